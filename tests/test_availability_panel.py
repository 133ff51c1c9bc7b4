"""The Availability panel and its figures, without a browser."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

from planner.availability import NodeReliability, fleet_availability, spares_table
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

    year = simulate(request, FLAKY, seed=1, min_context=65536)
    timeline = timeline_figure(year)
    assert [trace.name for trace in timeline.data] == list(TIMELINE_TRACES)
    line, _, replans = timeline.data
    assert max(line.x) == 8760 and set(line.y) <= {0, 65536, 262144}
    assert len(replans.x) == year.replans
    assert f"{year.replans} re-plans" in timeline.layout.title.text


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
    panel.min_context.value = 262144
    panel.afr.value = 0.119
    panel.repair.value = 72
    panel.compute()
    again = fleet_availability(request, NodeReliability(), min_context=262144)
    assert f"{again.availability:.4%}" in panel.summary.value
