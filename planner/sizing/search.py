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
``NoFleetMeetsTargets`` at once (:mod:`planner.sizing._covers`). Without latencies a fleet
plans at least every context a subset of its nodes fits, so a partial fleet sure to fit
a context no plan reads within the TPOT target is not searched further, and below it
the read-time covers of the context it is sure of hold (:mod:`planner.sizing._covers`).
The search is bounded (:data:`planner.limits.MAX_SIZING_KINDS`, ``MAX_SIZING_PLANS``,
``MAX_SIZING_QUEUE``):
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
them must still walk through the layers at ``c0`` (:mod:`planner.sizing._bounds`) and meet the
read-time covers. Leaves leave the queue in cost order and each is planned exactly (with
every f-node removal), so the first fleets found are the cheapest.
Plans are cached per count vector, which the removals share.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from planner._validate import Fail, flag, instance, integer, shown
from planner.errors import PlanError
from planner.limits import (
    DEFAULT_PRICE_KIND,
    MAX_SIZING_KINDS,
    MAX_TOP_FLEETS,
)
from planner.models.gpus import GpuModel
from planner.models.spec import ModelSpec
from planner.performance import (
    DEFAULT_LINK_BANDWIDTH_BYTES_PER_S,
    ModelTraffic,
    NodeSpeed,
    kinds_error_note,
    load_calibration,
)
from planner.planning import rules
from planner.planning.inputs import PlanningInput
from planner.sizing import floors
from planner.sizing._bounds import (
    _Bound,
    _largest_from,
    _largest_sizes,
    _Needs,
    _spare_walk,
)
from planner.sizing._covers import (
    _LEVEL_READ_COVERS,
    _Levels,
    _prefill_read_covers,
    _read_time_covers,
    _speed_carriers,
    _TopStages,
)
from planner.sizing._refusals import _nothing, _short_of, _why_not
from planner.sizing._result import SizedFleet, SizingResult, pareto_front
from planner.sizing._state import _MICRO, _Search
from planner.sizing._state import TOO_LARGE_ADVICE as TOO_LARGE_ADVICE
from planner.sizing._targets import (
    PRICE_KIND_TEXT,
    SizingError,
    SizingTargets,
    _check_kind_ids,
    _model_fields,
    select_kinds,
)
from planner.targets import TargetsError

# TOO_LARGE_ADVICE (the search state's) is named here too: the workbench words its own
# advice for each.
TOO_MANY_KINDS_ADVICE = "choose the kinds to compare (--kinds, kinds=)"
"""What ``TooManyKinds`` advises, in the command line's and Python's words."""


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
                                    if gpu.kind in used),
                                   traffic=traffic))
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


