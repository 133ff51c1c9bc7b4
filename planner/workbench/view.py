"""Output widgets: the plan summary, problems, warnings, figures and tables.

:class:`PlanView` shows one :class:`~planner.workbench.evaluation.Evaluation`. Each figure
is a :class:`~planner.workbench.chart.Chart`, redrawn only when its figure changed.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from planner.figures.plan import shape_target_met, shape_tpot
from planner.performance import ESTIMATE_NOTE
from planner.planning import STAGE_PART_NAMES, ChoiceExplanation, ShapeOption
from planner.planning.explain import RULE_TEXT
from planner.reports.tables import shown_stage_parts
from planner.units import format_bytes, format_milliseconds, layer_range
from planner.workbench.chart import Chart, chart_row
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
.wb-hint { font-size: 12px; color: #666; }
.wb-table { border-collapse: collapse; font-size: 12px; }
.wb-table th, .wb-table td { padding: 2px 8px; border-bottom: 1px solid #ddd;
  text-align: right; white-space: nowrap; }
.wb-table th { background: #f4f4f4; }
.wb-table td.wb-text, .wb-table th.wb-text { text-align: left; }
.wb-table tr.wb-selected td { background: #fbe9ea; font-weight: 600; }
.wb-table tr.wb-infeasible td { color: #999; }
.wb-table td.wb-wrap { white-space: normal; min-width: 14em; line-height: 1.35; }
.wb-table .wb-id { white-space: nowrap; }
.wb-sizing-table th { white-space: normal; vertical-align: bottom; }
.wb-sizing-table td.wb-fleet-label { min-width: 12em; }
.wb-estimate-note { font-size: 12px; color: #555; margin-top: 4px; }
.wb-fit { container-type: inline-size; }
@container (max-width: 760px) {
  .wb-fit table.wb-table, .wb-fit .wb-table tbody, .wb-fit .wb-table tr { display: block; }
  .wb-fit .wb-table thead { display: none; }
  .wb-fit .wb-table tr { padding: 3px 0; border-bottom: 1px solid #ddd; }
  .wb-fit .wb-table td { display: inline-block; border: none; padding: 1px 10px 1px 0;
    text-align: left; }
  .wb-fit .wb-table td:empty { display: none; }
  .wb-fit .wb-table td::before { content: attr(data-label) ": "; color: #777;
    font-weight: normal; }
  .wb-fit .wb-table td.wb-wrap { display: block; min-width: 0; }
}
</style>
"""


def _cell(value: object, *, text: bool = False, wrap: bool = False) -> str:
    classes = " ".join(name for name, on in (("wb-text", text), ("wb-wrap", wrap)) if on)
    css = f" class='{classes}'" if classes else ""
    return f"<td{css}>{escape(str(value))}</td>"


def table_html(headers: Sequence[tuple[str, bool]], rows: Sequence[tuple[str, Sequence[str]]],
               css_class: str = "") -> str:
    """A table of ``headers`` (name, and whether its column is text) and ``rows`` (the
    row's class, and its ``<td>`` cells), that fits its box: each cell carries its
    column's name, and in a box narrower than the table needs (JupyterLab at 1024 px)
    each row is drawn as a card of "name: value" pairs (:data:`STYLE`), so no column is
    ever behind a horizontal scroll."""
    head = "".join(f"<th{' class=wb-text' if text else ''}>{escape(name)}</th>"
                   for name, text in headers)
    labels = [f"<td data-label=\"{escape(name, quote=True)}\"" for name, _ in headers]
    body = "".join(f"<tr class='{css}'>"
                   + "".join(cell.replace("<td", label, 1)
                             for cell, label in zip(cells, labels, strict=True)) + "</tr>"
                   for css, cells in rows)
    return (f"<div class='wb-fit'><table class='wb-table {css_class}'><thead><tr>{head}"
            f"</tr></thead><tbody>{body}</tbody></table></div>")


LLAMACPP_STAGE_NOTE = (
    "Under llama.cpp's rule the plan charges the last stage the output head (and a tied "
    "token_embd's copy) and the output device's compute buffer as \"{other}\", and every "
    "node gives up its backend overhead and a pipeline stage's compute buffer before any "
    "layer (\"{reserve}\", outside \"usable\"). The llama.cpp panel lists what llama.cpp "
    "allocates on each device: there the output head counts among the weights and the "
    "compute buffers under compute.").format(other=STAGE_PART_NAMES["other_bytes"],
                                             reserve=STAGE_PART_NAMES["reserved_bytes"])


def stage_table_html(stages: pd.DataFrame, memory_model: str = "design") -> str:
    """The stage table (:func:`planner.stage_usage`) with sizes in human units: a
    recurrent state, what else the memory rule charges a stage and what it reserves on
    its node, where some stage has them (with a note on llama.cpp's parts under its
    ``memory_model``), and the speed estimate's per-stage read and hop times when the
    table has them."""
    estimated = "stage_read_ms" in stages and bool(stages["stage_read_ms"].notna().any())
    records = stages.to_dict("records")
    parts, reserved = shown_stage_parts(records)
    headers = [("stage", True), ("node", True), ("layers", False), ("count", False),
               ("weights", False), ("KV cache", False),
               *((name, False) for _, name in parts), ("used", False),
               *([(STAGE_PART_NAMES["reserved_bytes"], False)] if reserved else []),
               ("usable", False), ("remaining", False)]
    if estimated:
        headers += [("est. read", False), ("est. hop", False)]
    rows = []
    for stage in records:
        extra = ([_cell(format_milliseconds(stage["stage_read_ms"], estimated=True)),
                  _cell(format_milliseconds(stage["hop_ms"], estimated=True))]
                 if estimated else [])
        rows.append(("", [
            _cell(stage["stage_id"], text=True), _cell(stage["node_id"], text=True),
            _cell(layer_range(int(stage["layer_start"]), int(stage["layer_end"]))),
            _cell(stage["layer_count"]),
            _cell(format_bytes(int(stage["parameter_bytes"]))),
            _cell(format_bytes(int(stage["kv_cache_bytes"]))),
            *(_cell(format_bytes(int(stage[column]))) for column, _ in parts),
            _cell(format_bytes(int(stage["used_bytes"]))),
            *([_cell(format_bytes(int(stage["reserved_bytes"])))] if reserved else []),
            _cell(format_bytes(int(stage["usable_vram_bytes"]))),
            _cell(format_bytes(int(stage["remaining_bytes"]))),
            *extra,
        ]))
    note = (f"<div class='wb-hint wb-stage-note'>{escape(LLAMACPP_STAGE_NOTE)}</div>"
            if memory_model == "llamacpp" else "")
    return table_html(headers, rows) + note


def _short_nodes(node_ids: tuple[str, ...], shown: int = 6) -> str:
    """The first ``shown`` node ids as HTML, each kept whole on a line of its own (a
    wrapped cell broke "qwen-node-02" at a hyphen)."""
    ids = ", ".join(f"<span class='wb-id'>{escape(node_id)}</span>"
                    for node_id in node_ids[:shown])
    return ids + (f", … (+{len(node_ids) - shown})" if len(node_ids) > shown else "")


def candidates_table_html(candidates: pd.DataFrame, target_ms: int | None = None,
                          error_note: str = "") -> str:
    """One row per (context, stage count) shape; lanes are folded together. Its TPOT is
    the chart's (:func:`planner.figures.plan.shape_tpot`): the speed estimate where there
    is one, judged against ``target_ms`` (the fleet's TPOT target), with the planner's
    network estimate beside it; else the network estimate and the planner's judgement.
    Under a table of speed estimates, what they are and ``error_note`` (their measured
    error, :meth:`planner.performance.SpeedCalibration.error_note`)."""
    shapes = candidate_shapes(candidates)
    tpots, speed = shape_tpot(shapes)
    judged = shape_target_met(shapes, tpots, speed, target_ms)
    # The time to fill the context does not depend on lanes: one value per shape.
    fill: dict[tuple[int, int], float] = {}
    if "estimated_context_fill_ms" in candidates:
        for row in candidates.itertuples(index=False):
            filled = row.estimated_context_fill_ms
            if not pd.isna(filled):
                fill.setdefault((row.context_length, row.stage_count), float(filled))
    headers = [("context", False), ("stages", False), ("fits", True), ("est. TPOT", False),
               ("target", True), ("smallest margin", False), ("nodes / reason", True),
               ("selected", True)]
    if speed:
        headers.append(("network est.", False))
    if fill:
        headers.append(("est. context fill", False))
    rows = []
    for shape, tpot, met in zip(shapes.itertuples(index=False), tpots, judged, strict=True):
        network = shape.estimated_decode_network_ms_per_token
        margin = shape.min_remaining_bytes
        css = "wb-selected" if shape.selected else ("" if shape.feasible else "wb-infeasible")
        tpot_text = "" if tpot is None else format_milliseconds(tpot, estimated=speed)
        rows.append((css, [
            _cell(f"{shape.context_length:,}"), _cell(shape.stage_count),
            _cell("yes" if shape.feasible else "no", text=True),
            _cell(tpot_text),
            _cell("" if met is None else ("met" if met else "missed"),
                  text=True),
            _cell("" if pd.isna(margin) else format_bytes(int(margin))),
            (f"<td class='wb-text wb-wrap'>{_short_nodes(shape.node_ids)}</td>"
             if shape.feasible else _cell(shape.reason, text=True, wrap=True)),
            _cell(f"★ {shape.selected_lanes} lanes" if shape.selected else "", text=True),
            *([_cell("" if pd.isna(network) else format_milliseconds(network))]
              if speed else []),
            *([_cell(format_milliseconds(value, estimated=True) if (value := fill.get(
                (shape.context_length, shape.stage_count))) is not None else "")]
              if fill else []),
        ]))
    if not (speed or fill):
        return table_html(headers, rows)
    note = " ".join(part for part in (ESTIMATE_NOTE, error_note) if part)
    return (table_html(headers, rows) +
            f"<div class='wb-estimate-note'>est.: {escape(note)}</div>")


def _estimate(option: ShapeOption) -> str:
    estimate = option.estimated_decode_network_ms_per_token
    return "unknown (0 ms)" if estimate is None else format_milliseconds(estimate)


def choice_html(choice: ChoiceExplanation, speed: bool = False) -> str:
    """Why the plan has its shape: the chosen shape, the best shape at each higher context
    with the planner's estimate, and the docs/rules.md §6 rule that ranked it lower. With
    a ``speed`` estimate on the page (the TPOT shown), the planner's figure is named as
    what it is: its network estimate."""
    text = f"<div><b>Why this shape</b>: {escape(choice.summary)}</div>"
    if not choice.higher_contexts:
        return text
    headers = [("shape", True), ("context", False), ("stages", False),
               ("network est." if speed else "est. TPOT", False),
               ("target", True), ("rule that decided", True)]
    options = [("chosen", choice.chosen, "")]
    options += [("higher context", item.option, RULE_TEXT[item.rule])
                for item in choice.higher_contexts]
    rows = []
    for label, option, rule in options:
        met = option.decode_tpot_target_met
        rows.append(("wb-selected" if label == "chosen" else "", [
            _cell(label, text=True), _cell(f"{option.context_length:,}"),
            _cell(option.stage_count), _cell(_estimate(option)),
            _cell("" if met is None else ("met" if met else "missed"), text=True),
            _cell(rule, text=True),
        ]))
    return text + table_html(headers, rows)


class PlanView(widgets.VBox):
    """Everything the workbench shows about one evaluation."""

    def __init__(self) -> None:
        self.summary = widgets.HTML()
        self.summary.add_class("wb-summary")
        self.problem = widgets.HTML()
        self.problem.add_class("wb-error")
        self.warnings = widgets.HTML()
        self.warnings.add_class("wb-warnings")
        self.latency_note = widgets.HTML()
        self.latency_note.add_class("wb-latency-note")
        self.diagnosis = widgets.HTML()
        self.diagnosis.add_class("wb-diagnosis")
        self.memory_chart = Chart(css_class="wb-memory-figure")
        self.layers_chart = Chart(css_class="wb-layers-figure")
        self.candidates_chart = Chart(css_class="wb-candidates-figure")
        self.stage_table = widgets.HTML()
        self.stage_table.add_class("wb-stage-table")
        self.candidates_table = widgets.HTML(
            layout=widgets.Layout(max_height="420px", overflow="auto"))
        self.candidates_table.add_class("wb-candidates-table")
        self.results = widgets.VBox([
            widgets.HTML("<h3>Stages</h3>"), self.stage_table,
            chart_row(self.memory_chart, self.layers_chart),
            widgets.HTML("<h3>Candidates</h3>"),
            # The table under the chart, the page's whole width: beside it, its last
            # columns and its note were past a horizontal scroll.
            self.candidates_chart, self.candidates_table,
        ])
        super().__init__([self.summary, self.problem, self.warnings, self.latency_note,
                          self.diagnosis, self.results])
        self.add_class("wb-plan-view")

    @property
    def memory(self) -> go.Figure:
        """The memory-per-node figure on screen."""
        return self.memory_chart.figure

    @property
    def layers(self) -> go.Figure:
        """The layer-ranges figure on screen."""
        return self.layers_chart.figure

    @property
    def candidates(self) -> go.Figure:
        """The candidates figure on screen."""
        return self.candidates_chart.figure

    @staticmethod
    def _show(widget: widgets.Widget, visible: bool) -> None:
        widget.layout.display = None if visible else "none"

    def show(self, evaluation: Evaluation) -> None:
        plan = evaluation.plan
        headline = (f"Plan: {evaluation.summary()}" if plan is not None
                    else evaluation.summary())
        self.summary.value = f"<div class='wb-summary-box'>{escape(headline)}</div>"
        problem = evaluation.problem
        self.problem.value = ("" if problem is None else
                              f"<div class='wb-error-box'><b>{escape(problem.code)}</b>: "
                              f"{escape(problem.message)}</div>")
        self._show(self.problem, problem is not None)
        self.warnings.value = "".join(
            f"<div class='wb-warning-box'>⚠ {escape(text)}</div>"
            for text in evaluation.warnings)
        self._show(self.warnings, bool(evaluation.warnings))
        # Which latency the nodes without their own are planned at, whichever applies.
        note = evaluation.latency_note
        self.latency_note.value = (f"<div class='wb-message-box'>Latency: {escape(note)}</div>"
                                   if note else "")
        self._show(self.latency_note, bool(note))
        lines = []
        if evaluation.limiting is not None:
            lines.append(f"<div><b>Limiting node</b>: {escape(evaluation.limiting.describe())}"
                         "</div>")
        if evaluation.choice is not None:
            lines.append(choice_html(evaluation.choice, evaluation.estimate is not None))
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
        self.stage_table.value = (stage_table_html(evaluation.stages, request.memory_model)
                                  if evaluation.stages is not None
                                  else "<i>no stages: there is no plan</i>")
        table = evaluation.candidates
        self.candidates_table.value = (
            candidates_table_html(table, request.target_decode_tpot_ms,
                                  evaluation.estimate.error_note
                                  if evaluation.estimate is not None else "")
            if table is not None
            else "<i>no candidates</i>")
        self.memory_chart.show(memory_figure(request, plan))
        self.layers_chart.show(layer_ranges_figure(request, plan))
        self.candidates_chart.show(candidates_figure(
            table if table is not None else pd.DataFrame(), request.target_decode_tpot_ms))
