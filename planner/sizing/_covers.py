"""The speed covers that prune the sizing search (:mod:`planner.sizing.search`):
conditions every fleet meeting a TPOT or TTFT target satisfies, from the speed floors of
:mod:`planner.sizing.floors`: the kinds fast enough to carry a plan within the target
(:func:`_speed_carriers`), the read-time covers of the weights and cache a plan must
read within it, and the contexts a partial fleet surely plans at (:class:`_Levels`)."""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from planner.planning import rules
from planner.planning.inputs import PlanningInput
from planner.sizing import floors
from planner.sizing._bounds import _longest_run, _Needs
from planner.sizing._refusals import _nothing
from planner.targets import TargetsError
from planner.units import format_bandwidth, format_bytes, format_milliseconds

if TYPE_CHECKING:
    from planner.sizing._state import _Search

_Size = TypeVar("_Size", int, float)


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
           f"within the TPOT target of {format_milliseconds(target)} on the nodes to be "
           "had: the fastest hold too little of it")
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
                          f"within the TTFT target of {format_milliseconds(ttft)} on the "
                          "nodes to be had: the fastest hold too little of them"),
            *_time_covers(body, rho, rates, ttft - rest, needs, _READ_COVERS,
                          f"no fleet fills a {prompt:,}-token prompt within the TTFT target "
                          f"of {format_milliseconds(ttft)} on the nodes to be had: the "
                          "fastest hold too little of the model")]


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
            raise TargetsError("TtftNotEstimable",
                               f"the TTFT target ({format_milliseconds(ttft)}) is judged "
                               f"by the prefill estimate, and no plan has one: {why}",
                               target_ttft_ms=ttft)
        assert search.traffic is not None
        floor = search.prefill_floor(probe)
        least = floor.least_ms()
        if least > ttft:
            fastest = min(range(len(search.kinds)), key=lambda i: floor.read_ms_per_byte[i])
            why = ("no kind states a memory bandwidth" if math.isinf(least) else
                   f"reading the weights a ubatch uses and computing with them takes at "
                   f"least {format_milliseconds(least, estimated=True)} at the fastest "
                   f"kinds' rates ({search.kinds[fastest].kind})")
            raise _nothing(search, f"no split fills a {prompt:,}-token prompt within the "
                           f"TTFT target of {format_milliseconds(ttft)}: {why}")
        piped = floor.pipeline_least_ms(search.body_bytes, search.layer_count)
        if piped > ttft:
            raise _nothing(search, f"no split fills a {prompt:,}-token prompt within the "
                           f"TTFT target of {format_milliseconds(ttft)}: its ubatches pass "
                           "through the stages in turn, which takes at least "
                           f"{format_milliseconds(piped, estimated=True)} at the fastest "
                           f"kinds' rates ({format_milliseconds(least, estimated=True)} for one "
                           "ubatch through every stage, the others on the busiest stage, "
                           "whose share shrinks with more stages as the hops between them "
                           "add up)")
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
        raise TargetsError("TpotNotEstimable",
                           f"the TPOT target ({format_milliseconds(target)}) is judged by "
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
               "and computing with it takes at least "
               f"{format_milliseconds(least, estimated=True)} at the fastest kinds' "
               f"bandwidth ({gpu.kind}, "
               f"{format_bandwidth(gpu.memory_bandwidth_bytes_per_s or 0)})")
        raise _nothing(search, "no split decodes within the TPOT target of "
                       f"{format_milliseconds(target)}: {why}")
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
    raise _nothing(search, "the kinds fast enough for the TPOT target of "
                   f"{format_milliseconds(target)} at context {c0:,} each hold the whole "
                   f"model alone at {context:,} or more, the context the planner then plans, "
                   "where reading it takes at "
                   f"least {format_milliseconds(floor.least_ms(context), estimated=True)}")

