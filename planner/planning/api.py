"""``plan_topology`` and ``candidates``: the planner's public entry points."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from planner.errors import PlanError
from planner.planning.inputs import PlanningInput, as_planning_input
from planner.planning.nodesets import NodeIds
from planner.planning.plan import Plan
from planner.planning.rules import (
    at_context,
    build_stages,
    check_request,
    context_candidates,
    context_floor,
    greedy_layer_reach,
    lane_candidates,
    layer_bytes,
    layer_costs,
    node_count_range,
    request_for_stages,
    stage_order,
    walk_stages,
)
from planner.planning.search import ContextSearch, NodeSetChoice, SearchBudget
from planner.planning.tables import milliseconds_dtype
from planner.units import counted, format_bytes, latency_microseconds

Request = PlanningInput | Mapping[str, Any]


def target_met(request: PlanningInput, estimate: int | float | None) -> bool | None:
    if estimate is None or request.target_decode_tpot_ms is None:
        return None
    # In microseconds: a fractional estimate compares exactly.
    return latency_microseconds(estimate) <= request.target_decode_tpot_ms * 1000


def _to_plan(request: PlanningInput, shape: Shape) -> Plan:
    choice = shape.choice
    estimate = choice.estimated_decode_network_ms_per_token
    weights = layer_costs(request, choice.context_length, shape.lanes).weights
    return Plan(
        context_length=choice.context_length,
        parallel_lanes=shape.lanes,
        stages=build_stages(choice.nodes, choice.spans, weights),
        estimated_decode_network_ms_per_token=estimate,
        decode_tpot_target_met=target_met(request, estimate),
    )


def _set_order(choice: NodeSetChoice) -> tuple[int, int, tuple[str, ...]]:
    """docs/rules.md §5 rules 2-4 as an ascending sort key."""
    return (-choice.min_remaining_bytes, -choice.total_remaining_bytes,
            choice.node_ids.as_tuple())


def shape_rank(request: PlanningInput, estimate_us: int,
               context: int) -> tuple[bool, int, int]:
    """docs/rules.md §6, latency-aware: target met (unknown counts as met), lower estimate
    (unknown counts as 0; in whole microseconds, so exact), higher context (then more
    lanes, which :func:`select_shape` ranks next)."""
    target = request.target_decode_tpot_ms
    return (target is not None and estimate_us > target * 1000, estimate_us, -context)


@dataclass(frozen=True, slots=True)
class Shape:
    """A shape the planner may choose: a node set (its context and stage count) and the
    parallel lanes it runs."""

    choice: NodeSetChoice
    lanes: int


class Shapes:
    """The search at each context (and lane count, where the memory rule charges by
    lanes), run at most once per distinct cost of the layers and nodes and per stage
    count, so that the plan, the candidates table and the explanation share it. Stage
    counts whose costs differ (llama.cpp's rule: one device runs without pipeline
    parallelism's copies) are searched with their own rule."""

    def __init__(self, request: PlanningInput) -> None:
        self.request = request
        self.counts = node_count_range(request)
        self.lanes = lane_candidates(request)
        self._lanes_matter = request.memory_rule.lanes_matter(request)
        # One request per distinct rule among the stage counts, and each count's.
        self._regimes: list[PlanningInput] = []
        self._regime_of: dict[int, int] = {}
        for count in self.counts:
            staged = request_for_stages(request, count)
            index = next((i for i, known in enumerate(self._regimes)
                          if known.memory_rule is staged.memory_rule
                          or known.memory_rule == staged.memory_rule), None)
            if index is None:
                self._regimes.append(staged)
                index = len(self._regimes) - 1
            self._regime_of[count] = index
        self._searches: dict[Any, ContextSearch] = {}
        self._keys: dict[tuple[int, int, int], Any] = {}
        self._budget = SearchBudget()
        self._fitting: dict[Any, dict[int, int]] = {}
        self._best: dict[tuple[Any, int], NodeSetChoice] = {}

    def regime(self, count: int) -> PlanningInput:
        """The request a plan of ``count`` stages is searched and costed with."""
        return self._regimes[self._regime_of[count]]

    def _key(self, context: int, lanes: int, regime: int) -> Any:
        if not self._lanes_matter:
            return (regime, context)
        if (context, lanes, regime) not in self._keys:
            request = self._regimes[regime]
            rule = request.memory_rule
            reserves = rule.node_reserves(request, context, lanes)
            self._keys[(context, lanes, regime)] = (
                regime, context, rule.layer_costs(request, context, lanes).totals,
                tuple(sorted(reserves.items())))
        return self._keys[(context, lanes, regime)]

    def key(self, context: int, lanes: int) -> Any:
        """Equal for lane counts that cost every layer and node the same."""
        return tuple(self._key(context, lanes, regime)
                     for regime in range(len(self._regimes)))

    def _search(self, context: int, lanes: int, regime: int) -> ContextSearch:
        key = self._key(context, lanes, regime)
        if key not in self._searches:
            self._searches[key] = ContextSearch(self._regimes[regime], context,
                                                self._budget, lanes)
        return self._searches[key]

    def fitting(self, context: int, lanes: int) -> dict[int, int]:
        """Stage count -> smallest max latency in microseconds (unknown as 0), for the
        counts that fit."""
        fitting: dict[int, int] = {}
        for regime in range(len(self._regimes)):
            key = self._key(context, lanes, regime)
            if key not in self._fitting:
                found = self._search(context, lanes, regime).min_max_latency()
                self._fitting[key] = {k: v for k, v in found.items()
                                      if self._regime_of.get(k) == regime}
            fitting.update(self._fitting[key])
        return dict(sorted(fitting.items()))

    def best(self, context: int, lanes: int, counts: Iterable[int]) -> dict[int, NodeSetChoice]:
        """The docs/rules.md §5 best set for each of ``counts`` that fits at ``context``
        with ``lanes``."""
        fitting = self.fitting(context, lanes)
        wanted = [k for k in counts if k in fitting]
        for regime in range(len(self._regimes)):
            key = self._key(context, lanes, regime)
            missing = [k for k in wanted
                       if self._regime_of[k] == regime and (key, k) not in self._best]
            if missing:
                for k, choice in self._search(context, lanes, regime).best_for_counts(
                        missing).items():
                    self._best[(key, k)] = choice
        return {k: self._best[(self._key(context, lanes, self._regime_of[k]), k)]
                for k in wanted}


def select_shape(request: PlanningInput, shapes: Shapes,
                 contexts: Iterable[int] | None = None) -> Shape | None:
    """docs/rules.md §6: the chosen shape and its node set, or None.

    ``contexts`` (highest first) narrows the choice to those context lengths; by default
    every context candidate takes part.
    """
    counts = shapes.counts
    contexts = context_candidates(request) if contexts is None else tuple(contexts)
    if not request.has_latency:
        # Highest context first, then fewest nodes, then most lanes: the first shape
        # that fits wins.
        for context in contexts:
            for count in counts:
                for lanes in shapes.lanes:
                    if count in shapes.fitting(context, lanes):
                        return Shape(shapes.best(context, lanes, [count])[count], lanes)
        return None
    # Latency-aware: rank every fitting shape by target met, estimate, context, lanes
    # (the estimate needs only the smallest max latency); ties go to the docs/rules.md §5
    # rules, which need the sets themselves.
    ranked = [
        ((*shape_rank(request, count * latency, context), -lanes), context, lanes, count)
        for context in contexts
        for lanes in shapes.lanes
        for count, latency in shapes.fitting(context, lanes).items()
    ]
    if not ranked:
        return None
    best_key = min(key for key, _, _, _ in ranked)
    finalists = [Shape(shapes.best(context, lanes, [count])[count], lanes)
                 for key, context, lanes, count in ranked if key == best_key]
    return min(finalists, key=lambda shape: _set_order(shape.choice))


def plan_topology(request: Request) -> Plan:
    """Choose the context length, nodes, layer ranges and parallel lanes.

    ``request`` is a :class:`PlanningInput` or a plain dict with the field names of
    docs/rules.md §1 (nodes as dicts). Raises :class:`~planner.errors.PlanError` with the
    ``code`` of §2 (``InvalidInput`` for malformed requests), ``NoValidTopology`` too.

    This is the entry point for the plan alone. To show the plan beside its candidates,
    its explanation or its stage table, call :func:`~planner.planning.plan_request`
    instead: it makes the same plan (``plan_request(r).plan_or_raise() ==
    plan_topology(r)``) and works the other views out from the same search, where
    calling :func:`candidates`, ``explain_choice`` and ``stage_usage`` after this one
    searches again for each; and it returns a request nothing fits as a result with the
    error rather than raising it.

    >>> plan = plan_topology({
    ...     "native_context_length": 65536, "layer_count": 40,
    ...     "model_weight_bytes": 42949672960, "kv_bytes_per_token": 65536,
    ...     "nodes": [{"node_id": "a", "detected_vram_bytes": 85899345920}]})
    >>> plan.context_length, plan.node_ids
    (65536, ('a',))
    """
    req = as_planning_input(request)
    check_request(req)
    plan = plan_with(req, Shapes(req))
    if plan is None:
        raise no_valid_topology(req)
    return plan


def plan_with(request: PlanningInput, shapes: Shapes) -> Plan | None:
    """The plan of a checked request from ``shapes``' searches, or None."""
    shape = select_shape(request, shapes)
    return None if shape is None else _to_plan(request, shape)


def no_valid_topology(request: PlanningInput) -> PlanError:
    """The NoValidTopology error, with how close the fleet came at the lowest context."""
    contexts = context_candidates(request)
    lowest = contexts[-1]
    # The most room any shape has: the lowest context, the fewest lanes.
    lanes = lane_candidates(request)[-1]
    request = at_context(request, lowest, lanes)
    floor = context_floor(request)
    layers = request.layer_count
    counts = node_count_range(request)
    usable_nodes = [n for n in request.nodes if n.usable_bytes > 0]
    if not counts:
        stages = min(len(request.nodes), layers)
        why = (f"minimum_nodes is {request.minimum_nodes} but at most "
               f"{counted(stages, 'stage')} {'is' if stages == 1 else 'are'} possible "
               f"({counted(len(request.nodes), 'node')}, {counted(layers, 'layer')})")
        placed = 0
    elif not usable_nodes:
        why = "no node has usable memory (each node's VRAM, cap and headroom leave 0 bytes)"
        placed = 0
    else:
        costs = layer_bytes(request, lowest, lanes)
        ordered = stage_order(usable_nodes)[:layers]
        placed = greedy_layer_reach((node.usable_bytes for node in ordered), costs)
        missing = sum(costs[placed:])
        if placed < layers:
            why = (f"with all {len(ordered)} usable nodes at context {lowest:,}, "
                   f"{placed} of {layers} layers fit; the other "
                   f"{counted(layers - placed, 'layer')} ({format_bytes(missing)}) "
                   f"{'has' if layers - placed == 1 else 'have'} no room")
        else:
            why = (f"all {layers} layers fit on the {len(ordered)} usable nodes at context "
                   f"{lowest:,}, but not as "
                   f"{counts.start if len(counts) == 1 else f'{counts.start} to {counts[-1]}'}"
                   " stages of at least one layer each")
    span = f"{contexts[0]:,}" if len(contexts) == 1 else f"{contexts[0]:,} down to {lowest:,}"
    return PlanError(
        "NoValidTopology",
        f"no node set fits the model at context {span} (minimum context {floor:,}): {why}",
        minimum_context=floor,
        layers_fit=placed,
        layer_count=layers,
    )


CANDIDATE_COLUMNS = (
    "context_length",
    "stage_count",
    "parallel_lanes",
    "feasible",
    "node_ids",
    "stage_layer_counts",
    "min_remaining_bytes",
    "total_remaining_bytes",
    "estimated_decode_network_ms_per_token",
    "decode_tpot_target_met",
    "selected",
    "reason",
)


CANDIDATE_DTYPES = {
    "context_length": "int64",
    "stage_count": "int64",
    "parallel_lanes": "int64",
    "feasible": "bool",
    "min_remaining_bytes": "Int64",
    "total_remaining_bytes": "Int64",
    "estimated_decode_network_ms_per_token": "Int64",
    "decode_tpot_target_met": "boolean",
    "selected": "bool",
    "reason": "string",
}


def candidate_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Candidate rows (dicts with :data:`CANDIDATE_COLUMNS`) as the typed DataFrame
    :func:`candidates` returns; ``node_ids`` and ``stage_layer_counts`` become tuples (a
    search's own :class:`~planner.planning.nodesets.NodeIds` stay as they are)."""
    rows = [row if isinstance(row["node_ids"], NodeIds | tuple)
            and isinstance(row["stage_layer_counts"], tuple) else
            {**row, "node_ids": row["node_ids"] if isinstance(row["node_ids"], NodeIds)
             else tuple(row["node_ids"]),
             "stage_layer_counts": tuple(row["stage_layer_counts"])} for row in rows]
    frame = pd.DataFrame(rows, columns=list(CANDIDATE_COLUMNS))
    estimate = "estimated_decode_network_ms_per_token"
    return frame.astype({**CANDIDATE_DTYPES, estimate: milliseconds_dtype(frame[estimate])})


def candidates(request: Request) -> pd.DataFrame:
    """Every shape the planner considers, one row each, in the order it tries them.

    Columns:

    ``context_length`` (int)
        Context length of the shape, in tokens.
    ``stage_count`` (int)
        Number of nodes, one pipeline stage each.
    ``parallel_lanes`` (int)
        Parallel decode lanes (they share one KV cache; they change memory only where
        the memory rule charges a fixed state per sequence).
    ``feasible`` (bool)
        Whether some node set of that size fits at that context.
    ``node_ids`` (a tuple of str, or a :class:`~planner.planning.nodesets.NodeIds`, which
        compares, hashes and reads as one without a copy of the ids for every row)
        The best node set for the shape (docs/rules.md §5), in stage order; empty when
        infeasible.
    ``stage_layer_counts`` (a tuple of int)
        The layers each node of ``node_ids`` takes, in stage order (the spans of the walk
        of docs/rules.md §4 that the search found the set with); empty when infeasible.
    ``min_remaining_bytes``, ``total_remaining_bytes`` (Int64, bytes)
        Smallest and summed usable bytes left over across the set's stages.
    ``estimated_decode_network_ms_per_token`` (Int64 ms; Float64 once a latency is fractional)
        ``stage_count * max(latency)`` over the set's nodes with a latency; NA if none.
    ``decode_tpot_target_met`` (boolean)
        Estimate within ``target_decode_tpot_ms``; NA when either is unknown.
    ``selected`` (bool)
        True on exactly the row :func:`plan_topology` returns (none if it fails).
    ``reason`` (str)
        For infeasible rows, why no set fits; empty otherwise.

    Request errors (docs/rules.md §2, checks 1-8) raise like :func:`plan_topology`; a fleet
    that fits no shape gives a table whose rows are all infeasible.
    """
    req = as_planning_input(request)
    check_request(req)
    return candidates_with(req, Shapes(req))


def candidates_with(request: PlanningInput, shapes: Shapes) -> pd.DataFrame:
    """The candidates table of a checked request from ``shapes``' searches."""
    counts = list(shapes.counts)
    rows: list[dict[str, Any]] = []
    for context in context_candidates(request):
        best: dict[int, dict[int, NodeSetChoice]] = {}
        reasons: dict[Any, dict[int, str]] = {}
        for lanes in shapes.lanes:
            best[lanes] = shapes.best(context, lanes, counts)
            missing = [count for count in counts if count not in best[lanes]]
            key = shapes.key(context, lanes)
            if missing and key not in reasons:
                reasons[key] = _infeasible_reasons(request, context, lanes, missing)
        for count in counts:
            for lanes in shapes.lanes:
                reason = reasons.get(shapes.key(context, lanes), {}).get(count, "")
                rows.append(_row(request, context, count, lanes, best[lanes].get(count),
                                 reason))
    frame = candidate_frame(rows)
    selected = select_shape(request, shapes)
    if selected is not None:
        chosen = (
            (frame["context_length"] == selected.choice.context_length)
            & (frame["stage_count"] == selected.choice.stage_count)
            & (frame["parallel_lanes"] == selected.lanes)
        )
        frame.loc[chosen, "selected"] = True
    return frame


def _infeasible_reasons(request: PlanningInput, context: int, lanes: int,
                        counts: Iterable[int]) -> dict[int, str]:
    """Why no set of each of ``counts`` fits, each under the rule of its stage count; the
    fleet is sorted once per rule."""
    walked: dict[int, tuple[list[Any], tuple[int, ...]]] = {}
    reasons = {}
    for count in counts:
        staged = request_for_stages(request, count)
        rule = 0 if staged is request else count
        if rule not in walked:
            walked[rule] = (
                stage_order([n for n in at_context(staged, context, lanes).nodes
                             if n.usable_bytes > 0]),
                layer_bytes(staged, context, lanes))
        ordered, costs = walked[rule]
        reasons[count] = _infeasible_reason(ordered, count, costs)
    return reasons


def _row(request: PlanningInput, context: int, count: int, lanes: int,
         choice: NodeSetChoice | None, reason: str) -> dict[str, Any]:
    if choice is None:
        return {
            "context_length": context, "stage_count": count, "parallel_lanes": lanes,
            "feasible": False, "node_ids": (), "stage_layer_counts": (),
            "min_remaining_bytes": pd.NA,
            "total_remaining_bytes": pd.NA, "estimated_decode_network_ms_per_token": pd.NA,
            "decode_tpot_target_met": pd.NA, "selected": False, "reason": reason,
        }
    estimate = choice.estimated_decode_network_ms_per_token
    met = target_met(request, estimate)
    return {
        "context_length": context, "stage_count": count, "parallel_lanes": lanes,
        "feasible": True, "node_ids": choice.node_ids, "stage_layer_counts": choice.spans,
        "min_remaining_bytes": choice.min_remaining_bytes,
        "total_remaining_bytes": choice.total_remaining_bytes,
        "estimated_decode_network_ms_per_token": pd.NA if estimate is None else estimate,
        "decode_tpot_target_met": pd.NA if met is None else met,
        "selected": False, "reason": "",
    }


def _infeasible_reason(ordered: list[Any], count: int, costs: tuple[int, ...]) -> str:
    """Why no ``count`` nodes fit; ``ordered`` holds the nodes with usable memory in stage
    order."""
    if len(ordered) < count:
        return f"only {len(ordered)} nodes have usable memory"
    largest = ordered[:count]
    walk = walk_stages([n.usable_bytes for n in largest], costs)
    if walk.failed_stage is not None:
        node = largest[walk.failed_stage]
        return (f"no {count} nodes fit; with the {count} largest, {node.node_id} "
                f"({format_bytes(node.usable_bytes)} usable) cannot hold layer "
                f"{walk.next_layer} ({format_bytes(costs[walk.next_layer])})")
    return (f"no {count} nodes fit; the {count} largest hold {walk.next_layer} of "
            f"{len(costs)} layers")
