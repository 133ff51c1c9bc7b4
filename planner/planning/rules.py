"""The derived quantities (docs/rules.md §3), the request checks (§2) and the stage walk
that fits one node set at one context (§4)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate

from planner.errors import PlanError
from planner.limits import DEFAULT_PARALLEL_LANES
from planner.planning.inputs import NodeBudget, PlanningInput
from planner.planning.memory_rule import LayerCosts
from planner.planning.plan import Stage

CONTEXT_FLOOR = 65_536
CONTEXT_STEPS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
LANE_CANDIDATES = tuple(range(DEFAULT_PARALLEL_LANES, 0, -1))


def context_floor(request: PlanningInput) -> int:
    return min(request.native_context_length, CONTEXT_FLOOR)


def context_candidates(request: PlanningInput) -> tuple[int, ...]:
    """Context lengths to try, highest first."""
    if request.context_length_override is not None:
        return (request.context_length_override,)
    floor = context_floor(request)
    native = request.native_context_length
    values = {step for step in CONTEXT_STEPS if floor <= step <= native} | {native}
    return tuple(sorted(values, reverse=True))


def lane_candidates(request: PlanningInput) -> tuple[int, ...]:
    """Parallel lane counts to try, most first."""
    if request.parallel_lanes_override is not None:
        return (request.parallel_lanes_override,)
    return LANE_CANDIDATES


def node_count_range(request: PlanningInput) -> range:
    """Stage counts to try, fewest first."""
    lowest = max(request.minimum_nodes, 1)
    highest = min(len(request.nodes), request.layer_count)
    return range(lowest, highest + 1)


def layer_weights(request: PlanningInput) -> tuple[int, ...]:
    """Weight bytes of each layer: exact when given, else an even ceil split."""
    if request.layer_weight_bytes is not None:
        return request.layer_weight_bytes
    per_layer = -(-request.model_weight_bytes // request.layer_count)
    return (per_layer,) * request.layer_count


def kv_bytes_per_layer_token(request: PlanningInput) -> int:
    return -(-request.kv_bytes_per_token // request.layer_count)


def request_for_stages(request: PlanningInput, count: int) -> PlanningInput:
    """The request whose memory rule costs a plan of ``count`` stages (the request itself
    unless its rule's costs depend on the stage count)."""
    rule = request.memory_rule.for_stages(count)
    return request if rule is request.memory_rule else replace(request, memory_rule=rule)


def layer_costs(request: PlanningInput, context_length: int,
                lanes: int | None = None) -> LayerCosts:
    """Each layer's bytes by part under the request's memory rule, at ``context_length``
    with ``lanes`` parallel sequences (by default the most the request allows)."""
    lanes = lane_candidates(request)[0] if lanes is None else lanes
    return request.memory_rule.layer_costs(request, context_length, lanes)


def layer_bytes(request: PlanningInput, context_length: int,
                lanes: int | None = None) -> tuple[int, ...]:
    """Bytes each layer needs at ``context_length`` under the request's memory rule
    (docs/rules.md §3: weights plus its KV cache)."""
    return layer_costs(request, context_length, lanes).totals


def greedy_layer_reach(budgets: Iterable[int], costs: Sequence[int]) -> int:
    """The layers nodes with ``budgets`` bytes hold when each, in turn, takes all the
    next layers it can (``costs`` in layer order): how far a fleet gets, and, since any
    node set that fits is beaten by its nodes largest first, a test that one fits."""
    next_layer = 0
    for budget in budgets:
        while next_layer < len(costs) and costs[next_layer] <= budget:
            budget -= costs[next_layer]
            next_layer += 1
        if next_layer == len(costs):
            break
    return next_layer


def at_context(request: PlanningInput, context_length: int,
               lanes: int | None = None) -> PlanningInput:
    """The request whose node budgets the search walks at ``context_length``: each
    node's headroom grows by what the memory rule takes on it besides its layers
    (llama.cpp's backend overhead and a stage's compute buffer; nothing under the design
    rule), so the same search runs on what is left."""
    lanes = lane_candidates(request)[0] if lanes is None else lanes
    reserves = request.memory_rule.node_reserves(request, context_length, lanes)
    if not any(reserves.values()):
        return request
    nodes = tuple(replace(node, runtime_headroom_bytes=node.runtime_headroom_bytes
                          + reserves.get(node.node_id, 0))
                  for node in request.nodes)
    return replace(request, nodes=nodes)


def check_request(request: PlanningInput) -> None:
    """docs/rules.md §2, checks 1-8, in order. Check 9 is the search itself."""
    if request.native_context_length == 0:
        raise PlanError("MissingNativeContext",
                        "native_context_length is 0; the model's native context is required")
    if request.layer_count == 0:
        raise PlanError("MissingLayers", "layer_count is 0; the model's layer count is required")
    if request.model_weight_bytes == 0:
        raise PlanError("MissingModelWeights",
                        "model_weight_bytes is 0; the model's weight size is required")
    # A model that states its layers' KV (all 0 for a recurrent model) is not missing it.
    if request.kv_bytes_per_token == 0 and request.layer_kv_bytes_per_token is None:
        raise PlanError("MissingKvBytesPerToken",
                        "kv_bytes_per_token is 0; the KV cache size per token is required")
    if not request.nodes:
        raise PlanError("MissingNodes", "the fleet has no nodes; add at least one node")
    override = request.context_length_override
    native = request.native_context_length
    if override is not None and override > native:
        raise PlanError(
            "ContextExceedsNative",
            f"context override {override:,} exceeds the model's native context {native:,}",
            requested=override, native=native,
        )
    floor = context_floor(request)
    if override is not None and override < floor:
        raise PlanError(
            "ContextBelowMinimum",
            f"context override {override:,} is below the minimum context {floor:,} "
            f"(min(native {native:,}, {CONTEXT_FLOOR:,}))",
            requested=override, minimum=floor,
        )
    if request.parallel_lanes_override == 0:
        raise PlanError("ZeroParallelLanes", "parallel_lanes_override is 0; use 1 or more lanes")


def stage_order(nodes: Sequence[NodeBudget]) -> list[NodeBudget]:
    """Largest usable bytes first, ties by node id ascending (docs/rules.md §4)."""
    return sorted(nodes, key=lambda node: (-node.usable_bytes, node.node_id))


@dataclass(frozen=True, slots=True)
class Walk:
    """Outcome of the stage walk over one ordered node set."""

    fits: bool
    spans: tuple[int, ...]
    """Layers taken by each stage walked before the walk ended."""
    failed_stage: int | None
    """Index of the stage that could not take a layer, or None."""
    next_layer: int
    remaining_bytes: tuple[int, ...] = ()
    """Usable bytes each walked stage has left after its layers (docs/rules.md §4)."""


def walk_stages(usable: Sequence[int], costs: Sequence[int]) -> Walk:
    """The docs/rules.md §4 walk: each stage takes the most layers it can hold while
    leaving one layer for each later stage."""
    layer_count = len(costs)
    stage_count = len(usable)
    prefix = [0, *accumulate(costs)]
    next_layer = 0
    spans: list[int] = []
    remaining: list[int] = []
    for index, budget in enumerate(usable):
        assignable = (layer_count - next_layer) - (stage_count - 1 - index)
        span = 0
        # The most consecutive layers whose bytes stay within budget (binary search).
        low, high = 0, max(assignable, 0)
        while low < high:
            middle = (low + high + 1) // 2
            if prefix[next_layer + middle] - prefix[next_layer] <= budget:
                low = middle
            else:
                high = middle - 1
        span = low
        if span == 0:
            return Walk(False, tuple(spans), index, next_layer, tuple(remaining))
        spans.append(span)
        remaining.append(budget - (prefix[next_layer + span] - prefix[next_layer]))
        next_layer += span
    return Walk(next_layer == layer_count, tuple(spans), None, next_layer, tuple(remaining))


def build_stages(ordered: Sequence[NodeBudget], spans: Sequence[int],
                 weights: Sequence[int]) -> tuple[Stage, ...]:
    stages = []
    start = 0
    for index, (node, span) in enumerate(zip(ordered, spans, strict=True)):
        stages.append(Stage(
            stage_id=f"stage-{index}",
            stage_index=index,
            node_id=node.node_id,
            layer_start=start,
            layer_end=start + span,
            parameter_bytes=sum(weights[start:start + span]),
        ))
        start += span
    return tuple(stages)
