"""Step through event logs on a sequence chart: :class:`EventStepper`, the design's
scenarios in it (:class:`ScenarioStepper`, one in a :class:`ScenarioSection` made when
opened) and the model checker's counterexamples (:class:`CounterexampleStepper`);
:class:`Folded` is a titled section made the first time it is opened."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any

import ipywidgets as widgets
import pandas as pd
import plotly.graph_objects as go

from planner.fence.check import (
    KNOWN_TO_FAIL_NAMES,
    CheckReport,
    Counterexample,
)
from planner.fence.scenarios import (
    SCENARIO_LIST,
    ScenarioResult,
    get_scenario,
    run_scenario,
)
from planner.figures.fence import sequence_figure
from planner.workbench._fence_widgets import (
    STYLE,
    ChartHolder,
    verdict_html,
)
from planner.workbench.chart import Chart
from planner.workbench.sections import LazySections

# --- stepping through runs --------------------------------------------------------------------


class EventStepper(ChartHolder, widgets.VBox):
    """Step through an event log on a sequence chart, one event at a time."""

    children: tuple[Any, ...]  # the VBox trait, typed for the checker

    def __init__(self, events: pd.DataFrame | None = None, *, title: str = "",
                 header: str = "") -> None:
        self.header = widgets.HTML()
        # The slider reads the event's number as the chart's title does: 1 to the count.
        self.step = widgets.IntSlider(value=0, min=0, max=0, description="event",
                                      style={"description_width": "60px"},
                                      layout=widgets.Layout(width="560px"))
        self.previous = widgets.Button(description="◀ previous", layout=widgets.Layout(
            width="110px"))
        self.next = widgets.Button(description="next ▶", layout=widgets.Layout(width="110px"))
        self.everything = widgets.Button(description="show all",
                                         layout=widgets.Layout(width="110px"))
        self.current = widgets.HTML()
        self.chart = Chart(css_class="fx-sequence-figure")
        self.events = pd.DataFrame()
        self.title = title
        super().__init__([
            widgets.HTML(STYLE), self.header,
            widgets.HBox([self.previous, self.step, self.next, self.everything]),
            self.current, self.chart,
        ])
        self.add_class("fx-root")
        self.previous.on_click(lambda _b: self.move(-1))
        self.next.on_click(lambda _b: self.move(1))
        self.everything.on_click(lambda _b: self.show_all())
        self.step.observe(lambda _c: self.refresh(), names="value")
        if events is not None:
            self.show(events, title=title, header=header)

    def show(self, events: pd.DataFrame, *, title: str = "", header: str = "") -> None:
        """Show a new log, from its first event."""
        self.events = events.reset_index(drop=True)
        self.title = title
        self.header.value = header
        count = len(self.events)
        first = 1 if count else 0
        with self.step.hold_trait_notifications():
            # Widen before narrowing, so the slider's value is never out of its range.
            self.step.min, self.step.max = min(self.step.min, first), max(self.step.max, count)
            self.step.value = first
            self.step.min, self.step.max = first, count
        self.step.disabled = count == 0
        self.refresh()

    def move(self, delta: int) -> None:
        self.step.value = min(max(self.step.value + delta, self.step.min), self.step.max)

    def show_all(self) -> None:
        self.step.value = self.step.max

    @property
    def current_event(self) -> dict[str, Any] | None:
        """The event the slider is on (its number counts from 1), or None without events."""
        if self.events.empty:
            return None
        return dict(self.events.iloc[self.step.value - 1])

    def refresh(self) -> None:
        event = self.current_event
        if event is None:
            self.current.value = "<div class='fx-event'>no events</div>"
            self.chart.show(sequence_figure(self.events, title=self.title)
                        if not self.events.empty else go.Figure())
            return
        seq = int(event["seq"])
        self.current.value = (f"<div class='fx-event'>{escape(_event_line(event))}</div>")
        self.chart.show(sequence_figure(
            self.events, title=f"{self.title} (event {self.step.value} of "
            f"{len(self.events)})", upto=seq))


def _event_line(event: Mapping[str, Any]) -> str:
    # Numbered from 1, as the slider, the chart's title and its event axis are.
    parts = [f"event {int(event['seq']) + 1}:", f"t={event['time_ms']} ms", str(event["node"]),
             str(event["kind"])]
    message, peer = event.get("message"), event.get("peer")
    if isinstance(message, str):
        parts.append(message)
    if isinstance(peer, str):
        parts.append(("to " if event["kind"] in ("send", "drop") else "from ") + peer)
    term = event.get("term")
    if term is not None and not pd.isna(term):
        parts.append(f"term {int(term)}")
    line = " ".join(parts)
    if event.get("accepted") is True:
        line += ": accepted"
    elif event.get("accepted") is False:
        line += f": rejected ({event.get('reason')})"
    detail = event.get("detail")
    if isinstance(detail, str) and detail:
        line += f"\n{detail}"
    return line


class ScenarioStepper(EventStepper):
    """Pick one of the design's scenarios 1-10, run it, and step through its events."""

    def __init__(self, scenario: int = 1, *, seed: int | None = None) -> None:
        self.seed = seed
        self.choice = widgets.Dropdown(
            options=[(f"{s.number}. {s.title}", s.number) for s in SCENARIO_LIST],
            value=scenario, description="scenario", layout=widgets.Layout(width="560px"),
            style={"description_width": "70px"})
        self.outcome = widgets.HTML()
        self.result: ScenarioResult | None = None
        super().__init__()
        self.children = (self.choice, *self.children, self.outcome)
        self.choice.observe(lambda change: self.run(change["new"]), names="value")
        self.run(scenario)

    def run(self, number: int) -> None:
        if self.choice.value != number:
            self.choice.value = number  # observing the dropdown runs it
            return
        result = (run_scenario(number) if self.seed is None
                  else run_scenario(number, seed=self.seed))
        self.result = result
        scenario = result.scenario
        header = (f"<h4>{scenario.number}. {escape(scenario.title)}</h4>"
                  f"<div class='fx-note'>{escape(scenario.description)}</div>"
                  f"<div class='fx-note'><b>Expected:</b> {escape(scenario.expected)}</div>")
        self.show(result.events_frame(), title=f"Scenario {scenario.number}", header=header)
        checks = "".join(
            f"<li>{'✔' if e.met else '✘'} {escape(e.statement)}</li>"
            for e in result.outcome.expectations)
        self.outcome.value = verdict_html(result.outcome.met, result.outcome.summary) + (
            f"<ul class='fx-note'>{checks}</ul>")


class Folded(LazySections):
    """One titled section whose content is made the first time it is opened.

    Every chart on a page costs the browser time to draw, so a page with many steppers
    opens only the first and makes the others when a person opens them. ``content`` is
    the content once made (``None`` before); :meth:`unfold` opens it from code.
    """

    def __init__(self, title: str, make: Callable[[], widgets.Widget], *,
                 opened: bool = False) -> None:
        super().__init__()
        self.add(title, make)
        self.add_class("fx-folded")
        if opened:
            self.unfold()

    @property
    def content(self) -> widgets.Widget | None:
        return self.section(0)

    def unfold(self) -> widgets.Widget:
        """Open the section (making its content the first time); the content."""
        return self.open_section(0)


class ScenarioSection(Folded):
    """Scenario ``number``'s :class:`ScenarioStepper` in a :class:`Folded` section."""

    def __init__(self, number: int, *, opened: bool = False, seed: int | None = None) -> None:
        scenario = get_scenario(number)
        self.number = number
        super().__init__(f"Scenario {number}: {scenario.title}: step through its events",
                         lambda: ScenarioStepper(number, seed=seed), opened=opened)
        self.add_class(f"fx-scenario-{number}")

    @property
    def stepper(self) -> ScenarioStepper:
        """The stepper (opening the section, so it is made)."""
        stepper = self.unfold()
        assert isinstance(stepper, ScenarioStepper)
        return stepper


class CounterexampleStepper(EventStepper):
    """Step through the checker's counterexamples for the properties that do not hold."""

    def __init__(self, report: CheckReport, names: Sequence[str] | None = None) -> None:
        self.report = report
        broken = [name for name in (names or KNOWN_TO_FAIL_NAMES)
                  if report.verdict(name).counterexample is not None]
        self.choice = widgets.Dropdown(
            options=[(report.verdict(name).title, name) for name in broken],
            value=broken[0] if broken else None, description="property",
            layout=widgets.Layout(width="640px"), style={"description_width": "70px"})
        self.trace = widgets.HTML()
        self.counterexample: Counterexample | None = None
        super().__init__()
        self.children = (self.choice, *self.children, self.trace)
        self.choice.observe(lambda change: self.pick(change["new"]), names="value")
        if broken:
            self.pick(broken[0])

    def pick(self, name: str) -> None:
        if self.choice.value != name:
            self.choice.value = name
            return
        found = self.report.shortest_counterexample(name)
        if found is None:
            return
        config_name, example = found
        self.counterexample = example
        title = self.report.verdict(name).title
        header = (f"<h4>{escape(title)}: does not hold</h4>"
                  f"<div class='fx-note'>Shortest counterexample: {len(example.steps)} steps "
                  f"of the model in configuration {escape(config_name)}, "
                  f"{len(example.events_frame())} events on the chart (a stage deciding a "
                  "claim and sending its reply is one step, two events).</div>"
                  f"<div class='fx-verdict fx-rejected'>{escape(example.explanation)}</div>")
        self.show(example.events_frame(), title=f"Counterexample: {name}", header=header)
        self.trace.value = "<div class='fx-event'>" + escape(str(example)) + "</div>"

