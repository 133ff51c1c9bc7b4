"""The search for the cheapest fleets that meet a model's targets.

A **fleet** is a count per catalog kind; its nodes are named ``<kind>-00``,
``<kind>-01``, ... (:func:`fleet_nodes`), each with the kind's memory, ``headroom_bytes``
and ``stage_transfer_latency_ms``. A fleet **meets the targets** when
:func:`planner.plan_topology` on it (with the model, ``minimum_nodes``, the TPOT target as
``target_decode_tpot_ms`` and any overrides) returns a plan with

- ``context_length >= minimum_context`` (default: the context floor of docs/rules.md §3,
  ``min(native_context_length, 65_536)``),
- ``parallel_lanes >= minimum_lanes`` (default 1),
- with a TPOT target, ``estimated_tpot_ms <= target_decode_tpot_ms`` (the
  :mod:`planner.performance` estimate of that plan),

and, for ``failures_tolerated`` f > 0, so does the plan of every fleet left after removing
any f of its nodes. Nodes of one kind are interchangeable, so "any f nodes" is every
vector of per-kind removals adding up to f.

:func:`size_fleet` returns the fleets that meet the targets at the lowest price per hour
(ties: fewer nodes, then higher context, then catalog order), exactly, among every fleet
with at most ``max_count`` and at most ``layer_count + f`` of each kind (a plan uses at
most one node per layer and f more are spares: more of a kind are never planned, and
only cost). A fleet that holds a cheaper fleet found and plans the same stages on it
(its other nodes idle) is not listed: it is no alternative (:func:`_idles_on`).

With a TPOT or TTFT target, kinds too slow to carry a plan within it do not count
towards it (:mod:`planner.sizing.floors`: no split decodes faster than the whole model
read at the fastest kind's bandwidth, nor fills a prompt faster than at its fastest
compute): a fleet needs f + 1 nodes that can, and a question no fleet can answer is
``NoFleetMeetsTargets`` at once (:func:`_speed_carriers`). Without latencies a fleet
plans at least every context a subset of its nodes fits, so a partial fleet sure to fit
a context no plan reads within the TPOT target is not searched further, and below it
the read-time covers of the context it is sure of hold (:class:`_Levels`). The search is bounded
(:data:`planner.limits.MAX_SIZING_KINDS`, ``MAX_SIZING_PLANS``, ``MAX_SIZING_QUEUE``):
past them it is ``SizingTooLarge``, and the Pareto pass stops at the context it reached,
with a note.

How it stays exact and fast: a best-first search over count vectors, kind by kind (the
largest kinds first), whose priority is the cost so far plus a lower bound on the cost
still needed. The bound is the fractional-knapsack (linear programming) minimum over the
kinds left of covering what every fitting plan needs at the lowest admissible context
``c0`` (the smallest context candidate at or above the minimum): the layers, as each node
holds at most its longest run of consecutive layers at ``c0``, and the bytes, with f
nodes' worth more of each for the spares. Both needs only grow with the context, so no
fleet meeting the targets is pruned. The largest kinds are decided first, so a partial
fleet's first f nodes are the f largest of every fleet below it: what is left without
them must still walk through the layers at ``c0`` (:func:`_spare_walk`) and meet the
read-time covers. Leaves leave the queue in cost order and each is planned exactly (with
every f-node removal), so the first fleets found are the cheapest.
Plans are cached per count vector, which the removals share.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, TypeVar

from planner._validate import Fail, flag, instance, integer, shown
from planner.errors import PlanError
from planner.limits import (
    DEFAULT_PRICE_KIND,
    MAX_SIZING_KINDS,
    MAX_SIZING_PLANS,
    MAX_SIZING_QUEUE,
    MAX_TOP_FLEETS,
)
from planner.models.gpus import GpuModel
from planner.models.spec import ModelSpec
from planner.performance import (
    DEFAULT_LINK_BANDWIDTH_BYTES_PER_S,
    ModelTraffic,
    NodeSpeed,
    PerformanceError,
    PlanEstimate,
    fleet_estimate,
    kinds_error_note,
    load_calibration,
    node_speeds,
)
from planner.planning import rules
from planner.planning.api import plan_topology
from planner.planning.inputs import PlanningInput
from planner.planning.plan import Plan
from planner.sizing import floors
from planner.sizing.result import SizedFleet, SizingResult, pareto_front
from planner.sizing.targets import (
    PRICE_KIND_TEXT,
    SizingError,
    SizingTargets,
    _check_kind_ids,
    _model_fields,
    fleet_node_kinds,
    fleet_nodes,
    select_kinds,
)
from planner.targets import TargetsError
from planner.units import format_bytes

_MICRO = 1_000_000  # prices are summed in micro-USD so that equal costs compare equal

TOO_LARGE_ADVICE = "size with fewer kinds (--kinds), lower max_count, or relax the targets"
"""What ``SizingTooLarge`` advises, in the command line's words (a page says it in its
own)."""
TOO_MANY_KINDS_ADVICE = "choose the kinds to compare (--kinds, kinds=)"
"""What ``TooManyKinds`` advises, in the command line's and Python's words."""
_Size = TypeVar("_Size", int, float)


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
        if self.plans_evaluated > MAX_SIZING_PLANS or queued > MAX_SIZING_QUEUE:
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
                seen.append(f"an estimated {name} of {ms:,.1f} ms ({label}) against the "
                            f"target of {target} ms")
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


class _Needs:
    """What every plan meeting the targets needs at context ``c0``, per node kind: the
    most layers one node holds and its usable bytes; and the totals to cover."""

    def __init__(self, search: _Search, costs: tuple[int, ...]) -> None:
        self.costs = costs
        self.layers_needed = len(costs)
        self.bytes_needed = sum(costs)
        self.caps = [_longest_run(gpu.usable_bytes, costs) for gpu in search.kinds]
        self.usable = [gpu.usable_bytes if cap else 0
                       for gpu, cap in zip(search.kinds, self.caps, strict=True)]
        f = search.f
        holding = [i for i, cap in enumerate(self.caps) if cap]
        # The f spares hold at least as much as the smallest node that holds a layer.
        self.layers_total = self.layers_needed + f * min((self.caps[i] for i in holding),
                                                         default=0)
        self.bytes_total = self.bytes_needed + f * min((self.usable[i] for i in holding),
                                                       default=0)
        self.min_cap = min((self.caps[i] for i in holding), default=0)
        self.min_usable = min((self.usable[i] for i in holding), default=0)

    def totals(self, f: int, top_caps: tuple[int, ...], top_usable: tuple[int, ...]
               ) -> tuple[int, int]:
        """The layers and bytes a fleet must hold in all: what the plan needs plus its f
        largest nodes. Those hold at least the f largest of a partial fleet (``top_caps``,
        ``top_usable``), topped up with the smallest holding kind: in a fleet that meets
        the targets, the f largest nodes all hold a layer."""
        if not f:
            return self.layers_total, self.bytes_total
        return (self.layers_needed + max(f * self.min_cap, sum(top_caps)
                                         + (f - len(top_caps)) * self.min_cap),
                self.bytes_needed + max(f * self.min_usable, sum(top_usable)
                                        + (f - len(top_usable)) * self.min_usable))

    def necessary(self, search: _Search, counts: Sequence[int]) -> bool:
        """Conditions every fleet meeting the targets satisfies, also after losing its f
        largest nodes: enough layers, bytes and holding nodes (the speed targets' carriers
        are counted in the search)."""
        f = search.f
        caps = sorted(itertools.chain.from_iterable(
            [self.caps[i]] * n for i, n in enumerate(counts)), reverse=True)
        usable = sorted(itertools.chain.from_iterable(
            [self.usable[i]] * n for i, n in enumerate(counts)), reverse=True)
        if sum(caps[f:]) < self.layers_needed or sum(usable[f:]) < self.bytes_needed:
            return False
        holding = sum(1 for cap in caps[f:] if cap)
        if holding < max(search.targets.minimum_nodes, 1):
            return False
        # The fleet without its f largest nodes must fit: then some set of its nodes
        # fits, and each node taking all it can, largest first, gets at least as far.
        left = sorted(itertools.chain.from_iterable(
            [gpu.usable_bytes] * n for gpu, n in zip(search.kinds, counts, strict=True)),
            reverse=True)[f:]
        return rules.greedy_layer_reach(left, self.costs) == len(self.costs)


def _spare_walk(f: int, prefix: Sequence[int], walk: tuple[int, int], usable: int,
                amount: int) -> tuple[int, int]:
    """How many of a partial fleet's nodes are among the f largest of every fleet below
    it, and how far the others reach at ``c0`` (``prefix``: the layers' bytes summed),
    after ``amount`` more nodes of ``usable`` bytes.

    The search decides the largest kinds first, so a partial fleet's first f nodes are
    f largest of every fleet below it, and its other nodes come first, in order, in the
    walk of that fleet less its f largest, each taking all the next layers it holds
    (:meth:`_Needs.necessary`). Each node to come takes at most its longest run: the
    layers left past the walk are a need of the kinds to come."""
    spared, reached = walk
    layers = len(prefix) - 1
    for _ in range(amount):
        if spared < f:
            spared += 1
        elif reached < layers:
            reached = bisect_right(prefix, prefix[reached] + usable) - 1
        else:
            break
    return spared, reached


def _largest_from(values: Sequence[int]) -> list[int]:
    """The largest of ``values`` from each position on (0 past the last)."""
    largest = [0] * (len(values) + 1)
    for index in range(len(values) - 1, -1, -1):
        largest[index] = max(values[index], largest[index + 1])
    return largest


def _largest_sizes(f: int, top: tuple[_Size, ...], size: _Size, amount: int
                   ) -> tuple[_Size, ...]:
    """The f largest sizes of a partial fleet once ``amount`` nodes of ``size`` join."""
    if not f or not amount:
        return top
    sizes = list(top) + [size] * min(amount, f)
    sizes.sort(reverse=True)
    return tuple(sizes[:f])


def _longest_run(budget: int, costs: Sequence[int]) -> int:
    """The most consecutive layers whose bytes add up to at most ``budget``."""
    best = start = total = 0
    for end, cost in enumerate(costs):
        total += cost
        while total > budget and start <= end:
            total -= costs[start]
            start += 1
        best = max(best, end - start + 1)
    return best


class _Bound:
    """Fractional-knapsack lower bounds on the cost of covering ``need`` units with the
    kinds from position ``d`` on (each kind at most its count bound)."""

    def __init__(self, prices: Sequence[int], amounts: Sequence[float], bounds: Sequence[int]
                 ) -> None:
        kinds = len(prices)
        self.tables: list[tuple[list[float], list[float], list[float]]] = []
        for start in range(kinds + 1):
            useful = sorted((i for i in range(start, kinds) if amounts[i] > 0 and bounds[i]),
                            key=lambda i: prices[i] / amounts[i])
            reach: list[float] = [0]
            spend, rate = [0.0], []
            for i in useful:
                reach.append(reach[-1] + amounts[i] * bounds[i])
                spend.append(spend[-1] + prices[i] * bounds[i])
                rate.append(prices[i] / amounts[i])
            self.tables.append((reach, spend, rate))

    def __call__(self, start: int, need: float) -> float | None:
        """``None`` when the kinds left cannot cover ``need`` at all."""
        if need <= 0:
            return 0.0
        reach, spend, rate = self.tables[start]
        if need > reach[-1]:
            return None
        index = bisect_left(reach, need) - 1
        return spend[index] + (need - reach[index]) * rate[index]


# The request checks that refuse an override the caller gave, not the model's fields.
_OVERRIDE_FIELDS = {"ContextExceedsNative": "context_length_override",
                    "ContextBelowMinimum": "context_length_override",
                    "ZeroParallelLanes": "parallel_lanes_override"}


def _bad_argument(name: str) -> Fail:
    return lambda problem, got: TargetsError(
        "InvalidTargets", f"{name}: {problem} (got {shown(got)})", field=name,
        value=shown(got))


def size_fleet(
    model: ModelSpec | Mapping[str, Any],
    catalog: Sequence[GpuModel],
    targets: SizingTargets | None = None,
    *,
    top: int = 5,
    kinds: Iterable[str] | None = None,
    traffic: ModelTraffic | None = None,
    context_length_override: int | None = None,
    parallel_lanes_override: int | None = None,
    pareto: bool = True,
    bandwidth_efficiency: float | None = None,
    link_bandwidth_bytes_per_s: int = DEFAULT_LINK_BANDWIDTH_BYTES_PER_S,
    price_kind: str = DEFAULT_PRICE_KIND,
) -> SizingResult:
    """The ``top`` cheapest fleets of ``catalog`` kinds that meet ``targets`` for ``model``.

    ``model`` is a :class:`~planner.models.ModelSpec` (its decode traffic comes with it) or
    the request's model fields (give ``traffic`` for speed estimates). ``kinds`` limits the
    kinds used (ids or names); by default every kind with a price. The overrides are the
    request's (docs/rules.md §1), as a fleet file's ``[planning]`` gives them.

    ``pareto``: also the Pareto front over (cost per hour, context, estimated TPOT) among
    the ``top`` cheapest fleets at each context candidate from the minimum up (each of
    them is exact for its context; the front is exact in cost and context).

    Raises :class:`SizingError` (``NoFleetMeetsTargets`` with the reason when nothing
    within the counts available meets the targets).
    """
    top = integer(top, _bad_argument("top"), minimum=1, maximum=MAX_TOP_FLEETS)
    instance(model, (ModelSpec, Mapping), _bad_argument("model"),
             "a ModelSpec or a mapping of the model's fields")
    if isinstance(catalog, str | bytes) or not isinstance(catalog, Sequence) or not all(
            isinstance(gpu, GpuModel) for gpu in catalog):
        raise _bad_argument("catalog")("must be a list of GpuModel", catalog)
    if targets is not None:
        instance(targets, SizingTargets, _bad_argument("targets"), "a Targets")
    if kinds is not None and (isinstance(kinds, str | bytes) or not isinstance(kinds, Iterable)):
        raise _bad_argument("kinds")("must be a list of kind names", kinds)
    if traffic is not None:
        instance(traffic, ModelTraffic, _bad_argument("traffic"), "a ModelTraffic")
    pareto = flag(pareto, _bad_argument("pareto"))
    targets = targets or SizingTargets()
    fields, spec_traffic = _model_fields(model)
    traffic = traffic or spec_traffic
    chosen, skipped = select_kinds(catalog, kinds, price_kind)
    if not chosen:
        raise SizingError("EmptyCatalog", f"no catalog kind has a {price_kind} "
                          "price_per_hour to size with", price_kind=price_kind)
    if len(chosen) > MAX_SIZING_KINDS:
        raise SizingError(
            "TooManyKinds", f"{len(chosen):,} kinds to size with; the exact search takes at "
            f"most {MAX_SIZING_KINDS}: {TOO_MANY_KINDS_ADVICE}",
            kinds=len(chosen), most=MAX_SIZING_KINDS)
    _check_kind_ids(chosen)
    planning = {
        "minimum_nodes": targets.minimum_nodes,
        "target_decode_tpot_ms": targets.target_decode_tpot_ms,
        "context_length_override": context_length_override,
        "parallel_lanes_override": parallel_lanes_override,
    }
    probe = PlanningInput.from_dict({**fields, **planning, "nodes": [
        {"node_id": "probe", "detected_vram_bytes": 1}]})
    try:
        rules.check_request(probe)
    except PlanError as error:
        field = _OVERRIDE_FIELDS.get(error.code)
        raise TargetsError("InvalidTargets",
                           error.message if field is None else f"{field}: {error.message}",
                           field=field or "model", planning_code=error.code) from None
    minimum_context = targets.context_for(probe)
    options = {"bandwidth_efficiency": bandwidth_efficiency,
               "link_bandwidth_bytes_per_s": link_bandwidth_bytes_per_s,
               **targets.estimate_options}
    search = _Search(fields, traffic, chosen, targets, planning, minimum_context, options)
    stopped: list[str] = []
    fleets = _cheapest(search, probe, minimum_context, top, stopped)
    front: tuple[SizedFleet, ...] = ()
    notes = [f"prices compared: {PRICE_KIND_TEXT[price_kind]}", *stopped]
    if pareto:
        pool = list(fleets)
        for context in sorted(rules.context_candidates(probe)):
            if context > max(minimum_context, fleets[0].plan.context_length):
                level = _Search(fields, traffic, chosen, targets, planning, context, options)
                level.cache = search.cache  # same fleets, same plans
                # One budget for the whole answer: the levels count on from the search.
                level.plans_evaluated = search.plans_evaluated
                try:
                    pool.extend(_cheapest(level, probe, context, top))
                except SizingError as error:
                    if error.code != "SizingTooLarge":
                        continue
                    notes.append(f"the Pareto front leaves out contexts from {context:,} "
                                 "on: searching them exactly passed the search's bounds")
                    break
                finally:
                    search.plans_evaluated = level.plans_evaluated
        front = pareto_front(pool)
    left_out = set(skipped)
    unpriced = [gpu.kind for gpu in catalog
                if gpu.kind in left_out and gpu.price_per_hour is None]
    if unpriced:
        notes.append(f"left out for want of a price: {', '.join(unpriced)}")
    other = [gpu.kind for gpu in catalog
             if gpu.kind in left_out and gpu.price_per_hour is not None]
    if other:
        notes.append(f"left out as priced otherwise than {price_kind}: {', '.join(other)}")
    used = {kind for fleet in (*fleets, *front) if fleet.estimate is not None
            for kind, _ in fleet.counts}
    error_note = ("" if not used or bandwidth_efficiency is not None else
                  kinds_error_note(load_calibration(),
                                   (NodeSpeed.of_kind(gpu.kind, gpu) for gpu in chosen
                                    if gpu.kind in used)))
    return SizingResult(tuple(fleets), front, targets, minimum_context,
                        tuple(gpu.kind for gpu in chosen), tuple(skipped),
                        search.plans_evaluated, tuple(notes), price_kind, error_note)


def _cheapest(search: _Search, probe: PlanningInput, minimum_context: int,
              top: int, stopped: list[str] | None = None) -> list[SizedFleet]:
    """The ``top`` cheapest fleets at ``minimum_context``, cheapest first.

    With ``stopped``, a search that reaches its bounds after proving the first fleets
    returns those (every fleet cheaper than the partial fleet it stopped at has been
    found) and appends a note saying so to ``stopped``; without, it raises
    ``SizingTooLarge``."""
    candidates = [c for c in rules.context_candidates(probe) if c >= minimum_context]
    lanes = rules.lane_candidates(probe)[0]
    if not candidates:
        tried = ", ".join(f"{c:,}" for c in rules.context_candidates(probe))
        raise _nothing(search, f"the planner tries no context of at least "
                       f"{minimum_context:,} (it tries {tried})")
    if lanes < search.targets.minimum_lanes:
        raise _nothing(search, f"the planner plans at most {lanes} parallel lanes")
    c0 = min(candidates)
    # At the fewest lanes a plan meeting the targets runs: the most room (a model with a
    # state per sequence may fit only with fewer lanes).
    costs = rules.layer_bytes(probe, c0, floors.least_lanes(probe, search.targets.minimum_lanes))
    needs = _Needs(search, costs)
    kinds = len(search.kinds)
    carriers = _speed_carriers(search, probe, candidates, c0)
    # The tree decides the largest kinds first (catalog order among equals): then the f
    # largest nodes of a partial fleet are soon those of every fleet below it, and the
    # spares' share of the bound is tight near the root. Leaves go back to catalog order,
    # so ties and results are as in any other order.
    order = sorted(range(kinds), key=lambda i: (-needs.usable[i], -needs.caps[i], i))
    prices = [search.prices[i] for i in order]
    caps = [needs.caps[i] for i in order]
    usables = [needs.usable[i] for i in order]
    # A kind in no fleet that meets a speed target is not searched.
    bounds = [0 if any(c.kinds[i] is None for c in carriers) else search.bounds[i]
              for i in order]
    layer_bound = _Bound(prices, caps, bounds)
    byte_bound = _Bound(prices, usables, bounds)
    # Each speed cover: what each kind's node gives towards it, and what a fleet needs.
    covers = [*carriers, *_read_time_covers(search, probe, candidates, c0, needs),
              *_prefill_read_covers(search, probe, candidates, needs)]
    levels = _Levels(search, probe, candidates, c0)
    top_stages = _TopStages(search, probe, candidates)
    for level, context in enumerate(levels.contexts):
        if not levels.dead[level]:
            covers += [replace(cover, level=level) for cover in _read_time_covers(
                search, probe, candidates, context, needs, _LEVEL_READ_COVERS)]
    carried = [[float(c.kinds[i] or 0) for i in order] for c in covers]
    carrier_bounds = [_Bound(prices, amounts, bounds) for amounts in carried]
    spans = [[levels.spans[level][i] for i in order] for level in range(len(levels.contexts))]

    def in_catalog_order(tree_counts: tuple[int, ...]) -> tuple[int, ...]:
        counts = [0] * kinds
        for position, index in enumerate(order):
            counts[index] = tree_counts[position]
        return tuple(counts)

    f = search.f

    prefix = list(itertools.accumulate(needs.costs, initial=0))
    # The largest layer from each layer on, and the largest node to be had from each
    # kind on: the walk past a layer needs a node that holds it.
    largest_after = _largest_from(needs.costs)
    largest_to_come = _largest_from([usable if bound else 0
                                     for usable, bound in zip(usables, bounds, strict=True)])

    def lower(start: int, layers: int, held: int, top_caps: tuple[int, ...] = (),
              top_usable: tuple[int, ...] = (), have: tuple[float, ...] = (),
              level: int = -1, walk: tuple[int, int] = (0, 0),
              tops: tuple[tuple[float, ...], ...] = ()) -> float | None:
        need_layers, need_bytes = needs.totals(f, top_caps, top_usable)
        parts = [layer_bound(start, need_layers - layers), byte_bound(start, need_bytes - held)]
        spared, reached = walk
        if spared >= f:
            # The fleet less its f largest nodes walks on from there (_Needs.necessary),
            # each node to come taking at most its longest run, and one of them taking the
            # largest layer left.
            if largest_after[reached] > largest_to_come[start]:
                return None
            parts.append(layer_bound(start, needs.layers_needed - reached))
        parts += [cover_bound(start, cover.need - (have[i] if have else 0)
                              + (sum(tops[i]) if tops else 0))
                  for i, (cover, cover_bound) in enumerate(zip(covers, carrier_bounds,
                                                                strict=True))
                  if cover.level < 0 or cover.level == level]
        if any(part is None for part in parts):
            return None
        return max(part for part in parts if part is not None)

    found: list[tuple[tuple[int, int, int, tuple[int, ...]], tuple[int, ...]]] = []
    threshold = float("inf")
    start_bound = lower(0, 0, 0)
    if start_bound is None:
        for cover, cover_bound in zip(covers, carrier_bounds, strict=True):
            if cover_bound(0, cover.need) is None:
                raise _nothing(search, cover.why)
        raise _nothing(search, _short_of(search, needs, c0))
    # Each entry: bound, tie order, counts of the first kinds, their cost, layers and
    # bytes, the f largest layer caps and usable bytes among their nodes, how many of
    # them carry each speed target, the layers they surely take at each level, how many
    # take one, and how far their walk there gets on how many (_Levels), and how far they
    # walk at the highest context (_TopStages), and how many of the f largest nodes of
    # every fleet below they hold and how far their others walk at c0 (_spare_walk).
    no_carriers = (0.0,) * len(covers)
    # A fleet that meets the targets after losing any f nodes meets a speed cover that
    # holds for every fleet meeting them without the f nodes that give it the most, which
    # give at least as much as the f that give the most among a partial fleet's nodes.
    spared_covers = [bool(f) and cover.level < 0 and cover.survives for cover in covers]
    no_tops: tuple[tuple[float, ...], ...] = ((),) * len(covers)
    no_spans = ((0, 0, 0, 0),) * len(levels.contexts)
    queue: list[tuple[float, int, tuple[int, ...], int, int, int, tuple[int, ...],
                      tuple[int, ...], tuple[float, ...],
                      tuple[tuple[int, int, int, int], ...], tuple[int, int],
                      tuple[int, int], tuple[tuple[float, ...], ...]]] = [
        (start_bound, 0, (), 0, 0, 0, (), (), no_carriers, no_spans, (0, 0), (0, 0),
         no_tops)]
    tie = itertools.count(1)
    while queue:
        (bound, _, tree_counts, cost, layers, held, top_caps, top_usable,
         have, sure, reach, walk, tops) = heapq.heappop(queue)
        if bound > threshold:
            break
        try:
            search.check_budget(len(queue))
        except SizingError:
            # Leaves leave the queue in cost order: those found below this bound are
            # the cheapest there are.
            proven = sorted(entry for entry in found if entry[0][0] < bound)
            if stopped is None or not proven:
                raise
            stopped.append(
                f"only {len(proven)} of the {top} fleets asked for are listed: the search "
                f"stopped after {search.plans_evaluated:,} plans, before proving which "
                f"fleet comes next (from USD {bound / _MICRO:,.2f} per hour)")
            return [search.sized(counts) for _, counts in proven]
        depth = len(tree_counts)
        if depth == kinds:
            counts = in_catalog_order(tree_counts)
            if (needs.necessary(search, counts) and search.meets(counts)
                    and not _idles_on(search, counts, found)):
                outcome = search.outcome(counts)
                assert outcome.plan is not None
                key = (cost, sum(counts), -outcome.plan.context_length, counts)
                found.append((key, counts))
                if len(found) >= top:
                    found.sort()
                    del found[top:]
                    threshold = found[-1][0][0]
            continue
        price, cap, usable = prices[depth], caps[depth], usables[depth]
        for amount in range(bounds[depth] + 1):
            child_cost = cost + price * amount
            if child_cost > threshold:
                break
            child_caps = _largest_sizes(f, top_caps, cap, amount)
            child_usable = _largest_sizes(f, top_usable, usable, amount)
            child_have = tuple(n + flags[depth] * amount
                               for n, flags in zip(have, carried, strict=True))
            child_tops = tuple(_largest_sizes(f, top, flags[depth], amount) if lost else ()
                               for top, flags, lost in zip(tops, carried, spared_covers,
                                                           strict=True))
            child_sure = tuple((taken + span[depth] * amount,
                                holders + (span[depth] > 0) * amount,
                                *levels.walk(level, (at, walked), usable, amount))
                               for level, ((taken, holders, at, walked), span)
                               in enumerate(zip(sure, spans, strict=True)))
            level = levels.level(child_sure)
            if level >= 0 and levels.dead[level]:
                break  # more of this kind only raise the context every completion plans
            child_reach = top_stages.walk(reach, usable, amount)
            if top_stages.misses(child_reach):
                break  # more of this kind plan on as few stages
            child_walk = _spare_walk(f, prefix, walk, usable, amount)
            rest = lower(depth + 1, layers + cap * amount, held + usable * amount,
                         child_caps, child_usable, child_have, level, child_walk,
                         child_tops)
            if rest is None:
                continue
            child_bound = child_cost + rest
            if child_bound <= threshold * (1 + 1e-12):
                heapq.heappush(queue, (child_bound, next(tie), (*tree_counts, amount),
                                       child_cost, layers + cap * amount,
                                       held + usable * amount, child_caps, child_usable,
                                       child_have, child_sure, child_reach, child_walk,
                                       child_tops))
    if not found:
        raise _nothing(search, _why_not(search, needs, c0))
    found.sort()
    return [search.sized(counts) for _, counts in found[:top]]


def _idles_on(search: _Search, counts: tuple[int, ...],
              found: Sequence[tuple[Any, tuple[int, ...]]]) -> bool:
    """Whether the fleet ``counts`` holds a fleet found before it and plans the same
    stages on it: the planner takes the fewest nodes, so a fleet that meets the targets
    still meets them with nodes added that it leaves idle, and every such fleet would
    otherwise be listed after it at a higher price. It is no alternative.

    Fleets leave the queue in cost order, and prices are above 0, so a fleet it holds was
    found before it; nodes of a kind are named in order (:func:`fleet_nodes`), so the
    smaller fleet's nodes are the larger's first ones, and equal plans name the same
    nodes."""
    plan = search.outcome(counts).plan
    return any(all(have >= need for have, need in zip(counts, other, strict=True))
               and search.outcome(other).plan == plan for _, other in found)


@dataclass(frozen=True, slots=True)
class _Cover:
    """A condition every fleet meeting a speed target satisfies: its nodes' ``kinds``
    amounts (per catalog kind; ``None``: a kind in no such fleet) add up to ``need``
    (``why`` says what, when no fleet can)."""

    kinds: tuple[float | None, ...]
    need: float
    why: str
    level: int = -1  # >= 0: it holds only for fleets at that _Levels level
    # It holds for every fleet that meets the targets at any context the search admits
    # (not only for those that keep f spares): so also after losing any f nodes.
    survives: bool = False


def _carriers(search: _Search, target: str, fast: Sequence[bool | None]) -> _Cover:
    """The kinds that can carry a plan that meets ``target`` (``True``), can be in a fleet
    that meets it without carrying its plan (``False``), or are in none (``None``): a
    fleet that meets it after losing any f nodes has f + 1 carriers."""
    return _Cover(tuple(None if flag is None else float(flag) for flag in fast),
                  search.f + 1,
                  f"the fleet must keep a node fast enough for the {target} target after "
                  f"losing any {search.f}, and fewer than {search.f + 1} such nodes can be "
                  "had")


# The read-time covers tried (each a valid condition; more cost more per partial fleet),
# at the lowest context and at each higher level.
_READ_COVERS = 8
_LEVEL_READ_COVERS = 4


class _Levels:
    """The contexts above ``c0`` that a partial fleet surely plans at or above, and the
    TPOT they cost.

    Without latencies the planner plans the highest context at which some set of the
    fleet's nodes fits (docs/rules.md §6), so a fleet plans at least any context that a
    subset of it fits at, and so does every fleet that holds it. A set of nodes surely
    fits at context ``c`` when each of them takes at least ``g >= 1`` layers in the walk
    of docs/rules.md §4 from any start layer (:func:`_surest_run`, at the fewest lanes:
    the most room), and their ``g`` add up to the layers (or they are as many as the
    layers), in at least ``minimum_nodes`` stages. The walk then ends at the last layer:
    each stage takes its ``g`` or, where it must leave one layer to each later stage,
    exactly that. A partial fleet's **level** is the highest such context; every fleet
    below it in the search plans that context or a higher one, so its plan reads at
    least the cache of that context (:class:`floors.DecodeFloor`) and hops between as
    many stages as it takes to hold the model there: a level no plan reads within the
    TPOT target is **dead**, and the level's read-time covers hold below it.

    Only with a TPOT target, no latencies and no memory rule that reserves bytes per
    node (which this walk leaves out); else there are no levels."""

    def __init__(self, search: _Search, probe: PlanningInput, candidates: Sequence[int],
                 c0: int) -> None:
        self.contexts: list[int] = []
        self.spans: list[list[int]] = []
        self.prefixes: list[list[int]] = []
        self.largest_layers: list[int] = []
        self.dead: list[bool] = []
        self.layer_count = search.layer_count
        self.stages = max(search.targets.minimum_nodes, 1)
        target = search.targets.target_decode_tpot_ms
        fewest_lanes = rules.lane_candidates(probe)[-1]
        if (target is None or search.traffic is None
                or any(gpu.stage_transfer_latency_ms is not None for gpu in search.kinds)):
            return
        floor = search.decode_floor(probe)
        hop = floors.least_hop_ms(search.kinds, search.options)
        for context in sorted(c for c in candidates if c > c0):
            if any(probe.memory_rule.node_reserves(probe, context, lanes).values()
                   for lanes in rules.lane_candidates(probe)):
                self.contexts, self.spans, self.dead = [], [], []
                self.prefixes, self.largest_layers = [], []
                return
            costs = rules.layer_bytes(probe, context, fewest_lanes)
            self.contexts.append(context)
            self.spans.append([_surest_run(gpu.usable_bytes, costs) for gpu in search.kinds])
            self.prefixes.append(list(itertools.accumulate(costs, initial=0)))
            self.largest_layers.append(max(costs))
            # A plan at this context or above has at least as many stages as the most
            # layers any node holds there take to cover the model: a hop between each.
            most = max(_longest_run(gpu.usable_bytes, costs) for gpu in search.kinds)
            stages = -(-self.layer_count // most) if most else self.layer_count
            self.dead.append(floor.least_ms(context) + (stages - 1) * hop > target)

    def walk(self, level: int, reach: tuple[int, int], usable: int, amount: int
             ) -> tuple[int, int]:
        """The layer the walk at ``level``'s context reaches and the nodes it took, after
        ``amount`` more nodes of ``usable`` bytes (no larger than those before); ``(-1,
        0)`` once a node that cannot hold every one layer comes before the walk has both
        reached the last layer and taken ``minimum_nodes`` nodes."""
        return _walk_on(self.prefixes[level], self.largest_layers[level], self.stages,
                         reach, usable, amount)

    def level(self, sure: Sequence[tuple[int, int, int, int]]) -> int:
        """The highest level a partial fleet surely plans at (-1: none), from the layers
        its nodes surely take and how many take one, per level, or from its walk there.

        The search decides the largest kinds first, so the walk takes the partial
        fleet's nodes in the stage order of docs/rules.md §4, each taking all the layers
        it holds: when that reaches the last layer on ``minimum_nodes`` nodes or more (at
        most the layers), each of which holds any one layer, those nodes fit, as leaving
        one layer to each later stage still ends at the last layer."""
        for level in range(len(sure) - 1, -1, -1):
            taken, holders, at, walked = sure[level]
            if (min(holders, self.layer_count) >= self.stages
                    and (taken >= self.layer_count or holders >= self.layer_count)):
                return level
            if at >= self.layer_count and self.layer_count >= walked >= self.stages:
                return level
        return -1


class _TopStages:
    """With a TTFT target: how few stages every fleet below a partial fleet plans on.

    Without latencies the planner plans the highest context some set of the fleet's
    nodes fits at, on the fewest stages that fit there (docs/rules.md §6). The search
    decides the largest kinds first, so a partial fleet's nodes are the largest of every
    fleet below it: when the first ``m`` of them, largest first, reach the last layer in
    the walk of docs/rules.md §4 at the highest context the planner tries (each taking
    all it holds; the smallest of them holds any one layer, so leaving one layer to each
    later stage still ends there), every fleet below plans that context on ``m`` stages
    or fewer. Fewer stages pass a prompt's ubatches through a shorter pipeline, each
    stage with more of the model (:meth:`floors.PrefillFloor.pipeline_least_ms`): too
    few to fill the prompt within the target, and no fleet below meets it.

    Only with a TTFT target, no latencies and no memory rule that reserves bytes per
    node (which this walk leaves out); else it prunes nothing."""

    def __init__(self, search: _Search, probe: PlanningInput, candidates: Sequence[int]
                 ) -> None:
        self.ttft_by_stages: list[float] = []
        self.minimum_nodes = max(search.targets.minimum_nodes, 1)
        target = search.targets.target_ttft_ms
        prompt = search.targets.prompt_tokens
        top = max(candidates)
        fewest_lanes = rules.lane_candidates(probe)[-1]
        if (target is None or prompt is None or search.traffic is None
                or floors.prefill_unknown(search.traffic, search.options)
                or any(gpu.stage_transfer_latency_ms is not None for gpu in search.kinds)
                or any(probe.memory_rule.node_reserves(probe, top, lanes).values()
                       for lanes in rules.lane_candidates(probe))):
            return
        self.target = target
        costs = rules.layer_bytes(probe, top, fewest_lanes)
        self.layer_count = len(costs)
        self.largest_layer = max(costs)
        self.prefix = list(itertools.accumulate(costs, initial=0))
        floor = search.prefill_floor(probe)
        self.ttft_by_stages = floor.pipeline_least_ms_by_stages(search.body_bytes,
                                                                self.layer_count)

    def walk(self, reach: tuple[int, int], usable: int, amount: int) -> tuple[int, int]:
        """The walk at the highest context after ``amount`` more nodes of ``usable``
        bytes (:func:`_walk_on`)."""
        if not self.ttft_by_stages:
            return reach
        return _walk_on(self.prefix, self.largest_layer, self.minimum_nodes, reach, usable,
                        amount)

    def misses(self, reach: tuple[int, int]) -> bool:
        """No fleet below a partial fleet whose walk is ``reach`` meets the TTFT target."""
        at, taken = reach
        return (bool(self.ttft_by_stages) and at == self.layer_count
                and taken >= self.minimum_nodes
                and self.ttft_by_stages[taken - 1] > self.target)


def _walk_on(prefix: Sequence[int], largest_layer: int, fewest: int, reach: tuple[int, int],
             usable: int, amount: int) -> tuple[int, int]:
    """The layer the walk of docs/rules.md §4 reaches and the nodes it took (``reach``
    before), after ``amount`` more nodes of ``usable`` bytes, no larger than those
    before, each taking all the next layers it holds (``prefix``: the layers' bytes
    summed), until it has reached the last layer on ``fewest`` nodes or more; ``(-1, 0)``
    once a node that cannot hold every single layer comes before that (then it proves
    nothing). Where it ends, those nodes fit as a set: a stage that must leave one layer
    to each later stage takes fewer, and each later one holds its one."""
    at, taken = reach
    layer_count = len(prefix) - 1
    for _ in range(amount):
        if at < 0 or (at >= layer_count and taken >= fewest):
            break
        if usable < largest_layer:
            return -1, 0
        at = bisect_right(prefix, prefix[at] + usable) - 1
        taken += 1
    return at, taken


def _surest_run(budget: int, costs: Sequence[int]) -> int:
    """The fewest consecutive layers a node of ``budget`` bytes takes from any start layer
    where the layers left do not all fit (``len(costs)`` when they always do)."""
    least = len(costs)
    end = total = 0
    for start in range(len(costs)):
        if end < start:
            end, total = start, 0
        while end < len(costs) and total + costs[end] <= budget:
            total += costs[end]
            end += 1
        if end < len(costs):
            least = min(least, end - start)
        if end > start:
            total -= costs[start]
    return least


def _read_time_covers(search: _Search, probe: PlanningInput, candidates: Sequence[int],
                      c0: int, needs: _Needs, most: int = _READ_COVERS) -> list[_Cover]:
    """With a TPOT target: the stages of a plan at ``c0`` or above read ``R`` weight bytes
    at least (and ``K`` cache bytes, :class:`floors.DecodeFloor` at ``c0``), a stage on a
    node of ``u`` usable bytes at most ``rho x u`` of them
    (:func:`floors.most_read_per_held_byte`), at ``m`` ms a byte or more (its compute
    and attention included), within ``T`` = the target less the fixed per-layer times and the
    other reads at the fastest kind's rate (:func:`_time_covers`). Likewise for the
    cache."""
    target = search.targets.target_decode_tpot_ms
    if target is None or search.traffic is None:
        return []
    floor = search.decode_floor(probe)
    rho_weight, rho_kv = floors.most_read_per_held_byte(search.traffic, probe, candidates)
    kv = floor.kv_bytes_per_token * c0
    kv_rates = floor.kv_ms_per_byte(c0)
    why = (f"no fleet reads the model (its active weights and the KV cache at {c0:,}) "
           f"within the TPOT target of {target} ms on the nodes to be had: the fastest "
           "hold too little of it")
    hop = floors.least_hop_ms(search.kinds, search.options)
    return [*_time_covers(floor.weight_bytes, rho_weight, floor.weight_ms_per_byte,
                          target - floor.fixed_ms - kv * min(kv_rates), needs, most, why,
                          hop),
            *_time_covers(kv, rho_kv, kv_rates, target - floor.fixed_ms
                          - floor.weight_bytes * min(floor.weight_ms_per_byte),
                          needs, most, why, hop)]


def _prefill_read_covers(search: _Search, probe: PlanningInput, candidates: Sequence[int],
                         needs: _Needs) -> list[_Cover]:
    """With a TTFT target: each batch of the prompt reads, over the stages, the weights its
    largest ubatch uses (:class:`floors.PrefillFloor`), a stage on a node of ``u`` usable
    bytes its own share of them, at most ``rho x u`` (:func:`floors.most_read_per_held_byte`
    with every weight counted); so the prompt reads ``R`` bytes within the target less
    every batch's fixed per-layer times (:func:`_time_covers`)."""
    ttft = search.targets.target_ttft_ms
    prompt = search.targets.prompt_tokens
    if (ttft is None or prompt is None or search.traffic is None
            or floors.prefill_unknown(search.traffic, search.options)):
        return []
    floor = search.prefill_floor(probe)
    read = floor.read_bytes()
    body = search.body_bytes
    rho, _ = floors.most_read_per_held_byte(search.traffic, probe, candidates, weight_share=1.0)
    # And the whole of each ubatch's stage time but attention, per body byte held
    # (floors.PrefillFloor.held_byte_rates): a stage holds at most rho x u of the body.
    rates, rest = floor.held_byte_rates(body)
    return [*_time_covers(read, rho * read / body, floor.read_ms_per_byte,
                          ttft - floor.fixed_ms * floor.batch_count, needs, _READ_COVERS,
                          f"no fleet reads the weights a {prompt:,}-token prompt uses "
                          f"within the TTFT target of {ttft} ms on the nodes to be had: the "
                          "fastest hold too little of them"),
            *_time_covers(body, rho, rates, ttft - rest, needs, _READ_COVERS,
                          f"no fleet fills a {prompt:,}-token prompt within the TTFT target "
                          f"of {ttft} ms on the nodes to be had: the fastest hold too little "
                          "of the model")]


def _time_covers(read: float, rho: float, rates: Sequence[float], budget: float,
                 needs: _Needs, most: int, why: str, hop: float = 0.0) -> list[_Cover]:
    """A fleet whose stages read ``read`` bytes, a stage on a node of ``u`` usable bytes at
    most ``rho x u`` of them at ``m`` ms a byte or more (its kind's ``rates``), within
    ``budget`` ms: the fastest nodes filled first do best; for any rate ``x``, that needs
    ``sum(rho x u x max(0, x - m)) >= x R - T`` over the fleet (linear programming's dual
    bound at ``x``, exact at the best ``x``, one of the kinds' ``m``).

    With ``hop`` ms or more between stages (a plan of ``k`` stages pays ``k - 1`` of
    them beside its reads): a stage reads at most ``rho x u``, so its hop costs at least
    ``hop / (rho x u)`` a byte it reads, and the plan takes at least ``sum((m + hop /
    (rho u)) r) - hop``: each kind's rate is raised so, and the budget by one hop. A node
    then gives ``max(0, rho x u x (x - m) - hop)``: a small stage pays a whole hop for the
    little of the model it reads."""
    effective = [m if math.isinf(m) or not hop else
                 (m + hop / (rho * usable) if rho * usable > 0 else math.inf)
                 for m, usable in zip(rates, needs.usable, strict=True)]
    budget += hop
    slow = sorted({m for m in effective if not math.isinf(m) and m * read > budget})
    if len(slow) > most:
        slow = [slow[round(i * (len(slow) - 1) / (most - 1))] for i in range(most)]
    covers = []
    for x in slow:
        amounts = tuple(0.0 if math.isinf(m) else rho * usable * max(0.0, x - m)
                        for m, usable in zip(effective, needs.usable, strict=True))
        covers.append(_Cover(amounts, (x * read - budget) * (1 - 1e-6), why,
                             survives=True))
    return covers


def _speed_carriers(search: _Search, probe: PlanningInput, candidates: Sequence[int],
                    c0: int) -> list[_Cover]:
    """The carriers of the TPOT and TTFT targets (:mod:`planner.sizing.floors`), or
    ``NoFleetMeetsTargets`` at once where no kind carries one; a target no plan of this
    model can be judged on is refused (``TpotNotEstimable``, ``TtftNotEstimable``).

    Beyond the floors: where the planner takes the highest context that fits (no
    latencies, one stage allowed), a fleet with a node that holds the whole model at
    context ``c`` plans at least ``c``, also after losing any other nodes: a kind that
    alone holds it at a context no kind decodes fast enough at is in no fleet that meets
    a TPOT target."""
    carriers = []
    target = search.targets.target_decode_tpot_ms
    if target is not None or search.targets.target_ttft_ms is not None:
        spoilers = _lone_plans_that_miss(search, candidates)
        if spoilers:
            carriers.append(_Cover(tuple(None if i in spoilers else 0.0
                                         for i in range(len(search.kinds))), 0, ""))
    if target is not None:
        carriers.extend(_tpot_carriers(search, probe, candidates, c0, target))
    ttft = search.targets.target_ttft_ms
    prompt = search.targets.prompt_tokens
    if ttft is not None and prompt is not None:
        why = floors.prefill_unknown(search.traffic, search.options)
        if why:
            raise TargetsError("TtftNotEstimable", f"the TTFT target ({ttft} ms) is judged "
                               f"by the prefill estimate, and no plan has one: {why}",
                               target_ttft_ms=ttft)
        assert search.traffic is not None
        floor = search.prefill_floor(probe)
        least = floor.least_ms()
        if least > ttft:
            fastest = min(range(len(search.kinds)), key=lambda i: floor.read_ms_per_byte[i])
            why = ("no kind states a memory bandwidth" if math.isinf(least) else
                   f"reading the weights a ubatch uses and computing with them takes at "
                   f"least {least:,.0f} ms at the fastest kinds' rates "
                   f"({search.kinds[fastest].kind})")
            raise _nothing(search, f"no split fills a {prompt:,}-token prompt within the "
                           f"TTFT target of {ttft} ms: {why}")
        piped = floor.pipeline_least_ms(search.body_bytes, search.layer_count)
        if piped > ttft:
            raise _nothing(search, f"no split fills a {prompt:,}-token prompt within the "
                           f"TTFT target of {ttft} ms: its ubatches pass through the stages "
                           f"in turn, which takes at least {piped:,.0f} ms at the fastest "
                           f"kinds' rates ({least:,.0f} ms for one ubatch through every "
                           "stage, the others on the busiest stage, whose share shrinks "
                           "with more stages as the hops between them add up)")
        # Each term's fastest kind in a plan is one of its nodes: a carrier of that term.
        carriers.extend(
            _carriers(search, "TTFT", [floor.least_ms(**{term: i}) <= ttft
                                       for i in range(len(search.kinds))])
            for term in floors.PREFILL_TERMS)
    return carriers


def _lone_plans_that_miss(search: _Search, candidates: Sequence[int]) -> set[int]:
    """The kinds in no fleet that meets the targets, because one node of theirs holds the
    whole model at the highest context the planner tries, and its plan misses them.

    Where the planner takes the first shape that fits (no latencies, one stage allowed:
    docs/rules.md §6), a fleet with such a node plans one stage at that context, on one
    of its nodes that holds the model alone: the plan of one such node by itself. When
    that plan misses the targets for every such kind in the fleet, so does the fleet's."""
    if search.targets.minimum_nodes > 1 or any(
            gpu.stage_transfer_latency_ms is not None for gpu in search.kinds):
        return set()
    top = max(candidates)
    holders = {}
    for index in range(len(search.kinds)):
        if not search.bounds[index]:
            continue
        counts = tuple(int(i == index) for i in range(len(search.kinds)))
        plan = search.outcome(counts).plan
        if plan is not None and plan.context_length == top and plan.stage_count == 1:
            holders[index] = search.fleet_meets(counts)
    # Any fleet with a holder plans on a holder: if none meets, all such fleets miss.
    return set() if any(holders.values()) else set(holders)


def _tpot_carriers(search: _Search, probe: PlanningInput, candidates: Sequence[int],
                   c0: int, target: int) -> list[_Cover]:
    """The TPOT target's carriers: a fleet that meets it keeps, after any f losses, a
    node that reads the weights, and one that reads the cache, fast enough given the
    fastest kind's reading of the other (:class:`floors.DecodeFloor`)."""
    if search.traffic is None:
        raise TargetsError("TpotNotEstimable", f"the TPOT target ({target} ms) is judged by "
                           "the speed estimate, and no plan has one: the model's decode "
                           "traffic is unknown (the model is typed as numbers; give a "
                           "preset or GGUF model)", target_decode_tpot_ms=target)
    floor = search.decode_floor(probe)
    least = floor.least_ms(c0)
    if least > target:
        fastest = min(range(len(search.kinds)), key=lambda i: floor.weight_ms_per_byte[i])
        gpu = search.kinds[fastest]
        why = ("no kind has a memory bandwidth" if math.isinf(least) else
               f"reading the model once (the weights a step of {floor.lanes} "
               f"lane{'s' if floor.lanes > 1 else ''} reads, "
               f"{format_bytes(round(floor.weight_bytes))}, and the KV cache at {c0:,}) "
               f"and computing with it takes at least {least:,.1f} ms at the fastest kinds' "
               f"bandwidth ({gpu.kind}, "
               f"{(gpu.memory_bandwidth_bytes_per_s or 0) / 1e9:,.0f} GB/s)")
        raise _nothing(search, f"no split decodes within the TPOT target of {target} ms: "
                       f"{why}")
    alone_at: dict[int, int] = {}
    if (search.targets.minimum_nodes <= 1 and not any(
            gpu.stage_transfer_latency_ms is not None for gpu in search.kinds)):
        for index, gpu in enumerate(search.kinds):
            alone = next((c for c in sorted(candidates, reverse=True)
                          if sum(rules.layer_bytes(probe, c)) <= gpu.usable_bytes), None)
            if alone is not None and floor.least_ms(alone) > target:
                alone_at[index] = alone
    kinds = range(len(search.kinds))
    readers = [[None if i in alone_at else floor.least_ms(c0, weight_kind=i) <= target
                for i in kinds],
               [None if i in alone_at else floor.least_ms(c0, kv_kind=i) <= target
                for i in kinds]]
    if all(any(flags) for flags in readers):
        return [_carriers(search, "TPOT", flags) for flags in readers]
    context = min(alone_at.values())
    raise _nothing(search, f"the kinds fast enough for the TPOT target of {target} ms at "
                   f"context {c0:,} each hold the whole model alone at {context:,} or "
                   "more, the context the planner then plans, where reading it takes at "
                   f"least {floor.least_ms(context):,.1f} ms")


def _nothing(search: _Search, why: str) -> SizingError:
    f = search.f
    spares = f", also after losing any {f} node{'s' if f > 1 else ''}" if f else ""
    return SizingError("NoFleetMeetsTargets",
                       f"no fleet within the counts available meets the targets (a context "
                       f"of at least {search.minimum_context:,}{spares}): {why}",
                       minimum_context=search.minimum_context, failures_tolerated=f)


def _largest(search: _Search) -> tuple[int, ...]:
    return tuple(search.bounds)


def _short_of(search: _Search, needs: _Needs, c0: int) -> str:
    """How far the largest fleet allowed falls short, in layers and bytes at ``c0``."""
    counts = _largest(search)
    caps = sorted(itertools.chain.from_iterable(
        [needs.caps[i]] * n for i, n in enumerate(counts)), reverse=True)[search.f:]
    held = min(sum(caps), needs.layers_needed)
    lost = f" after losing its {search.f} largest" if search.f else ""
    best = max(range(len(search.kinds)), key=lambda i: needs.caps[i] * search.bounds[i])
    gpu = search.kinds[best]
    kind = (f"; the largest kind, {gpu.kind}, holds {needs.caps[best]} layers a node "
            f"(at most {search.bounds[best]} nodes)")
    return (f"every kind at its most ({sum(counts)} nodes) holds {held} of "
            f"{needs.layers_needed} layers at {c0:,}{lost} "
            f"({format_bytes(needs.bytes_needed)} needed){kind}")


def _why_not(search: _Search, needs: _Needs, c0: int) -> str:
    counts = _largest(search)
    if not needs.necessary(search, counts):
        return _short_of(search, needs, c0)
    outcome = search.outcome(counts)
    if outcome.plan is None:
        return (f"the largest fleet allowed ({sum(counts)} nodes) has no plan that fits "
                f"at {c0:,}")
    parts = [f"the largest fleet allowed ({sum(counts)} nodes) plans context "
             f"{outcome.plan.context_length:,} with {outcome.plan.parallel_lanes} lanes"]
    missed = search.targets.shortfalls(outcome.plan, outcome.estimate)
    if missed:
        parts.append(f"and misses the targets: {'; '.join(missed)}")
    if search.fleet_meets(counts) and search.f:
        parts.append(f"but some removal of {search.f} nodes leaves a fleet that misses "
                     "the targets")
    return ", ".join(parts)


