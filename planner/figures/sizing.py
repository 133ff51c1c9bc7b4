"""The sizing chart: cost per hour against context for the fleets found, coloured by the
estimated TPOT, with the Pareto front drawn through."""

from __future__ import annotations

import textwrap

import plotly.graph_objects as go

from planner.figures._style import TPOT_COLOURS, axis, base_layout, plotly_text
from planner.sizing import SizedFleet, SizingResult
from planner.units import format_milliseconds

# Characters a subtitle line of 11 px text may hold and stay within the narrowest chart the
# pages draw (360 px wide).
SUBTITLE_LINE_CHARACTERS = 58


def _hover(fleet: SizedFleet) -> str:
    tpot = fleet.estimated_tpot_ms
    speed = "no estimate" if tpot is None else (
        f"estimated TPOT {format_milliseconds(tpot, estimated=True)}, "
        f"{fleet.tokens_per_s:,.1f} tokens/s (estimate)")
    return (f"{plotly_text(fleet.label)}<br>USD {fleet.cost_per_hour_usd:,.2f}/h, "
            f"context {fleet.plan.context_length:,}, {fleet.plan.stage_count} stages<br>"
            f"{speed}")


def sizing_figure(result: SizingResult) -> go.Figure:
    """Every fleet of ``result`` (cheapest and Pareto front) as a point: x the cost per
    hour, y the plan's context, colour the estimated TPOT; the front joined by a line."""
    fleets = list({f.counts: f for f in (*result.fleets, *result.pareto)}.values())
    tpots = [f.estimated_tpot_ms for f in fleets]
    known = [t for t in tpots if t is not None]
    # One TPOT for every fleet is said in the legend: a colour bar over one value would
    # show a range (68.6 .. 69.4) that no fleet has.
    spread = bool(known) and max(known) - min(known) >= 0.05
    same = (f", estimated TPOT {format_milliseconds(known[0], estimated=True)}"
            if known and not spread and len(known) == len(tpots) else "")
    figure = go.Figure()
    # Markers as well as the line: a front of one fleet draws no line, and the legend
    # shows what the front's points look like.
    figure.add_trace(go.Scatter(
        x=[f.cost_per_hour_usd for f in result.pareto],
        y=[f.plan.context_length for f in result.pareto],
        mode="lines+markers", line={"color": "#777777", "dash": "dot", "shape": "hv",
                                    "width": 2},
        marker={"symbol": "diamond-open", "size": 17, "color": "#777777",
                "line": {"width": 2}},
        name="Pareto front", hoverinfo="skip"))
    marker: dict[str, object] = {"size": 11, "line": {"width": 1, "color": "#333333"}}
    if spread:
        marker.update(color=[t if t is not None else max(known) for t in tpots],
                      showscale=True, **TPOT_COLOURS)
    else:
        marker["color"] = "#3b528b"
    figure.add_trace(go.Scatter(
        x=[f.cost_per_hour_usd for f in fleets],
        y=[f.plan.context_length for f in fleets],
        mode="markers", name=f"fleets{same}", marker=marker,
        text=[_hover(f) for f in fleets], hovertemplate="%{text}<extra></extra>"))
    # Contexts are powers of two far apart: a log axis, labelled at each context a fleet
    # reaches (plotly's own log ticks, 30k .. 2M, leave 262,144 unreadable).
    contexts = sorted({f.plan.context_length for f in fleets})
    figure.update_layout(**base_layout(
        "Cheapest fleets: cost per hour against context",
        xaxis=axis(title={"text": "cost per hour (USD)"}, rangemode="tozero"),
        yaxis=axis(title={"text": "context length (tokens)"}, type="log",
                   tickvals=contexts, ticktext=[f"{c:,}" for c in contexts]),
        height=440))
    if known and result.error_note:
        # The estimate's measured error goes with the chart wherever it is shown.
        # What it is, then each kind's group, each on lines short enough for the narrowest
        # chart (plotly does not wrap a subtitle: one line of three groups ran past it).
        head, groups = plotly_text(result.error_note).split(": ", 1)
        lines = [line for part in (f"{head}:", *groups.split("; "))
                 for line in textwrap.wrap(part, SUBTITLE_LINE_CHARACTERS)]
        # The legend is at the figure's foot (base_layout): at the top it covered the
        # note's second line on a page narrower than the note.
        # The title and its note from the figure's top down, and a margin that leaves
        # room under the note's last line (centred in it, the note met the chart).
        figure.update_layout(title_subtitle={"text": "<br>".join(lines),
                                             "font": {"size": 11, "color": "#555555"}},
                             title_yref="container", title_y=1, title_yanchor="top",
                             title_pad={"t": 14},
                             margin={"t": 60 + 15 * len(lines)},
                             height=460 + 15 * len(lines))
    return figure
