"""Explore the claim fence's decisions: :class:`ClaimExplorer` (edit a stored claim and
an incoming one, see the stage's decision and the branch of the claim flowchart that
decides it) and :class:`LoadExplorer` (the same for ``LoadStage``), each with ready-made
situations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

import ipywidgets as widgets

from planner.errors import CodedError
from planner.fence.claims import (
    ClaimDecision,
    ClaimFence,
    CoordinatorClaim,
    LoadClaimRef,
    LoadDecision,
)
from planner.figures.fence import (
    CLAIM_FLOW_EDGES,
    CLAIM_FLOW_NODES,
    LOAD_FLOW_EDGES,
    LOAD_FLOW_NODES,
    claim_decision_path,
    claim_flowchart_figure,
    load_decision_path,
    load_flowchart_figure,
)
from planner.workbench._fence_widgets import (
    LEAST_FENCE_INT,
    STYLE,
    ChartHolder,
    integer_box,
    path_text,
    read_integer,
    text_box,
    verdict_html,
)
from planner.workbench.chart import Chart

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


def _claim_inputs(values: dict[str, Any], names: Sequence[str]) -> dict[str, widgets.Text]:
    """One input per claim field: terms are never negative, times may be."""
    return {
        name: (integer_box(name, values[name]) if name in _INT_FIELDS
               else text_box(name, values[name]))
        for name in names
    }


class _FenceExplorer(ChartHolder, widgets.VBox):
    """A stored claim, an incoming message and the stage's clock, judged on every edit."""

    has_stored: widgets.Checkbox
    stored: dict[str, widgets.Text]
    now: widgets.Text
    _loading: bool

    verdict: widgets.HTML
    path_label: widgets.HTML
    decision: ClaimDecision | LoadDecision | None
    path: tuple[str, ...]

    def refresh(self) -> None:
        """Judge what the boxes hold, or say which box cannot be read."""
        try:
            self.judge()
        except CodedError as error:
            self.decision, self.path = None, ()
            self.verdict.value = verdict_html(False, f"Not decided: {error.message}")
            self.path_label.value = ""

    def judge(self) -> None:
        raise NotImplementedError

    @staticmethod
    def _values(inputs: Mapping[str, widgets.Text]) -> dict[str, Any]:
        """Each box's value: terms (never negative) and times read as whole numbers."""
        return {name: (read_integer(box, name, minimum=0 if name == "coordinator_term"
                                    else LEAST_FENCE_INT)
                       if name in _INT_FIELDS else box.value)
                for name, box in inputs.items()}

    def _set_fields(self, stored: Mapping[str, Any] | None, inputs: Mapping[str, widgets.Text],
                    values: Mapping[str, Any] | None, has_stored: bool | None,
                    now_unix_ms: int | None) -> None:
        self._loading = True
        try:
            if has_stored is not None:
                self.has_stored.value = has_stored
            for name, value in (stored or {}).items():
                self.stored[name].value = str(value)
            for name, value in (values or {}).items():
                inputs[name].value = str(value)
            if now_unix_ms is not None:
                self.now.value = str(now_unix_ms)
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
        # As wide as its label: the widget's default width cut it off.
        self.has_stored = widgets.Checkbox(description="the stage already holds a claim for "
                                           "this model", value=False, indent=False,
                                           layout=widgets.Layout(width="auto"))
        self.stored = _claim_inputs(_STORED, STORED_FIELDS)
        self.incoming = _claim_inputs(_INCOMING, CLAIM_FIELDS)
        self.now = integer_box("stage clock (ms)", _NOW)
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
        """The stored claim (``None``: none) and the incoming one, as the boxes hold them.
        Raises a :class:`~planner.errors.CodedError` naming a box that cannot be read."""
        incoming = CoordinatorClaim(**self._values(self.incoming))
        if not self.has_stored.value:
            return None, incoming
        key = {name: getattr(incoming, name)
               for name in ("model_id", "package_ref", "manifest_sha256")}
        stored = CoordinatorClaim(**key, **self._values(self.stored))
        return stored, incoming

    def judge(self) -> None:
        stored, incoming = self.claims()
        fence = ClaimFence({stored.key: stored} if stored is not None else None)
        decision = fence.accept_claim(incoming, read_integer(self.now, "stage clock"))
        self.decision = decision
        self.path = claim_decision_path(decision)
        notes = []
        if decision.accepted:
            notes.append("The stage now stores this claim for the model.")
        if decision.supersedes_term is not None:
            notes.append(f"Running work and preparations with term {decision.supersedes_term} "
                         "are shut down or cancelled.")
        self.verdict.value = verdict_html(decision.accepted, decision.message, notes)
        branch = path_text(self.path, CLAIM_FLOW_NODES, CLAIM_FLOW_EDGES)
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
                                           "model", value=True, indent=False,
                                           layout=widgets.Layout(width="auto"))
        self.stored = _claim_inputs(_STORED, STORED_FIELDS)
        self.load = {
            name: (integer_box(name, _LOAD[name]) if name in _INT_FIELDS
                   else text_box(name, _LOAD[name]))
            for name in LOAD_FIELDS
        }
        self.now = integer_box("stage clock (ms)", _NOW)
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

    def judge(self) -> None:
        key = {name: _INCOMING[name] for name in ("model_id", "package_ref", "manifest_sha256")}
        stored = (CoordinatorClaim(**key, **self._values(self.stored))
                  if self.has_stored.value else None)
        load = LoadClaimRef(**key, **self._values(self.load))
        fence = ClaimFence({stored.key: stored} if stored is not None else None)
        decision = fence.validate_load(load, read_integer(self.now, "stage clock"))
        self.decision = decision
        self.path = load_decision_path(decision)
        self.verdict.value = verdict_html(decision.accepted, decision.message)
        branch = path_text(self.path, LOAD_FLOW_NODES, LOAD_FLOW_EDGES)
        self.path_label.value = f"<div class='fx-note'>branch: {escape(branch)}</div>"
        self.chart.show(load_flowchart_figure(decision))

