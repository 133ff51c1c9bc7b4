"""The design's scenarios 1-10 as ready-made simulation runs.

Each :class:`Scenario` builds a :class:`~planner.fence.simulator.Simulation` (three
planned stages of one model, one or two coordinators, and whatever failure the
scenario is about), runs it, and checks the design's "Expected result" against the
event log as a list of :class:`Expectation` statements. The checks read what
happened; nothing in them is a stored answer.

``run_scenario(3)``, ``run_scenario("too_many_stages_down")`` and
``run_scenario("3")`` are the same run.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from planner._validate import is_integral
from planner.fence.claims import (
    CONFLICTING_SAME_TERM,
    EXPIRED_LEASE,
    MISSING_TERM,
    STALE_TERM,
    TERM_MISMATCH,
    ClaimKey,
    LoadClaimRef,
)
from planner.fence.coordinator import CoordinatorPolicy, SplitPlan
from planner.fence.errors import UnknownScenario
from planner.fence.messages import LoadStage
from planner.fence.runtime import StageRuntime, StageWork
from planner.fence.simulator import MessageRule, NetworkConfig, SimEvent, Simulation

MODEL_ID = "qwen3-coder-480b"
PACKAGE_REF = "hf://Qwen/Qwen3-Coder-480B-A35B-Instruct-GGUF"
MANIFEST_SHA256 = "sha256:5be1c0a4d2e9"
MODEL_KEY: ClaimKey = (MODEL_ID, PACKAGE_REF, MANIFEST_SHA256)
STAGES: tuple[str, ...] = ("stage-a", "stage-b", "stage-c")
LAYER_RANGES: tuple[tuple[int, int], ...] = ((0, 21), (21, 42), (42, 62))
DEFAULT_SEED = 7


def split_plan(topology_id: str, run_id: str, stages: tuple[str, ...] = STAGES) -> SplitPlan:
    ranges = LAYER_RANGES if len(stages) == len(LAYER_RANGES) else ()
    return SplitPlan(MODEL_ID, PACKAGE_REF, MANIFEST_SHA256, topology_id, run_id, stages,
                     ranges)


def _mesh(seed: int, *, clock_offsets: Mapping[str, int] | None = None) -> Simulation:
    sim = Simulation(seed=seed, network=NetworkConfig(base_delay_ms=20, jitter_ms=10))
    for stage in STAGES:
        sim.add_stage(stage, clock_offset_ms=(clock_offsets or {}).get(stage, 0))
    return sim


@dataclass(frozen=True, slots=True)
class Expectation:
    """One statement of the expected result and whether the run bears it out."""

    statement: str
    met: bool
    evidence: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"statement": self.statement, "met": self.met, "evidence": self.evidence}


class EventLog:
    """Queries over a run's events (filters left as ``None`` match anything)."""

    def __init__(self, events: Iterable[SimEvent]) -> None:
        self.events: tuple[SimEvent, ...] = tuple(events)

    def where(
        self,
        kind: str | None = None,
        *,
        node: str | None = None,
        message: str | None = None,
        peer: str | None = None,
        term: int | None = None,
        accepted: bool | None = None,
        reason: str | None = None,
        after_ms: int | None = None,
        before_ms: int | None = None,
    ) -> list[SimEvent]:
        return [
            e for e in self.events
            if (kind is None or e.kind == kind)
            and (node is None or e.node == node)
            and (message is None or e.message == message)
            and (peer is None or e.peer == peer)
            and (term is None or e.term == term)
            and (accepted is None or e.accepted == accepted)
            and (reason is None or e.reason == reason)
            and (after_ms is None or e.time_ms >= after_ms)
            and (before_ms is None or e.time_ms < before_ms)
        ]

    def first_time(self, kind: str, **filters: Any) -> int | None:
        found = self.where(kind, **filters)
        return found[0].time_ms if found else None


@dataclass(frozen=True, slots=True)
class ScenarioOutcome:
    """What a run ended with, in plain data."""

    split_started_by: tuple[tuple[str, int], ...]
    quorum_reached: tuple[tuple[str, int], ...]
    loads_sent: Mapping[str, int]
    running: Mapping[str, tuple[str, ...]]
    accepted_terms: Mapping[str, int]
    rejections: Mapping[str, int]
    coordinator_phases: Mapping[str, str]
    expectations: tuple[Expectation, ...]

    @property
    def met(self) -> bool:
        return all(e.met for e in self.expectations)

    @property
    def summary(self) -> str:
        parts = []
        for coordinator, phase in self.coordinator_phases.items():
            terms = [t for c, t in self.quorum_reached if c == coordinator]
            quorum = f"quorum at term {', '.join(map(str, terms))}" if terms else "no quorum"
            parts.append(f"{coordinator}: {quorum}, {self.loads_sent.get(coordinator, 0)} "
                         f"load(s) sent, ends {phase}")
        for stage, works in self.running.items():
            parts.append(f"{stage} runs {'; '.join(works) if works else 'nothing'}")
        verdict = "expected result holds" if self.met else "EXPECTED RESULT NOT MET"
        return f"{verdict}. " + ". ".join(parts) + "."

    def to_dict(self) -> dict[str, Any]:
        return {
            "split_started_by": [list(x) for x in self.split_started_by],
            "quorum_reached": [list(x) for x in self.quorum_reached],
            "loads_sent": dict(self.loads_sent),
            "running": {k: list(v) for k, v in self.running.items()},
            "accepted_terms": dict(self.accepted_terms),
            "rejections": dict(self.rejections),
            "coordinator_phases": dict(self.coordinator_phases),
            "expectations": [e.to_dict() for e in self.expectations],
            "met": self.met,
            "summary": self.summary,
        }


@dataclass(frozen=True)
class ScenarioResult:
    scenario: Scenario
    seed: int
    simulation: Simulation = field(repr=False)
    log: EventLog = field(repr=False)
    stages: Mapping[str, StageRuntime]
    outcome: ScenarioOutcome

    @property
    def events(self) -> tuple[SimEvent, ...]:
        return self.log.events

    def events_frame(self) -> pd.DataFrame:
        return self.simulation.events_frame()

    def steps(self) -> list[str]:
        """The run as readable lines, one per event (for a step-through)."""
        return [event.describe() for event in self.events]


Check = Callable[[Simulation, EventLog], list[Expectation]]


@dataclass(frozen=True)
class Scenario:
    number: int
    name: str
    title: str
    description: str
    expected: str
    build: Callable[[int], Simulation] = field(repr=False)
    check: Check = field(repr=False)


def _expect(statement: str, met: bool, evidence: str = "") -> Expectation:
    return Expectation(statement, bool(met), evidence)


def _runs(sim: Simulation, stage: str, *, term: int | None = None,
          coordinator: str | None = None) -> bool:
    return any(
        w.key == MODEL_KEY and w.fenced
        and (term is None or w.coordinator_term == term)
        and (coordinator is None or w.coordinator_id == coordinator)
        for w in sim.stage(stage).running
    )


def _fenced_running(sim: Simulation, stage: str) -> list[StageWork]:
    return [w for w in sim.stage(stage).running if w.key == MODEL_KEY and w.fenced]


def _load_sends(log: EventLog, coordinator: str, **filters: Any) -> list[SimEvent]:
    return log.where("send", node=coordinator, message="LoadStage", **filters)


# -- 1 ---------------------------------------------------------------------------------


def _build_fresh(seed: int) -> Simulation:
    sim = _mesh(seed)
    sim.add_coordinator("coord-1", split_plan("topo-1", "run-1"))
    sim.start_coordinator(0, "coord-1", term=1)
    return sim


def _check_fresh(sim: Simulation, log: EventLog) -> list[Expectation]:
    loads = log.where("load", message="LoadStage")
    quorum_at = log.first_time("quorum", node="coord-1", term=1)
    first_load = log.first_time("send", node="coord-1", message="LoadStage")
    return [
        _expect("coord-1 reaches a majority of the 3 planned stages at term 1",
                quorum_at is not None, f"quorum at {quorum_at} ms"),
        _expect("no LoadStage is sent before quorum",
                quorum_at is not None and first_load is not None and first_load >= quorum_at,
                f"first load at {first_load} ms"),
        _expect("every stage accepts a load with the same term and coordinator id",
                len(loads) == 3 and all(e.accepted and e.term == 1 and e.peer == "coord-1"
                                        for e in loads),
                f"{sum(e.accepted or False for e in loads)}/3 loads accepted"),
        _expect("the split starts: all 3 stages run term 1 from coord-1",
                bool(log.where("split_started", node="coord-1"))
                and all(_runs(sim, s, term=1, coordinator="coord-1") for s in STAGES)),
    ]


# -- 2 ---------------------------------------------------------------------------------


def _build_one_down(seed: int) -> Simulation:
    sim = _mesh(seed)
    sim.add_coordinator("coord-1", split_plan("topo-1", "run-1"),
                        policy=CoordinatorPolicy(load_timeout_ms=10_000))
    sim.crash(0, "stage-c")
    sim.start_coordinator(100, "coord-1", term=1)
    return sim


def _check_one_down(sim: Simulation, log: EventLog) -> list[Expectation]:
    accepted = {e.node for e in log.where("claim", accepted=True, term=1)}
    lost = log.where("drop", peer="stage-c", reason="node_down")
    return [
        _expect("stage-c is down, so only stage-a and stage-b accept term 1",
                accepted == {"stage-a", "stage-b"} and bool(lost),
                f"accepted by {sorted(accepted)}"),
        _expect("2 of 3 is a majority: coord-1 reaches quorum and continues with loads",
                bool(log.where("quorum", node="coord-1"))
                and len(_load_sends(log, "coord-1")) == 3),
        _expect("the load to stage-c fails, so the split does not start",
                bool(log.where("split_incomplete", node="coord-1"))
                and not log.where("split_started")
                and not _runs(sim, "stage-c")
                and _runs(sim, "stage-a", term=1) and _runs(sim, "stage-b", term=1)),
    ]


# -- 3 ---------------------------------------------------------------------------------


def _build_too_many_down(seed: int) -> Simulation:
    sim = _mesh(seed)
    sim.add_coordinator("coord-1", split_plan("topo-1", "run-1"),
                        policy=CoordinatorPolicy(max_attempts=3, retry_interval_ms=10_000))
    sim.crash(0, "stage-b")
    sim.crash(0, "stage-c")
    sim.start_coordinator(100, "coord-1", term=1)
    return sim


def _check_too_many_down(sim: Simulation, log: EventLog) -> list[Expectation]:
    attempts = [e.term for e in log.where("attempt", node="coord-1") if e.term is not None]
    failed = log.where("no_quorum", node="coord-1")
    return [
        _expect("each attempt gets 1 of 3 accepts, short of the quorum of 2",
                bool(failed) and len(failed) == len(attempts)
                and not log.where("quorum"),
                f"{len(failed)} attempt(s) without quorum"),
        _expect("no LoadStage message is ever sent", not log.where("send", message="LoadStage")),
        _expect("no stage runs the model",
                all(not sim.stage(s).running and not sim.stage(s).preparing for s in STAGES)),
        _expect("the coordinator retries with higher terms, then stays out",
                len(attempts) >= 2 and attempts == sorted(set(attempts))
                and sim.coordinator("coord-1").phase in ("gave_up", "standby"),
                f"terms tried: {attempts}"),
    ]


# -- 4 ---------------------------------------------------------------------------------


def _build_coordinator_disappears(seed: int) -> Simulation:
    sim = _mesh(seed)
    sim.add_coordinator("coord-1", split_plan("topo-1", "run-1"))
    sim.add_coordinator("coord-2", split_plan("topo-2", "run-2"))
    sim.start_coordinator(0, "coord-1", term=1)
    sim.crash(5_000, "coord-1")
    # coord-2 saw term 1 in the mesh status before coord-1 vanished.
    sim.start_coordinator(8_000, "coord-2", term=2)
    return sim


def _check_coordinator_disappears(sim: Simulation, log: EventLog) -> list[Expectation]:
    started_1 = log.first_time("split_started", node="coord-1")
    crashed = log.first_time("crash", node="coord-1")
    shut = {e.node for e in log.where("shutdown", term=1)}
    return [
        _expect("coord-1's split runs at term 1 before coord-1 disappears",
                started_1 is not None and crashed is not None and started_1 < crashed),
        _expect("stages elect nobody on their own: nothing changes until coord-2 claims",
                not log.where("claim", after_ms=crashed or 0, before_ms=8_000)),
        _expect("coord-2 claims the newer term 2 from a majority and loads",
                bool(log.where("quorum", node="coord-2", term=2))),
        _expect("accepting term 2 shuts down every stage's term-1 work",
                shut == set(STAGES), f"shut down on {sorted(shut)}"),
        _expect("the replacement split runs: all stages at term 2 from coord-2",
                all(_runs(sim, s, term=2, coordinator="coord-2")
                    and not _runs(sim, s, term=1) for s in STAGES)),
    ]


# -- 5 ---------------------------------------------------------------------------------


def _build_old_coordinator_returns(seed: int) -> Simulation:
    sim = _mesh(seed)
    sim.add_coordinator("coord-1", split_plan("topo-1", "run-1"))
    sim.add_coordinator("coord-2", split_plan("topo-2", "run-2"))
    sim.start_coordinator(0, "coord-1", term=10)
    sim.crash(5_000, "coord-1")
    sim.start_coordinator(8_000, "coord-2", term=11)
    sim.restart(15_000, "coord-1")
    sim.resend_loads(16_000, "coord-1")
    sim.stop_split(17_000, "coord-1")
    return sim


def _check_old_coordinator_returns(sim: Simulation, log: EventLog) -> list[Expectation]:
    back = 15_000
    stale_loads = log.where("load", term=10, after_ms=back)
    stale_stops = log.where("stop", term=10)
    return [
        _expect("every stage accepts term 11 and shuts down its term-10 stage",
                {e.node for e in log.where("claim", term=11, accepted=True)} == set(STAGES)
                and {e.node for e in log.where("shutdown", term=10)} == set(STAGES)),
        _expect("the returning coordinator's LoadStage(term 10) is rejected everywhere",
                len(stale_loads) == 3
                and all(not e.accepted and e.reason == TERM_MISMATCH for e in stale_loads)),
        _expect("its StopStage(term 10) is rejected as stale and stops nothing",
                len(stale_stops) == 3
                and all(not e.accepted and e.reason == STALE_TERM for e in stale_stops)
                and not log.where("stopped")),
        _expect("the newer split keeps running: all stages at term 11 from coord-2",
                all(_runs(sim, s, term=11, coordinator="coord-2") for s in STAGES)),
    ]


# -- 6 ---------------------------------------------------------------------------------


def _build_same_term_race(seed: int) -> Simulation:
    sim = _mesh(seed)
    sim.add_coordinator("coord-1", split_plan("topo-1", "run-1"))
    sim.add_coordinator("coord-2", split_plan("topo-2", "run-2", ("stage-c", "stage-a",
                                                                  "stage-b")))
    # Arrival order decides each stage: coord-1 is nearer to A and B, coord-2 to C.
    for src, dst in (("coord-2", "stage-a"), ("coord-2", "stage-b"), ("coord-1", "stage-c")):
        sim.add_rule(MessageRule(src=src, dst=dst, message="ClaimCoordinator",
                                 extra_delay_ms=60, label=f"{src} is farther from {dst}"))
    sim.start_coordinator(0, "coord-1", term=7)
    sim.start_coordinator(0, "coord-2", term=7)
    return sim


def _check_same_term_race(sim: Simulation, log: EventLog) -> list[Expectation]:
    accepted = Counter(e.node for e in log.where("claim", term=7, accepted=True))
    conflicts = log.where("claim", term=7, reason=CONFLICTING_SAME_TERM)
    winners = {e.node for e in log.where("quorum", term=7)}
    owners = {s: {w.coordinator_id for w in _fenced_running(sim, s)} for s in STAGES}
    return [
        _expect("each stage accepts exactly one claim for term 7 (the first to arrive)",
                all(accepted[s] == 1 for s in STAGES), f"accepts per stage: {dict(accepted)}"),
        _expect("the second, different claim for term 7 is rejected as ConflictingSameTerm",
                len(conflicts) == 3, f"{len(conflicts)} conflicting-claim rejections"),
        _expect("at most one coordinator reaches a majority at term 7",
                len(winners) <= 1, f"quorum reached by {sorted(winners) or 'nobody'}"),
        _expect("coord-2 never loads, and no stage runs work from two coordinators",
                not _load_sends(log, "coord-2")
                and all(len(o) <= 1 and "coord-2" not in o for o in owners.values()),
                f"owners: {owners}"),
    ]


# -- 7 ---------------------------------------------------------------------------------


def _build_different_term_race(seed: int) -> Simulation:
    sim = _mesh(seed)
    sim.add_coordinator("coord-1", split_plan("topo-1", "run-1"))
    sim.add_coordinator("coord-2", split_plan("topo-2", "run-2"))
    for src, dst, delay in (("coord-2", "stage-a", 25), ("coord-2", "stage-b", 25),
                            ("coord-1", "stage-c", 60)):
        sim.add_rule(MessageRule(src=src, dst=dst, message="ClaimCoordinator",
                                 extra_delay_ms=delay, label=f"{src} is farther from {dst}"))
    sim.start_coordinator(0, "coord-1", term=3)
    sim.start_coordinator(0, "coord-2", term=4)
    return sim


def _check_different_term_race(sim: Simulation, log: EventLog) -> list[Expectation]:
    superseded = [
        s for s in STAGES
        if log.where("claim", node=s, term=3, accepted=True)
        and log.where("claim", node=s, term=4, accepted=True)
    ]
    stale = log.where("claim", term=3, reason=STALE_TERM)
    old_loads = log.where("load", term=3)
    return [
        _expect("stages that saw term 3 first accept term 4 over it",
                len(superseded) >= 1, f"superseded on {superseded}"),
        _expect("a stage that already holds term 4 rejects term 3 as stale",
                bool(stale), f"{len(stale)} StaleTerm rejection(s)"),
        _expect("coord-1's loads for term 3 are fenced: none is accepted, no stage runs term 3",
                bool(old_loads) and not any(e.accepted for e in old_loads)
                and not log.where("running", term=3)),
        _expect("every stage converges on term 4 and coord-2's split starts",
                all(sim.stage(s).accepted_term(MODEL_KEY) == 4 for s in STAGES)
                and all(_runs(sim, s, term=4, coordinator="coord-2") for s in STAGES)
                and bool(log.where("split_started", node="coord-2"))),
    ]


# -- 8 ---------------------------------------------------------------------------------

_PARTITION_AT, _HEAL_AT = 5_000, 20_000


def _build_partition(seed: int) -> Simulation:
    sim = _mesh(seed)
    plan_b = split_plan("topo-1", "run-1")
    sim.add_coordinator("coord-b", plan_b, policy=CoordinatorPolicy(max_attempts=1))
    sim.add_coordinator("coord-a", split_plan("topo-2", "run-2"),
                        policy=CoordinatorPolicy(load_timeout_ms=5_000))
    sim.start_coordinator(0, "coord-b", term=1)
    sim.partition(_PARTITION_AT, {"coord-a", "stage-a", "stage-b"}, {"coord-b", "stage-c"})
    # Each side notices the other vanish and tries to own the split.
    sim.start_coordinator(6_000, "coord-a", term=2)
    sim.start_coordinator(7_000, "coord-b", term=1)
    sim.heal(_HEAL_AT)
    sim.start_coordinator(21_000, "coord-b", term=1)
    sim.start_coordinator(25_000, "coord-a")
    return sim


def _check_partition(sim: Simulation, log: EventLog) -> list[Expectation]:
    during: dict[str, Any] = {"after_ms": _PARTITION_AT, "before_ms": _HEAL_AT}
    after: dict[str, Any] = {"after_ms": _HEAL_AT}
    a_quorum = log.where("quorum", node="coord-a", **during)
    side_a_runs = {e.node for e in log.where("running", term=2, **during)}
    stale_after = {e.node for e in log.where("claim", term=1, reason=STALE_TERM, **after)}
    final_terms = {s: sim.stage(s).accepted_term(MODEL_KEY) for s in STAGES}
    return [
        _expect("side A holds 2 of 3 planned stages: coord-a reaches quorum and loads them",
                bool(a_quorum) and side_a_runs == {"stage-a", "stage-b"},
                f"running term 2 during the partition: {sorted(side_a_runs)}"),
        _expect("side B holds 1 of 3: coord-b gets no quorum and sends no load",
                bool(log.where("no_quorum", node="coord-b", **during))
                and not log.where("quorum", node="coord-b", **during)
                and not _load_sends(log, "coord-b", **during)),
        _expect("after the heal, stages that accepted term 2 reject coord-b's term 1 as stale",
                stale_after == {"stage-a", "stage-b"},
                f"stale rejections on {sorted(stale_after)}"),
        _expect("coord-a then claims a newer term and the whole split converges on it",
                len(set(final_terms.values())) == 1 and min(final_terms.values()) > 2
                and all(_runs(sim, s, coordinator="coord-a") for s in STAGES),
                f"final terms {final_terms}"),
    ]


# -- 9 ---------------------------------------------------------------------------------


def _build_lease_expiry(seed: int) -> Simulation:
    sim = _mesh(seed, clock_offsets={"stage-b": 25_000})
    sim.add_coordinator("coord-1", split_plan("topo-1", "run-1"),
                        policy=CoordinatorPolicy(lease_ms=30_000, load_timeout_ms=60_000))
    sim.add_rule(MessageRule(src="coord-1", dst="stage-b", message="LoadStage",
                             extra_delay_ms=10_000, label="load to stage-b held 10 s"))
    sim.add_rule(MessageRule(src="coord-1", dst="stage-c", message="LoadStage",
                             extra_delay_ms=45_000, label="load to stage-c held 45 s"))
    sim.start_coordinator(0, "coord-1", term=1)
    return sim


def _check_lease_expiry(sim: Simulation, log: EventLog) -> list[Expectation]:
    expired = {e.node for e in log.where("load", reason=EXPIRED_LEASE)}
    skewed = log.where("load", node="stage-b", reason=EXPIRED_LEASE)
    late = [e for e in log.where("load", node="stage-c", reason=EXPIRED_LEASE)
            if e.time_ms >= 45_000]
    renew_at = log.first_time("renew", node="coord-1")
    reloaded = log.where("load", accepted=True, after_ms=renew_at or 0)
    fenced_ok = [e for e in log.where("load", accepted=True) if e.lease_until_ms is not None]
    return [
        _expect("stage-b's clock runs 25 s fast: a load 10 s late is past the lease on its clock",
                any(e.time_ms < 30_000 for e in skewed),
                f"rejected at sim time {[e.time_ms for e in skewed]} ms"),
        _expect("the load held 45 s in the network reaches stage-c after the lease: rejected",
                bool(late), f"rejected at {[e.time_ms for e in late]} ms"),
        _expect("no load is accepted after the lease on the receiving stage's clock",
                all(e.clock_ms <= (e.lease_until_ms or 0) for e in fenced_ok)
                and expired == {"stage-b", "stage-c"}),
        _expect("the coordinator claims again with a fresh lease before loading again",
                renew_at is not None
                and bool(log.where("claim", accepted=True, after_ms=renew_at))
                and bool(reloaded)),
        _expect("after the renewal the split starts on all stages",
                bool(log.where("split_started", node="coord-1"))
                and all(_runs(sim, s, term=1) for s in STAGES)),
    ]


# -- 10 --------------------------------------------------------------------------------

_LOCAL_MODEL = LoadClaimRef("llama-3.1-8b", "hf://meta-llama/Llama-3.1-8B-GGUF", "sha256:0c1f",
                            "local", "local-1", None, 0)
_LOCAL_SPLIT_MODEL = LoadClaimRef(MODEL_ID, PACKAGE_REF, MANIFEST_SHA256, "local", "bench-1",
                                  None, 0)
_HALF_FENCED = LoadClaimRef(MODEL_ID, PACKAGE_REF, MANIFEST_SHA256, "local", "test-1",
                            "test-harness", 0)


def _build_unfenced(seed: int) -> Simulation:
    sim = _mesh(seed)
    sim.add_coordinator("coord-1", split_plan("topo-1", "run-1"))
    sim.start_coordinator(0, "coord-1", term=5)
    sim.local_load(3_000, "stage-a", _LOCAL_MODEL)
    sim.local_load(3_500, "stage-b", _LOCAL_SPLIT_MODEL)
    sim.local_load(4_000, "stage-c", _HALF_FENCED)
    return sim


def _check_unfenced(sim: Simulation, log: EventLog) -> list[Expectation]:
    local = log.where("load", term=0)
    by_node = {e.node: e for e in local}
    a, b, c = (by_node.get(s) for s in STAGES)
    return [
        _expect("a local load (term 0, no coordinator id) on stage-a is accepted unfenced",
                a is not None and bool(a.accepted)
                and StageWork.from_load(_LOCAL_MODEL) in sim.stage("stage-a").running),
        _expect("it bypasses the fence even for the split's own model on stage-b",
                b is not None and bool(b.accepted)
                and sim.stage("stage-b").accepted_term(MODEL_KEY) == 5
                and StageWork.from_load(_LOCAL_SPLIT_MODEL) in sim.stage("stage-b").running),
        _expect("term 0 with a coordinator id is not unfenced: rejected as MissingTerm",
                c is not None and c.accepted is False and c.reason == MISSING_TERM),
        _expect("the fenced split is untouched: all stages still run term 5 from coord-1",
                all(_runs(sim, s, term=5, coordinator="coord-1") for s in STAGES)),
    ]


SCENARIO_LIST: tuple[Scenario, ...] = (
    Scenario(
        1, "fresh_split_startup", "Fresh split startup",
        "One coordinator plans a 3-stage split, sends ClaimCoordinator to every planned "
        "stage, reaches a majority, then loads every stage with the same term and "
        "coordinator id.",
        "Split starts.",
        _build_fresh, _check_fresh,
    ),
    Scenario(
        2, "one_stage_down", "One planned stage is down during startup",
        "stage-c has crashed. Two of three stages accept, which is a majority, so the "
        "coordinator loads; the load to stage-c is lost and the split cannot start "
        "without it.",
        "The coordinator may continue. The later load can still fail if the missing stage "
        "is required for the concrete topology.",
        _build_one_down, _check_one_down,
    ),
    Scenario(
        3, "too_many_stages_down", "Too many planned stages are down",
        "stage-b and stage-c have crashed. Only stage-a accepts, one of three is not a "
        "majority, so nothing is loaded; the coordinator retries with higher terms and "
        "gives up.",
        "The split is not loaded. The node remains in standby/retry behavior and can try "
        "again after peer changes or retry ticks.",
        _build_too_many_down, _check_too_many_down,
    ),
    Scenario(
        4, "coordinator_disappears", "Coordinator disappears after the split is running",
        "coord-1's split runs at term 1, then coord-1 crashes. The stages keep running and "
        "elect nobody; coord-2, another mesh node, plans a replacement split and claims "
        "term 2.",
        "A reachable node can become coordinator by claiming a newer term from a majority "
        "of the planned replacement stages.",
        _build_coordinator_disappears, _check_coordinator_disappears,
    ),
    Scenario(
        5, "old_coordinator_returns", "Old coordinator comes back",
        "coord-1 ran the split at term 10 and crashed; coord-2 took over at term 11. "
        "coord-1 restarts remembering term 10 and sends LoadStage and StopStage for it.",
        "The old coordinator cannot corrupt the newer split.",
        _build_old_coordinator_returns, _check_old_coordinator_returns,
    ),
    Scenario(
        6, "same_term_race", "Two coordinators race with the same term",
        "coord-1 and coord-2 both claim term 7 for different topologies. Each stage keeps "
        "the first claim that reaches it and rejects the other; stage-c heard coord-2 "
        "first, so it also refuses coord-1's load.",
        "Same-term split brain is fenced at the stage.",
        _build_same_term_race, _check_same_term_race,
    ),
    Scenario(
        7, "different_term_race", "Two coordinators race with different terms",
        "coord-1 claims term 3 and coord-2 term 4 at the same moment. Stages that hear "
        "term 3 first accept term 4 over it; coord-1 briefly has a majority, but its loads "
        "arrive after term 4 and are refused.",
        "Convergence on the newer term for stages that receive it. The coordinator still "
        "needs majority acceptance before it can load a split.",
        _build_different_term_race, _check_different_term_race,
    ),
    Scenario(
        8, "network_partition", "Network partition",
        "coord-b runs the split at term 1, then the mesh splits into {coord-a, stage-a, "
        "stage-b} and {coord-b, stage-c}. coord-a claims term 2 on its side; coord-b tries "
        "to renew term 1 on its side. After the heal coord-b's term 1 is stale, and "
        "coord-a claims once more to bring stage-c back.",
        "The side that can claim a majority of the planned stages may load; the side that "
        "cannot stays out; when the partition heals, stale terms are rejected by stages "
        "that accepted a newer term.",
        _build_partition, _check_partition,
    ),
    Scenario(
        9, "lease_expiry", "Lease expiry",
        "coord-1 claims with a 30 s lease. stage-b's clock runs 25 s fast and its load is "
        "held 10 s; the load to stage-c is held 45 s. Both arrive after the lease on the "
        "stage's own clock and are refused; the coordinator claims again and reloads.",
        "Old or delayed load messages do not start stages after the lease window.",
        _build_lease_expiry, _check_lease_expiry,
    ),
    Scenario(
        10, "unfenced_local_load", "Local or legacy unfenced load",
        "While a fenced split runs at term 5, local loads with term 0 and no coordinator "
        "id start on the stages, even for the split's own model; a load with term 0 but a "
        "coordinator id is not unfenced and is refused.",
        "Non-split stage usage and tests that do not participate in split coordination "
        "still work.",
        _build_unfenced, _check_unfenced,
    ),
)

SCENARIOS: dict[str, Scenario] = {s.name: s for s in SCENARIO_LIST}


def get_scenario(name_or_number: str | int) -> Scenario:
    """A scenario by number (``3`` or ``"3"``) or name (``"too_many_stages_down"``)."""
    ref = name_or_number
    if is_integral(ref):  # numpy integers too (a number read from a DataFrame)
        found = [s for s in SCENARIO_LIST if s.number == operator.index(ref)]
    elif isinstance(ref, str) and ref.strip().isdigit():
        found = [s for s in SCENARIO_LIST if s.number == int(ref)]
    elif isinstance(ref, str):
        wanted = ref.strip().lower().replace("-", "_").replace(" ", "_")
        found = [SCENARIOS[wanted]] if wanted in SCENARIOS else []
    else:
        found = []
    if found:
        return found[0]
    names = ", ".join(f"{s.number} {s.name}" for s in SCENARIO_LIST)
    raise UnknownScenario(f"no scenario {ref!r}; choose one of: {names}")


def _outcome(sim: Simulation, log: EventLog, expectations: list[Expectation]) -> ScenarioOutcome:
    rejections = Counter(
        e.reason for e in log.events
        if e.kind in ("claim", "load", "stop") and e.accepted is False and e.reason
    )
    return ScenarioOutcome(
        split_started_by=tuple((e.node, e.term or 0) for e in log.where("split_started")),
        quorum_reached=tuple((e.node, e.term or 0) for e in log.where("quorum")),
        loads_sent={c: len(log.where("send", node=c, message=LoadStage.name))
                    for c in sim.coordinator_ids},
        running={s: tuple(w.describe() for w in sim.stage(s).running) for s in sim.stage_ids},
        accepted_terms={s: sim.stage(s).accepted_term(MODEL_KEY) for s in sim.stage_ids},
        rejections=dict(sorted(rejections.items())),
        coordinator_phases={c: str(sim.coordinator(c).phase) for c in sim.coordinator_ids},
        expectations=tuple(expectations),
    )


def run_scenario(name_or_number: str | int, *, seed: int = DEFAULT_SEED) -> ScenarioResult:
    """Build, run and check one scenario. Any seed gives the same expected result."""
    scenario = get_scenario(name_or_number)
    sim = scenario.build(seed)
    sim.run()
    log = EventLog(sim.events)
    expectations = scenario.check(sim, log)
    return ScenarioResult(
        scenario=scenario,
        seed=seed,
        simulation=sim,
        log=log,
        stages={s: sim.stage(s) for s in sim.stage_ids},
        outcome=_outcome(sim, log, expectations),
    )


def run_all(*, seed: int = DEFAULT_SEED) -> list[ScenarioResult]:
    return [run_scenario(s.number, seed=seed) for s in SCENARIO_LIST]


def scenario_table(results: Iterable[ScenarioResult] | None = None) -> pd.DataFrame:
    """One row per scenario: number, title, expected result, whether it held, summary."""
    rows = []
    for result in results if results is not None else run_all():
        s = result.scenario
        rows.append({"number": s.number, "name": s.name, "title": s.title,
                     "expected": s.expected, "met": result.outcome.met,
                     "summary": result.outcome.summary})
    return pd.DataFrame(rows)
