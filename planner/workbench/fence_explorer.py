"""Widgets for exploring the claim fence: decisions, quorum, and step-through runs.

- :class:`ClaimExplorer`: edit a stored claim and an incoming claim, see the stage's
  decision and the branch of the claim flowchart that decides it;
- :class:`LoadExplorer`: the same for ``LoadStage`` against a stored claim;
- :class:`QuorumExplorer`: sliders for planned stages and accepts;
- :class:`EventStepper`: step through any event log on a sequence chart;
  :class:`ScenarioStepper` runs the design's scenarios 1-10 in it and
  :class:`CounterexampleStepper` the model checker's counterexamples;
- :class:`ScenarioTable`: every scenario's expected and actual outcome, in full;
- :class:`CheckResults`: the model checker's saved results, or a check in the background
  when they are stale;
- :class:`Folded`: a titled section made the first time it is opened, and
  :class:`ScenarioSection`, one scenario's stepper in it: a page with many steppers draws
  only the charts a person opens.

The rules come from :mod:`planner.fence` and the figures from
:mod:`planner.figures.fence`; nothing here decides anything itself. Every widget can be
driven from code (set a value, read ``decision`` or ``html``), which is how it runs
headless.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pandas as pd
import plotly.graph_objects as go

from planner.errors import CodedError
from planner.fence.check import (
    DEFAULT_CONFIGS,
    KNOWN_TO_FAIL_NAMES,
    PROPERTY_NAMES,
    CheckProgress,
    CheckReport,
    Counterexample,
    NamedConfig,
    StaleCheckResults,
    check_defaults,
    load_report,
)
from planner.fence.claims import (
    ClaimDecision,
    ClaimFence,
    CoordinatorClaim,
    LoadClaimRef,
    LoadDecision,
    quorum_requirement,
)
from planner.fence.scenarios import (
    SCENARIO_LIST,
    ScenarioResult,
    get_scenario,
    run_scenario,
    scenario_table,
)
from planner.figures.fence import (
    CLAIM_FLOW_EDGES,
    CLAIM_FLOW_NODES,
    LOAD_FLOW_EDGES,
    LOAD_FLOW_NODES,
    check_report_figure,
    claim_decision_path,
    claim_flowchart_figure,
    load_decision_path,
    load_flowchart_figure,
    quorum_figure,
    sequence_figure,
)
from planner.workbench.chart import Chart
from planner.workbench.sections import LazySections

STYLE = """
<style>
.fx-root { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; }
.fx-verdict { font-size: 15px; font-weight: 600; padding: 6px 10px; }
.fx-accepted { background: #e8f5ee; border-left: 4px solid #2e8b57; }
.fx-rejected { background: #fdecea; border-left: 4px solid #c44e52; }
.fx-note { color: #495057; padding: 2px 10px; }
.fx-event { font-family: ui-monospace, monospace; font-size: 12px; padding: 4px 10px;
  background: #f8f9fa; border-left: 4px solid #4c72b0; white-space: pre-wrap; }
.fx-table { border-collapse: collapse; font-size: 12px; }
.fx-table th, .fx-table td { padding: 2px 8px; border-bottom: 1px solid #ddd; text-align: left; }
.fx-table th { background: #f4f4f4; }
</style>
"""

_WIDE = {"description_width": "150px"}
_FIELD = widgets.Layout(width="380px")
_MAX_INT = 2**62


def _text(description: str, value: str) -> widgets.Text:
    return widgets.Text(value=value, description=description, continuous_update=False,
                        layout=_FIELD, style=_WIDE)


def _integer(description: str, value: int, minimum: int = -_MAX_INT) -> widgets.BoundedIntText:
    return widgets.BoundedIntText(value=value, min=minimum, max=_MAX_INT,
                                  description=description, continuous_update=False,
                                  layout=_FIELD, style=_WIDE)


def _path_text(
    path: Sequence[str],
    nodes: Sequence[tuple[str, str, float, float]],
    edges: Sequence[tuple[str, str, str]],
) -> str:
    """``Shape valid? --ok--> Existing claim? --no--> Accept claim``."""
    labels = {node: label.replace("<br>", " ") for node, label, _, _ in nodes}
    answers = {(start, end): label for start, end, label in edges}
    parts = [labels[path[0]]] if path else []
    for start, end in itertools.pairwise(path):
        answer = answers.get((start, end), "")
        parts.append(f"--{answer}--> {labels[end]}" if answer else f"--> {labels[end]}")
    return " ".join(parts)


def _verdict_html(accepted: bool, headline: str, notes: Sequence[str] = ()) -> str:
    css = "fx-accepted" if accepted else "fx-rejected"
    body = "".join(f"<div class='fx-note'>{escape(note)}</div>" for note in notes)
    return f"<div class='fx-verdict {css}'>{escape(headline)}</div>{body}"


# --- claims ----------------------------------------------------------------------------------

CLAIM_FIELDS: tuple[str, ...] = (
    "model_id", "package_ref", "manifest_sha256", "topology_id", "run_id", "coordinator_id",
    "coordinator_term", "participant_set_hash", "topology_hash", "lease_until_unix_ms",
)
STORED_FIELDS: tuple[str, ...] = (
    "topology_id", "run_id", "coordinator_id", "coordinator_term", "participant_set_hash",
    "topology_hash", "lease_until_unix_ms",
)
_INT_FIELDS = frozenset({"coordinator_term", "lease_until_unix_ms", "now_unix_ms"})

_NOW = 1_000_000
_STORED: dict[str, Any] = {
    "topology_id": "topo-1", "run_id": "run-1", "coordinator_id": "coord-1",
    "coordinator_term": 10, "participant_set_hash": "ph-1", "topology_hash": "th-1",
    "lease_until_unix_ms": _NOW + 60_000,
}
_INCOMING: dict[str, Any] = {
    "model_id": "qwen3-coder-480b", "package_ref": "hf://Qwen/Qwen3-Coder-480B-GGUF",
    "manifest_sha256": "sha256:5be1c0a4", **_STORED,
}


@dataclass(frozen=True)
class ClaimPreset:
    """A ready-made situation: the stored claim (``None``: none), the incoming claim."""

    title: str
    stored: Mapping[str, Any] | None
    incoming: Mapping[str, Any]
    now_unix_ms: int = _NOW


CLAIM_PRESETS: tuple[ClaimPreset, ...] = (
    ClaimPreset("First claim for this model", None, {**_INCOMING}),
    ClaimPreset("Same epoch again: the lease is renewed", _STORED,
                {**_INCOMING, "lease_until_unix_ms": _NOW + 120_000}),
    ClaimPreset("Newer term supersedes the stored one", _STORED,
                {**_INCOMING, "coordinator_term": 11, "coordinator_id": "coord-2",
                 "topology_id": "topo-2", "run_id": "run-2"}),
    ClaimPreset("Stale term from an old coordinator", _STORED,
                {**_INCOMING, "coordinator_term": 9}),
    ClaimPreset("Same term, different coordinator (split brain)", _STORED,
                {**_INCOMING, "coordinator_id": "coord-2"}),
    ClaimPreset("Lease already expired on the stage's clock", _STORED,
                {**_INCOMING, "coordinator_term": 11, "lease_until_unix_ms": _NOW}),
    ClaimPreset("Missing coordinator id", None, {**_INCOMING, "coordinator_id": ""}),
    ClaimPreset("Term 0 is not a fencing term", None, {**_INCOMING, "coordinator_term": 0}),
)


def _claim_inputs(values: dict[str, Any], names: Sequence[str]) -> dict[str, widgets.Widget]:
    """One input per claim field: terms are never negative, times may be."""
    return {
        name: (_integer(name, values[name], 0 if name == "coordinator_term" else -_MAX_INT)
               if name in _INT_FIELDS else _text(name, values[name]))
        for name in names
    }


class _ChartHolder:
    """A widget with one :class:`Chart`; ``figure`` is the figure it shows."""

    chart: Chart

    @property
    def figure(self) -> go.Figure:
        return self.chart.figure


class _FenceExplorer(_ChartHolder, widgets.VBox):
    """A stored claim, an incoming message and the stage's clock, judged on every edit."""

    has_stored: widgets.Checkbox
    stored: dict[str, widgets.Widget]
    now: widgets.Widget
    _loading: bool

    def refresh(self) -> None:
        raise NotImplementedError

    def _set_fields(self, stored: Mapping[str, Any] | None, inputs: dict[str, widgets.Widget],
                    values: Mapping[str, Any] | None, has_stored: bool | None,
                    now_unix_ms: int | None) -> None:
        self._loading = True
        try:
            if has_stored is not None:
                self.has_stored.value = has_stored
            for name, value in (stored or {}).items():
                self.stored[name].value = value
            for name, value in (values or {}).items():
                inputs[name].value = value
            if now_unix_ms is not None:
                self.now.value = now_unix_ms
        finally:
            self._loading = False
        self.refresh()

    def _changed(self) -> None:
        if not self._loading:
            self.refresh()


class ClaimExplorer(_FenceExplorer):
    """Edit a claim and see which branch of the claim decision decides it."""

    def __init__(self) -> None:
        self.preset = widgets.Dropdown(
            options=[(p.title, i) for i, p in enumerate(CLAIM_PRESETS)], value=0,
            description="situation", layout=widgets.Layout(width="520px"),
            style={"description_width": "80px"})
        self.has_stored = widgets.Checkbox(description="the stage already holds a claim for "
                                           "this model", value=False, indent=False)
        self.stored = _claim_inputs(_STORED, STORED_FIELDS)
        self.incoming = _claim_inputs(_INCOMING, CLAIM_FIELDS)
        self.now = _integer("stage clock (ms)", _NOW)
        self.verdict = widgets.HTML()
        self.path_label = widgets.HTML()
        self.chart = Chart()
        self.decision: ClaimDecision | None = None
        self.path: tuple[str, ...] = ()
        self._loading = False

        stored_box = widgets.VBox([self.has_stored, *self.stored.values()],
                                  layout=widgets.Layout(border="1px solid #dee2e6",
                                                        padding="4px"))
        incoming_box = widgets.VBox([widgets.HTML("<b>incoming ClaimCoordinator</b>"),
                                     *self.incoming.values(), self.now],
                                    layout=widgets.Layout(border="1px solid #dee2e6",
                                                          padding="4px"))
        stored_title = widgets.HTML("<b>stored claim</b> (same model/package/manifest)")
        super().__init__([
            widgets.HTML(STYLE), self.preset,
            widgets.HBox([widgets.VBox([stored_title, stored_box]), incoming_box]),
            self.verdict, self.path_label, self.chart,
        ])
        self.add_class("fx-root")
        self.preset.observe(lambda change: self.load_preset(change["new"]), names="value")
        for widget in (self.has_stored, self.now, *self.stored.values(),
                       *self.incoming.values()):
            widget.observe(lambda _change: self._changed(), names="value")
        self.load_preset(0)

    def load_preset(self, index: int) -> None:
        preset = CLAIM_PRESETS[index]
        self.set_values(stored=preset.stored or _STORED, incoming=preset.incoming,
                        has_stored=preset.stored is not None, now_unix_ms=preset.now_unix_ms)

    def set_values(self, *, stored: Mapping[str, Any] | None = None,
                   incoming: Mapping[str, Any] | None = None,
                   has_stored: bool | None = None, now_unix_ms: int | None = None) -> None:
        """Set any fields at once (one refresh), as a person would by editing them."""
        self._set_fields(stored, self.incoming, incoming, has_stored, now_unix_ms)

    def claims(self) -> tuple[CoordinatorClaim | None, CoordinatorClaim]:
        incoming = CoordinatorClaim(**{n: w.value for n, w in self.incoming.items()})
        if not self.has_stored.value:
            return None, incoming
        key = {name: getattr(incoming, name)
               for name in ("model_id", "package_ref", "manifest_sha256")}
        stored = CoordinatorClaim(**key, **{n: w.value for n, w in self.stored.items()})
        return stored, incoming

    def refresh(self) -> None:
        stored, incoming = self.claims()
        fence = ClaimFence({stored.key: stored} if stored is not None else None)
        decision = fence.accept_claim(incoming, self.now.value)
        self.decision = decision
        self.path = claim_decision_path(decision)
        notes = []
        if decision.accepted:
            notes.append("The stage now stores this claim for the model.")
        if decision.supersedes_term is not None:
            notes.append(f"Running work and preparations with term {decision.supersedes_term} "
                         "are shut down or cancelled.")
        self.verdict.value = _verdict_html(decision.accepted, decision.message, notes)
        branch = _path_text(self.path, CLAIM_FLOW_NODES, CLAIM_FLOW_EDGES)
        self.path_label.value = f"<div class='fx-note'>branch: {escape(branch)}</div>"
        self.chart.show(claim_flowchart_figure(decision))


# --- loads ------------------------------------------------------------------------------------

LOAD_FIELDS: tuple[str, ...] = (
    "topology_id", "run_id", "coordinator_id", "coordinator_term",
)


@dataclass(frozen=True)
class LoadPreset:
    title: str
    stored: Mapping[str, Any] | None
    load: Mapping[str, Any]
    now_unix_ms: int = _NOW


_LOAD = {name: _STORED[name] for name in LOAD_FIELDS}
LOAD_PRESETS: tuple[LoadPreset, ...] = (
    LoadPreset("Load matching the accepted claim", _STORED, {**_LOAD}),
    LoadPreset("Load at the lease instant (still accepted)", _STORED, {**_LOAD},
               _NOW + 60_000),
    LoadPreset("Delayed load after the lease", _STORED, {**_LOAD}, _NOW + 60_001),
    LoadPreset("Old coordinator's load with a stale term", _STORED,
               {**_LOAD, "coordinator_term": 9}),
    LoadPreset("Right term, wrong coordinator", _STORED, {**_LOAD, "coordinator_id": "coord-9"}),
    LoadPreset("Right term, another run", _STORED, {**_LOAD, "run_id": "run-9"}),
    LoadPreset("No claim for this model yet", None, {**_LOAD}),
    LoadPreset("Local or legacy load: term 0, no coordinator", None,
               {**_LOAD, "coordinator_term": 0, "coordinator_id": ""}),
    LoadPreset("Term 0 but a coordinator id", _STORED, {**_LOAD, "coordinator_term": 0}),
)


class LoadExplorer(_FenceExplorer):
    """Edit a ``LoadStage`` and see which branch of the load fence decides it."""

    def __init__(self) -> None:
        self.preset = widgets.Dropdown(
            options=[(p.title, i) for i, p in enumerate(LOAD_PRESETS)], value=0,
            description="situation", layout=widgets.Layout(width="520px"),
            style={"description_width": "80px"})
        self.has_stored = widgets.Checkbox(description="the stage holds a claim for this "
                                           "model", value=True, indent=False)
        self.stored = _claim_inputs(_STORED, STORED_FIELDS)
        self.load = {
            name: (_integer(name, _LOAD[name], 0) if name in _INT_FIELDS
                   else _text(name, _LOAD[name]))
            for name in LOAD_FIELDS
        }
        self.now = _integer("stage clock (ms)", _NOW)
        self.verdict = widgets.HTML()
        self.path_label = widgets.HTML()
        self.chart = Chart()
        self.decision: LoadDecision | None = None
        self.path: tuple[str, ...] = ()
        self._loading = False
        super().__init__([
            widgets.HTML(STYLE), self.preset,
            widgets.HBox([
                widgets.VBox([widgets.HTML("<b>stored claim</b>"), self.has_stored,
                              *self.stored.values()]),
                widgets.VBox([widgets.HTML("<b>incoming LoadStage</b> (same model)"),
                              *self.load.values(), self.now]),
            ]),
            self.verdict, self.path_label, self.chart,
        ])
        self.add_class("fx-root")
        self.preset.observe(lambda change: self.load_preset(change["new"]), names="value")
        for widget in (self.has_stored, self.now, *self.stored.values(), *self.load.values()):
            widget.observe(lambda _change: self._changed(), names="value")
        self.load_preset(0)

    def load_preset(self, index: int) -> None:
        preset = LOAD_PRESETS[index]
        self.set_values(stored=preset.stored or _STORED, load=preset.load,
                        has_stored=preset.stored is not None, now_unix_ms=preset.now_unix_ms)

    def set_values(self, *, stored: Mapping[str, Any] | None = None,
                   load: Mapping[str, Any] | None = None, has_stored: bool | None = None,
                   now_unix_ms: int | None = None) -> None:
        """Set any fields at once (one refresh), as a person would by editing them."""
        self._set_fields(stored, self.load, load, has_stored, now_unix_ms)

    def refresh(self) -> None:
        key = {name: _INCOMING[name] for name in ("model_id", "package_ref", "manifest_sha256")}
        stored = (CoordinatorClaim(**key, **{n: w.value for n, w in self.stored.items()})
                  if self.has_stored.value else None)
        load = LoadClaimRef(**key, **{n: w.value for n, w in self.load.items()})
        fence = ClaimFence({stored.key: stored} if stored is not None else None)
        decision = fence.validate_load(load, self.now.value)
        self.decision = decision
        self.path = load_decision_path(decision)
        self.verdict.value = _verdict_html(decision.accepted, decision.message)
        branch = _path_text(self.path, LOAD_FLOW_NODES, LOAD_FLOW_EDGES)
        self.path_label.value = f"<div class='fx-note'>branch: {escape(branch)}</div>"
        self.chart.show(load_flowchart_figure(decision))


# --- quorum -----------------------------------------------------------------------------------


class QuorumExplorer(_ChartHolder, widgets.VBox):
    """Sliders for planned stages and accepts; says whether the coordinator may load."""

    def __init__(self, planned_stages: int = 3, accepts: int = 2, max_planned: int = 9) -> None:
        self.max_planned = max_planned
        self.planned = widgets.IntSlider(value=planned_stages, min=1, max=max_planned,
                                         description="planned stages",
                                         style={"description_width": "120px"},
                                         layout=widgets.Layout(width="460px"))
        self.accepts = widgets.IntSlider(value=min(accepts, planned_stages), min=0,
                                         max=planned_stages, description="accepts",
                                         style={"description_width": "120px"},
                                         layout=widgets.Layout(width="460px"))
        self.verdict = widgets.HTML()
        self.chart = Chart()
        super().__init__([widgets.HTML(STYLE), self.planned, self.accepts, self.verdict,
                          self.chart])
        self.add_class("fx-root")
        self.planned.observe(lambda _c: self._planned_changed(), names="value")
        self.accepts.observe(lambda _c: self.refresh(), names="value")
        self.refresh()

    @property
    def quorum(self) -> int:
        return quorum_requirement(self.planned.value)

    @property
    def reached(self) -> bool:
        return self.accepts.value >= self.quorum

    def _planned_changed(self) -> None:
        # Lowering the maximum clamps the value, which refreshes by itself.
        clamps = self.accepts.value > self.planned.value
        self.accepts.max = self.planned.value
        if not clamps:
            self.refresh()

    def refresh(self) -> None:
        planned, accepts = self.planned.value, self.accepts.value
        headline = (f"{accepts} of {planned} planned stages accepted; quorum is "
                    f"{planned} // 2 + 1 = {self.quorum}: "
                    + ("the coordinator may load the split." if self.reached
                       else "the coordinator must not load the split."))
        note = (f"Any two sets of {self.quorum} stages out of {planned} share at least "
                f"{2 * self.quorum - planned} stage(s), so two coordinators cannot both "
                f"collect a quorum of the same planned stages with the same term.")
        self.verdict.value = _verdict_html(self.reached, headline, [note])
        self.chart.show(quorum_figure(planned, accepts,
                                               max_planned=self.max_planned))


# --- stepping through runs --------------------------------------------------------------------


class EventStepper(_ChartHolder, widgets.VBox):
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
        self.outcome.value = _verdict_html(result.outcome.met, result.outcome.summary) + (
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
                  f"<div class='fx-note'>Shortest counterexample: {len(example.steps)} steps in "
                  f"configuration {escape(config_name)}.</div>"
                  f"<div class='fx-verdict fx-rejected'>{escape(example.explanation)}</div>")
        self.show(example.events_frame(), title=f"Counterexample: {name}", header=header)
        self.trace.value = "<div class='fx-event'>" + escape(str(example)) + "</div>"


# --- the model checker's results --------------------------------------------------------------


def _frame_html(frame: pd.DataFrame) -> str:
    """``frame`` as a table, a missing value as an empty cell (pandas writes a missing
    nullable integer as "<NA>" whatever ``na_rep`` says)."""
    shown = frame.astype(object).where(frame.notna(), "")
    return shown.to_html(index=False, escape=True, border=0, classes="fx-table")


class ScenarioTable(widgets.HTML):
    """The design's scenarios in one table (:func:`~planner.fence.scenarios.scenario_table`:
    number, title, expected result, whether it held, summary), every text whole: a
    DataFrame's own view cuts long cells short with "..."."""

    def __init__(self, results: Sequence[ScenarioResult] | None = None) -> None:
        self.frame = scenario_table(results)
        super().__init__(STYLE + _frame_html(self.frame))
        self.add_class("fx-scenario-table")


class CheckResults(_ChartHolder, widgets.VBox):
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
            self.status.value = _verdict_html(False, "Saved results are stale: nothing here "
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
            self.progress_text.value = _verdict_html(False, "The check stopped",
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
        self.status.value = _verdict_html(not unexpected, headline, notes)
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
