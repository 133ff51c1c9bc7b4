"""Chart: one text/html display per figure, plotly.js once per kernel, no resend of an
unchanged figure. What the browser draws from it is tested in the browser tests."""

from __future__ import annotations

import json
import re
from html import unescape

import plotly.graph_objects as go

from planner.workbench.chart import PLOT_CLASS, Chart, figure_html, plotly_loader


def _bars(n: int, title: str = "bars") -> go.Figure:
    return go.Figure(go.Bar(x=list(range(n)), y=list(range(n))),
                     layout={"title": {"text": title}, "height": 300})


def _shown_figure(chart: Chart) -> dict:
    (output,) = chart.output.outputs
    html = output["data"]["text/html"]
    match = re.search(r'data-figure="([^"]*)"', html)
    assert match is not None
    return json.loads(unescape(match.group(1)))


def test_show_replaces_the_one_output_with_the_new_figure() -> None:
    chart = Chart(_bars(3), css_class="my-chart")
    assert "my-chart" in chart._dom_classes
    assert _shown_figure(chart)["data"][0]["x"] == [0, 1, 2]
    chart.show(_bars(5))
    assert len(chart.output.outputs) == 1
    assert _shown_figure(chart)["data"][0]["x"] == [0, 1, 2, 3, 4]
    assert chart.figure.data[0].x == (0, 1, 2, 3, 4)
    assert chart.draws == 2


def test_an_unchanged_figure_is_not_sent_again() -> None:
    chart = Chart(_bars(3))
    chart.show(_bars(3))
    assert chart.draws == 1
    chart.show(_bars(3, title="other"))
    assert chart.draws == 2


def test_text_that_looks_like_markup_stays_inside_the_attribute() -> None:
    evil = '"><script>alert(1)</script>'
    html = figure_html(_bars(1, title=evil))
    assert "<script>alert" not in html
    assert html.count("<script>") == 1
    chart = Chart(_bars(1, title=evil))
    assert _shown_figure(chart)["layout"]["title"]["text"] == evil


def test_every_chart_shares_one_plotly_loader() -> None:
    first, second = Chart(), Chart()
    assert first.children[0] is second.children[0] is plotly_loader()
    (output,) = plotly_loader().outputs
    html = output["data"]["text/html"]
    assert "window.Plotly = Plotly" in html
    # The source sits in one inert text/plain script and cannot end it early.
    assert html.count("</script>") == 2
    assert f'class="{PLOT_CLASS}"' in figure_html(_bars(1))
