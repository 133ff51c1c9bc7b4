"""The "Availability" panel: how often the fleet on screen is up as nodes fail.

It shows the availability at the targets, the context distribution over failure states,
the spares needed for 99 %, 99.9 % and 99.99 %, a simulated year as a timeline, and
each node's failure figures with where they came from. The figures, targets and speed
estimate are those of ``planner availability`` for the same fleet file
(:func:`planner.availability.fleet.fleet_file_availability`): each node's own, else the
fleet-wide value typed here, else its catalog kind's, else the defaults.

It reads the fleet from a :class:`~planner.workbench.app.Workbench` or a fleet document
and computes when **Compute** is pressed (a large fleet's availability takes a while, so
it does not run on every keystroke). When the workbench's fleet changes afterwards, the
panel says it is out of date, and why, until it is computed again.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

import ipywidgets as widgets
import pandas as pd

from planner.availability import (
    DEFAULT_ANNUAL_FAILURE_RATE,
    DEFAULT_REPAIR_HOURS,
    QUICK_MAX_STATES,
    AvailabilityError,
    AvailabilityResult,
    NodeFigures,
    spares_table,
)
from planner.availability.fleet import fleet_file_availability
from planner.errors import CodedError
from planner.figures.availability import context_distribution_figure, timeline_figure
from planner.fleet import FleetDocument
from planner.limits import MAX_LANES, MAX_SEED
from planner.planning import PlanningInput
from planner.simulation import SimulatedYear, simulate
from planner.targets import plan_or_none
from planner.workbench._changes import document_changes
from planner.workbench._stale import OutOfDateNote
from planner.workbench.catalog import gpu_catalog
from planner.workbench.chart import Chart, chart_row
from planner.workbench.editor import (
    context_input,
    read_context_input,
    read_whole,
    show_context_used,
    text_input,
    whole_input,
)
from planner.workbench.view import STYLE, table_html


@dataclass(frozen=True, slots=True)
class AvailabilityView:
    """Everything the panel shows, computed once (plain data, no widgets)."""

    result: AvailabilityResult
    spares: pd.DataFrame
    year: SimulatedYear
    min_context: int
    figures: dict[str, NodeFigures]
    missed_with_every_node_up: tuple[str, ...] = ()


def compute_view(document: FleetDocument, request: PlanningInput | None = None, *,
                 annual_failure_rate: float | None = None, repair_hours: float | None = None,
                 min_context: int | None = None, min_lanes: int = 1,
                 seed: int = 0) -> AvailabilityView:
    """The panel's figures for ``document`` planned as ``request``, worked out as
    ``planner availability`` does (a large fleet bounded as there: an interval, in about
    a minute)."""
    found = fleet_file_availability(
        document, request, catalog=gpu_catalog(), annual_failure_rate=annual_failure_rate,
        repair_hours=repair_hours, minimum_context=min_context, minimum_lanes=min_lanes,
        max_states=QUICK_MAX_STATES)
    request = document.to_request() if request is None else request
    reliability = found.reliability
    spares = spares_table(request, reliability, targets=found.targets,
                          estimator=found.estimator, max_spares=8,
                          max_states=QUICK_MAX_STATES)
    year = simulate(request, reliability, seed=seed, targets=found.targets,
                    estimator=found.estimator)
    assert found.targets.minimum_context is not None
    return AvailabilityView(found.result, spares, year, found.targets.minimum_context,
                            found.figures, found.missed_with_every_node_up)


def _percent(value: float | None) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.4%}"


def summary_html(view: AvailabilityView) -> str:
    result = view.result
    if result.exact:
        headline = f"Available {_percent(result.availability)} of the time"
    else:
        headline = (f"Available between {_percent(result.availability_lower)} and "
                    f"{_percent(result.availability_upper)} of the time")
    expected = result.expected_hours_down_per_year
    fewest, most = result.hours_down_per_year
    down = (f"about {expected:,.1f} hours" if expected is not None
            else f"between {fewest:,.1f} and {most:,.1f} hours")
    missed = ""
    if view.missed_with_every_node_up:
        missed = ("<div class='wb-warning-box'>With every node up, the plan misses the "
                  f"targets: {escape('; '.join(view.missed_with_every_node_up))}</div>")
    return (f"<div class='wb-summary-box'>{escape(headline)} at context ≥ "
            f"{view.min_context:,}</div><div class='wb-message-box'>{down} a year below "
            f"the targets; {result.states_evaluated:,} plans of failure states</div>"
            f"{missed}")


def _spares_cost(cost: Any) -> str:
    return ("no price: no catalog kind of the node is priced" if cost is None or pd.isna(cost)
            else f"USD {cost:,.2f}/h")


def spares_html(spares: pd.DataFrame) -> str:
    rows = [("", [f"<td>{row.target:.2%}</td>",
                  f"<td class='wb-text'>{escape(str(row.spares))}</td>",
                  f"<td>{_percent(row.availability_lower)}</td>",
                  f"<td class='wb-text'>{escape(_spares_cost(row.cost_per_hour))}</td>"])
            for row in spares.itertuples(index=False)]
    return table_html([("target", False), ("spares", True), ("availability with them", False),
                       ("cost of the spares", True)], rows, "wb-spares-table")


def _source_text(where: str) -> str:
    return {"the node's own": "its fleet-file entry",
            "fleet-wide": "typed here for every node"}.get(where, where)


def figures_html(figures: dict[str, NodeFigures]) -> str:
    """Each node's failure figures and where they came from, as an HTML table."""
    rows = [("", [f"<td class='wb-text'>{escape(node_id)}</td>",
                  f"<td class='wb-text'>{escape(node.kind or 'unknown')}</td>",
                  f"<td>{node.reliability.annual_failure_rate:g}</td>",
                  f"<td class='wb-text'>{escape(_source_text(node.annual_failure_rate_source))}"
                  "</td>",
                  f"<td>{node.reliability.repair_hours:g}</td>",
                  f"<td class='wb-text'>{escape(_source_text(node.repair_hours_source))}</td>"])
            for node_id, node in figures.items()]
    table = table_html([("node", True), ("kind", True), ("failures / year", False),
                        ("from", True), ("repair hours", False), ("from", True)], rows,
                       "wb-figures-table")
    return ("<details><summary>Failure figures per node (those planner availability "
            f"uses for this fleet)</summary>{table}</details>")


def _rate(text: str, label: str) -> float | None:
    """A fleet-wide figure typed in the panel; blank is ``None`` (each node's own)."""
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise AvailabilityError("InvalidReliability", f"{label}: must be a number of at "
                                f"least 0, or blank for each node's own (got {text!r})",
                                field=label) from None
    if not value >= 0 or value == float("inf"):
        raise AvailabilityError("InvalidReliability", f"{label}: must be a number of at "
                                f"least 0 (got {text!r})", field=label)
    return value


class AvailabilityPanel(widgets.VBox):
    """The panel; ``source`` is a Workbench or a fleet document.

    ``annual_failure_rate`` and ``repair_hours`` are fleet-wide figures for nodes without
    their own (as ``planner availability --afr/--repair-hours``); ``None`` leaves each
    node its catalog kind's, or the defaults."""

    def __init__(self, source: Any, *, annual_failure_rate: float | None = None,
                 repair_hours: float | None = None, seed: int = 0,
                 compute: bool = True) -> None:
        self._source = source
        self.afr = text_input("" if annual_failure_rate is None else f"{annual_failure_rate:g}",
                              "wb-availability-afr", width="210px", description="failures/yr",
                              placeholder="each node's own",
                              tooltip="for nodes without their own figure; blank: each "
                                      f"node's catalog kind, else {DEFAULT_ANNUAL_FAILURE_RATE:g}")
        self.repair = text_input("" if repair_hours is None else f"{repair_hours:g}",
                                 "wb-availability-repair", width="200px",
                                 description="repair h", placeholder="each node's own",
                                 tooltip="for nodes without their own figure; blank: each "
                                         f"node's catalog kind, else {DEFAULT_REPAIR_HOURS:g}")
        self.min_context = context_input("wb-availability-min-context", width="220px")
        self.min_lanes = whole_input(1, "wb-availability-min-lanes", width="150px",
                                     description="min lanes")
        self.seed = whole_input(seed, "wb-availability-seed", width="170px",
                                description="seed", tooltip="the simulated year's random seed")
        self.compute_button = widgets.Button(description="Compute", button_style="primary")
        self.compute_button.add_class("wb-availability-compute")
        self.compute_button.on_click(lambda _: self.compute())
        self.stale = OutOfDateNote("wb-availability-stale", "Compute again", self.compute)
        self.summary = widgets.HTML()
        self.summary.add_class("wb-availability-summary")
        self.problem = widgets.HTML()
        self.problem.add_class("wb-error")
        self.context_chart = Chart(css_class="wb-availability-context-figure")
        self.timeline_chart = Chart(css_class="wb-availability-timeline-figure")
        # A share of the row beside the chart: sized by its content, a table that fits
        # its box (view.table_html) had no width to fit.
        self.spares = widgets.HTML(layout=widgets.Layout(flex="1 1 360px", min_width="300px"))
        self.spares.add_class("wb-availability-spares")
        self.figures = widgets.HTML()
        self.figures.add_class("wb-availability-figures")
        self.view: AvailabilityView | None = None
        self._computed: FleetDocument | None = None
        """The fleet last computed (what the figures on screen are of)."""
        controls = widgets.HBox([self.afr, self.repair, self.min_context, self.min_lanes,
                                 self.seed, self.compute_button],
                                layout=widgets.Layout(flex_flow="row wrap"))
        self.results = widgets.VBox([self.summary, chart_row(self.context_chart, self.spares),
                                     self.timeline_chart, self.figures])
        self.results.layout.display = "none"
        super().__init__([widgets.HTML(STYLE + "<h3>Availability</h3>"), controls,
                          self.stale, self.problem, self.results])
        self.add_class("wb-root")
        self.add_class("wb-availability-panel")
        if hasattr(source, "on_change"):
            source.on_change(self._fleet_changed)
        if compute:
            self.compute()

    def _fleet(self) -> tuple[FleetDocument, PlanningInput | None]:
        """The fleet document on screen and the request the workbench plans it as."""
        source = self._source
        if isinstance(source, FleetDocument):
            return source, source.to_request()
        if hasattr(source, "state") and hasattr(source, "evaluation"):
            return source.state.to_document(), source.evaluation.request
        raise TypeError(f"cannot read a fleet from {type(source).__name__}")

    @property
    def out_of_date(self) -> bool:
        """Whether the fleet changed since the figures on screen were computed."""
        return bool(self.stale.value)

    def _fleet_changed(self) -> None:
        if self._computed is None:
            return
        try:
            document, _ = self._fleet()
        except CodedError as error:
            reason = f"the fleet cannot be read ({error.message})"
        else:
            reason = document_changes(self._computed, document)
        if reason:
            self.stale.show(reason, "these figures were computed")
        else:
            self.stale.clear()

    def compute(self) -> None:
        """Recompute from the current fleet and the panel's settings; problems are shown,
        never raised."""
        try:
            document, request = self._fleet()
        except CodedError as error:
            self._say(f"{error.code}: {error.message}")
            return
        try:
            if request is None:
                self._say("No fleet to evaluate: fix the problems shown above first.")
                return
            if plan_or_none(request) is None:
                self._say("no valid topology even with every node up; the plan above says "
                          "why", document)
                return
            view = compute_view(
                document, request, annual_failure_rate=_rate(self.afr.value, "failures/yr"),
                repair_hours=_rate(self.repair.value, "repair h"),
                min_context=read_context_input(self.min_context, "minimum_context"),
                min_lanes=read_whole(self.min_lanes, "minimum_lanes", label="min lanes",
                                     minimum=1, maximum=MAX_LANES),
                seed=read_whole(self.seed, "seed", label="seed", maximum=MAX_SEED))
        except CodedError as error:
            self._say(f"{error.code}: {error.message}", document)
            return
        self._computed = document
        self.stale.clear()
        self.problem.value = ""
        self.view = view
        self.results.layout.display = None
        self.summary.value = summary_html(view)
        show_context_used(self.min_context, view.min_context)
        self.spares.value = "<h3>Spares needed</h3>" + spares_html(view.spares)
        self.figures.value = figures_html(view.figures)
        self.context_chart.show(context_distribution_figure(view.result, view.min_context))
        self.timeline_chart.show(timeline_figure(view.year))

    def _say(self, message: str, document: FleetDocument | None = None) -> None:
        """Show a problem in place of the figures; ``document`` is the fleet it is about,
        so that the panel says when that fleet changes."""
        # No figures of another fleet stay on screen under a problem.
        self._computed = document
        self.view = None
        self.stale.clear()
        self.results.layout.display = "none"
        self.problem.value = f"<div class='wb-error-box'>{escape(message)}</div>"
