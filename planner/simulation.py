"""A simulated year of failures and repairs, re-planned at every change.

Every node alternates between up and down: up for an exponential time with rate
``annual_failure_rate / 8760`` per hour, then down for an exponential time with mean
``repair_hours`` (the rates of the node's kind, or its own). At each change the
coordinator plans the surviving nodes. The timeline records hours below the targets
(down), hours at a lower context than the whole fleet gets (reduced), and every new plan,
which the coordinator claims under a new term.

Claim traffic: the fleet's nodes are stages of one :class:`planner.fence.simulator.Simulation`
for the whole timeline. Failed nodes are crashed there and restarted on repair; each new
plan is claimed by a coordinator with the next term, which sends its claims and loads,
and the stages shut down the older term's work as they accept the newer claim
(docs/rules.md §8-§9). The messages of each term are counted from the fence's event log.

Same seed, same timeline: all randomness comes from one ``numpy`` generator seeded with
``seed``, drawn node by node in fleet order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from planner._validate import integer, number, shown
from planner.availability import (
    HOURS_PER_YEAR,
    AvailabilityError,
    NodeReliability,
    Outcome,
    per_node_reliability,
    plan_survivors,
    resolve_targets,
)
from planner.errors import CodedError
from planner.fence.coordinator import CoordinatorPolicy, SplitPlan
from planner.fence.simulator import NetworkConfig, Simulation
from planner.limits import (
    MAX_FENCE_TERMS,
    MAX_SEED,
    MAX_SIMULATED_CHANGES,
    MAX_SIMULATION_RUNS,
)
from planner.planning import PlanningInput
from planner.planning.inputs import as_planning_input
from planner.targets import SpeedEstimator, Targets

MS_PER_HOUR = 3_600_000
# How long after a re-plan the fence exchange is followed: claims, replies and loads
# settle within seconds at the simulator's default network delays.
SETTLE_MS = 60_000

TIMELINE_COLUMNS = ("start_hours", "end_hours", "up_nodes", "context_length",
                    "meets_targets", "reduced_context", "term")
TERM_COLUMNS = ("term", "start_hours", "stage_count", "node_ids", "claim_messages",
                "load_messages", "stop_messages", "replies", "stages_accepted",
                "shutdowns")


@dataclass(frozen=True, slots=True)
class SimulatedYear:
    """The timeline of one simulated horizon.

    ``timeline``: one row per interval between changes (:data:`TIMELINE_COLUMNS`);
    ``terms``: one row per coordinator term with the fence messages it caused
    (:data:`TERM_COLUMNS`); ``failures``: node failures within the horizon.
    """

    horizon_hours: float
    seed: int
    timeline: pd.DataFrame
    terms: pd.DataFrame
    failures: int
    full_context_length: int

    @property
    def hours_down(self) -> float:
        frame = self.timeline
        return float((frame["end_hours"] - frame["start_hours"])[~frame["meets_targets"]].sum())

    @property
    def hours_reduced_context(self) -> float:
        frame = self.timeline
        mask = frame["reduced_context"]
        return float((frame["end_hours"] - frame["start_hours"])[mask].sum())

    @property
    def availability(self) -> float:
        return 1 - self.hours_down / self.horizon_hours

    @property
    def replans(self) -> int:
        """New plans after the first one (each a new coordinator term)."""
        return max(0, len(self.terms) - 1)

    def summary(self) -> dict[str, Any]:
        """The numbers a sweep reports for one simulated horizon."""
        return {
            "horizon_hours": self.horizon_hours,
            "hours_down": self.hours_down,
            "hours_reduced_context": self.hours_reduced_context,
            "simulated_availability": self.availability,
            "failures": self.failures,
            "replans": self.replans,
            "claim_messages": int(self.terms["claim_messages"].sum()) if len(self.terms) else 0,
        }


class SimulationLimitError(CodedError):
    """``SimulationTooLarge``: the simulated horizon holds more failures and repairs than
    :data:`MAX_SIMULATED_CHANGES`, or (with the fence on) more re-plans than
    :data:`MAX_FENCE_TERMS` (``planner.limits``). Every failure and repair is drawn and
    checked one by one, so a failure rate or horizon far beyond any real one ends in this
    error within seconds instead of filling memory."""

    codes = ("SimulationTooLarge",)


def _too_many_changes(horizon: float) -> SimulationLimitError:
    return SimulationLimitError(
        "SimulationTooLarge",
        f"the fleet fails and is repaired more than {MAX_SIMULATED_CHANGES:,} times in "
        f"{horizon:,g} hours; simulate a shorter horizon or check the failure rates "
        "(failures per node-year) and repair hours", limit=MAX_SIMULATED_CHANGES,
        horizon_hours=horizon)


def _node_timelines(rng: np.random.Generator, reliability: NodeReliability,
                    horizon: float, budget: int) -> list[tuple[float, bool]]:
    """(time, up after the change) for one node, starting up at time 0; at most
    ``budget`` changes, else :class:`SimulationLimitError`."""
    changes: list[tuple[float, bool]] = []
    rate = reliability.failures_per_hour
    if rate == 0:
        return changes
    now, up = 0.0, True
    while True:
        now += (rng.exponential(1 / rate) if up else
                rng.exponential(reliability.repair_hours) if reliability.repair_hours else 0.0)
        if now >= horizon:
            return changes
        up = not up
        changes.append((now, up))
        if len(changes) > budget:
            raise _too_many_changes(horizon)


class _Fence:
    """The fleet's stages in one fence simulation; each new plan is a new term."""

    def __init__(self, node_ids: list[str], horizon_hours: float, seed: int) -> None:
        self.sim = Simulation(seed=seed, network=NetworkConfig())
        for node_id in node_ids:
            self.sim.add_stage(node_id)
        # One lease for the whole horizon: the counted traffic is what re-planning
        # causes, not periodic renewals.
        lease = math.ceil(horizon_hours * MS_PER_HOUR) + 2 * SETTLE_MS + 1
        self.policy = CoordinatorPolicy(lease_ms=lease, max_renewals=0)
        self.term = 0

    def at(self, hours: float) -> int:
        return max(self.sim.now_ms, int(hours * MS_PER_HOUR))

    def crash(self, hours: float, node_id: str) -> None:
        self.sim.crash(self.at(hours), node_id)

    def restart(self, hours: float, node_id: str) -> None:
        self.sim.restart(self.at(hours), node_id)

    def claim(self, hours: float, outcome: Outcome) -> dict[str, Any]:
        assert outcome.plan is not None
        self.term += 1
        term = self.term
        plan = SplitPlan.from_stages(outcome.plan.stages, model_id="model",
                                     package_ref="package", manifest_sha256="manifest",
                                     topology_id=f"topology-{term}", run_id=f"run-{term}")
        name = f"coordinator-term-{term}"
        self.sim.add_coordinator(name, plan, policy=self.policy)
        start = self.at(hours)
        first = len(self.sim.events)
        self.sim.start_coordinator(start, name, term=term)
        self.sim.run(until_ms=start + SETTLE_MS)
        events = self.sim.events[first:]
        sent = [e for e in events if e.kind == "send"]
        return {
            "term": term,
            "start_hours": hours,
            "stage_count": outcome.plan.stage_count,
            "node_ids": ",".join(outcome.plan.node_ids),
            "claim_messages": sum(e.message == "ClaimCoordinator" for e in sent),
            "load_messages": sum(e.message == "LoadStage" for e in sent),
            "stop_messages": sum(e.message == "StopStage" for e in sent),
            "replies": sum(e.message not in ("ClaimCoordinator", "LoadStage", "StopStage")
                           for e in sent),
            "stages_accepted": sum(e.kind == "claim" and bool(e.accepted) for e in events),
            "shutdowns": sum(e.kind == "shutdown" for e in events),
        }


def _bad_argument(name: str, problem: str, value: Any) -> AvailabilityError:
    return AvailabilityError("InvalidTarget", f"{name} {problem} (got {shown(value)})",
                             field=name, value=value)


def _horizon(value: Any) -> float:
    def fail(problem: str, got: Any) -> AvailabilityError:
        return _bad_argument("horizon_hours", problem, got)

    return float(number(value, fail, above=0))


def _seed(value: Any) -> int:
    def fail(problem: str, got: Any) -> AvailabilityError:
        return _bad_argument("seed", problem, got)

    return integer(value, fail, minimum=0, maximum=MAX_SEED)


def simulate(
    request: PlanningInput | Mapping[str, Any],
    reliability: Mapping[str, NodeReliability] | NodeReliability | None = None,
    *,
    horizon_hours: float = HOURS_PER_YEAR,
    seed: int = 0,
    targets: Targets | None = None,
    min_context: int | None = None,
    min_lanes: int = 1,
    estimator: SpeedEstimator | None = None,
    fence: bool = True,
) -> SimulatedYear:
    """Simulate failures and repairs over ``horizon_hours`` and re-plan at every change.

    ``reliability`` and the targets as in :func:`planner.availability.fleet_availability`.
    With ``fence``
    off, terms are still counted but no fence messages are simulated (zeros).
    """
    req = as_planning_input(request)
    judged = resolve_targets(req, targets, min_context, min_lanes, estimator)
    horizon = _horizon(horizon_hours)
    seed = _seed(seed)
    if not isinstance(fence, bool):
        raise _bad_argument("fence", "must be True or False", fence)
    per_node = per_node_reliability(req.nodes, reliability)
    rng = np.random.default_rng(seed)
    changes: list[tuple[float, int, str, bool]] = []
    for order, node in enumerate(req.nodes):
        for when, comes_up in _node_timelines(rng, per_node[node.node_id], horizon,
                                              MAX_SIMULATED_CHANGES - len(changes)):
            changes.append((when, order, node.node_id, comes_up))
    changes.sort()
    failures = sum(1 for change in changes if not change[3])

    memo: dict[frozenset[str], Outcome] = {}

    def outcome_of(up: set[str]) -> Outcome:
        key = frozenset(up)
        if key not in memo:
            memo[key] = plan_survivors(req, [n for n in req.nodes if n.node_id in up], judged,
                                       estimator)
        return memo[key]

    up = {node.node_id for node in req.nodes}
    full = outcome_of(up)
    fence_sim = _Fence([n.node_id for n in req.nodes], horizon, seed) if (
        fence and req.nodes) else None
    terms: list[dict[str, Any]] = []
    running: tuple[Any, ...] | None = None

    def adopt(hours: float, outcome: Outcome) -> int | None:
        nonlocal running
        if outcome.plan is None:
            running = None
            return None
        layout = tuple((s.node_id, s.layer_start, s.layer_end) for s in outcome.plan.stages)
        if layout != running:
            running = layout
            if fence_sim is not None:
                if len(terms) >= MAX_FENCE_TERMS:
                    raise SimulationLimitError(
                        "SimulationTooLarge",
                        f"the fleet is re-planned more than {MAX_FENCE_TERMS:,} times in "
                        f"{horizon:,g} hours, each a claim exchange in the fence "
                        "simulator; simulate a shorter horizon, or with fence=False for the "
                        "hours and counts alone", limit=MAX_FENCE_TERMS,
                        horizon_hours=horizon)
                terms.append(fence_sim.claim(hours, outcome))
            else:
                terms.append({"term": len(terms) + 1, "start_hours": hours,
                              "stage_count": outcome.plan.stage_count,
                              "node_ids": ",".join(outcome.plan.node_ids),
                              **dict.fromkeys(TERM_COLUMNS[4:], 0)})
        return terms[-1]["term"] if terms else None

    rows: list[dict[str, Any]] = []
    start = 0.0
    current = full
    term = adopt(0.0, full)
    index = 0
    while index <= len(changes):
        end = changes[index][0] if index < len(changes) else horizon
        if end > start:
            rows.append({"start_hours": start, "end_hours": end, "up_nodes": len(up),
                         "context_length": current.context_length,
                         "meets_targets": current.meets_targets,
                         "reduced_context": current.meets_targets
                         and current.context_length < full.context_length,
                         "term": term})
        if index == len(changes):
            break
        # Apply every change at this instant before re-planning.
        while index < len(changes) and changes[index][0] == end:
            _, _, node_id, node_up = changes[index]
            if node_up:
                up.add(node_id)
                if fence_sim is not None:
                    fence_sim.restart(end, node_id)
            else:
                up.discard(node_id)
                if fence_sim is not None:
                    fence_sim.crash(end, node_id)
            index += 1
        current = outcome_of(up)
        term = adopt(end, current)
        start = end
    timeline = pd.DataFrame(rows, columns=list(TIMELINE_COLUMNS)).astype(
        {"up_nodes": "int64", "context_length": "int64", "meets_targets": "bool",
         "reduced_context": "bool", "term": "Int64"})
    term_frame = pd.DataFrame(terms, columns=list(TERM_COLUMNS))
    return SimulatedYear(horizon, seed, timeline, term_frame, failures,
                         full.context_length)


def simulate_many(request: PlanningInput | Mapping[str, Any],
                  reliability: Mapping[str, NodeReliability] | NodeReliability | None = None,
                  *, runs: int, horizon_hours: float = HOURS_PER_YEAR, seed: int = 0,
                  **targets: Any) -> pd.DataFrame:
    """``runs`` independent horizons (seeds ``seed .. seed + runs - 1``), one summary row
    each, without the fence exchange (for estimates that need many runs); at most
    :data:`MAX_SIMULATION_RUNS` runs."""

    def fail(problem: str, got: Any) -> AvailabilityError:
        return _bad_argument("runs", problem, got)

    runs = integer(runs, fail, minimum=0, maximum=MAX_SIMULATION_RUNS)
    seed = _seed(seed)
    rows = []
    for offset in range(runs):
        year = simulate(request, reliability, horizon_hours=horizon_hours,
                        seed=seed + offset, fence=False, **targets)
        rows.append({"seed": seed + offset, **year.summary()})
    return pd.DataFrame(rows)

__all__ = ["TERM_COLUMNS", "TIMELINE_COLUMNS", "SimulatedYear", "SimulationLimitError",
           "simulate", "simulate_many"]
