"""The fence's results on screen: :class:`ScenarioTable`, every scenario's expected and
actual outcome in full, and :class:`CheckResults`, the model checker's saved results (or
a check in the background when they are stale)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from html import escape
from pathlib import Path

import ipywidgets as widgets
import pandas as pd

from planner.errors import CodedError
from planner.fence.check import (
    DEFAULT_CONFIGS,
    PROPERTY_NAMES,
    CheckProgress,
    CheckReport,
    NamedConfig,
    StaleCheckResults,
    check_defaults,
    load_report,
)
from planner.fence.scenarios import (
    ScenarioResult,
    scenario_table,
)
from planner.figures.fence import check_report_figure
from planner.workbench._fence_steppers import CounterexampleStepper, Folded
from planner.workbench._fence_widgets import (
    STYLE,
    ChartHolder,
    verdict_html,
)
from planner.workbench.chart import Chart

# --- the model checker's results --------------------------------------------------------------


def _frame_html(frame: pd.DataFrame) -> str:
    """``frame`` as a table, a missing value as an empty cell (pandas writes a missing
    nullable integer as "<NA>" whatever ``na_rep`` says)."""
    shown = frame.astype(object).where(frame.notna(), "")
    return str(shown.to_html(index=False, escape=True, border=0, classes="fx-table"))


class ScenarioTable(widgets.HTML):
    """The design's scenarios in one table (:func:`~planner.fence.scenarios.scenario_table`:
    number, title, expected result, whether it held, summary), every text whole: a
    DataFrame's own view cuts long cells short with "..."."""

    def __init__(self, results: Sequence[ScenarioResult] | None = None) -> None:
        self.frame = scenario_table(results)
        super().__init__(STYLE + _frame_html(self.frame))
        self.add_class("fx-scenario-table")


class CheckResults(ChartHolder, widgets.VBox):
    """The model checker's results, on screen at once.

    The saved report (:func:`~planner.fence.check.load_report`, written by ``make
    fence-check``) is shown when it is current. When it is not (missing, or computed by
    other fence rules or another checker model), the panel says why and shows nothing as
    proven; **check now** computes the results in a background thread with a progress
    bar and shows them when done (:meth:`wait` blocks until then).

    ``report`` is the report shown (``None`` while there is none), ``saved`` whether it
    is the saved one, ``stale`` the problem with the saved report (``None`` when it is
    current), ``error`` what stopped a check started here.
    """

    def __init__(self, path: Path | None = None, *,
                 configs: Sequence[NamedConfig] | None = None) -> None:
        self.path = path
        self.configs = DEFAULT_CONFIGS if configs is None else tuple(configs)
        self.report: CheckReport | None = None
        self.saved = False
        self.stale: str | None = None
        self.error: str | None = None
        self.status = widgets.HTML()
        self.check_now = widgets.Button(description="check now", button_style="warning",
                                        layout=widgets.Layout(width="120px", display="none"))
        self.progress = widgets.IntProgress(
            value=0, min=0, max=len(self.configs), description="checked",
            style={"description_width": "60px"},
            layout=widgets.Layout(width="420px", display="none"))
        self.progress_text = widgets.HTML()
        self.chart = Chart()
        self.summary = widgets.HTML()
        self.runs = widgets.HTML()
        self.counterexamples: Folded | None = None
        self._counterexample_box = widgets.VBox()
        self._thread: threading.Thread | None = None
        super().__init__([
            widgets.HTML(STYLE), self.status,
            widgets.HBox([self.check_now, self.progress]), self.progress_text,
            self.chart, self.summary, self.runs, self._counterexample_box,
        ])
        self.add_class("fx-root")
        self.check_now.on_click(lambda _button: self.start())
        try:
            report = load_report(path)
        except StaleCheckResults as stale:
            self.stale = stale.message
            self.status.value = verdict_html(False, "Saved results are stale: nothing here "
                                              "is shown as proven", [
                stale.message,
                "check now computes them in the background (a minute or two for the "
                "default configurations); make fence-check saves them."])
            self.check_now.layout.display = None
        else:
            self._show(report, saved=True)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Check :attr:`configs` in a background thread (nothing happens if one runs)."""
        if self.running:
            return
        self.error = None
        self.check_now.disabled = True
        self.progress.value = 0
        self.progress.layout.display = None
        self.progress_text.value = "<div class='fx-note'>starting…</div>"
        self._thread = threading.Thread(target=self._check, name="fence-check", daemon=True)
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a check started here ends; False if it still runs after ``timeout``."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def _check(self) -> None:
        try:
            report = check_defaults(self.configs, progress=self._heard)
        except CodedError as error:
            self.error = error.message
            self.progress_text.value = verdict_html(False, "The check stopped",
                                                     [error.message])
            self.check_now.disabled = False
            return
        self._show(report, saved=False)

    def _heard(self, name: str, where: CheckProgress) -> None:
        if where.done:
            self.progress.value += 1
        self.progress_text.value = (
            f"<div class='fx-note'>{escape(name)}: {where.states_explored:,} states, depth "
            f"{where.depth}{' (done)' if where.done else ''}</div>")

    def _show(self, report: CheckReport, *, saved: bool) -> None:
        self.report, self.saved = report, saved
        where = "the saved results (make fence-check)" if saved else (
            "computed here just now (not saved: make fence-check saves them)")
        unexpected = [name for name in PROPERTY_NAMES if not report.verdict(name).as_expected]
        headline = (f"{report.states_explored:,} states over {len(report.runs)} "
                    f"configuration(s), {where}")
        notes = ([f"not as expected: {', '.join(unexpected)}"] if unexpected else
                 ["every property that must hold holds; every property known not to hold "
                  "has a counterexample"])
        self.status.value = verdict_html(not unexpected, headline, notes)
        self.check_now.layout.display = "none"
        self.progress.layout.display = "none"
        self.progress_text.value = ""
        self.chart.show(check_report_figure(report))
        self.summary.value = "<h4>Properties</h4>" + _frame_html(report.summary_frame())
        self.runs.value = "<h4>Configurations</h4>" + _frame_html(report.runs_frame())
        # Made when opened: the stepper's chart is not drawn with the rest of the page.
        self.counterexamples = Folded(
            "Counterexamples: step through the shortest one for each property that does "
            "not hold", lambda: CounterexampleStepper(report))
        self._counterexample_box.children = (self.counterexamples,)
