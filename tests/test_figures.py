"""The plan figures: what each trace holds, checked against the planner's own tables."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planner_strategies import requests

import planner
from planner.figures import (
    CANDIDATE_TRACES,
    MEMORY_PARTS,
    MEMORY_SEGMENTS,
    candidate_shapes,
    candidates_figure,
    layer_ranges_figure,
    memory_by_node,
    memory_figure,
)
from planner.llamacpp import LayerLayout, LlamaCppCosts, LlamaCppModel

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
    parts = table[list(MEMORY_PARTS)].sum(axis=1)
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


# -- every bar adds up to the node's detected VRAM, under both memory rules ---------------

MIB = 2**20


def _plan_or_none(request: planner.PlanningInput) -> planner.Plan | None:
    try:
        return planner.plan_topology(request)
    except planner.PlanError:
        return None


def _assert_memory_adds_up(request: planner.PlanningInput) -> None:
    """Each node's parts (:data:`MEMORY_PARTS`) add up to its detected VRAM, exactly; the
    figure's bars stack to it; a plan's nodes show the stage table's parts; the
    reserve is what the rule reserves on the node."""
    plan = _plan_or_none(request)
    table = memory_by_node(request, plan)
    parts = table[list(MEMORY_PARTS)]
    assert (parts >= 0).all().all(), table
    assert list(parts.sum(axis=1)) == list(table["detected_vram_bytes"])
    assert sorted(table["node_id"]) == sorted(n.node_id for n in request.nodes)
    figure = memory_figure(request, plan)
    for index, detected in enumerate(table["detected_vram_bytes"]):
        stacked = sum(trace.y[index] for trace in figure.data)
        assert math.isclose(stacked, detected / GIB, rel_tol=1e-9, abs_tol=1e-12)
    if plan is None:
        return
    usage = planner.stage_usage(request, plan)
    staged = table.iloc[:plan.stage_count]
    for column, usage_column in (("weights", "parameter_bytes"), ("kv_cache", "kv_cache_bytes"),
                                 ("state", "state_bytes"), ("other", "other_bytes"),
                                 ("free", "remaining_bytes")):
        assert list(staged[column]) == list(usage[usage_column]), column
    reserves = planner.planning.plan_reserves(request, plan)
    assert list(staged["reserved"]) == [reserves.get(n, 0) for n in plan.node_ids]


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(requests(failures=False))
def test_memory_parts_add_up_under_the_design_rule(fields: dict) -> None:
    """Random fleets, hybrid models with a state per sequence among them."""
    _assert_memory_adds_up(planner.PlanningInput.from_dict(fields))


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(requests(failures=False))
def test_memory_parts_add_up_under_the_design_rule_on_a_few_fleets(fields: dict) -> None:
    _assert_memory_adds_up(planner.PlanningInput.from_dict(fields))


@st.composite
def llamacpp_requests(draw: st.DrawFn) -> planner.PlanningInput:
    """A small hand-made model under llama.cpp's rule: attention layers (some sliding),
    recurrent layers with a state per sequence, an output head; nodes with caps,
    headroom and backend overheads."""
    count = draw(st.integers(1, 6))
    layers = []
    for _ in range(count):
        weights = draw(st.sampled_from((4, 16, 64))) * MIB
        if draw(st.booleans()):
            elements = draw(st.sampled_from((256, 1024)))
            layers.append(LayerLayout(weights, elements, elements, sliding=draw(st.booleans())))
        else:
            layers.append(LayerLayout(weights, 0, 0, state_elements=draw(
                st.sampled_from((4096, 65536, 1 << 20)))))
    native = draw(st.sampled_from((8192, 32768, 65536)))
    model = LlamaCppModel(
        name="hand", architecture="llama", native_context_length=native,
        embedding_length=1024, vocab_size=32000, head_count=8, feed_forward_length=4096,
        layers=tuple(layers), input_bytes=32000 * 1024 * 2,
        output_bytes=draw(st.sampled_from((0, 32000 * 1024 * 2))),
        sliding_window=512)
    nodes = []
    overheads = {}
    for index in range(draw(st.integers(1, 5))):
        node_id = f"n{index}"
        detected = draw(st.integers(64, 4096)) * MIB
        cap = draw(st.none() | st.integers(32, 4096).map(lambda m: m * MIB))
        headroom = draw(st.sampled_from((0, 0, 100 * MIB, 5000 * MIB)))
        nodes.append(planner.NodeBudget(node_id, detected, cap, headroom))
        if draw(st.booleans()):
            overheads[node_id] = draw(st.integers(0, 600)) * MIB
    kv_per_token = sum(layer.key_elements + layer.value_elements for layer in layers) * 2
    return planner.PlanningInput(
        native_context_length=native, layer_count=count,
        model_weight_bytes=sum(layer.weight_bytes for layer in layers),
        kv_bytes_per_token=max(kv_per_token, 1), nodes=tuple(nodes),
        minimum_nodes=draw(st.integers(0, 2)),
        parallel_lanes_override=draw(st.none() | st.integers(1, 4)),
        memory_rule=LlamaCppCosts(model, overhead_bytes=tuple(overheads.items())))


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(llamacpp_requests())
def test_memory_parts_add_up_under_the_llamacpp_rule(request: planner.PlanningInput) -> None:
    _assert_memory_adds_up(request)


@settings(max_examples=20, derandomize=True, database=None, deadline=None)
@given(llamacpp_requests())
def test_memory_parts_add_up_under_the_llamacpp_rule_on_a_few_fleets(
        request: planner.PlanningInput) -> None:
    _assert_memory_adds_up(request)


def test_the_llamacpp_rule_shows_its_output_compute_and_reserve(tmp_path: Path) -> None:
    """gemma-3-270m-like on 2 x 1200 MiB under llama.cpp's rule: the bars were short by
    the stage compute buffer each node reserves (171 MiB) and, on the last, by its output
    head and compute buffer too (987 MiB)."""
    from test_memory import write_gemma_like

    from planner.fleet import parse_fleet_toml

    gguf = write_gemma_like(tmp_path)
    document = parse_fleet_toml(
        f'[model]\ngguf = "{gguf}"\n[planning]\nminimum_nodes = 2\n'
        '[[nodes]]\nid = "a"\nvram = "1200 MiB"\n[[nodes]]\nid = "b"\nvram = "1200 MiB"\n')
    request = document.to_request("llamacpp")
    _assert_memory_adds_up(request)
    table = memory_by_node(request, planner.plan_topology(request)).set_index("node_id")
    assert (table["reserved"] > 0).all()
    assert table.loc["b", "other"] > 0 and table.loc["a", "other"] == 0


def test_a_state_per_sequence_is_drawn() -> None:
    """nemotron-nano-9b-v2 on 2 x 12 GiB under the design rule: its recurrent state
    (555 MiB) was left out of the bars."""
    from planner.models import load_preset

    fields = load_preset("nemotron-nano-9b-v2").planning_fields()
    request = planner.PlanningInput.from_dict({**fields, "nodes": [
        node("a", 12), node("b", 12)]})
    _assert_memory_adds_up(request)
    table = memory_by_node(request, planner.plan_topology(request))
    assert table["state"].sum() > 500 * MIB
    assert "recurrent state" in [trace.name for trace in memory_figure(
        request, planner.plan_topology(request)).data if trace.showlegend is not False]


def test_the_tpot_colours_are_the_same_in_the_candidates_and_the_sizing_charts() -> None:
    """The candidates chart drew a fast TPOT dark and the sizing chart drew it bright."""
    from planner.figures.sizing import sizing_figure
    from planner.models import load_gpu_catalog, load_preset
    from planner.sizing import size_fleet
    from planner.workbench import WorkbenchState, evaluate
    from planner.workbench.catalog import preset_source

    state = WorkbenchState.design_default().with_model(
        preset_source("llama-3.1-70b").fields).with_nodes(())
    evaluation = evaluate(state.add_gpus("h100", 80 * GIB, 3, kind="h100-sxm-80gb"))
    candidates = candidates_figure(evaluation.candidates).data[0].marker
    sized = sizing_figure(size_fleet(load_preset("llama-3.1-70b"), load_gpu_catalog(),
                                     top=6)).data[1].marker
    assert candidates.showscale and sized.showscale
    assert candidates.colorscale == sized.colorscale
    assert bool(candidates.reversescale) == bool(sized.reversescale)
    assert candidates.colorbar.title.text == sized.colorbar.title.text
