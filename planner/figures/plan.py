"""Plotly figures of a planning request, its plan and its candidate shapes.

Each function returns a plain ``plotly.graph_objects.Figure`` with a fixed set of traces
(possibly empty), whatever the input: the workbench relies on that to update a live
figure in place, trace by trace, instead of rebuilding it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from planner.figures._style import TPOT_COLOURS, axis, base_layout, plotly_text
from planner.planning import (
    STAGE_PART_NAMES,
    Plan,
    PlanningInput,
    plan_reserves,
    stage_usage,
)
from planner.planning.nodesets import node_set_text
from planner.targets import tpot_verdicts
from planner.units import format_bytes, format_milliseconds, layer_range

GIB = 1024**3

MEMORY_SEGMENTS: tuple[tuple[str, str], ...] = (
    (STAGE_PART_NAMES["parameter_bytes"], "#4c72b0"),
    (STAGE_PART_NAMES["kv_cache_bytes"], "#dd8452"),
    (STAGE_PART_NAMES["state_bytes"], "#937860"),
    (STAGE_PART_NAMES["other_bytes"], "#da8bc3"),
    ("free", "#55a868"),
    (STAGE_PART_NAMES["reserved_bytes"], "#64b5cd"),
    ("headroom", "#8172b3"),
    ("capped away", "#c7c7c7"),
)
"""Memory figure traces, bottom to top: (trace name, colour)."""

MEMORY_PARTS: tuple[str, ...] = ("weights", "kv_cache", "state", "other", "free", "reserved",
                                 "headroom", "capped_away")
"""The columns of :func:`memory_by_node` that add up to a node's detected VRAM, in the
order of :data:`MEMORY_SEGMENTS`."""

_PART_HOVER = {
    "state": "recurrent state (per sequence, times the lanes)",
    "other": "output head and the output device's compute buffer",
    "reserved": "backend overhead and a pipeline stage's compute buffer",
}

CANDIDATE_TRACES: tuple[str, ...] = ("feasible", "infeasible", "selected")
"""Candidates figure traces, in order."""


def _gib(values: Sequence[int]) -> list[float]:
    return [value / GIB for value in values]


def memory_by_node(request: PlanningInput, plan: Plan | None) -> pd.DataFrame:
    """Per-node memory split, one row per node: the numbers behind :func:`memory_figure`.

    Nodes of the plan come first in stage order, then the unused nodes in fleet order.
    Columns: ``node_id``, ``stage_id`` (empty when unused), then the parts
    (:data:`MEMORY_PARTS`, bytes) and ``detected_vram_bytes``. A plan's node shows the
    stage table's figures (:func:`planner.stage_usage`): ``weights``, ``kv_cache``,
    ``state`` (a fixed state per sequence, times the lanes), ``other`` (what else the
    memory rule charges the stage: under llama.cpp's, the output head and the output
    device's compute buffer on the last stage) and ``free`` (its remaining bytes); every
    node shows ``reserved`` (what the rule reserves on it besides its layers:
    :func:`planner.planning.plan_reserves`), ``headroom`` and ``capped_away``. For every
    row the parts add up to the detected VRAM: the headroom and the reserve are the parts
    of the capped VRAM they actually take (all of it when they exceed it).
    """
    return pd.DataFrame(_memory_rows(request, plan), columns=list(_MEMORY_COLUMNS))


_MEMORY_COLUMNS = ("node_id", "stage_id", *MEMORY_PARTS, "detected_vram_bytes")


def _memory_rows(request: PlanningInput, plan: Plan | None) -> list[dict[str, Any]]:
    used: dict[str, dict[str, Any]] = {}
    reserves: dict[str, int] = {}
    if plan is not None:
        reserves = plan_reserves(request, plan)
        for row in stage_usage(request, plan).to_dict("records"):
            used[str(row["node_id"])] = {
                "stage_id": str(row["stage_id"]),
                "weights": int(row["parameter_bytes"]),
                "kv_cache": int(row["kv_cache_bytes"]),
                "state": int(row["state_bytes"]),
                "other": int(row["other_bytes"]),
                "free": int(row["remaining_bytes"]),
            }
    nodes = {node.node_id: node for node in request.nodes}
    order = list(used) + [node_id for node_id in nodes if node_id not in used]
    rows = []
    for node_id in order:
        node = nodes[node_id]
        capped = node.capped_vram_bytes
        headroom = min(node.runtime_headroom_bytes, capped)
        reserved = min(reserves.get(node_id, 0), capped - headroom)
        stage = used.get(node_id, {"stage_id": "", "weights": 0, "kv_cache": 0, "state": 0,
                                   "other": 0, "free": capped - headroom - reserved})
        rows.append({
            "node_id": node_id,
            **stage,
            "reserved": reserved,
            "headroom": headroom,
            "capped_away": node.detected_vram_bytes - capped,
            "detected_vram_bytes": node.detected_vram_bytes,
        })
    return rows


def memory_figure(request: PlanningInput, plan: Plan | None) -> go.Figure:
    """Stacked bars per node, bottom to top: weights, KV cache, recurrent state, output
    and compute (llama.cpp's rule, on the last stage), free, llama.cpp's reserve,
    headroom and capped-away memory (:func:`memory_by_node`).

    Each bar reaches the node's detected VRAM. Nodes the plan does not use are shown
    after the plan's nodes, labelled "unused"; with ``plan=None`` every node is unused.
    Bar heights are in GiB; hovering shows exact sizes. Every part is a trace, always;
    the legend, under the chart, names those some node has.
    """
    rows = _memory_rows(request, plan)
    labels = [f"{plotly_text(row['node_id'])}<br>{plotly_text(row['stage_id'] or 'unused')}"
              for row in rows]
    traces = []
    for (name, colour), column in zip(MEMORY_SEGMENTS, MEMORY_PARTS, strict=True):
        values = [row[column] for row in rows]
        what = _PART_HOVER.get(column, name)
        traces.append({
            "type": "bar",
            "name": name,
            "x": labels,
            "y": _gib(values),
            "marker": {"color": colour},
            "showlegend": any(values),
            "customdata": [format_bytes(v) for v in values],
            "hovertemplate": f"%{{x}}<br>{what}: %{{customdata}}<extra></extra>",
        })
    # One Figure from plain data: validating it once is much cheaper than trace by trace.
    return go.Figure({"data": traces, "layout": base_layout(
        "Memory per node, stacked to its VRAM",
        barmode="stack",
        yaxis=axis(title={"text": "GiB"}, rangemode="tozero"),
        xaxis=axis(title={"text": "node"}, type="category"),
        height=420,
    )})


# Below this share of the model's layers a bar is too narrow to hold its range label.
NARROW_BAR_SHARE = 0.15
NARROW_LABEL_MARGIN_PX = 110


def _narrow(stage_layers: int, model_layers: int) -> bool:
    return stage_layers < NARROW_BAR_SHARE * max(model_layers, 1)


def layer_ranges_figure(request: PlanningInput, plan: Plan | None) -> go.Figure:
    """One horizontal bar per stage covering its layers ``[layer_start, layer_end)``.

    The x axis is the model's layers, 0 to ``layer_count``; stage 0 is at the top.
    With ``plan=None`` the single trace is empty and the figure says there is no plan.
    """
    stages = plan.stages if plan is not None else ()
    labels = [plotly_text(f"{s.stage_id} · {s.node_id}") for s in stages]
    bars = {
        "type": "bar",
        "name": "layers",
        "orientation": "h",
        "y": labels,
        "x": [s.layer_count for s in stages],
        "base": [s.layer_start for s in stages],
        "text": [f"{layer_range(s.layer_start, s.layer_end)} ({s.layer_count})"
                 for s in stages],
        # A bar too narrow for its label would shrink it to an unreadable sliver: its
        # label goes beside the bar, at full size, and may run into the right margin.
        "textposition": ["outside" if _narrow(s.layer_count, request.layer_count)
                         else "inside" for s in stages],
        "insidetextanchor": "middle",
        "constraintext": "inside",
        "cliponaxis": False,
        "customdata": [[s.layer_start, s.layer_end, format_bytes(s.parameter_bytes)]
                       for s in stages],
        "hovertemplate": ("%{y}<br>layers %{customdata[0]} to %{customdata[1]} (exclusive)"
                          "<br>weights %{customdata[2]}<extra></extra>"),
        "marker": {"color": "#4c72b0"},
    }
    layout = base_layout(
        f"Layer ranges along the model ({request.layer_count} layers)",
        showlegend=False,
        xaxis=axis(title={"text": "layer"}, range=[0, max(request.layer_count, 1)]),
        yaxis=axis(autorange="reversed", type="category"),
        height=max(220, 90 + 28 * len(stages)),
    )
    if any(_narrow(s.layer_count, request.layer_count) for s in stages):
        layout["margin"] = {**layout["margin"], "r": NARROW_LABEL_MARGIN_PX}
    if plan is None:
        layout["annotations"] = [{"text": "no plan", "showarrow": False,
                                  "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
                                  "font": {"size": 16, "color": "#888"}}]
    return go.Figure({"data": [bars], "layout": layout})


SHAPE_COLUMNS = (
    "context_length", "stage_count", "feasible", "node_ids", "min_remaining_bytes",
    "estimated_decode_network_ms_per_token", "decode_tpot_target_met", "selected",
    "selected_lanes", "reason", "estimated_tpot_ms",
)


def candidate_shapes(candidates: pd.DataFrame) -> pd.DataFrame:
    """The candidates table folded to one row per (context, stage count), in its order.

    Lanes never change whether a shape fits, its node set or its memory, so the rows of
    one shape differ only in ``parallel_lanes``. Columns: ``context_length``,
    ``stage_count``, ``feasible``, ``node_ids``, ``min_remaining_bytes``,
    ``estimated_decode_network_ms_per_token``, ``decode_tpot_target_met``, ``selected``,
    ``selected_lanes`` (the lanes of the selected row, 0 when none), ``reason`` and
    ``estimated_tpot_ms``: the speed estimate (:mod:`planner.performance`) of the
    selected row, else of the shape's first row (NA where the table has none).
    """
    if candidates.empty:
        return pd.DataFrame(columns=list(SHAPE_COLUMNS))
    key = ["context_length", "stage_count"]
    if "estimated_tpot_ms" not in candidates:
        candidates = candidates.assign(estimated_tpot_ms=pd.array(
            [pd.NA] * len(candidates), dtype="Float64"))
    # The selected row first, so each shape's speed estimate is the plan's where chosen.
    ordered = pd.concat([candidates[candidates["selected"]], candidates])
    speed = ordered.drop_duplicates(key)[[*key, "estimated_tpot_ms"]]
    shapes = candidates.drop_duplicates(key).drop(
        columns=["parallel_lanes", "selected", "estimated_tpot_ms"])
    shapes = shapes.merge(speed, on=key, how="left")
    chosen = candidates.loc[candidates["selected"], [*key, "parallel_lanes"]]
    chosen = chosen.drop_duplicates(key).rename(columns={"parallel_lanes": "selected_lanes"})
    shapes = shapes.merge(chosen, on=key, how="left")
    shapes["selected"] = shapes["selected_lanes"].notna()
    shapes["selected_lanes"] = shapes["selected_lanes"].fillna(0).astype("int64")
    return shapes.loc[:, list(SHAPE_COLUMNS)].reset_index(drop=True)


def shape_tpot(shapes: pd.DataFrame) -> tuple[list[float | None], bool]:
    """Each shape's one estimated TPOT (:func:`candidate_shapes`' rows), and whether it
    is the speed estimate: the speed estimate where the table has any (the figure the
    workbench's summary, reports and sizing show), else the planner's network estimate
    (docs/rules.md §6). Unknown is ``None``."""
    speed = "estimated_tpot_ms" in shapes and bool(shapes["estimated_tpot_ms"].notna().any())
    column = "estimated_tpot_ms" if speed else "estimated_decode_network_ms_per_token"
    values = [float(v) if _known(v) else None for v in shapes.get(column, [])]
    return values, speed


def shape_target_met(shapes: pd.DataFrame, tpots: list[float | None], speed: bool,
                     target_ms: float | None) -> list[bool | None]:
    """Whether each shape meets the TPOT target, judged on its one estimated TPOT
    (:func:`shape_tpot`): the speed estimate against ``target_ms`` where there is one,
    else the planner's judgement of its network estimate. Unknown is ``None``."""
    network = [bool(met) if _known(met) else None
               for met in shapes.get("decode_tpot_target_met", [None] * len(tpots))]
    return tpot_verdicts(target_ms, tpots if speed else [None] * len(tpots), network)


def _known(value: Any) -> bool:
    return value is not None and not pd.isna(value)


def _tpot_text(tpot: float | None, speed: bool) -> str:
    if tpot is None:
        return "estimated TPOT unknown"
    return f"estimated TPOT {format_milliseconds(tpot, estimated=speed)}"


def _hover(shape: dict[str, Any], tpot: float | None = None, speed: bool = False,
           met: bool | None = None) -> str:
    lines = [f"context {shape['context_length']:,}", f"{shape['stage_count']} stages"]
    if shape["feasible"]:
        lines.append(_tpot_text(tpot, speed))
        if met is not None:
            lines.append("target met" if met else "target missed")
        lines.append(f"smallest margin {format_bytes(int(shape['min_remaining_bytes']))}")
        nodes = node_set_text(shape["node_ids"], limit=8)
        lines.append(plotly_text(f"nodes {nodes if len(nodes) <= 80 else nodes[:77] + '...'}"))
    else:
        lines.append(plotly_text(f"does not fit: {shape['reason']}"))
    return "<br>".join(lines)


def candidates_figure(candidates: pd.DataFrame, target_ms: float | None = None) -> go.Figure:
    """Context length against stage count, coloured by estimated decode TPOT.

    ``candidates`` is the table of :func:`planner.candidates`. Lanes are folded together
    (they never change whether a shape fits). Feasible shapes are dots coloured by their
    estimated TPOT (:func:`shape_tpot`; a hollow dot when it misses the TPOT target
    ``target_ms``, :func:`shape_target_met`),
    infeasible ones grey crosses, and the selected shape a star. Traces: ``feasible``,
    ``infeasible``, ``selected``, always in that order.
    """
    shapes = candidate_shapes(candidates)
    tpots, speed = shape_tpot(shapes)
    judged = shape_target_met(shapes, tpots, speed, target_ms)
    records = shapes.to_dict("records")
    for record, tpot, met in zip(records, tpots, judged, strict=True):
        record["hover"] = _hover(record, tpot, speed, met)
        record["missed"] = met is False
    feasible = [r for r in records if r["feasible"]]
    infeasible = [r for r in records if not r["feasible"]]
    selected = [r for r in records if r["selected"]]
    estimates = [tpot for r, tpot in zip(records, tpots, strict=True) if r["feasible"]]
    has_estimates = any(v is not None for v in estimates)
    missed = [r["missed"] for r in feasible]
    marker: dict[str, Any] = {
        "size": 11,
        "symbol": ["circle-open" if m else "circle" for m in missed],
        "line": {"width": 2},
    }
    if has_estimates:
        marker.update(
            color=[v if v is not None else float("nan") for v in estimates],
            showscale=True, **TPOT_COLOURS)
    else:
        marker["color"] = "#4c72b0"
    traces = [
        {
            "type": "scatter",
            "name": "feasible",
            "mode": "markers",
            "x": [int(r["stage_count"]) for r in feasible],
            "y": [int(r["context_length"]) for r in feasible],
            "marker": marker,
            "hovertext": [r["hover"] for r in feasible],
            "hoverinfo": "text",
        },
        {
            "type": "scatter",
            "name": "infeasible",
            "mode": "markers",
            "x": [int(r["stage_count"]) for r in infeasible],
            "y": [int(r["context_length"]) for r in infeasible],
            "marker": {"size": 8, "symbol": "x-thin-open", "color": "#b0b0b0",
                       "line": {"width": 1.5, "color": "#b0b0b0"}},
            "hovertext": [r["hover"] for r in infeasible],
            "hoverinfo": "text",
        },
        {
            "type": "scatter",
            "name": "selected",
            "mode": "markers+text",
            "x": [int(r["stage_count"]) for r in selected],
            "y": [int(r["context_length"]) for r in selected],
            "marker": {"size": 22, "symbol": "star", "color": "rgba(0,0,0,0)",
                       "line": {"width": 2.5, "color": "#c44e52"}},
            "text": [f"selected, {r['selected_lanes']} lanes" for r in selected],
            "textposition": "top center",
            "textfont": {"color": "#c44e52"},
            "hovertext": [r["hover"] for r in selected],
            "hoverinfo": "text",
        },
    ]
    contexts = sorted({int(r["context_length"]) for r in records})
    counts = [int(r["stage_count"]) for r in records] or [1]
    # Room on both sides so the selected star's label is not cut off at the edge.
    stage_range = [min(counts) - 0.8, max(counts) + 0.8]
    logs = [math.log10(c) for c in contexts] or [0.0]
    context_range = [min(logs) - 0.12, max(logs) + 0.22]
    title = "Candidates: context vs stage count"
    title += (", coloured by estimated TPOT" if has_estimates else
              " (no latencies and no speed estimate: TPOT unknown)")
    return go.Figure({"data": traces, "layout": base_layout(
        title,
        xaxis=axis(title={"text": "stages"}, range=stage_range,
                    dtick=1 if max(counts) - min(counts) <= 20 else None),
        yaxis=axis(title={"text": "context length (tokens)"}, type="log",
                    tickvals=contexts, ticktext=[f"{c:,}" for c in contexts],
                    range=context_range),
        height=380,
    )})
