"""The Availability panel and its figures, without a browser."""

from __future__ import annotations

import json
from html import unescape
from itertools import pairwise
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import pytest

from planner.availability import NodeReliability, fleet_availability, spares_table
from planner.cli import main as cli_main
from planner.figures.availability import (
    CONTEXT_TRACES,
    TIMELINE_TRACES,
    context_distribution_figure,
    timeline_figure,
)
from planner.fleet import load_fleet
from planner.simulation import simulate
from planner.workbench import Workbench
from planner.workbench.availability_panel import AvailabilityPanel

FIVE = Path(__file__).resolve().parents[1] / "data" / "fleets" / "qwen480b-5x80.toml"
FLAKY = NodeReliability(annual_failure_rate=3.0, repair_hours=300)


def test_figures_show_the_numbers() -> None:
    request = load_fleet(FIVE).to_request()
    result = fleet_availability(request, FLAKY, min_context=262144)
    figure = context_distribution_figure(result, 262144)
    assert isinstance(figure, go.Figure)
    assert [trace.name for trace in figure.data] == list(CONTEXT_TRACES)
    good, bad = figure.data
    assert list(good.x) == ["262,144"] and list(good.y) == [result.availability]
    assert set(bad.x) == {"no plan", "65,536"}
    assert sum(good.y) + sum(bad.y) == sum(result.context_distribution.values())
    # The probability axis is labelled once per power of ten, in percent, down to the
    # rarest state shown (plotly's own log labels, "2e-5 3e-5 ...", crowded each other).
    yaxis = figure.layout.yaxis
    smallest = min(p for p in result.context_distribution.values() if p > 0)
    assert yaxis.tickvals[0] <= smallest < yaxis.tickvals[0] * 10
    assert yaxis.tickvals[-1] == 1.0 and yaxis.ticktext[-1] == "100%"
    assert all(b == pytest.approx(a * 10) for a, b in pairwise(yaxis.tickvals))
    assert all(text.endswith("%") and "e" not in text for text in yaxis.ticktext)
    assert len(yaxis.ticktext) == len(set(yaxis.ticktext))

    year = simulate(request, FLAKY, seed=1, min_context=65536)
    timeline = timeline_figure(year)
    assert [trace.name for trace in timeline.data] == list(TIMELINE_TRACES)
    line, _, replans = timeline.data
    assert max(line.x) == 8760 and set(line.y) <= {0, 65536, 262144}
    assert len(replans.x) == year.replans
    assert timeline.layout.title.subtitle.text.endswith(f"{year.replans:,} re-plans")
    # Seed 5 over 200 hours: one failure, repaired after the horizon.
    short = simulate(request, FLAKY, seed=5, min_context=65536, horizon_hours=200)
    assert short.replans == 1
    assert timeline_figure(short).layout.title.subtitle.text.endswith(", 1 re-plan")
    assert timeline.layout.title.text == "Simulated 1 year, seed 1"
    two = simulate(request, FLAKY, seed=1, min_context=65536, horizon_hours=2 * 8760)
    assert timeline_figure(two).layout.title.text == "Simulated 2 years, seed 1"


def test_panel_follows_the_workbench_fleet() -> None:
    bench = Workbench.from_fleet(FIVE)
    panel = AvailabilityPanel(bench, annual_failure_rate=3.0, repair_hours=300)
    request = bench.evaluation.request
    expected = fleet_availability(request, FLAKY, min_context=65536)
    assert f"{expected.availability:.4%}" in panel.summary.value
    assert panel.problem.value == ""
    spares = spares_table(request, FLAKY, min_context=65536, max_spares=8)
    assert list(panel.view.spares["spare_count"]) == list(spares["spare_count"])
    assert panel.view.spares["spare_count"].iloc[-1] >= 1  # 99.99 % needs a spare
    assert "99.99%" in panel.spares.value
    assert [t.name for t in panel.context_chart.figure.data] == list(CONTEXT_TRACES)
    assert panel.timeline_chart.figure.data[0].name == "context"
    # Settings change what is computed.
    panel.min_context.value = "262144"
    panel.afr.value = "0.119"
    panel.repair.value = "72"
    panel.compute()
    again = fleet_availability(request, NodeReliability(), min_context=262144)
    assert f"{again.availability:.4%}" in panel.summary.value


FLEETS = sorted(FIVE.parent.glob("*.toml"))


def _cli(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    code = cli_main(["availability", str(path), "--json"])
    captured = capsys.readouterr()
    if code != 0:
        return {"error": captured.err.strip()}
    return json.loads(captured.out)


def _cli_text(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    cli_main(["availability", str(path)])
    return capsys.readouterr().out


@pytest.mark.parametrize("path", FLEETS, ids=lambda path: path.stem)
def test_the_panel_gives_what_planner_availability_gives(
        path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each node's figures as the command line takes them (its own, its catalog kind's,
    the defaults): the panel once applied one rate to every node (99.6097 % for the home
    lab where the command line says 99.092308 %)."""
    panel = AvailabilityPanel(Workbench.from_fleet(path))
    expected = _cli(capsys, path)
    if "error" in expected:
        # The same refusal, in the same words.
        assert panel.view is None
        said = expected["error"].removeprefix(f"planner: {path}: ").removeprefix("planner: ")
        said = said.split("; see 'planner plan'")[0]
        assert unescape(panel.problem.value).count(said) == 1, (said, panel.problem.value)
        return
    result = panel.view.result
    assert result.to_dict()["availability"] == expected["availability"]
    assert result.to_dict()["availability_lower"] == expected["availability_lower"]
    shown = (f"{result.availability:.4%}" if result.exact
             else f"{result.availability_lower:.4%}")
    assert shown in panel.summary.value
    # Where the plan of the whole fleet already misses the targets, both say so.
    said = _cli_text(capsys, path)
    missed = "with every node up, the plan misses the targets" in said
    assert missed == ("With every node up, the plan misses the targets"
                      in unescape(panel.summary.value)), (said, panel.summary.value)


def test_the_panel_shows_where_each_nodes_figures_came_from(tmp_path: Path) -> None:
    text = FIVE.read_text().replace('id = "qwen-node"\ncount = 5',
                                    'id = "qwen-node"\ncount = 4')
    text += ('\n[[nodes]]\nid = "own"\nvram = "80 GiB"\nannual_failure_rate = 2.5\n'
             'gpu = "h100-sxm-80gb"\n'
             '\n[[nodes]]\nid = "odd"\nvram = "70 GiB"\n')
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    panel = AvailabilityPanel(Workbench.from_fleet(path))
    figures = panel.view.figures
    assert figures["own"].reliability.annual_failure_rate == 2.5
    assert figures["own"].annual_failure_rate_source == "the node's own"
    assert figures["own"].repair_hours_source == "catalog: h100-sxm-80gb"
    # 80 GiB is exactly the A100 80GB's memory and no other kind's.
    assert figures["qwen-node-00"].kind == "a100-80gb"
    assert figures["odd"].kind is None
    assert figures["odd"].annual_failure_rate_source == "default"
    table = unescape(panel.figures.value)
    assert "its fleet-file entry" in table and "catalog: h100-sxm-80gb" in table
    assert "default" in table
    panel.repair.value = "12"
    panel.compute()
    assert panel.view.figures["own"].repair_hours_source == "fleet-wide"
    assert "typed here for every node" in unescape(panel.figures.value)


def test_the_panel_says_when_the_fleet_changed_under_it() -> None:
    bench = Workbench.from_fleet(FIVE)
    panel = bench.panel("Availability")
    assert isinstance(panel, AvailabilityPanel) and panel.view is not None
    assert not panel.out_of_date
    before = panel.view.result
    bench.remove_node(4)
    assert panel.out_of_date
    assert "node qwen-node-04 removed" in unescape(panel.stale.value)
    # The note says why and offers to compute again, right there.
    assert panel.stale.layout.display is None
    assert panel.stale.button.description == "Compute again"
    panel.stale.button.click()
    assert not panel.out_of_date and panel.stale.layout.display == "none"
    assert list(panel.view.figures) == [f"qwen-node-0{i}" for i in range(4)]
    assert panel.view.result != before
    # A fleet that cannot be read shows no figures of the one before.
    bench.fleet_editor.row_editors[0].vram.value = "80 GX"
    assert panel.out_of_date and "cannot be read" in panel.stale.value
    panel.compute()
    assert panel.view is None and panel.results.layout.display == "none"


def test_a_problem_goes_out_of_date_with_its_fleet() -> None:
    bench = Workbench.from_fleet(FIVE)
    panel = bench.panel("Availability")
    panel.min_context.value = "1,000,000"
    panel.compute_button.click()
    assert panel.view is None and panel.problem.value and not panel.out_of_date
    bench.remove_node(4)
    # The problem was about the five-node fleet: the panel says that changed.
    assert panel.out_of_date and "node qwen-node-04 removed" in unescape(panel.stale.value)
    panel.min_context.value = ""
    panel.stale.button.click()
    assert not panel.out_of_date and panel.problem.value == ""
    assert list(panel.view.figures) == [f"qwen-node-0{i}" for i in range(4)]


def test_the_minimum_context_box_shows_the_context_the_figures_use() -> None:
    """The box said "min context 0" while the summary said "≥ 65,536": a blank box now
    shows, greyed, the floor the figures were computed at, and a typed context is read
    as the other context boxes read it ("128k")."""
    bench = Workbench.from_fleet(FIVE)
    panel = bench.panel("Availability")
    panel.compute()
    assert panel.min_context.value == ""
    assert panel.min_context.placeholder == "65,536"
    assert "context ≥ 65,536" in panel.summary.value
    panel.min_context.value = "256k"
    panel.compute()
    assert "context ≥ 262,144" in panel.summary.value
    panel.min_context.value = "lots"
    panel.compute()
    assert panel.view is None and "min context" in panel.problem.value


def test_the_sizing_panel_shows_the_context_it_sized_for() -> None:
    from planner.workbench.sizing_panel import SizingPanel

    bench = Workbench.from_fleet(FIVE)
    panel = SizingPanel(bench, top=1)
    assert panel.result is not None
    assert panel.min_context.placeholder == f"{panel.result.minimum_context:,}"
    assert f"context ≥ {panel.result.minimum_context:,}" in panel.summary.value


def test_spares_are_priced_as_the_kind_the_nodes_are() -> None:
    """The page's spares table said "no price: the fleet's nodes name no GPU kind" while
    the panel below it listed every node as an a100-80gb and the workbench priced them:
    a spare copies the fleet's most common node, and costs what its kind costs, through
    the Python API and in the panel alike."""
    from planner.models import load_gpu_catalog

    price = next(gpu.price_per_hour for gpu in load_gpu_catalog() if gpu.kind == "a100-80gb")
    assert price is not None
    request = load_fleet(FIVE).to_request()
    spares = spares_table(request, FLAKY, min_context=65536, max_spares=8)
    assert list(spares["cost_per_hour"]) == pytest.approx(
        [count * price for count in spares["spare_count"]])
    bench = Workbench.from_fleet(FIVE)
    panel = AvailabilityPanel(bench, annual_failure_rate=3.0, repair_hours=300)
    assert set(panel.view.figures[n].kind for n in panel.view.figures) == {"a100-80gb"}
    assert list(panel.view.spares["cost_per_hour"]) == list(spares["cost_per_hour"])
    assert f"USD {spares['cost_per_hour'].iloc[-1]:,.2f}" in unescape(panel.spares.value)
    assert f"USD {price * 5:,.2f}/h" in bench.evaluation.summary()


@pytest.mark.parametrize("distribution", [
    {262_144: 1.0},                       # nothing ever fails: one state
    {262_144: 0.6, 65_536: 0.4},          # both above 10 %: plotly's range held no decade
    {262_144: 0.99, 65_536: 0.0099, 0: 1e-4},
])
def test_the_probability_axis_shows_at_least_two_decades(distribution: dict) -> None:
    """The context chart's log axis could show one tick: its range, plotly's own, fitted
    the bars and left out the decades labelled."""
    import math

    from planner.availability import AvailabilityResult

    result = AvailabilityResult(availability=1.0, availability_lower=1.0,
                                availability_upper=1.0, states_evaluated=len(distribution),
                                context_distribution=distribution)
    yaxis = context_distribution_figure(result, 65_536).layout.yaxis
    low, high = yaxis.range
    shown = [t for t in yaxis.tickvals if low <= math.log10(t) <= high]
    assert len(shown) >= 2 and shown == list(yaxis.tickvals), (yaxis.range, yaxis.tickvals)
    assert all(low <= math.log10(p) <= high for p in distribution.values())
