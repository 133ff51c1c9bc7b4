"""The look every figure shares: white background, light grid, one font."""

from __future__ import annotations

from html import escape
from typing import Any

from planner._validate import inert_text

FONT = {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12}


TPOT_COLOURS: dict[str, Any] = {"colorscale": "Viridis", "reversescale": True,
                                "colorbar": {"title": {"text": "estimated<br>TPOT ms"},
                                             "thickness": 12}}
"""How every chart colours an estimated TPOT: the faster, the brighter."""

FOOT_LEGEND: dict[str, Any] = {"orientation": "h", "yref": "container", "y": 0,
                               "yanchor": "bottom", "x": 0, "xanchor": "left",
                               "traceorder": "normal"}
"""A legend at the foot of the figure, below the axis title, in trace order: plotly makes
room for it, so however many rows it wraps to it covers neither the chart nor its title."""


def axis(**extra: Any) -> dict[str, Any]:
    return {"gridcolor": "#e8e8e8", "zerolinecolor": "#cccccc", "linecolor": "#bbbbbb",
            "automargin": True, **extra}


def base_layout(title: str, **extra: Any) -> dict[str, Any]:
    """Layout with the shared look; ``extra`` adds to or overrides it (e.g. ``margin``)."""
    # Plain colours rather than a named template: applying a template costs more than
    # building the rest of the figure, and the workbench rebuilds figures on every edit.
    return {
        # 15 px: a title of the default 17 px was wider than a chart in JupyterLab at
        # 1024 px.
        "title": {"text": title, "x": 0.01, "xanchor": "left", "font": {"size": 15}},
        "plot_bgcolor": "white",
        "paper_bgcolor": "white",
        "font": FONT,
        "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
        # Under the chart: above it, beside the title, a legend covered the title of a
        # chart narrower than the two.
        "legend": FOOT_LEGEND,
        **extra,
    }


def plotly_text(text: str) -> str:
    """A user's string (a node id, a reason) as literal text in a plotly label.

    Plotly reads a subset of HTML in every text it draws (tick labels, hover text,
    annotations): ``<a href>`` becomes a live link and ``<span style>`` restyles the chart.
    Escaped, the string is drawn exactly as typed, but for control characters and
    bidirectional overrides, drawn ``?`` as everywhere else (they would reorder the label).
    """
    return escape(inert_text(text), quote=False)
