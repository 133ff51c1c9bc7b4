"""The plan figures: what each trace holds, checked against the planner's own tables."""

from __future__ import annotations

import math

import pandas as pd
import pytest

import planner
from planner.figures import (
    CANDIDATE_TRACES,
    MEMORY_SEGMENTS,
    candidate_shapes,
    candidates_figure,
    layer_ranges_figure,
    memory_by_node,
    memory_figure,
)

GIB = 1024**3
QWEN = {"native_context_length": 262_144, "layer_count": 62,
        "model_weight_bytes": 315_680_000_000, "kv_bytes_per_token": 131_072}


def request(nodes: list[dict], **options: object) -> planner.PlanningInput:
    return planner.PlanningInput.from_dict({**QWEN, "nodes": nodes, **options})


def node(node_id: str, gib: float, **fields: object) -> dict:
    return {"node_id": node_id, "detected_vram_bytes": int(gib * GIB), **fields}


@pytest.fixture
def mixed() -> planner.PlanningInput:
    """Five usable 80 GiB-class nodes (one capped, one with headroom), one tiny, one empty."""
    return request([
        node("a", 80), node("b", 80), node("c", 80),
        node("d", 96, max_vram_bytes=80 * GIB),
        node("e", 82, runtime_headroom_bytes=2 * GIB),
        node("tiny", 4),
        node("empty", 16, runtime_headroom_bytes=20 * GIB),
    ])


def test_memory_parts_add_up_to_each_nodes_detected_vram(mixed: planner.PlanningInput) -> None:
    plan = planner.plan_topology(mixed)
    table = memory_by_node(mixed, plan)
    parts = table[["weights", "kv_cache", "free", "headroom", "capped_away"]].sum(axis=1)
    assert list(parts) == list(table["detected_vram_bytes"])
    detected = {n.node_id: n.detected_vram_bytes for n in mixed.nodes}
    assert dict(zip(table["node_id"], table["detected_vram_bytes"], strict=True)) == detected


def test_memory_stages_match_stage_usage_and_come_first(mixed: planner.PlanningInput) -> None:
    plan = planner.plan_topology(mixed)
    usage = planner.stage_usage(mixed, plan)
    table = memory_by_node(mixed, plan)
    staged = table.iloc[:plan.stage_count]
    assert list(staged["node_id"]) == list(plan.node_ids)
    assert list(staged["weights"]) == list(usage["parameter_bytes"])
    assert list(staged["kv_cache"]) == list(usage["kv_cache_bytes"])
    assert list(staged["free"]) == list(usage["remaining_bytes"])
    unused = table.iloc[plan.stage_count:]
    assert set(unused["node_id"]) == {n.node_id for n in mixed.nodes} - set(plan.node_ids)
    assert (unused["weights"] == 0).all() and (unused["kv_cache"] == 0).all()


def test_memory_shows_cap_and_headroom_where_they_apply(mixed: planner.PlanningInput) -> None:
    table = memory_by_node(mixed, planner.plan_topology(mixed)).set_index("node_id")
    assert table.loc["d", "capped_away"] == 16 * GIB
    assert table.loc["e", "headroom"] == 2 * GIB
    # Headroom above the VRAM reserves all of it, and no more.
    assert table.loc["empty", "headroom"] == 16 * GIB
    assert table.loc["empty", "free"] == 0
    assert table.loc["a", "capped_away"] == 0 and table.loc["a", "headroom"] == 0


def test_memory_figure_traces_and_labels(mixed: planner.PlanningInput) -> None:
    plan = planner.plan_topology(mixed)
    figure = memory_figure(mixed, plan)
    assert [trace.name for trace in figure.data] == [name for name, _ in MEMORY_SEGMENTS]
    assert figure.layout.barmode == "stack"
    labels = list(figure.data[0].x)
    assert labels[0] == f"{plan.node_ids[0]}<br>stage-0"
    assert "tiny<br>unused" in labels and "empty<br>unused" in labels
    table = memory_by_node(mixed, plan)
    for index, detected in enumerate(table["detected_vram_bytes"]):
        stacked = sum(trace.y[index] for trace in figure.data)
        assert math.isclose(stacked, detected / GIB, rel_tol=1e-12)


def test_memory_figure_without_plan_shows_every_node_unused(
        mixed: planner.PlanningInput) -> None:
    figure = memory_figure(mixed, None)
    assert all(label.endswith("unused") for label in figure.data[0].x)
    assert len(figure.data[0].x) == len(mixed.nodes)
    assert all(value == 0 for value in figure.data[0].y)


def test_layer_ranges_cover_the_model_once(mixed: planner.PlanningInput) -> None:
    plan = planner.plan_topology(mixed)
    figure = layer_ranges_figure(mixed, plan)
    (bars,) = figure.data
    assert list(bars.base) == [s.layer_start for s in plan.stages]
    assert list(bars.x) == [s.layer_end - s.layer_start for s in plan.stages]
    assert sum(bars.x) == mixed.layer_count
    assert list(bars.y) == [f"{s.stage_id} · {s.node_id}" for s in plan.stages]
    assert tuple(figure.layout.xaxis.range) == (0, mixed.layer_count)


def test_layer_ranges_without_plan_say_so(mixed: planner.PlanningInput) -> None:
    figure = layer_ranges_figure(mixed, None)
    assert len(figure.data) == 1 and len(figure.data[0].x) == 0
    assert figure.layout.annotations[0].text == "no plan"


def test_candidate_shapes_fold_lanes(mixed: planner.PlanningInput) -> None:
    table = planner.candidates(mixed)
    shapes = candidate_shapes(table)
    assert len(shapes) == len(table) // 4  # four lane counts per shape without an override
    assert not shapes.duplicated(["context_length", "stage_count"]).any()
    chosen = shapes[shapes["selected"]]
    plan = planner.plan_topology(mixed)
    assert len(chosen) == 1
    assert int(chosen.iloc[0]["stage_count"]) == plan.stage_count
    assert int(chosen.iloc[0]["context_length"]) == plan.context_length
    assert int(chosen.iloc[0]["selected_lanes"]) == plan.parallel_lanes
    assert (shapes.loc[~shapes["selected"], "selected_lanes"] == 0).all()


def test_candidates_figure_marks_the_selected_shape(mixed: planner.PlanningInput) -> None:
    table = planner.candidates(mixed)
    plan = planner.plan_topology(mixed)
    figure = candidates_figure(table)
    assert tuple(trace.name for trace in figure.data) == CANDIDATE_TRACES
    feasible, infeasible, selected = figure.data
    shapes = candidate_shapes(table)
    assert len(feasible.x) == int(shapes["feasible"].sum())
    assert len(infeasible.x) == int((~shapes["feasible"]).sum())
    assert (tuple(selected.x), tuple(selected.y)) == ((plan.stage_count,),
                                                      (plan.context_length,))
    assert selected.text == (f"selected, {plan.parallel_lanes} lanes",)
    # No latencies: one colour, and the title says the TPOT is unknown.
    assert feasible.marker.color == "#4c72b0"
    assert "TPOT unknown" in figure.layout.title.text


def test_candidates_figure_colours_by_estimate_and_opens_missed_targets() -> None:
    nodes = [node(f"n{i}", 80, stage_transfer_latency_ms=10) for i in range(5)]
    req = request(nodes, target_decode_tpot_ms=45)
    table = planner.candidates(req)
    figure = candidates_figure(table)
    feasible = figure.data[0]
    rows = candidate_shapes(table)
    rows = rows[rows["feasible"]]
    assert list(feasible.marker.color) == [
        float(v) for v in rows["estimated_decode_network_ms_per_token"]]
    expected = ["circle-open" if not met else "circle" for met in rows["decode_tpot_target_met"]]
    assert list(feasible.marker.symbol) == expected
    assert "circle-open" in expected and "circle" in expected  # 5 x 10 ms misses 45 ms


def test_candidates_figure_of_an_empty_table_has_empty_traces() -> None:
    figure = candidates_figure(pd.DataFrame())
    assert tuple(trace.name for trace in figure.data) == CANDIDATE_TRACES
    assert all(len(trace.x) == 0 for trace in figure.data)


def test_candidates_figure_when_nothing_fits() -> None:
    req = request([node(f"n{i}", 70) for i in range(4)])
    table = planner.candidates(req)
    figure = candidates_figure(table)
    feasible, infeasible, selected = figure.data
    assert len(feasible.x) == 0 and len(selected.x) == 0
    assert len(infeasible.x) == len(candidate_shapes(table))
    assert all("does not fit" in text for text in infeasible.hovertext)


def test_a_narrow_bar_draws_its_label_beside_it_at_full_size() -> None:
    # 5 x 80 GiB: four stages of 15 layers and a last one of 2 (layers 60-61) that
    # cannot hold "60–61 (2)" inside its bar.
    five = request([node(f"gpu-{index}", 80) for index in range(5)])
    plan = planner.plan_topology(five)
    figure = layer_ranges_figure(five, plan)
    (bars,) = figure.data
    assert [s.layer_count for s in plan.stages] == [15, 15, 15, 15, 2]
    assert list(bars.textposition) == ["inside"] * 4 + ["outside"]
    assert bars.cliponaxis is False
    assert figure.layout.margin.r >= 110
    assert list(bars.text)[-1] == "60–61 (2)"


def test_wide_bars_keep_their_labels_inside() -> None:
    two = request([node(f"gpu-{index}", 160) for index in range(2)])
    plan = planner.plan_topology(two)
    figure = layer_ranges_figure(two, plan)
    assert min(s.layer_count for s in plan.stages) >= 0.15 * 62
    assert set(figure.data[0].textposition) == {"inside"}
    assert figure.layout.margin.r == 20
