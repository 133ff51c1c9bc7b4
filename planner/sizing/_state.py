"""The state of one sizing question (:class:`_Search`): the model, the kinds, the targets,
the cache of the plans made and their estimates, the speed floors once computed and the
budget of :mod:`planner.limits`. The search (:mod:`planner.sizing.search`), its bounds
(:mod:`planner.sizing._bounds`), its speed covers (:mod:`planner.sizing._covers`) and its
refusals (:mod:`planner.sizing._refusals`) all read it; the search loop itself stays in
:mod:`planner.sizing.search`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from planner import limits
from planner.errors import PlanError
from planner.models.gpus import GpuModel
from planner.performance import (
    ModelTraffic,
    PerformanceError,
    PlanEstimate,
    fleet_estimate,
    node_speeds,
)
from planner.planning import rules
from planner.planning.api import plan_topology
from planner.planning.inputs import PlanningInput
from planner.planning.plan import Plan
from planner.sizing import floors
from planner.sizing._result import SizedFleet
from planner.sizing._targets import (
    SizingError,
    SizingTargets,
    fleet_node_kinds,
    fleet_nodes,
)
from planner.units import format_milliseconds

_MICRO = 1_000_000  # prices are summed in micro-USD so that equal costs compare equal

TOO_LARGE_ADVICE = "size with fewer kinds (--kinds), lower max_count, or relax the targets"
"""What ``SizingTooLarge`` advises, in the command line's words (a page says it in its
own)."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    plan: Plan | None
    estimate: PlanEstimate | None


class _Search:
    """One sizing question: the model, the kinds, the targets and the plan cache."""

    def __init__(self, model: Mapping[str, Any], traffic: ModelTraffic | None,
                 kinds: Sequence[GpuModel], targets: SizingTargets,
                 planning: Mapping[str, Any], minimum_context: int, options: Mapping[str, Any]
                 ) -> None:
        self.model = dict(model)
        self.traffic = traffic
        self.kinds = list(kinds)
        self.targets = replace(targets, minimum_context=minimum_context)
        self.planning = dict(planning)
        self.minimum_context = minimum_context
        self.options = dict(options)
        self.f = targets.failures_tolerated
        self.layer_count = int(model["layer_count"])
        # A plan has at most one stage per layer, so more than layer_count + f nodes of
        # a kind are never planned, even after f losses: such fleets only cost more.
        most = self.layer_count + self.f
        self.bounds = [most if gpu.max_count is None else min(gpu.max_count, most)
                       for gpu in self.kinds]
        self.prices = [int(Decimal(str(gpu.price_per_hour)) * _MICRO) for gpu in self.kinds]
        self.cache: dict[tuple[int, ...], _Outcome] = {}
        self.plans_evaluated = 0
        self._floor: floors.DecodeFloor | None = None
        self._prefill: floors.PrefillFloor | None = None
        self.body_bytes = 1
        # The fastest estimates among the plans evaluated, with their fleets: what a
        # search that stops short can still tell of a speed target.
        self.fastest: dict[str, tuple[float, tuple[int, ...]]] = {}

    def decode_floor(self, probe: PlanningInput) -> floors.DecodeFloor:
        """The TPOT floor of plans that meet the targets (at their least lanes)."""
        if self._floor is None:
            assert self.traffic is not None
            self._floor = floors.decode_floor(
                self.kinds, self.traffic, probe, self.options,
                floors.least_lanes(probe, self.targets.minimum_lanes))
        return self._floor

    def prefill_floor(self, probe: PlanningInput) -> floors.PrefillFloor:
        """The TTFT floor of the prompt of the targets, on every kind."""
        if self._prefill is None:
            assert self.traffic is not None and self.targets.prompt_tokens is not None
            self._prefill = floors.prefill_floor(self.kinds, self.traffic, probe,
                                                 self.targets.prompt_tokens, self.options)
            self.body_bytes = max(1, sum(rules.layer_weights(probe))
                             - (self.traffic.token_embedding_bytes or 0))
        return self._prefill

    def check_budget(self, queued: int) -> None:
        """``SizingTooLarge`` once the search has made more plans or holds more partial
        fleets than the bounds of :mod:`planner.limits` allow."""
        # Read at each call, so that the one place the bounds live rules them.
        if (self.plans_evaluated > limits.MAX_SIZING_PLANS
                or queued > limits.MAX_SIZING_QUEUE):
            raise SizingError(
                "SizingTooLarge",
                f"the search stopped after {self.plans_evaluated:,} plans with "
                f"{queued:,} partial fleets queued, without proving which fleets are "
                f"cheapest at context {self.minimum_context:,}{self._fastest_seen()}; "
                + TOO_LARGE_ADVICE,
                plans_evaluated=self.plans_evaluated, queued=queued)

    def _fastest_seen(self) -> str:
        """What the plans evaluated reached of the speed targets (the TPOT and TTFT
        targets only)."""
        seen = []
        for name, target in (("TPOT", self.targets.target_decode_tpot_ms),
                             ("TTFT", self.targets.target_ttft_ms)):
            if target is not None and name in self.fastest:
                ms, counts = self.fastest[name]
                label = " + ".join(f"{n} x {gpu.kind}"
                                   for gpu, n in zip(self.kinds, counts, strict=True) if n)
                seen.append(f"an estimated {name} of {format_milliseconds(ms, estimated=True)} "
                            f"({label}) against the target of {format_milliseconds(target)}")
        return f"; the fastest plans evaluated reach {' and '.join(seen)}" if seen else ""

    def _note_fastest(self, counts: tuple[int, ...], estimate: PlanEstimate | None) -> None:
        if estimate is None:
            return
        for name, ms in (("TPOT", estimate.estimated_tpot_ms), ("TTFT", estimate.ttft_ms)):
            if ms is not None and (name not in self.fastest or ms < self.fastest[name][0]):
                self.fastest[name] = (float(ms), counts)

    # -- exact evaluation ------------------------------------------------------------

    def request(self, counts: Sequence[int]) -> PlanningInput:
        return PlanningInput.from_dict({**self.model, **self.planning,
                                        "nodes": list(fleet_nodes(self.kinds, counts))})

    def outcome(self, counts: tuple[int, ...]) -> _Outcome:
        known = self.cache.get(counts)
        if known is not None:
            return known
        result = _Outcome(None, None)
        if sum(counts):
            request = self.request(counts)
            self.plans_evaluated += 1
            try:
                plan = plan_topology(request)
            except PlanError as error:
                if error.code != "NoValidTopology":
                    raise
                plan = None
            if plan is not None:
                result = _Outcome(plan, self.estimate(counts, request, plan))
                self._note_fastest(counts, result.estimate)
        self.cache[counts] = result
        return result

    def fleet_meets(self, counts: tuple[int, ...]) -> bool:
        """This fleet's own plan meets the targets (no removals)."""
        outcome = self.outcome(counts)
        return outcome.plan is not None and self.plan_meets(outcome.plan, outcome.estimate)

    def estimate(self, counts: Sequence[int], request: PlanningInput, plan: Plan, *,
                 context_fill: bool = False) -> PlanEstimate | None:
        """The fleet's estimate; the time to fill the context, which no target reads, only
        with ``context_fill`` (for the fleets the answer shows: it is most of the cost of
        an estimate, and the search estimates thousands of plans)."""
        if self.traffic is None:
            return None
        speeds = node_speeds(request.nodes, self.kinds, fleet_node_kinds(self.kinds, counts))
        try:
            return fleet_estimate(request, plan, self.traffic, speeds,
                                  context_fill=context_fill, **self.options)
        except PerformanceError as error:
            if error.code != "MissingNodeSpeed":
                raise
            return None

    def plan_meets(self, plan: Plan, estimate: PlanEstimate | None) -> bool:
        return self.targets.meets(plan, estimate)

    def removals(self, counts: tuple[int, ...]) -> Iterable[tuple[int, ...]]:
        """Every per-kind removal vector adding up to f (largest kinds first)."""
        order = sorted((i for i, n in enumerate(counts) if n),
                       key=lambda i: -self.kinds[i].usable_bytes)

        def walk(position: int, left: int, taken: dict[int, int]) -> Iterable[tuple[int, ...]]:
            if left == 0:
                yield tuple(taken.get(i, 0) for i in range(len(counts)))
                return
            if position == len(order):
                return
            index = order[position]
            for amount in range(min(left, counts[index]), -1, -1):
                taken[index] = amount
                yield from walk(position + 1, left - amount, taken)
            taken.pop(index, None)

        return walk(0, self.f, {})

    def meets(self, counts: tuple[int, ...]) -> bool:
        """The fleet meets the targets, and so does every fleet left after losing f."""
        if not self.fleet_meets(counts):
            return False
        if self.f == 0:
            return True
        if sum(counts) <= self.f:
            return False
        for removed in self.removals(counts):
            left = tuple(n - r for n, r in zip(counts, removed, strict=True))
            if not self.fleet_meets(left):
                return False
        return True

    def sized(self, counts: tuple[int, ...]) -> SizedFleet:
        outcome = self.outcome(counts)
        assert outcome.plan is not None
        nodes = fleet_nodes(self.kinds, counts)
        estimate = (None if outcome.estimate is None else
                    self.estimate(counts, self.request(counts), outcome.plan,
                                  context_fill=True))
        return SizedFleet(
            counts=tuple((gpu.kind, n) for gpu, n in zip(self.kinds, counts, strict=True) if n),
            node_ids=tuple(node.node_id for node in nodes),
            cost_per_hour_usd=self.cost(counts) / _MICRO,
            plan=outcome.plan, estimate=estimate, failures_tolerated=self.f)

    def cost(self, counts: Sequence[int]) -> int:
        return sum(p * n for p, n in zip(self.prices, counts, strict=True))
