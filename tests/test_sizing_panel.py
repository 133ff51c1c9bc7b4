"""The "Size a fleet" panel, driven through its widgets: the targets and the edited
catalog give the fleets :func:`planner.sizing.size_fleet` gives, the table and chart show
them, and choosing one loads it into the workbench and plans it."""

from __future__ import annotations

from dataclasses import replace
from html import unescape

import pytest

import planner
from planner.models import load_gpu_catalog, load_preset
from planner.sizing import SizingTargets, size_fleet
from planner.units import format_milliseconds
from planner.workbench import Workbench
from planner.workbench.catalog import preset_source
from planner.workbench.sizing_panel import SizingModel, SizingPanel

KINDS = ("h100-sxm-80gb", "a100-80gb", "l40s", "rtx-4090")


def _catalog():
    return [gpu for gpu in load_gpu_catalog() if gpu.kind in KINDS]


def _model() -> SizingModel:
    from planner.performance import ModelTraffic

    spec = load_preset("llama-3.1-70b")
    return SizingModel(spec.planning_fields(), ModelTraffic.from_spec(spec), spec.name)


def _row(panel: SizingPanel, kind: str):
    return next(row for row in panel.catalog_rows if row.gpu.kind == kind)


def test_panel_shows_what_size_fleet_finds() -> None:
    panel = SizingPanel(_model(), catalog=_catalog(), top=4)
    expected = size_fleet(load_preset("llama-3.1-70b"), _catalog(), SizingTargets(), top=4)
    assert panel.result is not None and panel.problem.value == ""
    assert panel.result.fleets == expected.fleets
    assert list(panel.frame["fleet"]) == [fleet.label for fleet in expected.fleets]
    assert panel.table.value.count("<tr class=''>") == len(expected.fleets)
    assert expected.cheapest.label in panel.summary.value
    markers = panel.chart.figure.data[1]
    # x the cost per hour, y the context, colour the estimated TPOT, one point a fleet.
    points = {(fleet.cost_per_hour_usd, fleet.plan.context_length, fleet.estimated_tpot_ms)
              for fleet in (*expected.fleets, *expected.pareto)}
    assert set(zip(markers.x, markers.y, markers.marker.color, strict=True)) == points
    assert panel.choice.options[0][0].startswith("1. ")
    assert panel.choice.value == 0


def test_edited_targets_and_catalog_are_used() -> None:
    panel = SizingPanel(_model(), catalog=_catalog(), compute=False)
    assert panel.result is None
    panel.tolerate.value = "1"
    panel.min_lanes.value = "2"
    _row(panel, "rtx-4090").use.value = False
    _row(panel, "l40s").price.value = "0.5"
    _row(panel, "a100-80gb").max_count.value = "2"
    panel.size_button.click()
    edited = [replace(gpu, price_per_hour=0.5) if gpu.kind == "l40s" else
              replace(gpu, max_count=2) if gpu.kind == "a100-80gb" else gpu
              for gpu in _catalog() if gpu.kind != "rtx-4090"]
    expected = size_fleet(load_preset("llama-3.1-70b"), edited,
                          SizingTargets(minimum_lanes=2, failures_tolerated=1), top=8)
    assert panel.result.fleets == expected.fleets
    assert all("rtx-4090" not in fleet.label for fleet in panel.result.fleets)
    assert all(fleet.counts_by_kind.get("a100-80gb", 0) <= 2 for fleet in panel.result.fleets)
    assert all(fleet.failures_tolerated == 1 for fleet in panel.result.fleets)


@pytest.mark.parametrize(("field", "text", "expected"), [
    ("price", "cheap", "l40s price per hour: must be a price"),
    ("price", "-1", "l40s price per hour: must be above 0"),
    ("max_count", "2.5", "l40s count available: must be a whole number"),
])
def test_bad_catalog_entries_are_named_not_raised(field: str, text: str, expected: str) -> None:
    panel = SizingPanel(_model(), catalog=_catalog())
    getattr(_row(panel, "l40s"), field).value = text
    panel.compute()
    assert panel.result is None and panel.frame is None
    assert expected in panel.problem.value and "InvalidEditorValue" in panel.problem.value
    assert panel.table.value == "" and panel.choice.options == ()


def test_no_fleet_meets_the_targets_says_why() -> None:
    panel = SizingPanel(_model(), catalog=_catalog(), compute=False)
    for kind in ("h100-sxm-80gb", "a100-80gb", "l40s"):
        _row(panel, kind).use.value = False
    _row(panel, "rtx-4090").max_count.value = "1"
    panel.compute()
    assert panel.result is None
    assert "NoFleetMeetsTargets" in panel.problem.value
    for row in panel.catalog_rows:
        row.use.value = False
    panel.compute()
    assert "tick at least one kind" in panel.problem.value


def test_choosing_a_fleet_loads_and_plans_it() -> None:
    bench = Workbench.default()
    bench.set_state(bench.state.with_model(preset_source("llama-3.1-70b").fields))
    panel = bench.panel("Size a fleet")
    assert isinstance(panel, SizingPanel) and panel.result is not None
    fleet = panel.result.fleets[1]
    panel.choice.value = 1
    panel.load_button.click()
    assert tuple(row.node_id for row in bench.state.nodes) == fleet.node_ids
    assert tuple(row.node_id for row in bench.fleet_editor.rows()) == fleet.node_ids
    plan = planner.plan_topology(bench.state.to_request())
    assert bench.evaluation.plan == plan == fleet.plan
    # The fleet's nodes are catalog kinds, so the workbench estimates its speed too.
    assert bench.evaluation.estimate is not None
    assert bench.evaluation.estimate.estimated_tpot_ms == pytest.approx(fleet.estimated_tpot_ms)
    assert "wb-selected" in panel.table.value


def test_the_table_names_its_columns_in_words() -> None:
    panel = SizingPanel(_model(), catalog=_catalog(), top=2)
    assert "_" not in "".join(panel.table.value.split("<th")[1:]).split("</thead>")[0]
    assert "USD / hour" in panel.table.value and "est. TPOT" in panel.table.value
    layout = panel.chart.figure.layout.yaxis
    assert [int(v) for v in layout.tickvals] == sorted(
        {fleet.plan.context_length for fleet in panel.result.fleets + panel.result.pareto})
    assert all("," in text or len(text) <= 3 for text in layout.ticktext)


HOME_LAB = planner.fleet.example_fleet("llama70b-home-lab")


def test_a_sized_fleet_has_one_cost_and_one_tpot_wherever_shown(tmp_path) -> None:
    import json
    import re
    from html import unescape

    bench = Workbench.from_fleet(HOME_LAB, fleet_dir=tmp_path, report_dir=tmp_path)
    panel = bench.panel("Size a fleet")
    panel.tpot.value = "0"
    panel.tolerate.value = "1"
    panel.size_button.click()
    assert panel.result is not None, panel.problem.value
    fleet = panel.result.fleets[0]
    panel.load_button.click()
    evaluation = bench.evaluation
    # The fleet keeps a spare: the plan leaves a node out, which is still paid for.
    assert len(evaluation.plan.node_ids) < len(fleet.node_ids) == len(bench.state.nodes)
    cost = f"USD {fleet.cost_per_hour_usd:,.2f}/h"
    assert evaluation.estimate.cost_per_hour_usd == pytest.approx(fleet.cost_per_hour_usd)
    summary = unescape(bench.view.summary.value)
    assert cost in summary
    assert f'<td data-label="USD / hour">{fleet.cost_per_hour_usd:,.2f}</td>' in panel.table.value
    for name in ("sized.json", "sized.md"):
        bench.export_report(name)
    report = json.loads((tmp_path / "sized.json").read_text())
    assert report["estimate"]["cost_per_hour_usd"] == pytest.approx(fleet.cost_per_hour_usd)
    markdown = (tmp_path / "sized.md").read_text()
    assert f"| estimated cost per hour | {cost.removesuffix('/h')} |" in markdown
    # Every way to run the fleet costs the fleet's price: the spare is paid for too.
    assert re.findall(r"\| ([0-9.]+) \| [0-9.]+ \|$", markdown, re.M) and {
        float(v) for v in re.findall(r"\| ([0-9.]+) \| [0-9.]+ \|$", markdown, re.M)} == {
        round(fleet.cost_per_hour_usd, 2)}
    # One TPOT figure: the speed estimate, in the summary, the table and the chart.
    tpot = f"{fleet.estimated_tpot_ms:,.1f}"
    assert f'<td data-label="est. TPOT">{tpot}</td>' in panel.table.value
    assert f"estimated TPOT {tpot} ms" in summary
    assert "unknown" not in summary and len(re.findall("TPOT", summary)) == 1
    assert "ms per token" not in summary
    shown = re.sub(r' data-label="[^"]*"', "", bench.view.candidates_table.value)
    assert "TPOT" not in shown.split("network est.")[1]
    assert "est. TPOT" not in bench.view.diagnosis.value
    title = bench.view.candidates.layout.title.text
    assert "unknown" not in title and "estimated TPOT" in title
    colours = [c for c in bench.view.candidates.data[0].marker.color if c == c]
    assert float(tpot.replace(",", "")) in {round(c, 1) for c in colours}


def test_the_panel_says_when_the_model_changed_under_it_even_after_a_refusal() -> None:
    from html import unescape

    bench = Workbench.from_fleet(HOME_LAB)
    panel = bench.panel("Size a fleet")
    # The home lab's own 40 ms target cannot be met: a refusal, about llama-3.1-70b.
    assert panel.result is None and "NoFleetMeetsTargets" in panel.problem.value
    assert not panel.out_of_date
    bench.model_editor.preset.value = "gpt-oss-120b"
    assert panel.out_of_date and panel.stale.layout.display is None
    assert "the model changed (llama-3.1-70b → gpt-oss-120b)" in unescape(panel.stale.value)
    assert panel.stale.button.description == "Size again"
    panel.stale.button.click()
    assert not panel.out_of_date and panel.stale.layout.display == "none"
    assert panel.result is not None and "gpt-oss-120b" in unescape(panel.summary.value)
    # Sized fleets go out of date too, and editing the nodes changes neither.
    bench.remove_node(0)
    assert not panel.out_of_date
    bench.model_editor.preset.value = "llama-3.1-70b"
    assert panel.out_of_date and "(gpt-oss-120b → " in unescape(panel.stale.value)


def test_the_chart_shows_no_colour_range_when_every_fleet_has_one_tpot() -> None:
    """Fleets of one estimated TPOT had a colour bar of 68.6 .. 69.4, a range no fleet
    has; the legend now says the one value. The Pareto front is drawn with markers, so a
    front of one fleet is seen and its legend entry shows its mark."""
    from planner.figures.sizing import SUBTITLE_LINE_CHARACTERS, sizing_figure

    result = size_fleet(load_preset("llama-3.1-70b"), _catalog(),
                        SizingTargets(), kinds=["h100-sxm-80gb"], top=2)
    tpots = {round(f.estimated_tpot_ms, 1) for f in (*result.fleets, *result.pareto)}
    figure = sizing_figure(result)
    front, fleets = figure.data
    assert "markers" in front.mode and front.marker.symbol == "diamond-open"
    assert len(tpots) == 1  # two and three H100s decode alike
    assert not fleets.marker.showscale
    assert fleets.name == ("fleets, estimated TPOT "
                           + format_milliseconds(tpots.pop(), estimated=True))
    mixed = size_fleet(load_preset("llama-3.1-70b"), _catalog(), SizingTargets(), top=6)
    spread = {round(f.estimated_tpot_ms, 1) for f in (*mixed.fleets, *mixed.pareto)}
    assert len(spread) > 1
    assert sizing_figure(mixed).data[1].marker.showscale
    # The estimate is labelled with its measured error on the chart itself.
    assert mixed.error_note.startswith("Median error on published measurements of GPUs and "
                                       "sources the fit did not see")
    drawn = sizing_figure(mixed)
    lines = drawn.layout.title.subtitle.text.split("<br>")
    # Every word of the note, in order, on lines short enough for the narrowest chart;
    # each kind's group starts a line.
    assert " ".join(lines).split() == mixed.error_note.replace(";", "").split()
    assert all(len(line) <= SUBTITLE_LINE_CHARACTERS for line in lines)
    groups = mixed.error_note.split(": ", 1)[1].split("; ")
    assert len(groups) >= 2 and all(any(line.startswith(group.split(" memory")[0])
                                        for line in lines) for group in groups)
    # The legend sits at the figure's foot, clear of the note (at the top it covered the
    # note's second line on an 812-pixel page).
    legend = drawn.layout.legend
    assert (legend.yref, legend.y, legend.yanchor) == ("container", 0, "bottom")


def test_a_failed_size_leaves_no_chart_of_the_fleets_before() -> None:
    """A 10 ms TPOT target: the error showed and the table emptied, but the chart still
    drew the fleets sized before, and "Load into the fleet editor" said "press Size
    first". The chart is hidden with the table, and loading says why there is nothing."""
    bench = Workbench.default()
    bench.set_state(bench.state.with_model(preset_source("llama-3.1-70b").fields))
    panel = bench.panel("Size a fleet")
    assert isinstance(panel, SizingPanel) and panel.result is not None
    assert panel.chart.figure.data and panel.chart.layout.display != "none"
    nodes = bench.state.nodes
    panel.tpot.value = "10"
    panel.size_button.click()
    assert "NoFleetMeetsTargets" in panel.problem.value
    assert panel.chart.layout.display == "none" and not panel.chart.figure.data
    assert panel.load_button.disabled
    panel.choose(0)
    assert "no fleet meets the targets" in panel.problem.value.lower()
    assert "press Size first" not in panel.problem.value
    assert bench.state.nodes == nodes
    panel.tpot.value = "0"
    panel.size_button.click()
    assert panel.chart.layout.display != "none" and panel.chart.figure.data
    assert not panel.load_button.disabled


def test_a_search_too_large_is_answered_in_the_page_s_words(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SizingTooLarge told a page user to use the command line's --kinds."""
    from planner import limits

    monkeypatch.setattr(limits, "MAX_SIZING_QUEUE", 3)
    panel = SizingPanel(_model(), catalog=_catalog())
    assert "SizingTooLarge" in panel.problem.value
    assert "--kinds" not in panel.problem.value
    assert "untick kinds in the catalog" in panel.problem.value


@pytest.mark.parametrize(("box", "text", "expected"), [
    ("tolerate", "-3", "survive losing: cannot be negative (got '-3')"),
    ("tolerate", "99", "survive losing: must be at most 16 (got '99')"),
    ("min_lanes", "0", "min lanes: must be at least 1 (got '0')"),
    ("tpot", "fast", "TPOT target: must be a whole number (got 'fast')"),
    ("top", "100000", "show: must be at most 1,000 (got '100000')"),
])
def test_a_target_out_of_range_is_refused_by_name(box: str, text: str, expected: str) -> None:
    from html import unescape

    panel = SizingPanel(_model(), catalog=_catalog(), compute=False)
    getattr(panel, box).value = text
    panel.compute()
    assert panel.result is None
    assert expected in unescape(panel.problem.value)


def test_the_panel_sizes_a_preset_at_the_size_of_the_file_typed() -> None:
    """The file size typed beside a preset is the model the panel sizes, and a size typed
    after sizing marks the fleets shown as sized for other numbers."""
    bench = Workbench.default()
    bench.model_editor.preset.value = "gpt-oss-20b"
    panel = bench.panel("Size a fleet")
    assert isinstance(panel, SizingPanel)
    for row in panel.catalog_rows:
        row.use.value = row.gpu.kind == "rtx-4090"
    panel.size_button.click()
    own = panel.result.fleets[0].estimated_tpot_ms
    bench.model_editor.file_size.value = "11.27 GiB"
    assert "the model's numbers changed" in unescape(panel.stale.value)
    panel.size_button.click()
    # The default fleet's KV cache type (q8_0) is kept for the preset chosen.
    stored = load_preset("gpt-oss-20b", kv_cache_type=bench.state.model.kv_cache_type
                         ).stored_in(round(11.27 * 2**30))
    expected = size_fleet(stored, panel.catalog(), panel.targets(),
                          top=panel.shown_count())
    assert panel.result.fleets == expected.fleets
    assert panel.result.fleets[0].estimated_tpot_ms < own
