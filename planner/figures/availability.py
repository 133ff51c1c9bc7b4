"""Figures of a fleet's availability: the context it gets and a simulated timeline.

Plain ``plotly.graph_objects.Figure`` objects with a fixed set of traces whatever the
input, shown in the workbench through :class:`planner.workbench.chart.Chart`.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from planner.availability import AvailabilityResult
from planner.availability.reliability import HOURS_PER_YEAR
from planner.figures._style import axis, base_layout
from planner.simulation import SimulatedYear
from planner.units import counted

UP_COLOUR = "#4c72b0"
REDUCED_COLOUR = "#dd8452"
DOWN_COLOUR = "#c44e52"

CONTEXT_TRACES = ("meets targets", "below targets")
TIMELINE_TRACES = ("context", "below targets", "re-plans")


def _context_label(context: int) -> str:
    return "no plan" if context == 0 else f"{context:,}"


def context_distribution_figure(result: AvailabilityResult, min_context: int,
                                *, title: str = "Context over failure states") -> go.Figure:
    """Probability of each planned context (bars, log scale: rare states stay visible),
    coloured by whether it meets the minimum context."""
    items = sorted(result.context_distribution.items())
    good = [(c, p) for c, p in items if c and c >= min_context]
    bad = [(c, p) for c, p in items if not c or c < min_context]
    traces = []
    for name, rows, colour in ((CONTEXT_TRACES[0], good, UP_COLOUR),
                               (CONTEXT_TRACES[1], bad, DOWN_COLOUR)):
        traces.append(go.Bar(
            name=name, x=[_context_label(c) for c, _ in rows], y=[p for _, p in rows],
            marker_color=colour, text=[f"{p:.4%}" for _, p in rows], textposition="outside",
            hovertemplate="context %{x}: %{y:.6%}<extra></extra>"))
    order = [_context_label(c) for c, _ in items]
    layout = base_layout(title, height=320, barmode="overlay")
    figure = go.Figure(traces, layout)
    figure.update_xaxes(**axis(title="planned context (tokens)", type="category",
                               categoryorder="array", categoryarray=order))
    ticks = _percent_decades([p for _, p in items])
    # The range is the decades labelled, and room above 100 % for the bars' labels:
    # plotly's own fits the bars, and could leave one labelled decade or none in view.
    figure.update_yaxes(**axis(title="probability", type="log", tickvals=ticks,
                               ticktext=[_percent_text(t) for t in ticks],
                               range=[math.log10(ticks[0]), _LABEL_ROOM_DECADES]))
    return figure


_LABEL_ROOM_DECADES = 0.35
"""How far above 100 % (in powers of ten) the probability axis reaches: room for the
label over a bar of 100 %."""


def _percent_decades(probabilities: list[float]) -> list[float]:
    """One tick per power of ten from the smallest probability shown up to 100 %, at
    least two (a log axis's own labels, 2e-5, 3e-5, ..., crowd each other)."""
    smallest = min((p for p in probabilities if p > 0), default=1.0)
    lowest = min(math.floor(math.log10(smallest)), -1)
    return [10.0 ** k for k in range(lowest, 1)]


def _percent_text(probability: float) -> str:
    """``0.001`` is ``"0.1%"``, ``1e-7`` is ``"0.00001%"``."""
    digits = max(0, -round(math.log10(probability)) - 2)
    return f"{probability * 100:.{digits}f}%"


def timeline_figure(year: SimulatedYear, *, title: str | None = None) -> go.Figure:
    """The planned context through the simulated horizon (a step line), the spans below
    the targets shaded, and a marker at every re-plan (a new coordinator term)."""
    frame = year.timeline
    x: list[float] = []
    y: list[int] = []
    for row in frame.itertuples(index=False):
        x += [row.start_hours, row.end_hours]
        y += [row.context_length, row.context_length]
    down = frame[~frame["meets_targets"]]
    down_x: list[float | None] = []
    down_y: list[int | None] = []
    top = max([year.full_context_length, *y, 1])
    for row in down.itertuples(index=False):
        down_x += [row.start_hours, row.start_hours, row.end_hours, row.end_hours, None]
        down_y += [0, top, top, 0, None]
    terms = year.terms.iloc[1:] if len(year.terms) else year.terms
    context_at = dict(zip(frame["start_hours"], frame["context_length"], strict=True))
    traces = [
        go.Scatter(name=TIMELINE_TRACES[0], x=x, y=y, mode="lines",
                   line={"color": UP_COLOUR, "width": 2},
                   hovertemplate="hour %{x:,.0f}: context %{y:,}<extra></extra>"),
        go.Scatter(name=TIMELINE_TRACES[1], x=down_x, y=down_y, mode="lines",
                   fill="toself", fillcolor="rgba(196,78,82,0.25)",
                   line={"color": DOWN_COLOUR, "width": 0}, hoverinfo="skip"),
        go.Scatter(name=TIMELINE_TRACES[2], x=list(terms["start_hours"]),
                   y=[context_at.get(t, 0) for t in terms["start_hours"]], mode="markers",
                   marker={"color": REDUCED_COLOUR, "size": 8, "symbol": "diamond"},
                   text=[f"term {t}: {m} claim messages" for t, m
                         in zip(terms["term"], terms["claim_messages"], strict=True)],
                   hovertemplate="hour %{x:,.0f}: %{text}<extra></extra>"),
    ]
    years = year.horizon_hours / HOURS_PER_YEAR
    heading = title or f"Simulated {years:g} year{'' if years == 1 else 's'}, seed {year.seed}"
    # What the year came to, under the title: on one line with it, it was wider than a
    # chart in JupyterLab at 1024 px.
    outcome = (f"{year.hours_down:,.1f} h below targets, "
               f"{year.hours_reduced_context:,.1f} h at reduced context, "
               f"{counted(year.replans, 're-plan')}")
    layout = base_layout(heading, height=340, margin={"l": 70, "r": 20, "t": 70, "b": 60})
    layout["title"] = {**layout["title"], "subtitle": {"text": outcome}}
    figure = go.Figure(traces, layout)
    figure.update_xaxes(**axis(title="hours", range=[0, year.horizon_hours]))
    figure.update_yaxes(**axis(title="planned context (tokens)", rangemode="tozero"))
    return figure
