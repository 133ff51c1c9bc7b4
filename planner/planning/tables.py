"""Plain tables about a request and its plan, for people and for charts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from planner.errors import PlanError
from planner.planning.inputs import PlanningInput, as_planning_input
from planner.planning.plan import Plan
from planner.planning.rules import at_context, layer_costs, request_for_stages, walk_stages


def milliseconds_dtype(values: Iterable[Any]) -> str:
    """``Int64`` for a column of whole milliseconds (the request's integers), ``Float64``
    once a latency or estimate is fractional; missing values are NA in either."""
    for value in values:
        if value is not None and not pd.isna(value) and not float(value).is_integer():
            return "Float64"
    return "Int64"


def node_budgets(request: PlanningInput | Mapping[str, Any]) -> pd.DataFrame:
    """One row per node: how its usable bytes are derived (docs/rules.md §3).

    Columns: ``node_id``, ``detected_vram_bytes``, ``max_vram_bytes`` (Int64, NA when
    uncapped), ``capped_away_bytes`` (detected VRAM the cap removes),
    ``runtime_headroom_bytes``, ``usable_vram_bytes``, ``stage_transfer_latency_ms``
    (Int64, Float64 once one is fractional; NA when unknown).
    """
    request = as_planning_input(request)
    rows = []
    for node in request.nodes:
        rows.append({
            "node_id": node.node_id,
            "detected_vram_bytes": node.detected_vram_bytes,
            "max_vram_bytes": node.max_vram_bytes,
            "capped_away_bytes": node.detected_vram_bytes - node.capped_vram_bytes,
            "runtime_headroom_bytes": node.runtime_headroom_bytes,
            "usable_vram_bytes": node.usable_bytes,
            "stage_transfer_latency_ms": node.stage_transfer_latency_ms,
        })
    frame = pd.DataFrame(rows, columns=[
        "node_id", "detected_vram_bytes", "max_vram_bytes", "capped_away_bytes",
        "runtime_headroom_bytes", "usable_vram_bytes", "stage_transfer_latency_ms",
    ])
    return frame.astype({
        "node_id": "string",
        "detected_vram_bytes": "int64",
        "max_vram_bytes": "Int64",
        "capped_away_bytes": "int64",
        "runtime_headroom_bytes": "int64",
        "usable_vram_bytes": "int64",
        "stage_transfer_latency_ms": milliseconds_dtype(frame["stage_transfer_latency_ms"]),
    })


def plan_reserves(request: PlanningInput, plan: Plan) -> dict[str, int]:
    """What the memory rule takes on each node besides its layers at the plan's context
    and lanes, by node id (llama.cpp's backend overhead and a pipeline stage's compute
    buffer; nothing under the design rule): the search walked each node's usable bytes
    after it, so a stage's ``usable_vram_bytes`` (:func:`stage_usage`) is the capped VRAM
    less the headroom and this reserve."""
    staged = request_for_stages(request, plan.stage_count)
    reserves = staged.memory_rule.node_reserves(staged, plan.context_length,
                                                plan.parallel_lanes)
    return {node.node_id: int(reserves.get(node.node_id, 0)) for node in request.nodes}


STAGE_PART_NAMES: dict[str, str] = {
    "parameter_bytes": "weights",
    "kv_cache_bytes": "KV cache",
    "state_bytes": "recurrent state",
    # Only llama.cpp's rule charges a stage more than its layers (its output head and the
    # output device's compute buffer) and reserves room on a node before any layer.
    "other_bytes": "output & compute",
    "reserved_bytes": "llama.cpp reserve",
}
"""What each part of a stage's memory (:func:`stage_usage`) is called on the page, in
the reports and in the memory figure."""


STAGE_USAGE_COLUMNS = (
    "stage_id", "stage_index", "node_id", "layer_start", "layer_end", "layer_count",
    "parameter_bytes", "kv_cache_bytes", "state_bytes", "other_bytes", "used_bytes",
    "reserved_bytes", "usable_vram_bytes", "remaining_bytes")


def stage_usage(request: PlanningInput, plan: Plan) -> pd.DataFrame:
    """One row per stage of ``plan``: what it holds and what is left on its node, every
    figure under the request's memory rule.

    Columns: ``stage_id``, ``stage_index``, ``node_id``, ``layer_start``, ``layer_end``
    (exclusive), ``layer_count``, ``parameter_bytes`` (the stage's layers' weights),
    ``kv_cache_bytes`` (their KV cache at the plan's context), ``state_bytes`` (their
    fixed state per sequence times the plan's lanes), ``other_bytes`` (what else the
    rule charges to them: under llama.cpp's rule, the output head and the output
    device's compute buffer on the last stage), ``used_bytes`` (the sum of those four:
    what the walk charged), ``reserved_bytes`` (what the rule takes on the node besides
    its layers: :func:`plan_reserves`), ``usable_vram_bytes`` (the capped VRAM less the
    headroom and that reserve), ``remaining_bytes``.

    ``plan`` must be the plan of ``request`` (its stages are the docs/rules.md §4 walk
    over its nodes); any other plan raises :class:`~planner.errors.PlanError`.

    Under llama.cpp's rule the usable bytes are what is left after its fixed costs on the
    node (backend overhead, a stage's compute buffer).
    """
    lanes = plan.parallel_lanes
    request = request_for_stages(request, plan.stage_count)
    budgets = at_context(request, plan.context_length, lanes)
    usable = budgets.usable_bytes
    reserves = plan_reserves(request, plan)
    missing = [stage.node_id for stage in plan.stages if stage.node_id not in usable]
    if missing:
        raise PlanError("PlanMismatch",
                        f"the plan's node {missing[0]!r} is not in the request's fleet")
    costs = layer_costs(request, plan.context_length, lanes)
    walk = walk_stages([usable[stage.node_id] for stage in plan.stages], costs.totals)
    if not walk.fits or walk.spans != tuple(stage.layer_count for stage in plan.stages):
        raise PlanError("PlanMismatch",
                        "the plan's layer ranges are not the stage walk of the request's "
                        "nodes at its context; plan the request again")
    rows = []
    for stage, remaining in zip(plan.stages, walk.remaining_bytes, strict=True):
        parts = costs.stage(stage.layer_start, stage.layer_end)
        rows.append({
            "stage_id": stage.stage_id,
            "stage_index": stage.stage_index,
            "node_id": stage.node_id,
            "layer_start": stage.layer_start,
            "layer_end": stage.layer_end,
            "layer_count": stage.layer_count,
            "parameter_bytes": parts["weights"],
            "kv_cache_bytes": parts["kv"],
            "state_bytes": parts["state"],
            "other_bytes": parts["other"],
            "used_bytes": parts["total"],
            "reserved_bytes": reserves[stage.node_id],
            "usable_vram_bytes": usable[stage.node_id],
            "remaining_bytes": remaining,
        })
    return pd.DataFrame(rows, columns=list(STAGE_USAGE_COLUMNS))
