"""Plain tables about a request and its plan, for people and for charts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from planner.errors import PlanError
from planner.planning.inputs import PlanningInput
from planner.planning.plan import Plan
from planner.planning.rules import (
    at_context,
    kv_bytes_per_layer_token,
    layer_bytes,
    layer_weights,
    walk_stages,
)


def milliseconds_dtype(values: Iterable[Any]) -> str:
    """``Int64`` for a column of whole milliseconds (the request's integers), ``Float64``
    once a latency or estimate is fractional; missing values are NA in either."""
    for value in values:
        if value is not None and not pd.isna(value) and not float(value).is_integer():
            return "Float64"
    return "Int64"


def node_budgets(request: PlanningInput) -> pd.DataFrame:
    """One row per node: how its usable bytes are derived (docs/rules.md §3).

    Columns: ``node_id``, ``detected_vram_bytes``, ``max_vram_bytes`` (Int64, NA when
    uncapped), ``capped_away_bytes`` (detected VRAM the cap removes),
    ``runtime_headroom_bytes``, ``usable_vram_bytes``, ``stage_transfer_latency_ms``
    (Int64, Float64 once one is fractional; NA when unknown).
    """
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


def stage_usage(request: PlanningInput, plan: Plan) -> pd.DataFrame:
    """One row per stage of ``plan``: what it holds and what is left on its node.

    Columns: ``stage_id``, ``stage_index``, ``node_id``, ``layer_start``, ``layer_end``
    (exclusive), ``layer_count``, ``parameter_bytes``, ``kv_cache_bytes`` (the stage's
    layers' KV cache at the plan's context), ``used_bytes``, ``usable_vram_bytes``,
    ``remaining_bytes``.

    ``plan`` must be the plan of ``request`` (its stages are the docs/rules.md §4 walk
    over its nodes); any other plan raises :class:`~planner.errors.PlanError`.

    With ``memory_model="llamacpp"`` the usable bytes are what is left after llama.cpp's
    fixed costs on the node, the KV cache is llama.cpp's and the used bytes are what the
    walk charged (the last stage's include the output head and its compute buffer).
    """
    request = at_context(request, plan.context_length)
    usable = request.usable_bytes
    missing = [stage.node_id for stage in plan.stages if stage.node_id not in usable]
    if missing:
        raise PlanError("PlanMismatch",
                        f"the plan's node {missing[0]!r} is not in the request's fleet")
    costs = layer_bytes(request, plan.context_length)
    walk = walk_stages([usable[stage.node_id] for stage in plan.stages], costs)
    if not walk.fits or walk.spans != tuple(stage.layer_count for stage in plan.stages):
        raise PlanError("PlanMismatch",
                        "the plan's layer ranges are not the stage walk of the request's "
                        "nodes at its context; plan the request again")
    kv_per_layer = kv_bytes_per_layer_token(request) * plan.context_length
    weights = layer_weights(request)
    rows = []
    for stage, remaining in zip(plan.stages, walk.remaining_bytes, strict=True):
        parameter_bytes = sum(weights[stage.layer_start:stage.layer_end])
        kv = kv_per_layer * stage.layer_count
        used = parameter_bytes + kv
        if request.memory_model == "llamacpp":
            kv = request.llamacpp.kv_bytes(plan.context_length, stage.layer_start,
                                           stage.layer_end)
            used = sum(costs[stage.layer_start:stage.layer_end])
        rows.append({
            "stage_id": stage.stage_id,
            "stage_index": stage.stage_index,
            "node_id": stage.node_id,
            "layer_start": stage.layer_start,
            "layer_end": stage.layer_end,
            "layer_count": stage.layer_count,
            "parameter_bytes": parameter_bytes,
            "kv_cache_bytes": kv,
            "used_bytes": used,
            "usable_vram_bytes": usable[stage.node_id],
            "remaining_bytes": remaining,
        })
    columns = ["stage_id", "stage_index", "node_id", "layer_start", "layer_end", "layer_count",
               "parameter_bytes", "kv_cache_bytes", "used_bytes", "usable_vram_bytes",
               "remaining_bytes"]
    return pd.DataFrame(rows, columns=columns)
