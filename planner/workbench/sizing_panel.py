"""The "Size a fleet" panel: which GPUs, how many, at what price, for the model on screen.

It shows the targets (minimum context, lanes, nodes, an optional TPOT target and the
failures to tolerate), the GPU catalog as an editable table (use, price per hour, how
many can be had), the cheapest fleets that meet the targets (:func:`planner.sizing.
size_fleet`) and a chart of cost per hour against context coloured by the estimated TPOT.
Choosing a fleet loads its nodes (``<kind>-00``, ...) into the workbench's fleet editor and
plans it. Speeds and token costs are estimates and are labelled so. Sizing runs when
**Size** is pressed: a large catalog at f > 0 takes a moment, too long for every keystroke.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from html import escape
from typing import Any

import ipywidgets as widgets
import pandas as pd
import plotly.graph_objects as go

from planner.errors import CodedError
from planner.figures.sizing import sizing_figure
from planner.fleet import ReliabilityOverride
from planner.limits import (
    DEFAULT_PRICE_KIND,
    MAX_CONTEXT,
    MAX_FAILURES_TOLERATED,
    MAX_LANES,
    MAX_LATENCY_MS,
    MAX_MINIMUM_NODES,
    MAX_NODES,
    MAX_TOP_FLEETS,
)
from planner.models import GpuModel
from planner.performance import ESTIMATE_NOTE, ModelTraffic
from planner.reports.sizing import answer_text, fleet_table
from planner.sizing import (
    SizedFleet,
    SizingResult,
    SizingTargets,
    fleet_node_kinds,
    fleet_nodes,
    size_fleet,
)
from planner.sizing.search import TOO_LARGE_ADVICE, TOO_MANY_KINDS_ADVICE
from planner.units import format_bandwidth, format_bytes
from planner.workbench._stale import OutOfDateNote
from planner.workbench.catalog import gpu_catalog, model_traffic
from planner.workbench.chart import Chart
from planner.workbench.editor import (
    button,
    context_input,
    fixed_width,
    read_context_input,
    read_whole,
    show_context_used,
    whole_input,
)
from planner.workbench.editor_fields import NodeExtras, NodeRow
from planner.workbench.problems import WorkbenchInputError
from planner.workbench.view import STYLE, table_html

# The search's advice in the command line's words, and as this page says it.
_PAGE_ADVICE = {
    TOO_LARGE_ADVICE: "untick kinds in the catalog, give kinds a count available, or "
                      "relax the targets",
    TOO_MANY_KINDS_ADVICE: "untick kinds in the catalog to compare fewer",
}


def page_message(error: CodedError) -> str:
    """``error`` as the panel shows it: its advice in the page's words."""
    message = error.message
    for said, advice in _PAGE_ADVICE.items():
        message = message.replace(said, advice)
    return f"{error.code}: {message}"


CATALOG_COLUMNS = (("use", "36px"), ("kind · memory · bandwidth · price", "380px"),
                   ("USD / hour", "100px"), ("available", "90px"))

# The sizing table's columns as the rest of the page names them.
FLEET_HEADERS = {
    "rank": "#", "fleet": "fleet", "nodes": "nodes", "cost_per_hour_usd": "USD / hour",
    "context_length": "context", "stage_count": "stages", "parallel_lanes": "lanes",
    "estimated_tpot_ms": "est. TPOT",
    "estimated_ttft_ms": "est. TTFT", "tokens_per_s": "est. tokens/s",
    "estimated_context_fill_s": "est. fill (s)",
    "cost_per_million_tokens_usd": "USD / M tokens", "failures_tolerated": "survives losing",
}


class CatalogRow(widgets.HBox):
    """One catalog kind as the panel edits it: whether to use it, its price per hour and
    how many can be had (blank: as many as needed)."""

    def __init__(self, gpu: GpuModel) -> None:
        self.gpu = gpu
        # Rented prices by default: sizing compares one kind of price (planner.sizing).
        widths = [width for _, width in CATALOG_COLUMNS]
        self.use = widgets.Checkbox(value=gpu.price_per_hour is not None
                                    and gpu.price_kind == DEFAULT_PRICE_KIND, indent=False,
                                    layout=fixed_width(widths[0]))
        self.price = widgets.Text(
            value="" if gpu.price_per_hour is None else f"{gpu.price_per_hour:g}",
            placeholder="USD/h", layout=fixed_width(widths[2]))
        self.price.add_class("wb-sizing-price")
        self.max_count = widgets.Text(
            value="" if gpu.max_count is None else str(gpu.max_count),
            placeholder="any", layout=fixed_width(widths[3]))
        self.max_count.add_class("wb-sizing-available")
        bandwidth = gpu.memory_bandwidth_bytes_per_s
        label = (f"{gpu.kind} · {format_bytes(gpu.memory_bytes)} · "
                 + ("bandwidth unknown" if bandwidth is None
                    else format_bandwidth(bandwidth))
                 + (f" · {gpu.price_kind}" if gpu.price_kind else ""))
        name = widgets.HTML(f"<span style='white-space:nowrap'>{escape(label)}</span>",
                            layout=fixed_width(widths[1]))
        # A row keeps its height in the scrolling list: squeezed to fit the list's
        # height, rows were 20 px high and their boxes overlapped.
        super().__init__([self.use, name, self.price, self.max_count],
                         layout=widgets.Layout(flex="0 0 auto", align_items="center"))
        self.add_class("wb-sizing-catalog-row")

    def edited(self) -> GpuModel | None:
        """The kind with the typed price and count, ``None`` when not used. Raises
        :class:`WorkbenchInputError` naming the kind and field."""
        if not self.use.value:
            return None
        kind = self.gpu.kind
        price_text = self.price.value.strip()
        try:
            price = float(price_text)
        except ValueError:
            raise WorkbenchInputError(
                f"catalog.{kind}.price_per_hour", "must be a price in USD per hour, e.g. 2.45",
                value=price_text, label=f"{kind} price per hour") from None
        if not price > 0 or price == float("inf"):
            raise WorkbenchInputError(f"catalog.{kind}.price_per_hour", "must be above 0",
                                      value=price_text, label=f"{kind} price per hour")
        count_text = self.max_count.value.strip()
        count = None
        if count_text:
            if not count_text.isdigit() or not 1 <= int(count_text) <= MAX_NODES:
                raise WorkbenchInputError(
                    f"catalog.{kind}.max_count",
                    f"must be a whole number from 1 to {MAX_NODES:,}, or blank for any",
                    value=count_text, label=f"{kind} count available")
            count = int(count_text)
        return replace(self.gpu, price_per_hour=price, max_count=count)


@dataclass(frozen=True, slots=True)
class SizingModel:
    """What sizing needs from the workbench: the request's model fields (docs/rules.md §1),
    the decode traffic and the fleet's planning overrides."""

    fields: Mapping[str, Any]
    traffic: ModelTraffic | None
    label: str
    minimum_nodes: int = 1
    target_decode_tpot_ms: int | None = None
    context_length_override: int | None = None
    parallel_lanes_override: int | None = None


def _from_workbench(workbench: Any) -> SizingModel:
    """The model and planning options of the fleet document on screen. Raises
    :class:`WorkbenchInputError` or the fleet file's error when they cannot be read."""
    state = workbench.state
    document = state.to_document()
    fields = dict(document.model.resolve(document.base_dir))
    if fields.get("layer_weight_bytes") is None:
        fields.pop("layer_weight_bytes", None)
    return SizingModel(fields, model_traffic(document.model, document.base_dir),
                       document.model.label, minimum_nodes=document.minimum_nodes or 1,
                       target_decode_tpot_ms=document.target_decode_tpot_ms,
                       context_length_override=document.context_length_override,
                       parallel_lanes_override=document.parallel_lanes_override)


def model_changes(before: SizingModel, after: SizingModel) -> str:
    """What changed between the model sized for and the one on screen, in words."""
    changes = []
    if before.label != after.label or before.fields != after.fields:
        changes.append(f"the model changed ({before.label} → {after.label})"
                       if before.label != after.label else "the model's numbers changed")
    options = [name for name, key in (
        ("minimum nodes", "minimum_nodes"), ("TPOT target", "target_decode_tpot_ms"),
        ("context override", "context_length_override"),
        ("lanes override", "parallel_lanes_override"))
        if getattr(before, key) != getattr(after, key)]
    if options:
        changes.append(f"the fleet's planning options changed ({', '.join(options)})")
    return "; ".join(changes)


def _fleet_cell(label: str) -> str:
    """A fleet's label in a cell that wraps between its kinds, never inside one (the
    table then fits a narrow page)."""
    kinds = " + ".join(f"<span class='wb-id'>{escape(part)}</span>"
                       for part in label.split(" + "))
    return f"<td class='wb-text wb-wrap wb-fleet-label'>{kinds}</td>"


def fleets_html(fleets: Sequence[SizedFleet], chosen: int | None = None) -> str:
    """The fleets as an HTML table (:func:`planner.reports.sizing.fleet_table`'s cells)."""
    table = fleet_table(fleets)
    headers = [(FLEET_HEADERS.get(h, h.replace("_", " ")), a != "r")
               for h, a in zip(table.headers, table.align, strict=True)]
    rows = [("wb-selected" if index == chosen else "",
             [_fleet_cell(c) if h == "fleet" else
              f"<td{'' if a == 'r' else ' class=wb-text'}>{escape(c)}</td>"
              for h, c, a in zip(table.headers, row, table.align, strict=True)])
            for index, row in enumerate(table.rows)]
    return table_html(headers, rows, "wb-sizing-table")


class SizingPanel(widgets.VBox):
    """The panel. ``source`` is a :class:`~planner.workbench.app.Workbench` (the model on
    screen, and where a chosen fleet goes) or a :class:`SizingModel`."""

    def __init__(self, source: Any, *, catalog: Sequence[GpuModel] | None = None,
                 top: int = 8, compute: bool = True) -> None:
        self._source = source
        # The boxes start at the fleet's own targets; a model that cannot be read yet
        # (text on the page, speed numbers that contradict each other) is said by
        # compute(), not raised while the panel is made.
        try:
            own = self._targets(self._model())
        except CodedError:
            own = (1, None)
        style = {"description_width": "initial"}
        self.min_context = context_input("wb-sizing-min-context", width="210px")
        self.min_lanes = whole_input(1, "wb-sizing-min-lanes", width="150px",
                                     description="min lanes")
        self.min_nodes = whole_input(own[0], "wb-sizing-min-nodes", width="150px",
                                     description="min nodes")
        self.tpot = whole_input(own[1], "wb-sizing-tpot", width="200px",
                                description="TPOT target (ms)", placeholder="none",
                                tooltip="estimated TPOT target; blank or 0: none")
        self.ttft = whole_input(None, "wb-sizing-ttft", width="200px",
                                description="TTFT target (ms)", placeholder="none",
                                tooltip="estimated time-to-first-token target for a prompt "
                                        "of 'prompt' tokens; blank or 0: none")
        self.prompt_tokens = whole_input(4096, "wb-sizing-prompt", width="200px",
                                         description="prompt (tokens)",
                                         tooltip="prompt tokens the TTFT is for")
        self.tolerate = whole_input(0, "wb-sizing-tolerate", width="170px",
                                    description="survive losing",
                                    tooltip="nodes the fleet must be able to lose")
        self.top = whole_input(top, "wb-sizing-top", width="120px", description="show",
                               tooltip="how many of the cheapest fleets to list")
        self.size_button = widgets.Button(description="Size", button_style="primary")
        self.size_button.add_class("wb-sizing-size")
        self.size_button.on_click(lambda _: self.compute())
        kinds = gpu_catalog() if catalog is None else catalog
        self.catalog_rows = tuple(CatalogRow(gpu) for gpu in kinds)
        self.choice = widgets.Dropdown(options=[], description="fleet", style=style,
                                       layout=widgets.Layout(width="420px", min_width="200px",
                                                             flex="0 1 auto"))
        self.load_button = button("Load into the fleet editor", "wb-sizing-load",
                                  tooltip="replace the fleet on screen with this one")
        self.load_button.disabled = not hasattr(source, "set_state")
        self.load_button.on_click(lambda _: self.choose(self.choice.value))
        self.stale = OutOfDateNote("wb-sizing-stale", "Size again", self.compute)
        self.summary = widgets.HTML()
        self.summary.add_class("wb-sizing-summary")
        self.problem = widgets.HTML()
        self.problem.add_class("wb-error")
        self.table = widgets.HTML(layout=widgets.Layout(max_height="320px", overflow="auto"))
        self.table.add_class("wb-sizing-fleets")
        self.chart = Chart(css_class="wb-sizing-figure")
        self.result: SizingResult | None = None
        self._kinds: dict[str, GpuModel] = {}
        self.chosen: int | None = None
        self._sized_for: SizingModel | None = None
        """The model and planning options the fleets on screen were sized for."""
        self._fleet_targets = own
        """The fleet's own minimum nodes and TPOT target, as last put in the boxes."""
        header = widgets.HBox([
            widgets.HTML(f"<b style='white-space:nowrap'>{escape(label)}</b>",
                         layout=fixed_width(width)) for label, width in CATALOG_COLUMNS])
        targets = widgets.HBox([self.min_context, self.min_lanes, self.min_nodes, self.tpot,
                                self.ttft, self.prompt_tokens, self.tolerate, self.top,
                                self.size_button],
                               layout=widgets.Layout(flex_flow="row wrap"))
        rows = widgets.VBox(list(self.catalog_rows),
                            layout=widgets.Layout(max_height="260px", overflow="auto"))
        rows.add_class("wb-sizing-catalog")
        super().__init__([
            widgets.HTML(STYLE + "<h3>Size a fleet</h3>"), targets,
            widgets.HTML("<h3>Catalog</h3>"), header, rows,
            self.stale, self.problem, self.summary, self.table,
            widgets.HBox([self.choice, self.load_button],
                         layout=widgets.Layout(flex_flow="row wrap")), self.chart,
            widgets.HTML(f"<div class='wb-message-box'>{escape(ESTIMATE_NOTE)}</div>"),
        ])
        self.add_class("wb-root")
        self.add_class("wb-sizing-panel")
        if hasattr(source, "on_change"):
            source.on_change(self._fleet_changed)
        if compute:
            self.compute()

    @staticmethod
    def _targets(model: SizingModel) -> tuple[int, int | None]:
        """The fleet's own minimum nodes and TPOT target."""
        return model.minimum_nodes, model.target_decode_tpot_ms

    def _model(self) -> SizingModel:
        if isinstance(self._source, SizingModel):
            return self._source
        return _from_workbench(self._source)

    @property
    def out_of_date(self) -> bool:
        """Whether the model or planning options changed since the fleets were sized."""
        return bool(self.stale.value)

    def _fleet_changed(self) -> None:
        """Follow the fleet's own targets, and say when the fleets shown were sized for
        another model or other planning options (editing nodes changes neither)."""
        try:
            model = self._model()
        except CodedError as error:
            reason = f"the model cannot be read ({error.message})"
        else:
            own = self._targets(model)
            if own != self._fleet_targets:
                self._fleet_targets = own
                self.min_nodes.value = str(model.minimum_nodes)
                self.tpot.value = ("" if model.target_decode_tpot_ms is None
                                   else str(model.target_decode_tpot_ms))
            reason = ("" if self._sized_for is None
                      else model_changes(self._sized_for, model))
        if self._sized_for is None:
            reason = ""
        if reason:
            self.stale.show(reason, "the last sizing")
        else:
            self.stale.clear()

    def catalog(self) -> list[GpuModel]:
        """The kinds in use, as edited. Raises :class:`WorkbenchInputError`."""
        return [gpu for row in self.catalog_rows if (gpu := row.edited()) is not None]

    def targets(self) -> SizingTargets:
        """The targets typed. Raises :class:`WorkbenchInputError` naming a box that cannot
        be read or is out of range (never clamped)."""
        tpot = read_whole(self.tpot, "target_decode_tpot_ms", label="TPOT target",
                          maximum=MAX_LATENCY_MS, default=0)
        ttft = read_whole(self.ttft, "target_ttft_ms", label="TTFT target",
                          maximum=MAX_LATENCY_MS, default=0)
        return SizingTargets(
            minimum_context=read_context_input(self.min_context, "minimum_context"),
            minimum_lanes=read_whole(self.min_lanes, "minimum_lanes", label="min lanes",
                                     minimum=1, maximum=MAX_LANES),
            minimum_nodes=read_whole(self.min_nodes, "minimum_nodes", label="min nodes",
                                     minimum=1, maximum=MAX_MINIMUM_NODES),
            target_decode_tpot_ms=tpot or None,
            failures_tolerated=read_whole(self.tolerate, "failures_tolerated",
                                          label="survive losing",
                                          maximum=MAX_FAILURES_TOLERATED),
            target_ttft_ms=ttft or None,
            prompt_tokens=read_whole(self.prompt_tokens, "prompt_tokens",
                                     label="prompt (tokens)", minimum=1,
                                     maximum=MAX_CONTEXT) if ttft else None)

    def shown_count(self) -> int:
        """How many fleets to list (the "show" box)."""
        return read_whole(self.top, "top", label="show", minimum=1, maximum=MAX_TOP_FLEETS)

    @property
    def frame(self) -> pd.DataFrame | None:
        """The cheapest fleets shown, as :meth:`planner.sizing.SizingResult.frame`."""
        return None if self.result is None else self.result.frame()

    def compute(self) -> None:
        """Size from the current model, targets and catalog; problems are shown, never
        raised."""
        self.result = None
        self.chosen = None
        try:
            model = self._model()
        except CodedError as error:
            self._say(f"{error.code}: {error.message}")
            return
        try:
            catalog = self.catalog()
            if not catalog:
                raise WorkbenchInputError("catalog", "tick at least one kind to size with",
                                          label="catalog")
            result = size_fleet(
                model.fields, catalog, self.targets(), top=self.shown_count(),
                traffic=model.traffic,
                context_length_override=model.context_length_override,
                parallel_lanes_override=model.parallel_lanes_override)
        except CodedError as error:
            # A refusal is about this model and these options: say when they change.
            self._say(page_message(error), model)
            return
        self.problem.value = ""
        self.chart.layout.display = None
        self.load_button.disabled = not hasattr(self._source, "set_state")
        self.stale.clear()
        self._sized_for = model
        self.result = result
        self._kinds = {gpu.kind: gpu for gpu in catalog}
        show_context_used(self.min_context, result.minimum_context)
        speed = (f" {result.error_note}" if model.traffic is not None else
                 " No speed estimate: the model is not a preset or GGUF file.")
        self.summary.value = (f"<div class='wb-summary-box'>{escape(answer_text(result))}"
                              f"</div><div class='wb-message-box'>{escape(model.label)}: "
                              f"context ≥ {result.minimum_context:,}, "
                              f"{result.plans_evaluated:,} plans evaluated.{escape(speed)}"
                              "</div>")
        self.table.value = fleets_html(result.fleets)
        self.choice.options = [(f"{rank}. {fleet.label} (USD "
                                f"{fleet.cost_per_hour_usd:,.2f}/h)", rank - 1)
                               for rank, fleet in enumerate(result.fleets, 1)]
        self.choice.value = 0
        self.chart.show(sizing_figure(result))

    def choose(self, index: int | None) -> None:
        """Load fleet ``index`` (0 is the cheapest) into the workbench and plan it."""
        if self.result is None or index is None:
            refused = self.problem.value
            self._say("Nothing to load: no fleet meets the targets of the last Size (see "
                      "its reason above)." if refused else "Nothing to load: press Size "
                      "first.", self._sized_for)
            if refused:
                self.problem.value = refused + self.problem.value
            return
        fleet = self.result.fleets[index]
        kinds = self._kinds  # as sized, whatever was edited since
        nodes = fleet_nodes([kinds[kind] for kind, _ in fleet.counts],
                            [count for _, count in fleet.counts])
        self.chosen = index
        self.table.value = fleets_html(self.result.fleets, index)
        workbench = self._source
        if hasattr(workbench, "set_state"):
            # Each node names the kind it was sized as (its `gpu`), as a fleet file would.
            named = fleet_node_kinds([kinds[kind] for kind, _ in fleet.counts],
                                     [count for _, count in fleet.counts])
            state = workbench.state.with_nodes(
                [NodeRow.from_budget(n) for n in nodes],
                [NodeExtras(ReliabilityOverride(gpu=named[n.node_id])) for n in nodes])
            workbench.set_state(state.with_name(f"{self._model().label} on {fleet.label}"))

    def _say(self, message: str, model: SizingModel | None = None) -> None:
        """Show a problem in place of the fleets; ``model`` is what it is about."""
        # Nothing sized stays loadable once the problem shows.
        self.load_button.disabled = True
        self._sized_for = model
        self.stale.clear()
        self.problem.value = f"<div class='wb-error-box'>{escape(message)}</div>"
        self.summary.value = ""
        self.table.value = ""
        self.choice.options = []
        # No chart of the fleets sized before stays under a problem.
        self.chart.show(go.Figure())
        self.chart.layout.display = "none"
