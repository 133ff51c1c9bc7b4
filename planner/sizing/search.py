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
with at most ``max_count`` of each kind (a kind without ``max_count``: at most
``layer_count + f``, since a plan uses at most one node per layer and f more are spares).

How it stays exact and fast: a best-first search over count vectors, kind by kind (the
largest kinds first), whose priority is the cost so far plus a lower bound on the cost
still needed. The bound is the fractional-knapsack (linear programming) minimum over the
kinds left of covering what every fitting plan needs at the lowest admissible context
``c0`` (the smallest context candidate at or above the minimum): the layers, as each node
holds at most its longest run of consecutive layers at ``c0``, and the bytes, with f
nodes' worth more of each for the spares. Both needs only grow with the context, so no
fleet meeting the targets is pruned; leaves leave the queue in cost order and each is
planned exactly (with every f-node removal), so the first fleets found are the cheapest.
Plans are cached per count vector, which the removals share.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from planner._validate import integer, shown
from planner.errors import PlanError
from planner.limits import DEFAULT_PRICE_KIND, MAX_TOP_FLEETS
from planner.models.gpus import GpuModel
from planner.models.spec import ModelSpec
from planner.performance import (
    DEFAULT_LINK_BANDWIDTH_BYTES_PER_S,
    ModelTraffic,
    PerformanceError,
    PlanEstimate,
    estimate_plan,
    load_calibration,
    node_speeds,
)
from planner.planning import rules
from planner.planning.api import plan_topology
from planner.planning.inputs import PlanningInput
from planner.planning.plan import Plan
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
        self.bounds = [gpu.max_count if gpu.max_count is not None
                       else self.layer_count + self.f for gpu in self.kinds]
        self.prices = [int(Decimal(str(gpu.price_per_hour)) * _MICRO) for gpu in self.kinds]
        self.cache: dict[tuple[int, ...], _Outcome] = {}
        self.plans_evaluated = 0

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
        self.cache[counts] = result
        return result

    def fleet_meets(self, counts: tuple[int, ...]) -> bool:
        """This fleet's own plan meets the targets (no removals)."""
        outcome = self.outcome(counts)
        return outcome.plan is not None and self.plan_meets(outcome.plan, outcome.estimate)

    def estimate(self, counts: Sequence[int], request: PlanningInput, plan: Plan
                 ) -> PlanEstimate | None:
        if self.traffic is None:
            return None
        speeds = node_speeds(request.nodes, self.kinds, fleet_node_kinds(self.kinds, counts))
        try:
            return estimate_plan(request, plan, self.traffic, speeds,
                                 paid_node_ids=[node.node_id for node in request.nodes],
                                 **self.options)
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
        return SizedFleet(
            counts=tuple((gpu.kind, n) for gpu, n in zip(self.kinds, counts, strict=True) if n),
            node_ids=tuple(node.node_id for node in nodes),
            cost_per_hour_usd=self.cost(counts) / _MICRO,
            plan=outcome.plan, estimate=outcome.estimate, failures_tolerated=self.f)

    def cost(self, counts: Sequence[int]) -> int:
        return sum(p * n for p, n in zip(self.prices, counts, strict=True))


class _Needs:
    """What every plan meeting the targets needs at context ``c0``, per node kind: the
    most layers one node holds and its usable bytes; and the totals to cover."""

    def __init__(self, search: _Search, costs: tuple[int, ...], min_bandwidth_ms: float | None
                 ) -> None:
        self.layers_needed = len(costs)
        self.bytes_needed = sum(costs)
        self.caps = [_longest_run(gpu.usable_bytes, costs) for gpu in search.kinds]
        self.usable = [gpu.usable_bytes if cap else 0
                       for gpu, cap in zip(search.kinds, self.caps, strict=True)]
        self.min_bandwidth_ms = min_bandwidth_ms
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
        largest nodes: enough layers, bytes and holding nodes; and with a TPOT target, the
        fastest kind present reading the whole model within it."""
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
        target = search.targets.target_decode_tpot_ms
        if target is not None and self.min_bandwidth_ms is not None:
            fastest = max((search.kinds[i].memory_bandwidth_bytes_per_s or 0)
                          for i, n in enumerate(counts) if n)
            if fastest and self.min_bandwidth_ms / fastest > target * (1 + 1e-9):
                return False
        return True


def _largest_sizes(f: int, top: tuple[int, ...], size: int, amount: int) -> tuple[int, ...]:
    """The f largest sizes of a partial fleet once ``amount`` nodes of ``size`` join."""
    if not f or not amount:
        return top
    return tuple(sorted((*top, *[size] * min(amount, f)), reverse=True)[:f])


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

    def __init__(self, prices: Sequence[int], amounts: Sequence[int], bounds: Sequence[int]
                 ) -> None:
        kinds = len(prices)
        self.tables: list[tuple[list[int], list[float], list[float]]] = []
        for start in range(kinds + 1):
            useful = sorted((i for i in range(start, kinds) if amounts[i] > 0 and bounds[i]),
                            key=lambda i: prices[i] / amounts[i])
            reach, spend, rate = [0], [0.0], []
            for i in useful:
                reach.append(reach[-1] + amounts[i] * bounds[i])
                spend.append(spend[-1] + prices[i] * bounds[i])
                rate.append(prices[i] / amounts[i])
            self.tables.append((reach, spend, rate))

    def __call__(self, start: int, need: int) -> float | None:
        """``None`` when the kinds left cannot cover ``need`` at all."""
        if need <= 0:
            return 0.0
        reach, spend, rate = self.tables[start]
        if need > reach[-1]:
            return None
        index = bisect_left(reach, need) - 1
        return spend[index] + (need - reach[index]) * rate[index]


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
    targets = targets or SizingTargets()
    top = integer(top, lambda problem, got: TargetsError(
        "InvalidTargets", f"top: {problem} (got {shown(got)})", field="top", value=got),
        minimum=1, maximum=MAX_TOP_FLEETS)
    fields, spec_traffic = _model_fields(model)
    traffic = traffic or spec_traffic
    chosen, skipped = select_kinds(catalog, kinds, price_kind)
    if not chosen:
        raise SizingError("EmptyCatalog", f"no catalog kind has a {price_kind} "
                          "price_per_hour to size with", price_kind=price_kind)
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
        raise TargetsError("InvalidTargets", error.message, field="model",
                           planning_code=error.code) from None
    minimum_context = targets.context_for(probe)
    options = {"bandwidth_efficiency": bandwidth_efficiency,
               "link_bandwidth_bytes_per_s": link_bandwidth_bytes_per_s,
               **targets.estimate_options}
    search = _Search(fields, traffic, chosen, targets, planning, minimum_context, options)
    fleets = _cheapest(search, probe, minimum_context, top)
    front: tuple[SizedFleet, ...] = ()
    if pareto:
        pool = list(fleets)
        for context in rules.context_candidates(probe):
            if context > max(minimum_context, fleets[0].plan.context_length):
                level = _Search(fields, traffic, chosen, targets, planning, context, options)
                level.cache = search.cache  # same fleets, same plans
                try:
                    pool.extend(_cheapest(level, probe, context, top))
                except SizingError:
                    continue
                search.plans_evaluated += level.plans_evaluated
        front = pareto_front(pool)
    notes = [f"prices compared: {PRICE_KIND_TEXT[price_kind]}"]
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
                  load_calibration().error_note(
                      gpu.memory_type for gpu in chosen if gpu.kind in used))
    return SizingResult(tuple(fleets), front, targets, minimum_context,
                        tuple(gpu.kind for gpu in chosen), tuple(skipped),
                        search.plans_evaluated, tuple(notes), price_kind, error_note)


def _cheapest(search: _Search, probe: PlanningInput, minimum_context: int,
              top: int) -> list[SizedFleet]:
    candidates = [c for c in rules.context_candidates(probe) if c >= minimum_context]
    lanes = rules.lane_candidates(probe)[0]
    if not candidates:
        tried = ", ".join(f"{c:,}" for c in rules.context_candidates(probe))
        raise _nothing(search, f"the planner tries no context of at least "
                       f"{minimum_context:,} (it tries {tried})")
    if lanes < search.targets.minimum_lanes:
        raise _nothing(search, f"the planner plans at most {lanes} parallel lanes")
    c0 = min(candidates)
    costs = rules.layer_bytes(probe, c0)
    min_bandwidth_ms = None
    if search.targets.target_decode_tpot_ms is not None and search.traffic is not None:
        weights = rules.layer_weights(probe)
        read = (sum(weights) * search.traffic.active_weight_bytes
                / search.traffic.model_weight_bytes
                + (sum(costs) - sum(weights)))
        # A bound below every stage's read time: at the highest efficiency any memory
        # type reaches (or the one asked for).
        efficiency = (search.options["bandwidth_efficiency"]
                      or load_calibration().max_read_efficiency)
        min_bandwidth_ms = read / efficiency * 1000
    needs = _Needs(search, costs, min_bandwidth_ms)
    kinds = len(search.kinds)
    # The tree decides the largest kinds first (catalog order among equals): then the f
    # largest nodes of a partial fleet are soon those of every fleet below it, and the
    # spares' share of the bound is tight near the root. Leaves go back to catalog order,
    # so ties and results are as in any other order.
    order = sorted(range(kinds), key=lambda i: (-needs.usable[i], -needs.caps[i], i))
    prices = [search.prices[i] for i in order]
    caps = [needs.caps[i] for i in order]
    usables = [needs.usable[i] for i in order]
    bounds = [search.bounds[i] for i in order]
    layer_bound = _Bound(prices, caps, bounds)
    byte_bound = _Bound(prices, usables, bounds)

    def in_catalog_order(tree_counts: tuple[int, ...]) -> tuple[int, ...]:
        counts = [0] * kinds
        for position, index in enumerate(order):
            counts[index] = tree_counts[position]
        return tuple(counts)

    f = search.f

    def lower(start: int, layers: int, held: int, top_caps: tuple[int, ...] = (),
              top_usable: tuple[int, ...] = ()) -> float | None:
        need_layers, need_bytes = needs.totals(f, top_caps, top_usable)
        by_layers = layer_bound(start, need_layers - layers)
        by_bytes = byte_bound(start, need_bytes - held)
        if by_layers is None or by_bytes is None:
            return None
        return max(by_layers, by_bytes)

    found: list[tuple[tuple[int, int, int, tuple[int, ...]], tuple[int, ...]]] = []
    threshold = float("inf")
    start_bound = lower(0, 0, 0)
    if start_bound is None:
        raise _nothing(search, _short_of(search, needs, c0))
    # Each entry: bound, tie order, counts of the first kinds, their cost, layers and
    # bytes, and the f largest layer caps and usable bytes among their nodes.
    queue: list[tuple[float, int, tuple[int, ...], int, int, int, tuple[int, ...],
                      tuple[int, ...]]] = [(start_bound, 0, (), 0, 0, 0, (), ())]
    tie = itertools.count(1)
    while queue:
        bound, _, tree_counts, cost, layers, held, top_caps, top_usable = heapq.heappop(queue)
        if bound > threshold:
            break
        depth = len(tree_counts)
        if depth == kinds:
            counts = in_catalog_order(tree_counts)
            if needs.necessary(search, counts) and search.meets(counts):
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
            rest = lower(depth + 1, layers + cap * amount, held + usable * amount,
                         child_caps, child_usable)
            if rest is None:
                continue
            child_bound = child_cost + rest
            if child_bound <= threshold * (1 + 1e-12):
                heapq.heappush(queue, (child_bound, next(tie), (*tree_counts, amount),
                                       child_cost, layers + cap * amount,
                                       held + usable * amount, child_caps, child_usable))
    if not found:
        raise _nothing(search, _why_not(search, needs, c0))
    found.sort()
    return [search.sized(counts) for _, counts in found[:top]]


def _nothing(search: _Search, why: str) -> SizingError:
    f = search.f
    spares = f" and survives the loss of any {f} node{'s' if f > 1 else ''}" if f else ""
    return SizingError("NoFleetMeetsTargets",
                       f"no fleet within the counts available reaches context "
                       f"{search.minimum_context:,}{spares}: {why}",
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
    target = search.targets.target_decode_tpot_ms
    if target is not None:
        tpot = outcome.estimate.estimated_tpot_ms if outcome.estimate else None
        parts.append("no TPOT estimate (a kind has no memory bandwidth)" if tpot is None
                     else f"estimated TPOT {tpot:,.1f} ms against the target {target} ms")
    if search.fleet_meets(counts) and search.f:
        parts.append(f"but some removal of {search.f} nodes leaves a fleet that misses "
                     "the targets")
    return ", ".join(parts)


