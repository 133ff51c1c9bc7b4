"""What a check found, as plain data: :class:`Counterexample` (with its event log),
:class:`PropertyResult`, :class:`CheckResult` and :class:`CheckReport` over several
configurations, their JSON form, and the saved report of the default configurations
(:func:`write_report`, :func:`load_report`)."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from planner.errors import CodedError
from planner.fence.check._properties import MUST_HOLD, PROPERTIES, PROPERTY_NAMES, property_named
from planner.fence.check.configuration import (
    DEFAULT_CONFIGS,
    START_UNIX_MS,
    CheckConfig,
    CheckConfigError,
    NamedConfig,
    as_mapping,
    listed,
    record,
    stage_id,
)
from planner.fence.check.model import (
    CAMPAIGN,
    DELIVER_CLAIM,
    DELIVER_LOAD,
    DELIVER_REPLY,
    DELIVER_STOP,
    DROP,
    MESSAGE_NAMES,
    REPLY_MESSAGE,
    SEND_LOAD,
    SEND_STOP,
    TICK,
    TraceStep,
)
from planner.fence.errors import FenceError

EVENT_COLUMNS: tuple[str, ...] = (
    "seq", "step", "time_ms", "node", "clock_ms", "kind", "message", "peer", "term",
    "accepted", "reason", "lease_until_ms", "detail",
)


def _event_rows(number: int, step: TraceStep) -> list[dict[str, Any]]:
    """One trace step as rows of an event log shaped like the simulator's."""
    time_ms = step.now_unix_ms - START_UNIX_MS
    stage_clock = (None if step.stage_now_unix_ms is None
                   else step.stage_now_unix_ms - START_UNIX_MS)
    lease = None if step.lease_until_unix_ms is None else (
        step.lease_until_unix_ms - START_UNIX_MS)

    def row(node: str | None, kind: str, clock: int | None = None, **values: Any) -> dict[str, Any]:
        base = {"step": number, "time_ms": time_ms, "node": node, "kind": kind,
                "clock_ms": time_ms if clock is None else clock, "message": None, "peer": None,
                "term": step.term, "accepted": None, "reason": None, "lease_until_ms": None,
                "detail": ""}
        base.update(values)
        return base

    kind = step.kind
    if kind in (CAMPAIGN, SEND_LOAD, SEND_STOP):
        return [row(step.coordinator_id, "send", message=step.message, peer=target,
                    detail=step.detail) for target in step.targets]
    if kind == TICK:
        return [row("clock", "tick", term=None, detail=step.detail)]
    if kind == DROP:
        reply = step.message == MESSAGE_NAMES[REPLY_MESSAGE]
        sender, receiver = ((step.stage_id, step.coordinator_id) if reply
                            else (step.coordinator_id, step.stage_id))
        return [row(sender, "drop", message=step.message, peer=receiver, reason="lost",
                    detail=step.detail)]
    if kind == DELIVER_REPLY:
        return [row(step.coordinator_id, "receive", message=step.message, peer=step.stage_id,
                    accepted=True, detail=step.detail)]
    judged = {DELIVER_CLAIM: "claim", DELIVER_LOAD: "load", DELIVER_STOP: "stop"}[kind]
    rows = [row(step.stage_id, judged, stage_clock, message=step.message,
                peer=step.coordinator_id, accepted=step.accepted, reason=step.reason,
                lease_until_ms=lease, detail=step.detail)]
    if step.ended is not None:
        rows.append(row(step.stage_id, "shutdown" if kind == DELIVER_CLAIM else "stopped",
                        stage_clock, term=step.ended.coordinator_term,
                        detail=f"ended {step.ended.describe()}"))
    if kind == DELIVER_CLAIM and step.accepted:
        rows.append(row(step.stage_id, "send", stage_clock,
                        message=MESSAGE_NAMES[REPLY_MESSAGE], peer=step.coordinator_id))
    return rows


@dataclass(frozen=True)
class Counterexample:
    """A shortest run that breaks a property, from an initial state."""

    property_name: str
    explanation: str
    clock_offsets_ms: tuple[int, ...]
    steps: tuple[TraceStep, ...]

    @property
    def lines(self) -> list[str]:
        offsets = ", ".join(
            f"{stage_id(i)} {offset:+d} ms" for i, offset in enumerate(self.clock_offsets_ms))
        return ([f"start: stage clock offsets {offsets}"]
                + [f"{n}. {step.text}" for n, step in enumerate(self.steps, 1)]
                + [f"violated: {self.explanation}"])

    def __str__(self) -> str:
        return "\n".join(self.lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "property_name": self.property_name,
            "explanation": self.explanation,
            "clock_offsets_ms": list(self.clock_offsets_ms),
            "steps": [step.to_dict() for step in self.steps],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Counterexample:
        values = record(data, "counterexample",
                        ("property_name", "explanation", "clock_offsets_ms", "steps"))
        return cls(values["property_name"], values["explanation"],
                   tuple(listed(values["clock_offsets_ms"], "counterexample.clock_offsets_ms")),
                   tuple(TraceStep.from_dict(step)
                         for step in listed(values["steps"], "counterexample.steps")))

    def events_frame(self) -> pd.DataFrame:
        """The trace as an event log (columns :data:`EVENT_COLUMNS`), times in ms from 0."""
        rows = [r for n, step in enumerate(self.steps, 1) for r in _event_rows(n, step)]
        for seq, row in enumerate(rows):
            row["seq"] = seq
        return pd.DataFrame(rows, columns=list(EVENT_COLUMNS))

    def steps_frame(self) -> pd.DataFrame:
        """One row per step: number, true tick, kind, who, answer and the readable line."""
        return pd.DataFrame(
            [
                {"step": n, "tick": step.tick, "kind": step.kind,
                 "coordinator_id": step.coordinator_id, "stage_id": step.stage_id,
                 "term": step.term, "accepted": step.accepted, "reason": step.reason,
                 "detail": step.detail}
                for n, step in enumerate(self.steps, 1)
            ],
            columns=["step", "tick", "kind", "coordinator_id", "stage_id", "term", "accepted",
                     "reason", "detail"],
        )


@dataclass(frozen=True)
class PropertyResult:
    name: str
    title: str
    expectation: str
    holds: bool
    counterexample: Counterexample | None = None

    @property
    def as_expected(self) -> bool:
        return self.holds == (self.expectation == MUST_HOLD)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "expectation": self.expectation,
            "holds": self.holds,
            "as_expected": self.as_expected,
            "counterexample": None if self.counterexample is None
            else self.counterexample.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PropertyResult:
        values = record(data, "property", ("name", "title", "expectation", "holds"),
                        ("as_expected", "counterexample"))
        example = values.get("counterexample")
        return cls(values["name"], values["title"], values["expectation"], values["holds"],
                   None if example is None else Counterexample.from_dict(example))


@dataclass(frozen=True)
class CheckResult:
    """What one exploration found.

    ``complete`` is False when the state budget cut a ``partial`` exploration short;
    "holds" then only means that no state explored breaks the property.
    """

    config: CheckConfig
    states_explored: int
    transitions: int
    max_depth: int
    complete: bool
    properties: tuple[PropertyResult, ...]

    def result(self, name: str) -> PropertyResult:
        for result in self.properties:
            if result.name == name:
                return result
        raise CheckConfigError("property", "was not judged in this check; judged: "
                               f"{', '.join(r.name for r in self.properties)}", name)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "property": r.name,
                    "statement": r.title,
                    "expected": r.expectation,
                    "holds": r.holds,
                    "as_expected": r.as_expected,
                    "counterexample_steps": None if r.counterexample is None
                    else len(r.counterexample.steps),
                }
                for r in self.properties
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "states_explored": self.states_explored,
            "transitions": self.transitions,
            "max_depth": self.max_depth,
            "complete": self.complete,
            "properties": [r.to_dict() for r in self.properties],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckResult:
        values = record(data, "result", ("config", "states_explored", "transitions",
                                          "max_depth", "complete", "properties"))
        return cls(CheckConfig.from_dict(values["config"]), values["states_explored"],
                   values["transitions"], values["max_depth"], values["complete"],
                   tuple(PropertyResult.from_dict(r)
                         for r in listed(values["properties"], "result.properties")))


@dataclass(frozen=True)
class CheckReport:
    """Results over several configurations, property by property.

    ``model_fingerprint`` is :func:`model_fingerprint` of the code that computed them
    (empty when unknown): a saved report whose fingerprint is not today's is stale.
    """

    runs: tuple[tuple[NamedConfig, CheckResult], ...]
    model_fingerprint: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"format": REPORT_FORMAT,
                "model_fingerprint": self.model_fingerprint,
                "runs": [{**named.to_dict(), "result": result.to_dict()}
                         for named, result in self.runs]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckReport:
        values = as_mapping(data, "report")
        if values.get("format") != REPORT_FORMAT:
            raise CheckConfigError("format", f"a check report of format {REPORT_FORMAT} is "
                                   "expected", values.get("format"))
        values = record(values, "report", ("format", "model_fingerprint", "runs"))
        fingerprint = values["model_fingerprint"]
        if not isinstance(fingerprint, str):
            raise CheckConfigError("report.model_fingerprint", "must be a string", fingerprint)
        runs = []
        for index, run in enumerate(listed(values["runs"], "report.runs")):
            where = f"report.runs[{index}]"
            fields = record(run, where, ("name", "purpose", "config", "result"))
            named = NamedConfig.from_dict({key: fields[key]
                                           for key in ("name", "purpose", "config")})
            runs.append((named, CheckResult.from_dict(fields["result"])))
        return cls(tuple(runs), fingerprint)

    @property
    def states_explored(self) -> int:
        return sum(result.states_explored for _, result in self.runs)

    def result(self, config_name: str) -> CheckResult:
        for named, result in self.runs:
            if named.name == config_name:
                return result
        raise CheckConfigError("config_name", "not one of the checked configurations "
                               f"({', '.join(n.name for n, _ in self.runs)})", config_name)

    def shortest_counterexample(self, property_name: str) -> tuple[str, Counterexample] | None:
        """The configuration name and the shortest counterexample over all of them."""
        property_named(property_name)
        found = [
            (named.name, example) for named, result in self.runs
            if (example := result.result(property_name).counterexample) is not None
        ]
        if not found:
            return None
        return min(found, key=lambda pair: len(pair[1].steps))

    def verdict(self, property_name: str) -> PropertyResult:
        """Broken when any configuration breaks it (with the shortest counterexample)."""
        shortest = self.shortest_counterexample(property_name)
        results = {named.name: result.result(property_name) for named, result in self.runs}
        if shortest is not None:
            return results[shortest[0]]
        return next(iter(results.values()))

    def broken_in(self, property_name: str) -> list[str]:
        return [named.name for named, result in self.runs
                if not result.result(property_name).holds]

    def summary_frame(self) -> pd.DataFrame:
        rows = []
        for prop in PROPERTIES:
            verdict = self.verdict(prop.name)
            rows.append({
                "property": prop.name,
                "statement": prop.title,
                "expected": prop.expectation,
                "holds": verdict.holds,
                "as_expected": verdict.as_expected,
                "broken_in": ", ".join(self.broken_in(prop.name)),
                "shortest_counterexample_steps": None if verdict.counterexample is None
                else len(verdict.counterexample.steps),
            })
        frame = pd.DataFrame(rows)
        # A count with gaps stays a count (6, not 6.0): pandas' nullable integers.
        frame["shortest_counterexample_steps"] = frame[
            "shortest_counterexample_steps"].astype("Int64")
        return frame

    def runs_frame(self) -> pd.DataFrame:
        return pd.DataFrame([
            {
                "configuration": named.name,
                "purpose": named.purpose,
                "model": named.config.describe(),
                "states_explored": result.states_explored,
                "transitions": result.transitions,
                "max_depth": result.max_depth,
                "complete": result.complete,
            }
            for named, result in self.runs
        ])


# --- results computed once -----------------------------------------------------------------

REPORT_FORMAT = 2
REPORT_FILE = "fence_check.json"
"""The default configurations' report, in the data directory; ``make fence-check`` writes
it and a slow test recomputes it, so readers (the fencing notebook) need not wait."""


class StaleCheckResults(FenceError):
    """The saved checker report is missing, unreadable or not for today's configurations."""

    codes = ("StaleCheckResults",)

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}; regenerate it with `make fence-check`",
                         path=str(path))
        self.path = path


MODEL_MODULES: tuple[str, ...] = (
    "planner.fence.claims",
    "planner.fence.runtime",
    "planner.fence.check.configuration",
    "planner.fence.check.model",
    "planner.fence.check._properties",
    "planner.fence.check.exploration",
)
"""The modules whose code decides what a check finds: the fence rules the stages judge
with, and the checker's configurations, transitions, properties and search order."""


def model_fingerprint(modules: Sequence[str] = MODEL_MODULES) -> str:
    """A SHA-256 digest of the code of ``modules``, as Python reads it.

    Comments, docstrings and layout do not count (the syntax tree is hashed, not the
    text), so rewording a comment keeps saved results current while any change to what
    the code does makes them stale. The modules are read, not imported.
    """
    digest = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise CheckConfigError("modules", "names no module with source", name)
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"), spec.origin)
        digest.update(f"{name}\n{_canonical(_without_docstrings(tree))}\n".encode())
    return digest.hexdigest()


def _without_docstrings(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:]
    return tree


def _canonical(node: Any) -> str:
    # Written out by hand rather than with ast.dump, whose output differs between Python
    # versions (3.13 leaves out empty fields); empty fields are left out here on every one.
    if isinstance(node, ast.AST):
        fields = [f"{name}={_canonical(value)}" for name, value in ast.iter_fields(node)
                  if value is not None and value != []]
        return f"{type(node).__name__}({' '.join(fields)})"
    if isinstance(node, list):
        return f"[{','.join(_canonical(item) for item in node)}]"
    return repr(node)


def report_path() -> Path:
    """Where the default configurations' report is kept (the data directory)."""
    from planner.models.presets import data_dir  # the one place the data directory is found

    return data_dir() / REPORT_FILE


def write_report(report: CheckReport, path: Path | None = None) -> Path:
    """Save ``report`` as JSON (at :func:`report_path` unless given); returns the path."""
    target = report_path() if path is None else Path(path)
    text = json.dumps(report.to_dict(), indent=1, ensure_ascii=False) + "\n"
    temporary = target.with_name(f".{target.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(target)
    return target


def load_report(path: Path | None = None) -> CheckReport:
    """The saved report of the default configurations, refused when it is not for
    today's :data:`DEFAULT_CONFIGS` (names, purposes and configurations), today's
    properties, or today's code (:func:`model_fingerprint`)."""
    source = report_path() if path is None else Path(path)
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StaleCheckResults(source, "no saved checker report") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise StaleCheckResults(source, f"cannot be read ({error})") from None
    try:
        report = CheckReport.from_dict(data)
    except (CodedError, KeyError, TypeError) as error:
        raise StaleCheckResults(source, f"is not a checker report ({error})") from None
    if tuple(named for named, _ in report.runs) != DEFAULT_CONFIGS:
        raise StaleCheckResults(source, "was computed for other configurations than "
                                "today's defaults")
    if tuple(r.name for _, result in report.runs for r in result.properties) != (
            PROPERTY_NAMES * len(report.runs)):
        raise StaleCheckResults(source, "judges other properties than today's")
    if report.model_fingerprint != model_fingerprint():
        raise StaleCheckResults(source, "was computed with other code than today's fence "
                                "rules and checker model (its model_fingerprint differs)")
    return report
