"""The "Availability" panel: how often the fleet on screen is up as nodes fail.

It shows the availability at the targets, the context distribution over failure states,
the spares needed for 99 %, 99.9 % and 99.99 %, and a simulated year as a timeline. It
reads the fleet from a :class:`~planner.workbench.app.Workbench` (``source=workbench``)
or from a planning request, and recomputes when **Compute** is pressed (a large fleet's
availability takes a while, so it does not run on every keystroke).
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

import ipywidgets as widgets
import pandas as pd

from planner.availability import (
    QUICK_MAX_STATES,
    AvailabilityError,
    AvailabilityResult,
    NodeReliability,
    fleet_availability,
    spares_table,
)
from planner.errors import CodedError
from planner.figures.availability import context_distribution_figure, timeline_figure
from planner.limits import MAX_CONTEXT
from planner.planning import PlanningInput
from planner.simulation import SimulatedYear, simulate
from planner.targets import Targets
from planner.workbench.chart import Chart, chart_row
from planner.workbench.view import STYLE


@dataclass(frozen=True, slots=True)
class AvailabilityView:
    """Everything the panel shows, computed once (plain data, no widgets)."""

    result: AvailabilityResult
    spares: pd.DataFrame
    year: SimulatedYear
    min_context: int


def compute_view(request: PlanningInput, reliability: NodeReliability, *,
                 min_context: int | None = None, seed: int = 0) -> AvailabilityView:
    # A large fleet is bounded as on the command line: an interval, in about a minute.
    targets = Targets(minimum_context=min_context).for_request(request)
    result = fleet_availability(request, reliability, targets=targets,
                                max_states=QUICK_MAX_STATES)
    spares = spares_table(request, reliability, targets=targets, max_spares=8,
                          max_states=QUICK_MAX_STATES)
    year = simulate(request, reliability, seed=seed, targets=targets)
    assert targets.minimum_context is not None
    return AvailabilityView(result, spares, year, targets.minimum_context)


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
    return (f"<div class='wb-summary-box'>{escape(headline)} at context ≥ "
            f"{view.min_context:,}</div><div class='wb-message-box'>{down} a year below "
            f"the targets; {result.states_evaluated:,} plans of failure states</div>")


def spares_html(spares: pd.DataFrame) -> str:
    rows = "".join(
        f"<tr><td>{row.target:.2%}</td><td class='wb-text'>{escape(str(row.spares))}</td>"
        f"<td>{_percent(row.availability_lower)}</td></tr>"
        for row in spares.itertuples(index=False))
    return ("<table class='wb-table wb-spares-table'><thead><tr><th>target</th>"
            "<th class='wb-text'>spares</th><th>availability with them</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


class AvailabilityPanel(widgets.VBox):
    """The panel; ``source`` is a Workbench, a planning request, or a callable giving one."""

    def __init__(self, source: Any, *, annual_failure_rate: float = 0.119,
                 repair_hours: float = 72.0, seed: int = 0, compute: bool = True) -> None:
        self._source = source
        self.afr = widgets.BoundedFloatText(value=annual_failure_rate, min=0, max=1000,
                                            step=0.01, description="failures/yr")
        self.repair = widgets.BoundedFloatText(value=repair_hours, min=0, max=100_000,
                                               description="repair h")
        self.min_context = widgets.BoundedIntText(value=0, min=0, max=MAX_CONTEXT,
                                                  description="min context")
        self.seed = widgets.BoundedIntText(value=seed, min=0, max=2**31, description="seed")
        self.compute_button = widgets.Button(description="Compute", button_style="primary")
        self.compute_button.on_click(lambda _: self.compute())
        self.summary = widgets.HTML()
        self.summary.add_class("wb-availability-summary")
        self.problem = widgets.HTML()
        self.problem.add_class("wb-error")
        self.context_chart = Chart(css_class="wb-availability-context-figure")
        self.timeline_chart = Chart(css_class="wb-availability-timeline-figure")
        self.spares = widgets.HTML()
        self.spares.add_class("wb-availability-spares")
        self.view: AvailabilityView | None = None
        controls = widgets.HBox([self.afr, self.repair, self.min_context, self.seed,
                                 self.compute_button], layout=widgets.Layout(flex_flow="row wrap"))
        super().__init__([widgets.HTML(STYLE + "<h3>Availability</h3>"), controls,
                          self.problem, self.summary,
                          chart_row(self.context_chart, self.spares),
                          self.timeline_chart])
        self.add_class("wb-root")
        self.add_class("wb-availability-panel")
        if compute:
            self.compute()

    def _request(self) -> PlanningInput | None:
        source = self._source
        if isinstance(source, PlanningInput):
            return source
        if hasattr(source, "evaluation"):
            return source.evaluation.request
        if callable(source):
            return source()
        raise TypeError(f"cannot read a fleet from {type(source).__name__}")

    def compute(self) -> None:
        """Recompute from the current fleet and the panel's settings; problems are shown,
        never raised."""
        request = self._request()
        if request is None:
            self._say("No fleet to evaluate: fix the problems shown above first.")
            return
        try:
            reliability = NodeReliability(self.afr.value, self.repair.value)
            view = compute_view(request, reliability,
                                min_context=self.min_context.value or None,
                                seed=self.seed.value)
        except (AvailabilityError, CodedError) as error:
            self._say(error.message)
            return
        self.problem.value = ""
        self.view = view
        self.summary.value = summary_html(view)
        self.spares.value = "<h3>Spares needed</h3>" + spares_html(view.spares)
        self.context_chart.show(context_distribution_figure(view.result, view.min_context))
        self.timeline_chart.show(timeline_figure(view.year))

    def _say(self, message: str) -> None:
        self.problem.value = f"<div class='wb-error-box'>{escape(message)}</div>"
