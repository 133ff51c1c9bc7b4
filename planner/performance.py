"""An ESTIMATE of decode speed and cost for a plan (pure: no widgets, no plotting).

Decode is memory-bound: each output token reads, on every stage, the weights of the
stage's layers and their KV cache, and crosses every hop between consecutive stages once.
The estimate, per token of one sequence:

``stage_read_ms[i] = (weight_read_bytes[i] + kv_read_bytes[i]) /
(bandwidth_efficiency x memory_bandwidth_bytes_per_s[i]) x 1000``

- ``weight_read_bytes[i] = ceil(parameter_bytes[i] x active_weight_bytes /
  model_weight_bytes)``: the stage's weights, and for a mixture of experts only the
  active share (shared weights plus the active experts), spread evenly over the layers;
- ``kv_read_bytes[i] = ceil(kv_bytes_per_token / layer_count) x context_length x
  layers[i]``: the KV cache of the stage's layers, read whole at the plan's context (the
  last token of a full context, the slowest one);
- ``bandwidth_efficiency`` (default :data:`DEFAULT_BANDWIDTH_EFFICIENCY` = 0.7): the
  share of the vendor's peak bandwidth a decode kernel reaches. llm-analysis calls 0.9
  aggressive; measured efficiencies of 0.6-0.8 are common (docs/sources.md §3).

``hop_ms[i] = stage_transfer_latency_ms[i] + activation_bytes / link_bandwidth x 1000``
for each of the ``stages - 1`` hops, from stage ``i`` to stage ``i + 1``:
``activation_bytes = hidden_size x 4`` (llama.cpp passes activations between devices as
F32, one row of ``n_embd`` values per token); ``link_bandwidth_bytes_per_s`` defaults to
10 Gb/s (:data:`DEFAULT_LINK_BANDWIDTH_BYTES_PER_S`). A node without a latency adds 0 ms
of latency, and the estimate says so in its notes. (The planner's own
``estimated_decode_network_ms_per_token`` is docs/rules.md §6's ranking rule,
``stages x max(latency)``; this estimate counts the hops themselves.)

``estimated_tpot_ms = sum(stage_read_ms) + sum(hop_ms)``: time per output token of one
sequence (docs/sources.md §3: single-stream TPOT is the sum of the stage times and the hops).

``tokens_per_s = parallel_lanes x 1000 / estimated_tpot_ms``: the plan's lanes decode in
one batch (llama.cpp's server puts one token of every busy sequence in each decode
batch, and the lanes share one KV cache of ``context_length`` cells), so a step reads the
same weights and the same cache whatever the number of busy lanes, and yields one token
per lane. This is the memory-bound ceiling; compute and the batch's own overhead lower it.

``cost_per_hour_usd = sum(price_per_hour)`` over the nodes paid for (the plan's stages,
or a whole fleet), and ``cost_per_million_tokens_usd = cost_per_hour_usd /
(tokens_per_s x 3600) x 10**6`` (docs/sources.md §3).

Everything here is an estimate from vendor figures and is labelled so wherever it is shown
(:data:`ESTIMATE_NOTE`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from planner._validate import Fail, integer, number, shown
from planner.errors import CodedError
from planner.models.gpus import GpuModel, node_gpu_kinds
from planner.models.spec import ModelSpec
from planner.planning.inputs import NodeBudget, PlanningInput
from planner.planning.plan import Plan
from planner.planning.rules import (
    at_context,
    build_stages,
    kv_bytes_per_layer_token,
    layer_bytes,
    layer_weights,
    walk_stages,
)

DEFAULT_BANDWIDTH_EFFICIENCY = 0.7
DEFAULT_LINK_BANDWIDTH_BYTES_PER_S = 1_250_000_000  # 10 Gb/s
ACTIVATION_BYTES_PER_VALUE = 4  # F32 activations between llama.cpp devices
ESTIMATE_NOTE = ("Estimated from vendor memory bandwidth at a stated efficiency, not "
                 "measured: decode speed and cost are estimates.")

ESTIMATE_COLUMNS = ("estimated_tpot_ms", "tokens_per_s", "cost_per_hour_usd",
                    "cost_per_million_tokens_usd")


class PerformanceError(CodedError):
    """A speed estimate that cannot be made.

    ``code`` is stable: ``InvalidPerformanceInput`` (a bad efficiency, bandwidth or model
    figure, naming the field) or ``MissingNodeSpeed`` (a stage's node has no memory
    bandwidth; ``node_id`` names it).
    """

    codes = ("InvalidPerformanceInput", "MissingNodeSpeed")


@dataclass(frozen=True, slots=True)
class ModelTraffic:
    """What one decode step of a model moves: the weight bytes it reads of all its
    weights, and the width of the activations between stages."""

    model_weight_bytes: int
    active_weight_bytes: int
    hidden_size: int | None

    def __post_init__(self) -> None:
        for name in ("model_weight_bytes", "active_weight_bytes", "hidden_size"):
            value = getattr(self, name)
            if value is not None or name != "hidden_size":
                object.__setattr__(self, name, _positive(value, name))
        if self.active_weight_bytes > self.model_weight_bytes:
            raise PerformanceError("InvalidPerformanceInput",
                                   "active_weight_bytes exceeds model_weight_bytes",
                                   field="active_weight_bytes")

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> ModelTraffic:
        """A model's traffic; a spec without ``active_weight_bytes`` reads every weight."""
        return cls(spec.model_weight_bytes,
                   spec.active_weight_bytes or spec.model_weight_bytes, spec.hidden_size)

    @classmethod
    def dense(cls, model_weight_bytes: int, hidden_size: int | None = None) -> ModelTraffic:
        return cls(model_weight_bytes, model_weight_bytes, hidden_size)


@dataclass(frozen=True, slots=True)
class NodeSpeed:
    """What the estimate needs to know about one node (from its catalog kind)."""

    node_id: str
    memory_bandwidth_bytes_per_s: int | None
    price_per_hour: float | None
    kind: str | None = None


@dataclass(frozen=True, slots=True)
class StageEstimate:
    stage_id: str
    node_id: str
    weight_read_bytes: int
    kv_read_bytes: int
    memory_bandwidth_bytes_per_s: int
    stage_read_ms: float
    hop_ms: float  # to the next stage; 0 for the last

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage_id": self.stage_id, "node_id": self.node_id,
            "weight_read_bytes": self.weight_read_bytes,
            "kv_read_bytes": self.kv_read_bytes,
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s,
            "stage_read_ms": self.stage_read_ms, "hop_ms": self.hop_ms,
        }


@dataclass(frozen=True, slots=True)
class PlanEstimate:
    """The estimate for one plan. ``cost_per_hour_usd`` and
    ``cost_per_million_tokens_usd`` are ``None`` when a node paid for has no price."""

    stages: tuple[StageEstimate, ...]
    estimated_tpot_ms: float
    tokens_per_s: float
    parallel_lanes: int
    cost_per_hour_usd: float | None
    cost_per_million_tokens_usd: float | None
    bandwidth_efficiency: float
    link_bandwidth_bytes_per_s: int
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimated_tpot_ms": self.estimated_tpot_ms,
            "tokens_per_s": self.tokens_per_s,
            "parallel_lanes": self.parallel_lanes,
            "cost_per_hour_usd": self.cost_per_hour_usd,
            "cost_per_million_tokens_usd": self.cost_per_million_tokens_usd,
            "bandwidth_efficiency": self.bandwidth_efficiency,
            "link_bandwidth_bytes_per_s": self.link_bandwidth_bytes_per_s,
            "stages": [stage.to_dict() for stage in self.stages],
            "notes": [ESTIMATE_NOTE, *self.notes],
        }

    def summary(self) -> str:
        """One line for people, marked as an estimate."""
        cost = ("" if self.cost_per_hour_usd is None else
                f", USD {self.cost_per_hour_usd:,.2f}/h, "
                f"USD {self.cost_per_million_tokens_usd:,.2f} per million tokens")
        return (f"estimated TPOT {self.estimated_tpot_ms:,.1f} ms, "
                f"{self.tokens_per_s:,.1f} tokens/s over {self.parallel_lanes} lanes{cost} "
                f"(estimate at {self.bandwidth_efficiency:.0%} of peak memory bandwidth)")


def _bad(name: str) -> Fail:
    return lambda problem, value: PerformanceError(
        "InvalidPerformanceInput", f"{name}: {problem} (got {shown(value)})",
        field=name, value=value)


def _positive(value: Any, name: str) -> int:
    return integer(value, _bad(name), minimum=1)


def _check_efficiency(efficiency: Any) -> float:
    return float(number(efficiency, _bad("bandwidth_efficiency"), above=0, maximum=1))


def cost_per_million_tokens(cost_per_hour_usd: float, tokens_per_s: float) -> float:
    """``cost_per_hour / (tokens_per_s x 3600) x 10**6`` (docs/sources.md §3)."""
    return cost_per_hour_usd / (tokens_per_s * 3600) * 1_000_000


def node_speeds(nodes: Iterable[NodeBudget], catalog: Sequence[GpuModel],
                node_kinds: Mapping[str, str] | None = None) -> dict[str, NodeSpeed]:
    """Each node's bandwidth and price from its catalog kind
    (:func:`planner.models.gpus.node_gpu_kind`; ``node_kinds`` are the kinds nodes name,
    as a fleet file's ``gpu`` gives them); nodes of unknown kind are left out."""
    return {node_id: NodeSpeed(node_id, gpu.memory_bandwidth_bytes_per_s,
                               gpu.price_per_hour, gpu.kind)
            for node_id, gpu in node_gpu_kinds(nodes, catalog, node_kinds).items()
            if gpu is not None}


def estimate_plan(
    request: PlanningInput,
    plan: Plan,
    traffic: ModelTraffic,
    speeds: Mapping[str, NodeSpeed],
    *,
    bandwidth_efficiency: float = DEFAULT_BANDWIDTH_EFFICIENCY,
    link_bandwidth_bytes_per_s: int = DEFAULT_LINK_BANDWIDTH_BYTES_PER_S,
    paid_node_ids: Iterable[str] | None = None,
) -> PlanEstimate:
    """The estimate for ``plan`` of ``request`` (formulas in the module docstring).

    ``speeds`` gives each stage's node its bandwidth and price (:func:`node_speeds`);
    ``paid_node_ids`` are the nodes the cost counts (default: the plan's stages).
    Raises :class:`PerformanceError` ``MissingNodeSpeed`` when a stage's node has no
    memory bandwidth.
    """
    efficiency = _check_efficiency(bandwidth_efficiency)
    link_bandwidth_bytes_per_s = _positive(link_bandwidth_bytes_per_s,
                                           "link_bandwidth_bytes_per_s")
    weights = layer_weights(request)
    kv_layer = kv_bytes_per_layer_token(request)
    latency = {node.node_id: node.stage_transfer_latency_ms for node in request.nodes}
    notes: list[str] = []
    activation = (traffic.hidden_size or 0) * ACTIVATION_BYTES_PER_VALUE
    if traffic.hidden_size is None and plan.stage_count > 1:
        notes.append("the model's hidden size is unknown: hops carry no activation bytes")
    stages = []
    for index, stage in enumerate(plan.stages):
        speed = speeds.get(stage.node_id)
        if speed is None or speed.memory_bandwidth_bytes_per_s is None:
            raise PerformanceError(
                "MissingNodeSpeed",
                f"node {stage.node_id} has no memory bandwidth: give it a catalog kind "
                f"(gpu = \"<kind>\") whose entry has memory_bandwidth_bytes_per_s",
                node_id=stage.node_id)
        bandwidth = speed.memory_bandwidth_bytes_per_s
        parameter_bytes = sum(weights[stage.layer_start:stage.layer_end])
        weight_read = -(-parameter_bytes * traffic.active_weight_bytes
                        // traffic.model_weight_bytes)
        kv_read = kv_layer * plan.context_length * stage.layer_count
        read_ms = (weight_read + kv_read) / (efficiency * bandwidth) * 1000
        hop = 0.0
        if index < plan.stage_count - 1:
            stage_latency = latency.get(stage.node_id)
            if stage_latency is None:
                notes.append(f"{stage.node_id} has no stage-transfer latency: its hop counts "
                             "0 ms of latency")
            hop = (stage_latency or 0) + activation / link_bandwidth_bytes_per_s * 1000
        stages.append(StageEstimate(stage.stage_id, stage.node_id, weight_read, kv_read,
                                    bandwidth, read_ms, hop))
    tpot = sum(s.stage_read_ms + s.hop_ms for s in stages)
    tokens_per_s = plan.parallel_lanes * 1000 / tpot
    paid = list(paid_node_ids) if paid_node_ids is not None else list(plan.node_ids)
    prices = [speeds[n].price_per_hour if n in speeds else None for n in paid]
    if any(price is None for price in prices):
        unpriced = [n for n, price in zip(paid, prices, strict=True) if price is None]
        notes.append(f"no price for {', '.join(unpriced)}: cost not estimated")
        cost = per_million = None
    else:
        cost = math.fsum(p for p in prices if p is not None)
        per_million = cost_per_million_tokens(cost, tokens_per_s)
    return PlanEstimate(tuple(stages), tpot, tokens_per_s, plan.parallel_lanes, cost,
                        per_million, efficiency, link_bandwidth_bytes_per_s, tuple(notes))


def try_estimate(request: PlanningInput, plan: Plan, traffic: ModelTraffic | None,
                 catalog: Sequence[GpuModel], *, node_kinds: Mapping[str, str] | None = None,
                 **options: Any) -> tuple[PlanEstimate | None, str]:
    """The estimate when every stage's node is a catalog kind with a bandwidth, else
    ``None`` and why (for tables and summaries that show the estimate when they can)."""
    if traffic is None:
        return None, ("the model's decode traffic is unknown (give a preset or GGUF model "
                      "for a speed estimate)")
    try:
        return estimate_plan(request, plan, traffic,
                             node_speeds(request.nodes, catalog, node_kinds), **options), ""
    except PerformanceError as error:
        return None, error.message


def stage_estimates(estimate: PlanEstimate) -> pd.DataFrame:
    """One row per stage: ``stage_id``, ``node_id``, ``weight_read_bytes``,
    ``kv_read_bytes``, ``memory_bandwidth_bytes_per_s``, ``stage_read_ms``, ``hop_ms``
    (estimates)."""
    columns = ["stage_id", "node_id", "weight_read_bytes", "kv_read_bytes",
               "memory_bandwidth_bytes_per_s", "stage_read_ms", "hop_ms"]
    return pd.DataFrame([s.to_dict() for s in estimate.stages], columns=columns)


def with_stage_estimates(stage_table: pd.DataFrame, estimate: PlanEstimate | None) -> pd.DataFrame:
    """A stage table (``planner.stage_usage``) with the estimate's per-stage columns
    ``stage_read_ms`` and ``hop_ms`` added (NA without an estimate)."""
    table = stage_table.copy()
    if estimate is None:
        table["stage_read_ms"] = pd.Series([pd.NA] * len(table), dtype="Float64")
        table["hop_ms"] = pd.Series([pd.NA] * len(table), dtype="Float64")
        return table
    by_stage = {s.stage_id: s for s in estimate.stages}
    table["stage_read_ms"] = [by_stage[i].stage_read_ms for i in table["stage_id"]]
    table["hop_ms"] = [by_stage[i].hop_ms for i in table["stage_id"]]
    return table


def with_candidate_estimates(frame: pd.DataFrame, request: PlanningInput,
                             traffic: ModelTraffic | None, catalog: Sequence[GpuModel],
                             *, node_kinds: Mapping[str, str] | None = None,
                             **options: Any) -> pd.DataFrame:
    """The candidates table (``planner.candidates``) with :data:`ESTIMATE_COLUMNS` for
    every feasible row whose nodes are catalog kinds (NA elsewhere); each row is
    estimated as the plan its node set and shape would give."""
    weights = layer_weights(request)
    # The budgets and layer bytes the search walked, per shape: after the memory rule's
    # fixed costs per node (none under the design rule).
    walked: dict[tuple[int, int], tuple[dict[str, NodeBudget], tuple[int, ...]]] = {}
    speeds = node_speeds(request.nodes, catalog, node_kinds)
    values: dict[str, list[Any]] = {column: [] for column in ESTIMATE_COLUMNS}
    for row in frame.itertuples(index=False):
        estimate = None
        # Rows with a node of unknown bandwidth are left NA before any walking: most
        # fleets typed by hand name no catalog kind, and this runs on every edit.
        if row.feasible and traffic is not None and all(
                node_id in speeds and speeds[node_id].memory_bandwidth_bytes_per_s
                for node_id in row.node_ids):
            shape = (int(row.context_length), int(row.parallel_lanes))
            if shape not in walked:
                walked[shape] = (
                    {node.node_id: node for node in at_context(request, *shape).nodes},
                    layer_bytes(request, *shape))
            budgets, costs = walked[shape]
            ordered = [budgets[node_id] for node_id in row.node_ids]
            walk = walk_stages([node.usable_bytes for node in ordered], costs)
            if walk.fits:
                plan = Plan(shape[0], shape[1],
                            build_stages(ordered, walk.spans, weights), None, None)
                estimate = estimate_plan(request, plan, traffic, speeds, **options)
        for column in ESTIMATE_COLUMNS:
            value = None if estimate is None else getattr(estimate, column)
            values[column].append(pd.NA if value is None else value)
    table = frame.copy()
    for column in ESTIMATE_COLUMNS:
        table[column] = pd.array(values[column], dtype="Float64")
    return table
