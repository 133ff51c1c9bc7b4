"""The speed and cost estimate where plans are shown: the report (content, Markdown, HTML,
JSON), the candidates and stage tables, and the workbench summary. Expected values come
from :func:`planner.performance.estimate_plan` on the same plan, not from copies."""

from __future__ import annotations

import json
from html import escape

import pytest

import planner
from planner.fleet import parse_fleet_toml
from planner.models import load_gpu_catalog, load_preset
from planner.performance import (
    ESTIMATE_COLUMNS,
    ESTIMATE_NOTE,
    ModelTraffic,
    estimate_plan,
    node_speeds,
)
from planner.reports import build_report, render_report
from planner.reports.tables import candidate_table, estimate_rows, stage_table
from planner.units import format_milliseconds
from planner.workbench.catalog import preset_source
from planner.workbench.evaluation import evaluate
from planner.workbench.state import WorkbenchState
from planner.workbench.view import candidates_table_html, stage_table_html

H100 = """
[model]
preset = "llama-3.1-70b"

[[nodes]]
id = "h100-sxm-80gb"
count = 2
vram = "79.65 GiB"
latency_ms = 2
"""

UNNAMED = H100.replace('id = "h100-sxm-80gb"', 'id = "box"')


def _direct(document):
    request = document.to_request()
    plan = planner.plan_topology(request)
    traffic = ModelTraffic.from_spec(load_preset("llama-3.1-70b"))
    estimate = estimate_plan(request, plan, traffic,
                             node_speeds(request.nodes, load_gpu_catalog()))
    return request, plan, estimate


def test_report_carries_the_plans_estimate() -> None:
    document = parse_fleet_toml(H100)
    _, plan, expected = _direct(document)
    content = build_report(document)
    estimate = content.estimate
    assert estimate["available"] is True
    assert estimate["estimated_tpot_ms"] == pytest.approx(expected.estimated_tpot_ms)
    assert estimate["tokens_per_s"] == pytest.approx(expected.tokens_per_s)
    assert estimate["cost_per_hour_usd"] == pytest.approx(2 * 4.76)
    assert estimate["cost_per_million_tokens_usd"] == pytest.approx(
        expected.cost_per_million_tokens_usd)
    assert ESTIMATE_NOTE in estimate["notes"]
    # The stage rows carry the per-stage read and hop times.
    for row, stage in zip(content.stages, expected.stages, strict=True):
        assert row["stage_read_ms"] == pytest.approx(stage.stage_read_ms)
        assert row["hop_ms"] == pytest.approx(stage.hop_ms)
    # The selected candidate row is the plan, so its estimate is the plan's.
    selected = [row for row in content.candidates if row["selected"]]
    assert len(selected) == 1
    for column in ESTIMATE_COLUMNS:
        assert selected[0][column] == pytest.approx(getattr(expected, column))
    # Infeasible rows have no estimate.
    assert all(row["estimated_tpot_ms"] is None for row in content.candidates
               if not row["feasible"])
    assert plan.stage_count == len(content.stages)


def test_renderings_label_the_estimate() -> None:
    document = parse_fleet_toml(H100)
    _, _, expected = _direct(document)
    content = build_report(document)
    rows = dict(estimate_rows(content))
    tpot = format_milliseconds(expected.estimated_tpot_ms, estimated=True)
    assert rows["estimated TPOT"] == f"{tpot} per token"
    assert rows["estimated cost per hour"] == "USD 9.52"
    stages = stage_table(content)
    assert stages.headers[-2:] == ("est. read", "est. hop")
    assert stages.rows[0][-2] == format_milliseconds(expected.stages[0].stage_read_ms,
                                                     estimated=True)
    candidates = candidate_table(content)
    assert candidates.headers[-5:] == ("est. decode TPOT", "est. tokens/s",
                                       "est. context fill", "est. USD/h", "est. USD/M tokens")
    # The time to fill the plan's whole context, next to the TPOT.
    fill = expected.estimated_context_fill_ms
    assert fill is not None and fill > 0
    assert rows["estimated time to fill the context"] == format_milliseconds(fill, estimated=True)
    markdown = render_report(content, "md")
    assert "### Speed and cost (estimate)" in markdown
    assert f"{tpot} per token" in markdown
    html = render_report(content, "html")
    assert 'id="estimate-table"' in html and "Speed and cost (estimate)" in html
    data = json.loads(render_report(content, "json"))
    assert data["estimate"]["estimated_tpot_ms"] == pytest.approx(expected.estimated_tpot_ms)


def test_without_catalog_kinds_the_report_says_why() -> None:
    content = build_report(parse_fleet_toml(UNNAMED))
    assert content.estimate["available"] is False
    assert "box-00" in content.estimate["reason"]
    assert dict(estimate_rows(content))["estimate"].startswith("not available: ")
    # No estimate columns where no row has one.
    assert "est. read" not in stage_table(content).headers
    assert "est. decode TPOT" not in candidate_table(content).headers
    assert "stage_read_ms" in content.stages[0] and content.stages[0]["stage_read_ms"] is None


def test_numbers_typed_by_hand_have_no_traffic() -> None:
    text = H100.replace('preset = "llama-3.1-70b"', """native_context_length = 131072
layer_count = 80
model_weight_bytes = "70 GiB"
kv_bytes_per_token = 327680""")
    content = build_report(parse_fleet_toml(text))
    assert content.estimate["available"] is False
    assert "traffic is unknown" in content.estimate["reason"]


NUMBERS_WITH_SPEED_FIELDS = H100.replace('preset = "llama-3.1-70b"', """\
native_context_length = 131072
layer_count = 80
model_weight_bytes = "70 GiB"
kv_bytes_per_token = 327680
hidden_size = 8192
parameter_count = 70553706496""")


def test_numbers_with_speed_fields_are_estimated_wherever_plans_are_shown(
        tmp_path) -> None:
    """A fleet file's model typed as numbers with the speed fields is estimated in the
    report, judged against a TPOT target and sized, as ``planner speed`` estimates it."""
    from planner.fleet import load_fleet
    from planner.performance import model_traffic
    from planner.targets import SpeedEstimator

    document = parse_fleet_toml(NUMBERS_WITH_SPEED_FIELDS)
    traffic = model_traffic(None, document.model.numbers)
    assert traffic is not None and traffic.hidden_size == 8192
    request = document.to_request()
    plan = planner.plan_topology(request)
    expected = estimate_plan(request, plan, traffic,
                             node_speeds(request.nodes, load_gpu_catalog()))
    content = build_report(document)
    assert content.estimate["available"] is True
    assert content.estimate["estimated_tpot_ms"] == pytest.approx(expected.estimated_tpot_ms)
    assert content.estimate["estimated_context_fill_ms"] == pytest.approx(
        expected.estimated_context_fill_ms)
    estimator = SpeedEstimator.for_document(document, load_gpu_catalog())
    assert estimator(request, plan).estimated_tpot_ms == pytest.approx(
        expected.estimated_tpot_ms)
    fleet = tmp_path / "numbers.toml"
    fleet.write_text(NUMBERS_WITH_SPEED_FIELDS)
    loaded = load_fleet(fleet)
    assert SpeedEstimator.for_document(loaded, load_gpu_catalog()).traffic == traffic


def test_node_kinds_name_a_catalog_kind_for_any_node_id() -> None:
    request = parse_fleet_toml(UNNAMED).to_request()
    catalog = load_gpu_catalog()
    assert node_speeds(request.nodes, catalog) == {}
    speeds = node_speeds(request.nodes, catalog, {"box-00": "NVIDIA H100 SXM 80GB",
                                                  "box-01": "h100-sxm-80gb"})
    assert {speed.kind for speed in speeds.values()} == {"h100-sxm-80gb"}
    assert speeds["box-00"].price_per_hour == 4.76


def test_workbench_shows_the_estimate() -> None:
    state = WorkbenchState.design_default()
    state = state.with_model(preset_source("llama-3.1-70b").fields).with_nodes(())
    state = state.add_gpus("NVIDIA H100 SXM 80GB", 85520809984, 2)
    evaluation = evaluate(state)
    request, plan = evaluation.request, evaluation.plan
    expected = estimate_plan(request, plan, ModelTraffic.from_spec(load_preset("llama-3.1-70b")),
                             node_speeds(request.nodes, load_gpu_catalog()))
    assert evaluation.estimate == expected
    summary = evaluation.summary()
    tpot = format_milliseconds(expected.estimated_tpot_ms, estimated=True)
    assert f"estimated TPOT {tpot}" in summary
    assert "(estimate)" in summary
    assert list(evaluation.stages["stage_read_ms"]) == pytest.approx(
        [s.stage_read_ms for s in expected.stages])
    assert "est. read" in stage_table_html(evaluation.stages)
    assert tpot in candidates_table_html(evaluation.candidates)
    # The page's candidates table says under it that its est. columns are estimates, with
    # the measured error of the plan's estimate.
    from planner.workbench import Workbench

    bench = Workbench(state)
    shown = bench.view.candidates_table.value
    assert expected.error_note and "est.: Estimated, not measured" in shown
    assert escape(expected.error_note) in shown
    # Nodes typed by hand: no estimate; the summary does not pretend one, and says why.
    plain = evaluate(WorkbenchState.design_default())
    assert plain.estimate is None and "tokens/s" not in plain.summary()
    assert plain.estimate_reason
    assert f"estimated TPOT unknown: {plain.estimate_reason}" in plain.summary()


def test_a_node_naming_its_kind_in_the_fleet_file_is_estimated() -> None:
    text = UNNAMED.replace('latency_ms = 2', 'latency_ms = 2\ngpu = "h100-sxm-80gb"')
    content = build_report(parse_fleet_toml(text))
    assert content.estimate["available"] is True
    assert content.estimate["cost_per_hour_usd"] == pytest.approx(2 * 4.76)


def test_a_fractional_network_estimate_is_shown_exactly_in_the_workbench_table() -> None:
    gib = 2**30
    request = planner.PlanningInput.from_dict({
        "native_context_length": 8192, "layer_count": 8, "model_weight_bytes": 100 * gib,
        "kv_bytes_per_token": 8, "nodes": [
            {"node_id": f"n{i}", "detected_vram_bytes": 40 * gib,
             "stage_transfer_latency_ms": 0.5} for i in range(4)]})
    table = planner.candidates(request)
    chosen = table[table["selected"]].iloc[0]
    assert chosen["estimated_decode_network_ms_per_token"] == 1.5  # 3 stages x 0.5 ms
    html = candidates_table_html(table)
    assert ">1.5 ms<" in html and ">1 ms<" not in html
    assert ">2 ms<" in html  # 4 stages x 0.5 ms: a whole number stays whole
    from planner.figures.plan import candidates_figure

    (hover,) = candidates_figure(table).data[2].hovertext  # the selected shape's star
    assert "estimated TPOT 1.5 ms" in hover


def test_the_candidates_chart_opens_the_dots_the_table_says_missed() -> None:
    # A 2 x H100 fleet whose network estimate meets a 10 ms TPOT target while its speed
    # estimate misses it: the chart's hollow dots follow the one estimated TPOT shown.
    from dataclasses import replace

    from planner.figures.plan import candidate_shapes, candidates_figure, shape_tpot

    state = WorkbenchState.design_default()
    state = state.with_model(preset_source("llama-3.1-70b").fields).with_nodes(())
    state = state.add_gpus("NVIDIA H100 SXM 80GB", 85520809984, 2)
    state = state.with_options(replace(state.options, target_decode_tpot_ms="10"))
    evaluation = evaluate(state)
    table = evaluation.candidates
    shapes = candidate_shapes(table)
    tpots, speed = shape_tpot(shapes)
    assert speed
    feasible = [t for t, ok in zip(tpots, shapes["feasible"], strict=True) if ok]
    assert feasible and all(t is not None and t > 10 for t in feasible)
    assert shapes.loc[shapes["feasible"], "decode_tpot_target_met"].all()  # network: met
    figure = candidates_figure(table, target_ms=10)
    assert list(figure.data[0].marker.symbol) == ["circle-open"] * len(feasible)
    assert all("target missed" in text for text in figure.data[0].hovertext)
    html = candidates_table_html(table, 10)
    assert html.count(">missed<") == len(feasible) and ">met<" not in html
    from planner.workbench import Workbench

    shown = Workbench(state).view.candidates_chart
    assert list(shown.figure.data[0].marker.symbol) == ["circle-open"] * len(feasible)
