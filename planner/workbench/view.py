"""Output widgets: the plan summary, problems, warnings, figures and tables.

:class:`PlanView` shows one :class:`~planner.workbench.evaluation.Evaluation`. Figures are
plotly ``FigureWidget`` objects updated in place inside ``batch_update()``, so an edit sends
one small change to the browser instead of a new figure.
"""

from __future__ import annotations

from copy import deepcopy
from html import escape

import ipywidgets as widgets
import pandas as pd
import plotly.graph_objects as go

from planner.figures import (
    candidate_shapes,
    candidates_figure,
    layer_ranges_figure,
    memory_figure,
)
from planner.units import format_bytes
from planner.workbench.evaluation import Evaluation

STYLE = """
<style>
.wb-root { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; }
.wb-root h3 { margin: 10px 0 4px 0; font-size: 15px; }
.wb-summary-box { font-size: 17px; font-weight: 600; padding: 6px 10px;
  background: #eef4fb; border-left: 4px solid #4c72b0; }
.wb-error-box { padding: 6px 10px; background: #fdecea; border-left: 4px solid #c44e52;
  color: #7a1f1f; white-space: pre-wrap; }
.wb-warning-box { padding: 4px 10px; background: #fff7e0; border-left: 4px solid #e0a800; }
.wb-diagnosis-box { padding: 4px 10px; }
.wb-message-box { padding: 4px 10px; color: #245; }
.wb-table { border-collapse: collapse; font-size: 12px; }
.wb-table th, .wb-table td { padding: 2px 8px; border-bottom: 1px solid #ddd;
  text-align: right; white-space: nowrap; }
.wb-table th { background: #f4f4f4; }
.wb-table td.wb-text, .wb-table th.wb-text { text-align: left; }
.wb-table tr.wb-selected td { background: #fbe9ea; font-weight: 600; }
.wb-table tr.wb-infeasible td { color: #999; }
</style>
"""


def _cell(value: object, *, text: bool = False) -> str:
    css = " class='wb-text'" if text else ""
    return f"<td{css}>{escape(str(value))}</td>"


def _table(headers: list[tuple[str, bool]], rows: list[tuple[str, list[str]]]) -> str:
    head = "".join(f"<th{' class=wb-text' if text else ''}>{escape(name)}</th>"
                   for name, text in headers)
    body = "".join(f"<tr class='{css}'>{''.join(cells)}</tr>" for css, cells in rows)
    return f"<table class='wb-table'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def stage_table_html(stages: pd.DataFrame) -> str:
    """The stage table (:func:`planner.stage_usage`) with sizes in human units."""
    headers = [("stage", True), ("node", True), ("layers", False), ("count", False),
               ("weights", False), ("KV cache", False), ("used", False), ("usable", False),
               ("remaining", False)]
    rows = []
    for stage in stages.itertuples(index=False):
        rows.append(("", [
            _cell(stage.stage_id, text=True), _cell(stage.node_id, text=True),
            _cell(f"{stage.layer_start}–{stage.layer_end - 1}" if stage.layer_count > 1
                  else str(stage.layer_start)),
            _cell(stage.layer_count),
            _cell(format_bytes(int(stage.parameter_bytes))),
            _cell(format_bytes(int(stage.kv_cache_bytes))),
            _cell(format_bytes(int(stage.used_bytes))),
            _cell(format_bytes(int(stage.usable_vram_bytes))),
            _cell(format_bytes(int(stage.remaining_bytes))),
        ]))
    return _table(headers, rows)


def _short_nodes(node_ids: tuple[str, ...], shown: int = 6) -> str:
    if len(node_ids) <= shown:
        return ", ".join(node_ids)
    return ", ".join(node_ids[:shown]) + f", … (+{len(node_ids) - shown})"


def candidates_table_html(candidates: pd.DataFrame) -> str:
    """One row per (context, stage count) shape; lanes are folded together."""
    shapes = candidate_shapes(candidates)
    headers = [("context", False), ("stages", False), ("fits", True), ("est. TPOT", False),
               ("target", True), ("smallest margin", False), ("nodes / reason", True),
               ("selected", True)]
    rows = []
    for shape in shapes.itertuples(index=False):
        estimate = shape.estimated_decode_network_ms_per_token
        met = shape.decode_tpot_target_met
        margin = shape.min_remaining_bytes
        css = "wb-selected" if shape.selected else ("" if shape.feasible else "wb-infeasible")
        rows.append((css, [
            _cell(f"{shape.context_length:,}"), _cell(shape.stage_count),
            _cell("yes" if shape.feasible else "no", text=True),
            _cell("" if pd.isna(estimate) else f"{int(estimate)} ms"),
            _cell("" if pd.isna(met) else ("met" if met else "missed"), text=True),
            _cell("" if pd.isna(margin) else format_bytes(int(margin))),
            _cell(_short_nodes(shape.node_ids) if shape.feasible else shape.reason, text=True),
            _cell(f"★ {shape.selected_lanes} lanes" if shape.selected else "", text=True),
        ]))
    return _table(headers, rows)


def sync_figure(widget: go.FigureWidget, figure: go.Figure) -> None:
    """Make ``widget`` show ``figure``, in one batched update when the traces line up."""
    same_traces = len(widget.data) == len(figure.data) and all(
        a.type == b.type for a, b in zip(widget.data, figure.data, strict=True))
    if not same_traces:
        widget.data = ()
        widget.add_traces(list(figure.data))
        widget.layout = figure.layout
        _store_state(widget)
        return
    with widget.batch_update():
        for target, source in zip(widget.data, figure.data, strict=True):
            wanted = source.to_plotly_json()
            for key in target.to_plotly_json():
                if key not in wanted and key not in ("uid", "type"):
                    wanted[key] = None
            target.update(wanted, overwrite=True)
        # The template stays as the widget got it: re-applying one is the slowest part
        # of a plotly update, and the figures never change it.
        wanted_layout = figure.layout.to_plotly_json()
        wanted_layout.pop("template", None)
        for key in widget.layout.to_plotly_json():
            if key not in wanted_layout and key != "template":
                wanted_layout[key] = None
        widget.layout.update(wanted_layout, overwrite=True)
    _store_state(widget)


def _store_state(widget: go.FigureWidget) -> None:
    # Updates reach views already on screen as messages; a view created later (a widget
    # nested in a box is drawn after its cell ran, or again when a page reloads) starts
    # from the synced ``_widget_data`` and ``_widget_layout``, which plotly itself only
    # refreshes when the figure is displayed on its own.
    widget._widget_data = deepcopy(widget._data)
    widget._widget_layout = deepcopy(widget._layout_obj._props)


class PlanView(widgets.VBox):
    """Everything the workbench shows about one evaluation."""

    def __init__(self) -> None:
        self.summary = widgets.HTML()
        self.summary.add_class("wb-summary")
        self.problem = widgets.HTML()
        self.problem.add_class("wb-error")
        self.warnings = widgets.HTML()
        self.warnings.add_class("wb-warnings")
        self.diagnosis = widgets.HTML()
        self.diagnosis.add_class("wb-diagnosis")
        self._shown: dict[int, dict] = {}
        self.memory = go.FigureWidget()
        self.memory.add_class("wb-memory-figure")
        self.layers = go.FigureWidget()
        self.layers.add_class("wb-layers-figure")
        self.candidates = go.FigureWidget()
        self.candidates.add_class("wb-candidates-figure")
        self.stage_table = widgets.HTML()
        self.stage_table.add_class("wb-stage-table")
        self.candidates_table = widgets.HTML(
            layout=widgets.Layout(max_height="320px", overflow="auto"))
        self.candidates_table.add_class("wb-candidates-table")
        self.results = widgets.VBox([
            widgets.HTML("<h3>Stages</h3>"), self.stage_table,
            widgets.HBox([self.memory, self.layers],
                         layout=widgets.Layout(flex_flow="row wrap")),
            widgets.HTML("<h3>Candidates</h3>"),
            widgets.HBox([self.candidates, self.candidates_table],
                         layout=widgets.Layout(flex_flow="row wrap")),
        ])
        super().__init__([self.summary, self.problem, self.warnings, self.diagnosis,
                          self.results])
        self.add_class("wb-plan-view")

    @staticmethod
    def _show(widget: widgets.Widget, visible: bool) -> None:
        widget.layout.display = None if visible else "none"

    def show(self, evaluation: Evaluation) -> None:
        plan = evaluation.plan
        self.summary.value = (f"<div class='wb-summary-box'>Plan: "
                              f"{escape(evaluation.summary())}</div>")
        problem = evaluation.problem
        self.problem.value = ("" if problem is None else
                              f"<div class='wb-error-box'><b>{escape(problem.code)}</b>: "
                              f"{escape(problem.message)}</div>")
        self._show(self.problem, problem is not None)
        self.warnings.value = "".join(
            f"<div class='wb-warning-box'>⚠ {escape(text)}</div>"
            for text in evaluation.warnings)
        self._show(self.warnings, bool(evaluation.warnings))
        lines = []
        if evaluation.limiting is not None:
            lines.append(f"<div><b>Limiting node</b>: {escape(evaluation.limiting.describe())}"
                         "</div>")
        if evaluation.unused:
            items = "".join(f"<li><b>{escape(u.node_id)}</b>: {escape(u.reason)}</li>"
                            for u in evaluation.unused)
            lines.append(f"<div><b>Unused nodes</b> ({len(evaluation.unused)})"
                         f"<ul style='margin:2px 0'>{items}</ul></div>")
        self.diagnosis.value = f"<div class='wb-diagnosis-box'>{''.join(lines)}</div>"
        self._show(self.diagnosis, bool(lines))

        request = evaluation.request
        self._show(self.results, request is not None)
        if request is None:
            return
        self.stage_table.value = (stage_table_html(evaluation.stages)
                                  if evaluation.stages is not None
                                  else "<i>no stages: there is no plan</i>")
        table = evaluation.candidates
        self.candidates_table.value = (candidates_table_html(table) if table is not None
                                       else "<i>no candidates</i>")
        self._draw(self.memory, memory_figure(request, plan))
        self._draw(self.layers, layer_ranges_figure(request, plan))
        self._draw(self.candidates, candidates_figure(
            table if table is not None else pd.DataFrame()))

    def _draw(self, widget: go.FigureWidget, figure: go.Figure) -> None:
        # Many edits leave some figures as they were (the layer ranges when only a spare
        # node changes); sending nothing then saves time and keeps the viewer's zoom.
        shown = figure.to_plotly_json()
        if self._shown.get(id(widget)) == shown:
            return
        sync_figure(widget, figure)
        self._shown[id(widget)] = shown
