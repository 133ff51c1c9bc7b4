"""Plotly charts that redraw in every Jupyter front-end: :class:`Chart`.

Every chart of the workbench, the fence explorers and the panels is a :class:`Chart`:

    chart = Chart(css_class="wb-memory-figure")
    chart.show(memory_figure(request, plan))   # call again on every edit

A chart is built from core ipywidgets only, so it works wherever ipywidgets does
(JupyterLab, Notebook 7, nbclassic, Voilà) without a front-end extension of its own. Each
``show`` replaces the outputs of a ``widgets.Output`` with one ``text/html`` display: a
``<div>`` holding the figure's JSON and a short script that draws it with
``Plotly.newPlot`` once plotly.js is on the page. plotly.js itself comes once per kernel
from the ``Output`` returned by :func:`plotly_loader`, which every chart shows (it draws
nothing and loads plotly.js only when the page has none yet).

Why not ``plotly.graph_objects.FigureWidget``: from plotly 6 it is an anywidget, whose
front-end code needs a newer widget manager than Voilà 0.5 ships, so in Voilà it draws
once and never again.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go
import plotly.offline

PLOT_CLASS = "planner-chart-plot"
"""CSS class of the ``<div>`` plotly draws into; its ``.data`` and ``.layout`` are the
figure on screen (what the browser tests read)."""

CONFIG: dict[str, Any] = {"displaylogo": False, "responsive": False}

# Loads plotly.js once per page. Every chart shows the one loader, so its source is kept
# as inert text (not parsed again for each chart) and run only when the page has no
# ``window.Plotly``; ``define``, ``module`` and ``exports`` are shadowed so that a page
# with RequireJS (nbclassic) or a CommonJS shim still gets ``window.Plotly``.
_LOADER = """<script type="text/plain">{source}</script><script>
(function () {{
  var source = document.currentScript && document.currentScript.previousElementSibling;
  if (!source) {{ return; }}
  if (!window.Plotly && !window.__plannerPlotlyLoading) {{
    window.__plannerPlotlyLoading = true;
    var script = document.createElement("script");
    script.textContent = "(function (define, module, exports) {{\\n" + source.textContent +
      "\\n}}).call(window);";
    document.head.appendChild(script);
  }}
  source.textContent = "";
}})();
</script>"""

# Draws the figure in the <div> just before this script once plotly.js is there and the
# <div> is on the page with a real width (front-ends may run the script before attaching
# the output, or while its box has no width yet: a figure drawn then keeps a width of a
# few pixels). A ResizeObserver draws it as soon as it has a width (a closed section
# opened later), keeps it as wide as its box, and frees it once it is replaced.
_DRAW = """<div class="{plot_class}" style="width:100%;height:{height}px" data-figure="{figure}">
</div><script>
(function () {{
  var script = document.currentScript;
  var div = script && script.previousElementSibling;
  if (!div) {{ return; }}
  var config = {config};
  var deadline = Date.now() + 120000;
  var drawnWidth = 0;
  var observer = null;
  function check() {{
    if (drawnWidth && !div.isConnected) {{
      if (observer) {{ observer.disconnect(); }}
      window.Plotly.purge(div);
      return;
    }}
    var width = div.clientWidth;
    if (!window.Plotly || !div.isConnected || width < {min_width}) {{ return; }}
    if (!drawnWidth) {{
      var figure = JSON.parse(div.getAttribute("data-figure"));
      window.Plotly.newPlot(div, figure.data || [], figure.layout || {{}}, config);
      drawnWidth = width;
    }} else if (width !== drawnWidth) {{
      drawnWidth = width;
      window.Plotly.Plots.resize(div);
    }}
  }}
  if (window.ResizeObserver) {{
    observer = new ResizeObserver(check);
    observer.observe(div);
  }}
  (function poll() {{
    check();
    if (!drawnWidth && Date.now() < deadline) {{ setTimeout(poll, 30); }}
  }})();
}})();
</script>"""

MIN_DRAW_WIDTH = 40
"""A figure is drawn once its box is at least this many pixels wide."""

CHART_BASIS = "460px"
"""A chart's width in a row of charts (it grows to fill the row, and wraps below)."""
CHART_MIN_WIDTH = "360px"
"""The narrowest a chart in a row gets before it wraps onto a line of its own."""

_loader: widgets.Output | None = None


def plotly_loader() -> widgets.Output:
    """The one ``Output`` (per kernel) that puts plotly.js on the page; charts show it."""
    global _loader
    if _loader is None:
        source = plotly.offline.get_plotlyjs().replace("</script", "<\\/script")
        _loader = widgets.Output(layout=widgets.Layout(height="0px", overflow="hidden"))
        _loader.add_class("planner-plotly-loader")
        _loader.outputs = ({
            "output_type": "display_data",
            "data": {"text/html": _LOADER.format(source=source),
                     "text/plain": ""},
            "metadata": {},
        },)
    return _loader


def figure_html(figure: go.Figure) -> str:
    """The ``<div>`` and script that draw ``figure`` (what :meth:`Chart.show` displays)."""
    height = figure.layout.height or 450
    return _DRAW.format(plot_class=PLOT_CLASS, height=int(height),
                        figure=escape(figure.to_json(), quote=True),
                        config=json.dumps(CONFIG), min_width=MIN_DRAW_WIDTH)


class Chart(widgets.VBox):
    """A plotly figure on screen; :meth:`show` a new figure to redraw it.

    ``figure`` is the figure last shown, so code and tests read what the chart holds
    without a browser (``chart.figure.data``, ``chart.figure.layout``).
    """

    def __init__(self, figure: go.Figure | None = None, *,
                 css_class: str | None = None) -> None:
        self.output = widgets.Output(layout=widgets.Layout(width="100%"))
        self.output.add_class("planner-chart-output")
        self.figure = go.Figure()
        self.draws = 0
        """How many times the chart was sent to the page (unchanged figures are not)."""
        self._shown: str | None = None
        # The chart's width comes from its container, never from what it holds: a box
        # sized by its content shrinks to nothing while its figure is being replaced.
        super().__init__([plotly_loader(), self.output],
                         layout=widgets.Layout(width="100%", min_width="0"))
        self.add_class("planner-chart")
        if css_class:
            self.add_class(css_class)
        if figure is not None:
            self.show(figure)

    def show(self, figure: go.Figure) -> None:
        """Draw ``figure`` in place of the current one (nothing is sent if it is the same)."""
        html = figure_html(figure)
        self.figure = figure
        if html == self._shown:
            return
        self._shown = html
        self.draws += 1
        # Setting ``outputs`` directly (rather than capturing ``display`` with ``with
        # self.output``) works from widget callbacks in every front-end.
        self.output.outputs = ({
            "output_type": "display_data",
            "data": {"text/html": html, "text/plain": _title(figure)},
            "metadata": {},
        },)


def chart_row(*children: widgets.Widget) -> widgets.HBox:
    """Charts (and other widgets) side by side, wrapping onto more lines in a narrow
    window; each chart takes an equal share of the row, at least
    :data:`CHART_MIN_WIDTH`, and its own height (not stretched to a taller
    neighbour's, which left blank space below a short chart)."""
    for child in children:
        if isinstance(child, Chart):
            child.layout.width = None
            child.layout.flex = f"1 1 {CHART_BASIS}"
            child.layout.min_width = CHART_MIN_WIDTH
    return widgets.HBox(list(children),
                        layout=widgets.Layout(flex_flow="row wrap", width="100%",
                                              align_items="flex-start"))


def _title(figure: go.Figure) -> str:
    title = figure.layout.title.text
    return f"chart: {title}" if title else "chart"
