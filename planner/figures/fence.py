"""Plotly figures of the claim fence: decision flowcharts, quorum, sequence charts.

Plain functions from data to a ``plotly.graph_objects.Figure``. The sequence and term
figures read an event log shaped like the simulator's (``Simulation.events_frame()``,
``ScenarioResult.events_frame()`` or ``Counterexample.events_frame()``): columns
``seq``, ``time_ms``, ``node``, ``clock_ms``, ``kind``, ``message``, ``peer``, ``term``,
``accepted``, ``reason`` and ``detail``. A message is a ``send`` row at its sender
(``peer`` is the receiver) and, once it arrives, a row at the receiver (``claim``,
``load``, ``stop`` at a stage, ``receive`` at a coordinator) whose ``peer`` is the sender;
a ``drop`` row at the sender means it was lost.
"""

from __future__ import annotations

import itertools
from collections import defaultdict, deque
from collections.abc import Sequence
from typing import Any, Literal

import pandas as pd
import plotly.graph_objects as go

from planner._validate import integer
from planner.fence.check import MUST_HOLD, CheckReport
from planner.fence.claims import (
    RULE_CLAIM_EXISTS,
    RULE_FENCED_FIELDS,
    RULE_FIRST_CLAIM,
    RULE_LEASE,
    RULE_MATCH,
    RULE_NEWER_TERM,
    RULE_SAME_EPOCH,
    RULE_SHAPE,
    RULE_STALE_TERM,
    RULE_UNFENCED,
    ClaimDecision,
    LoadDecision,
    quorum_requirement,
)
from planner.fence.errors import InvalidFenceInput, bad_input
from planner.figures._style import axis, base_layout, plotly_text

ACCEPT_COLOUR = "#2e8b57"
REJECT_COLOUR = "#c44e52"
PATH_COLOUR = "#4c72b0"
IDLE_COLOUR = "#e9ecef"

MESSAGE_COLOURS: dict[str, str] = {
    "ClaimCoordinator": "#4c72b0",
    "ClaimReply": "#8fb0d9",
    "LoadStage": "#dd8452",
    "LoadReply": "#f0b98d",
    "StageReady": "#55a868",
    "StopStage": "#8172b3",
    "StopReply": "#b8addb",
}
OTHER_MESSAGES = "other messages"
SEQUENCE_TRACES: tuple[str, ...] = (
    *MESSAGE_COLOURS, OTHER_MESSAGES, "in flight", "node event", "accepted", "rejected",
    "lost", "current",
)
"""Sequence figure traces, in order (always all present, possibly empty)."""

RECEIPT_KINDS = frozenset({"claim", "load", "stop", "receive", "ignored"})
_SPECIAL_LANES = ("network", "clock")


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    # Sequence charts carry lane names on the left and a title line above.
    return base_layout(title, **{"margin": {"l": 80, "r": 20, "t": 60, "b": 50}, **extra})


# --- decision flowcharts -------------------------------------------------------------------

# (node id, label, x, y). The questions run down the middle as in the design's
# flowcharts; each outcome gets its own box beside the question that decides it, so
# every arrow is straight and none crosses another.
CLAIM_FLOW_NODES: tuple[tuple[str, str, float, float], ...] = (
    ("claim", "CoordinatorClaim", 0.0, 7.0),
    ("shape", "Shape valid?", 0.0, 6.0),
    ("existing", "Existing claim?", 0.0, 5.0),
    ("stale", "term < current term?", 0.0, 4.0),
    ("same_term", "same term?", 0.0, 3.0),
    ("same_epoch", "same topology/run/<br>coordinator/hashes?", 0.0, 2.0),
    ("reject_shape", "Reject: missing field,<br>term 0 or expired lease", 2.8, 6.0),
    ("accept_first", "Accept claim<br>(first for this model)", -2.8, 5.0),
    ("reject_stale", "Reject: StaleTerm", 2.8, 4.0),
    ("supersede", "Accept and supersede<br>older term", -2.8, 3.0),
    ("reject_conflict", "Reject:<br>ConflictingSameTerm", 2.8, 2.0),
    ("accept_renewal", "Accept claim<br>(same epoch: lease renewed)", 0.0, 1.0),
)
CLAIM_FLOW_EDGES: tuple[tuple[str, str, str], ...] = (
    ("claim", "shape", ""),
    ("shape", "reject_shape", "no"),
    ("shape", "existing", "ok"),
    ("existing", "accept_first", "no"),
    ("existing", "stale", "yes"),
    ("stale", "reject_stale", "yes"),
    ("stale", "same_term", "no"),
    ("same_term", "supersede", "no, newer term"),
    ("same_term", "same_epoch", "yes"),
    ("same_epoch", "reject_conflict", "no"),
    ("same_epoch", "accept_renewal", "yes"),
)

LOAD_FLOW_NODES: tuple[tuple[str, str, float, float], ...] = (
    ("load", "LoadStage", 0.0, 7.0),
    ("unfenced", "term 0 and no<br>coordinator_id?", 0.0, 6.0),
    ("fenced_fields", "term > 0 and<br>coordinator_id?", 0.0, 5.0),
    ("claim_exists", "claim for this<br>model exists?", 0.0, 4.0),
    ("match", "term, coordinator,<br>topology, run match?", 0.0, 3.0),
    ("lease", "lease still valid<br>on the stage's clock?", 0.0, 2.0),
    ("start_unfenced", "Start stage runtime<br>(unfenced: bypasses fence)", -2.8, 6.0),
    ("reject_fields", "Reject: MissingTerm /<br>MissingCoordinatorId", 2.8, 5.0),
    ("reject_missing", "Reject: MissingClaim", 2.8, 4.0),
    ("reject_mismatch", "Reject: Term / Coordinator /<br>TopologyRun mismatch", 2.8, 3.0),
    ("reject_expired", "Reject: ExpiredLease", 2.8, 2.0),
    ("start", "Start stage runtime", 0.0, 1.0),
)
LOAD_FLOW_EDGES: tuple[tuple[str, str, str], ...] = (
    ("load", "unfenced", ""),
    ("unfenced", "start_unfenced", "yes"),
    ("unfenced", "fenced_fields", "no"),
    ("fenced_fields", "reject_fields", "no"),
    ("fenced_fields", "claim_exists", "yes"),
    ("claim_exists", "reject_missing", "no"),
    ("claim_exists", "match", "yes"),
    ("match", "reject_mismatch", "no"),
    ("match", "lease", "yes"),
    ("lease", "reject_expired", "expired"),
    ("lease", "start", "valid"),
)

# Where each rule of the fence sits on its flowchart: the boxes up to and including
# the question that decided, then the outcome box (rejected, accepted). The rule is the
# decision's own ``rule`` field; the drawing never re-derives it from the reason.
# ``None``: that rule never decides that way.
_RulePaths = dict[str, tuple[tuple[str, ...], str | None, str | None]]
_CLAIM_RULE_PATHS: _RulePaths = {
    RULE_SHAPE: (("claim", "shape"), "reject_shape", None),
    RULE_FIRST_CLAIM: (("claim", "shape", "existing"), None, "accept_first"),
    RULE_STALE_TERM: (("claim", "shape", "existing", "stale"), "reject_stale", None),
    RULE_NEWER_TERM: (("claim", "shape", "existing", "stale", "same_term"), None,
                      "supersede"),
    RULE_SAME_EPOCH: (("claim", "shape", "existing", "stale", "same_term", "same_epoch"),
                      "reject_conflict", "accept_renewal"),
}
_LOAD_RULE_PATHS: _RulePaths = {
    RULE_UNFENCED: (("load", "unfenced"), None, "start_unfenced"),
    RULE_FENCED_FIELDS: (("load", "unfenced", "fenced_fields"), "reject_fields", None),
    RULE_CLAIM_EXISTS: (("load", "unfenced", "fenced_fields", "claim_exists"),
                        "reject_missing", None),
    RULE_MATCH: (("load", "unfenced", "fenced_fields", "claim_exists", "match"),
                 "reject_mismatch", None),
    RULE_LEASE: (("load", "unfenced", "fenced_fields", "claim_exists", "match", "lease"),
                 "reject_expired", "start"),
}


def _rule_path(paths: _RulePaths, rule: str | None, accepted: bool, kind: str
               ) -> tuple[str, ...]:
    if rule is None or rule not in paths:
        raise InvalidFenceInput("rule", f"a {kind} decision must name the rule that decided "
                                f"(one of {', '.join(paths)}); decisions made by the fence "
                                "always do", value=rule)
    asked, rejected, accepted_box = paths[rule]
    outcome = accepted_box if accepted else rejected
    if outcome is None:
        verdict = "accepts" if accepted else "rejects"
        raise InvalidFenceInput("rule", f"the {rule} rule never {verdict} a {kind}",
                                value=rule)
    return (*asked, outcome)


def claim_decision_path(decision: ClaimDecision) -> tuple[str, ...]:
    """The flowchart nodes a claim decision passes through, first to last."""
    return _rule_path(_CLAIM_RULE_PATHS, decision.rule, decision.accepted, "claim")


def load_decision_path(decision: LoadDecision) -> tuple[str, ...]:
    """The flowchart nodes a load decision passes through, first to last."""
    return _rule_path(_LOAD_RULE_PATHS, decision.rule, decision.accepted, "load")


_BOX_HALF_WIDTH = 1.1
_BOX_HALF_HEIGHT = 0.33


def _flowchart(
    title: str,
    nodes: Sequence[tuple[str, str, float, float]],
    edges: Sequence[tuple[str, str, str]],
    path: Sequence[str],
    outcome_colour: str,
) -> go.Figure:
    where = {node: (x, y) for node, _, x, y in nodes}
    on_path = set(path)
    path_edges = set(itertools.pairwise(path))
    shapes, annotations = [], []
    for node, label, x, y in nodes:
        last = bool(path) and node == path[-1]
        fill = outcome_colour if last else ("#dbe6f4" if node in on_path else IDLE_COLOUR)
        shapes.append({
            "type": "rect", "x0": x - _BOX_HALF_WIDTH, "x1": x + _BOX_HALF_WIDTH,
            "y0": y - _BOX_HALF_HEIGHT, "y1": y + _BOX_HALF_HEIGHT,
            "fillcolor": fill, "layer": "below",
            "line": {"color": PATH_COLOUR if node in on_path else "#adb5bd",
                     "width": 3 if node in on_path else 1},
        })
        annotations.append({
            "x": x, "y": y, "text": f"<b>{label}</b>" if node in on_path else label,
            "showarrow": False, "font": {"color": "white" if last else "#212529", "size": 11},
        })
    for start, end, label in edges:
        (x0, y0), (x1, y1) = where[start], where[end]
        taken = (start, end) in path_edges
        colour = PATH_COLOUR if taken else "#adb5bd"
        if x0 == x1:
            tail, head = (x0, y0 - _BOX_HALF_HEIGHT), (x1, y1 + _BOX_HALF_HEIGHT)
            spot = {"x": x0 + 0.08, "y": (y0 + y1) / 2, "xanchor": "left"}
        else:
            side = _BOX_HALF_WIDTH if x1 > x0 else -_BOX_HALF_WIDTH
            tail, head = (x0 + side, y0), (x1 - side, y1)
            spot = {"x": (tail[0] + head[0]) / 2, "y": y0 + 0.17, "xanchor": "center"}
        annotations.append({
            "x": head[0], "y": head[1], "ax": tail[0], "ay": tail[1],
            "xref": "x", "yref": "y", "axref": "x", "ayref": "y", "text": "",
            "showarrow": True, "arrowhead": 2, "arrowsize": 1.1,
            "arrowwidth": 3 if taken else 1.2, "arrowcolor": colour,
        })
        if label:
            annotations.append({
                **spot, "text": f"<i>{label}</i>", "showarrow": False,
                "font": {"size": 10, "color": colour if taken else "#6c757d"},
            })
    hover = {
        "type": "scatter", "mode": "markers", "name": "steps",
        "x": [x for _, _, x, _ in nodes], "y": [y for _, _, _, y in nodes],
        "text": [label.replace("<br>", " ") for _, label, _, _ in nodes],
        "customdata": ["on the path" if node in on_path else "not reached"
                       for node, _, _, _ in nodes],
        "hovertemplate": "%{text}: %{customdata}<extra></extra>",
        "marker": {"size": 40, "opacity": 0},
        "showlegend": False,
    }
    ys = [y for _, _, _, y in nodes]
    return go.Figure({"data": [hover], "layout": _layout(
        title, shapes=shapes, annotations=annotations, showlegend=False,
        xaxis={"visible": False, "range": [-4.0, 4.0]},
        yaxis={"visible": False, "range": [min(ys) - 0.5, max(ys) + 0.5]},
        height=500, margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )})


def claim_flowchart_figure(decision: ClaimDecision | None = None) -> go.Figure:
    """The design's claim-acceptance flowchart, with ``decision``'s path highlighted."""
    path = () if decision is None else claim_decision_path(decision)
    if decision is None:
        title, colour = "Claim decision", PATH_COLOUR
    else:
        verdict = "accepted" if decision.accepted else f"rejected: {decision.reason}"
        title = f"Claim decision: {verdict}"
        colour = ACCEPT_COLOUR if decision.accepted else REJECT_COLOUR
    return _flowchart(title, CLAIM_FLOW_NODES, CLAIM_FLOW_EDGES, path, colour)


def load_flowchart_figure(decision: LoadDecision | None = None) -> go.Figure:
    """The load-fencing flowchart, with ``decision``'s path highlighted.

    It has one check the design's drawing leaves out and docs/rules.md §8.2 orders: a load that
    is not unfenced needs both a non-zero term and a coordinator id.
    """
    path = () if decision is None else load_decision_path(decision)
    if decision is None:
        title, colour = "Load decision", PATH_COLOUR
    else:
        verdict = ("accepted unfenced" if decision.unfenced else "accepted") if (
            decision.accepted) else f"rejected: {decision.reason}"
        title = f"Load decision: {verdict}"
        colour = ACCEPT_COLOUR if decision.accepted else REJECT_COLOUR
    return _flowchart(title, LOAD_FLOW_NODES, LOAD_FLOW_EDGES, path, colour)


# --- quorum --------------------------------------------------------------------------------


def quorum_figure(planned_stages: int, accepts: int, *, max_planned: int = 9) -> go.Figure:
    """Accepts needed for each planned stage count, the chosen count highlighted.

    Bars: ``quorum_requirement(n)`` for ``n`` = 1..``max_planned``; a marker shows
    ``accepts`` over the chosen bar, green when it reaches the quorum.
    """
    planned_stages = integer(planned_stages, bad_input("planned_stages"), minimum=1)
    accepts = integer(accepts, bad_input("accepts"), maximum=planned_stages)
    top = max(max_planned, planned_stages)
    counts = list(range(1, top + 1))
    needed = [quorum_requirement(n) for n in counts]
    quorum = quorum_requirement(planned_stages)
    reached = accepts >= quorum
    bars = {
        "type": "bar", "name": "accepts needed (quorum)", "x": counts, "y": needed,
        "marker": {"color": [PATH_COLOUR if n == planned_stages else "#c9d6ea"
                             for n in counts]},
        "text": [str(q) for q in needed], "textposition": "outside",
        "hovertemplate": "%{x} planned stages: %{y} accepts needed<extra></extra>",
    }
    got = {
        "type": "scatter", "mode": "markers+text", "name": "accepts received",
        "x": [planned_stages], "y": [accepts], "text": [f"{accepts} accepted"],
        "textposition": "middle right",
        "marker": {"size": 16, "symbol": "diamond",
                   "color": ACCEPT_COLOUR if reached else REJECT_COLOUR},
        "hovertemplate": "%{y} accepts received<extra></extra>",
    }
    verdict = "quorum reached: the coordinator may load" if reached else (
        "no quorum: the coordinator must not load")
    return go.Figure({"data": [bars, got], "layout": _layout(
        f"{planned_stages} planned stages need {quorum} accepts "
        f"({planned_stages} // 2 + 1); {accepts} accepted: {verdict}",
        xaxis=axis(title={"text": "planned stages"}, dtick=1),
        yaxis=axis(title={"text": "accepts"}, rangemode="tozero",
                    range=[0, top // 2 + 2]),
        height=360,
    )})


# --- event logs ----------------------------------------------------------------------------


ARROW_COLUMNS: tuple[str, ...] = (
    "send_seq", "end_seq", "send_time_ms", "end_time_ms", "source", "target", "message",
    "term", "outcome", "reason", "detail",
)


def message_arrows(events: pd.DataFrame, upto: int | None = None) -> pd.DataFrame:
    """Pair each send with its arrival or loss (first unpaired send of the same message
    between the same nodes with the same term).

    ``outcome`` is ``accepted``/``rejected`` (the receiver's answer), ``delivered`` (an
    arrival with no answer), ``lost`` or ``in flight`` (nothing yet by ``upto``; then
    ``end_seq``/``end_time_ms`` are those of the last event shown).
    """
    shown = events if upto is None else events[events["seq"] <= upto]
    pending: dict[tuple[Any, ...], deque[int]] = defaultdict(deque)
    arrows: list[dict[str, Any]] = []
    if shown.empty:
        return pd.DataFrame(columns=list(ARROW_COLUMNS))
    last_seq, last_time = int(shown["seq"].iloc[-1]), int(shown["time_ms"].iloc[-1])
    for row in shown.itertuples(index=False):
        term = None if pd.isna(row.term) else int(row.term)
        if row.kind == "send":
            arrows.append({
                "send_seq": int(row.seq), "end_seq": last_seq,
                "send_time_ms": int(row.time_ms), "end_time_ms": last_time,
                "source": row.node, "target": row.peer, "message": row.message,
                "term": term, "outcome": "in flight", "reason": None, "detail": "",
            })
            pending[(row.node, row.peer, row.message, term)].append(len(arrows) - 1)
            continue
        if row.kind == "drop":
            key = (row.node, row.peer, row.message, term)
        elif row.kind in RECEIPT_KINDS and isinstance(row.peer, str):
            key = (row.peer, row.node, row.message, term)
        else:
            continue
        if not pending[key]:
            continue
        arrow = arrows[pending[key].popleft()]
        arrow["end_seq"], arrow["end_time_ms"] = int(row.seq), int(row.time_ms)
        arrow["detail"] = "" if not isinstance(row.detail, str) else row.detail
        if row.kind == "drop":
            arrow["outcome"] = "lost"
            arrow["reason"] = row.reason if isinstance(row.reason, str) else None
        elif row.accepted is True or row.accepted is False:
            arrow["outcome"] = "accepted" if row.accepted else "rejected"
            arrow["reason"] = row.reason if isinstance(row.reason, str) else None
        else:
            arrow["outcome"] = "delivered"
    return pd.DataFrame(arrows, columns=list(ARROW_COLUMNS))


def lanes(events: pd.DataFrame) -> list[str]:
    """Sequence-chart lanes, top to bottom: coordinators, stages, then network/clock.

    A node is a stage when it judges claims, loads or stops (or is named ``stage-*``).
    """
    judged = set(events.loc[events["kind"].isin(["claim", "load", "stop"]), "node"])
    nodes = [n for n in dict.fromkeys(events["node"]) if isinstance(n, str)]
    stages = [n for n in nodes if n in judged or n.startswith("stage")]
    special = [n for n in _SPECIAL_LANES if n in nodes]
    coordinators = [n for n in nodes if n not in stages and n not in special]
    return sorted(coordinators) + sorted(stages) + special


def _hover(row: Any) -> str:
    # Node ids and details are whatever a simulation was given: plotly would read HTML
    # in them, so they are escaped (plotly_text); the <br> is the one tag meant.
    parts = [f"event {event_number(row.seq)}, t={row.time_ms} ms", str(row.node), str(row.kind)]
    if isinstance(row.message, str):
        parts.append(row.message)
    if isinstance(row.peer, str):
        parts.append(f"({'to' if row.kind in ('send', 'drop') else 'from'} {row.peer})")
    if not pd.isna(row.term):
        parts.append(f"term {int(row.term)}")
    text = " ".join(parts)
    if row.accepted is True:
        text += ": accepted"
    elif row.accepted is False:
        text += f": rejected ({row.reason})"
    text = plotly_text(text)
    if isinstance(row.detail, str) and row.detail:
        text += f"<br>{plotly_text(row.detail)}"
    return text


def _check_x(x: str) -> None:
    if x not in ("seq", "time_ms"):
        raise InvalidFenceInput("x", "must be 'seq' (event order) or 'time_ms'", value=x)


def event_number(seq: int) -> int:
    """The number a person counts an event by: the log's first event (``seq`` 0) is 1, as
    on the explorer's slider and in its title ("event 1 of 39")."""
    return int(seq) + 1


EVENT_AXIS_TITLE = "event (the first is 1)"


def event_ticks(count: int) -> list[int]:
    """Tick values for an axis of ``count`` events numbered from 1: the first and the
    last event, and round numbers between them not crowding either (at most ~10)."""
    step = next(s for s in itertools.chain.from_iterable(
        (m, 2 * m, 5 * m) for m in (10 ** e for e in itertools.count()))
        if count / s <= 10)
    ticks = [1, *(n for n in range(step, count + 1, step) if n - 1 >= step / 2)]
    if count - ticks[-1] >= step / 2:
        ticks.append(count)
    return ticks


def _x_axis(events: pd.DataFrame, x: str, **extra: Any) -> dict[str, Any]:
    """The shared x axis: events numbered from 1 (``x="seq"``) or the simulated clock."""
    if x == "time_ms":
        return axis(title={"text": "time (ms)"}, zeroline=False, **extra)
    last = event_number(events["seq"].max()) if not events.empty else 1
    return axis(title={"text": EVENT_AXIS_TITLE}, zeroline=False, tickmode="array",
                tickvals=event_ticks(last), **extra)


def sequence_figure(
    events: pd.DataFrame,
    *,
    title: str = "Sequence of events",
    x: Literal["seq", "time_ms"] = "seq",
    upto: int | None = None,
) -> go.Figure:
    """A sequence chart: one lane per node, one arrow per message.

    ``x="seq"`` spaces events evenly in the order they happened (readable when many
    happen at once); ``x="time_ms"`` places them on the simulated clock. With ``upto``
    only events up to that ``seq`` are drawn (messages not yet arrived are "in flight")
    and the event ``upto`` is ringed.
    """
    _check_x(x)
    shown = events if upto is None else events[events["seq"] <= upto]
    order = lanes(events)
    lane_y = {node: -i for i, node in enumerate(order)}
    arrows = message_arrows(events, upto)
    start, end = ("send_seq", "end_seq") if x == "seq" else ("send_time_ms", "end_time_ms")
    # On the event axis an event sits at its number (seq + 1), as the explorer counts.
    offset = 1 if x == "seq" else 0
    extent = float(events[x].max() - events[x].min()) if not events.empty else 0.0
    stub = 1.5 if x == "seq" else max(extent * 0.02, 1.0)

    segments: dict[str, dict[str, list[Any]]] = {
        name: {"x": [], "y": [], "size": [], "text": []}
        for name in (*MESSAGE_COLOURS, OTHER_MESSAGES, "in flight")
    }
    for arrow in arrows.itertuples(index=False):
        if arrow.source not in lane_y or arrow.target not in lane_y:
            continue
        name = arrow.message if arrow.message in MESSAGE_COLOURS else OTHER_MESSAGES
        if arrow.outcome == "in flight":
            name = "in flight"
        y0: float = lane_y[arrow.source]
        y1: float = lane_y[arrow.target]
        x0: float = getattr(arrow, start) + offset
        x1: float = getattr(arrow, end) + offset
        if arrow.outcome == "lost":
            # A lost message stops short of its receiver.
            y1 = y0 + (y1 - y0) * 0.45
            x1 = x0 + (x1 - x0) * 0.45 if x1 != x0 else x0 + 0.45
        elif arrow.outcome == "in flight":
            # Still travelling: a short stub pointing at the receiver.
            y1 = y0 + (y1 - y0) * 0.35
            x1 = x0 + stub
        label = plotly_text(f"{arrow.message} term {arrow.term}: {arrow.source} → "
                            f"{arrow.target} ({arrow.outcome})")
        target = segments[name]
        target["x"] += [x0, x1, None]
        target["y"] += [y0, y1, None]
        target["size"] += [0, 0 if arrow.outcome == "lost" else 11, 0]
        target["text"] += [label, label, None]
    traces: list[dict[str, Any]] = []
    for name, seg in segments.items():
        colour = MESSAGE_COLOURS.get(name, "#999999")
        traces.append({
            "type": "scatter", "mode": "lines+markers", "name": name,
            "x": seg["x"], "y": seg["y"], "text": seg["text"],
            "hovertemplate": "%{text}<extra></extra>",
            "line": {"color": colour, "width": 1.6,
                     "dash": "dot" if name == "in flight" else "solid"},
            "marker": {"symbol": "arrow", "angleref": "previous", "size": seg["size"],
                       "color": colour},
            "showlegend": bool(seg["x"]),
        })

    def points(rows: pd.DataFrame, name: str, symbol: str, colour: str,
               size: int = 10) -> dict[str, Any]:
        rows = rows[rows["node"].isin(lane_y)]
        return {
            "type": "scatter", "mode": "markers", "name": name,
            "x": (rows[x] + offset).tolist(), "y": [lane_y[n] for n in rows["node"]],
            "text": [_hover(r) for r in rows.itertuples(index=False)],
            "hovertemplate": "%{text}<extra></extra>",
            "marker": {"symbol": symbol, "size": size, "color": colour,
                       "line": {"width": 1, "color": "white"}},
            "showlegend": not rows.empty,
        }

    # Answers are drawn after (above) what nodes did on their own at the same moment.
    events_only = shown[~shown["kind"].isin(RECEIPT_KINDS | {"send", "drop"})]
    traces.append(points(events_only, "node event", "diamond", "#6c757d", 9))
    judged = shown[shown["kind"].isin(RECEIPT_KINDS)]
    traces.append(points(judged[judged["accepted"] == True], "accepted",  # noqa: E712
                         "circle", ACCEPT_COLOUR))
    traces.append(points(judged[judged["accepted"] == False], "rejected",  # noqa: E712
                         "x", REJECT_COLOUR, 12))
    traces.append(points(shown[shown["kind"] == "drop"], "lost", "x-thin-open",
                         REJECT_COLOUR, 12))
    current = shown.tail(1) if upto is not None else shown.iloc[0:0]
    ring = points(current, "current", "circle-open", "#212529", 22)
    ring["showlegend"] = False
    traces.append(ring)

    x_values = events[x] + offset if not events.empty else pd.Series([offset])
    span = [float(x_values.min()) - 0.5, float(x_values.max()) + 0.5]
    return go.Figure({"data": traces, "layout": _layout(
        title,
        xaxis=_x_axis(events, x, range=span),
        yaxis=axis(tickvals=list(lane_y.values()), ticktext=[plotly_text(n) for n in lane_y],
                    range=[-len(order) + 0.5, 0.5], showgrid=True, zeroline=False),
        height=max(260, 120 + 55 * len(order)),
        hovermode="closest",
    )})


def accepted_terms(events: pd.DataFrame) -> pd.DataFrame:
    """Each stage's accepted term after every accepted claim: ``seq``, ``time_ms``,
    ``node``, ``term`` (the numbers behind :func:`accepted_terms_figure`)."""
    claims = events[(events["kind"] == "claim") & (events["accepted"] == True)]  # noqa: E712
    frame = claims.loc[:, ["seq", "time_ms", "node", "term"]].reset_index(drop=True)
    frame["term"] = frame["term"].astype("int64")
    return frame


def accepted_terms_figure(
    events: pd.DataFrame,
    *,
    title: str = "Accepted term per stage",
    x: Literal["seq", "time_ms"] = "seq",
) -> go.Figure:
    """A step line per stage: the term its fence holds, over the run.

    Rejected claims, loads and stops are marked on the line of the stage that refused
    them, at the term they carried.
    """
    _check_x(x)
    terms = accepted_terms(events)
    offset = 1 if x == "seq" else 0
    end = float(events[x].max()) + offset if not events.empty else float(offset)
    traces: list[dict[str, Any]] = []
    for node in sorted(set(terms["node"])):
        mine = terms[terms["node"] == node]
        ys = [*mine["term"].tolist(), int(mine["term"].iloc[-1])]
        traces.append({
            "type": "scatter", "mode": "lines+markers", "name": plotly_text(node),
            "line": {"shape": "hv"}, "x": [*(mine[x] + offset).tolist(), end], "y": ys,
            # The node id goes in as text, never into the template, where "%{...}" in it
            # would be read as a placeholder.
            "text": [plotly_text(node)] * len(ys),
            "hovertemplate": "%{text}: term %{y}<extra></extra>",
        })
    refused = events[events["kind"].isin(["claim", "load", "stop"])
                     & (events["accepted"] == False)]  # noqa: E712
    traces.append({
        "type": "scatter", "mode": "markers", "name": "refused",
        "x": (refused[x] + offset).tolist(), "y": refused["term"].tolist(),
        "text": [_hover(r) for r in refused.itertuples(index=False)],
        "hovertemplate": "%{text}<extra></extra>",
        "marker": {"symbol": "x", "size": 11, "color": REJECT_COLOUR},
    })
    return go.Figure({"data": traces, "layout": _layout(
        title,
        xaxis=_x_axis(events, x),
        yaxis=axis(title={"text": "term"}, dtick=1, rangemode="tozero"),
        height=320,
    )})


# --- the model checker ---------------------------------------------------------------------


def check_report_figure(report: CheckReport) -> go.Figure:
    """States explored per configuration, and which properties each one broke."""
    names = [named.name for named, _ in report.runs]
    states = [result.states_explored for _, result in report.runs]
    broken = [
        ", ".join(r.name for r in result.properties if not r.holds) or "nothing broken"
        for _, result in report.runs
    ]
    unexpected = [
        any(not r.as_expected and r.expectation == MUST_HOLD for r in result.properties)
        for _, result in report.runs
    ]
    bars = {
        "type": "bar", "orientation": "h", "name": "states explored",
        "y": [plotly_text(name) for name in names], "x": states,
        "text": [f"{s:,} states" for s in states],
        "textposition": "auto",
        "customdata": broken,
        "hovertemplate": "%{y}: %{x:,} states<br>broken: %{customdata}<extra></extra>",
        "marker": {"color": [REJECT_COLOUR if bad else PATH_COLOUR for bad in unexpected]},
    }
    return go.Figure({"data": [bars], "layout": _layout(
        f"Model checker: {report.states_explored:,} states explored",
        xaxis=axis(title={"text": "states explored"}),
        yaxis=axis(autorange="reversed", type="category"),
        height=max(240, 90 + 36 * len(names)), showlegend=False,
    )})
