"""Figures of the claim fence: flowchart paths, quorum, sequence charts, checker report."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pytest

from planner.fence import (
    ClaimDecision,
    ClaimFence,
    CoordinatorClaim,
    InvalidFenceInput,
    LoadClaimRef,
    LoadDecision,
    quorum_requirement,
)
from planner.fence.check import CheckConfig, CheckReport, NamedConfig, check, load_report
from planner.fence.scenarios import run_scenario
from planner.figures.fence import (
    ACCEPT_COLOUR,
    ARROW_COLUMNS,
    CLAIM_FLOW_EDGES,
    CLAIM_FLOW_NODES,
    LOAD_FLOW_EDGES,
    LOAD_FLOW_NODES,
    RECEIPT_KINDS,
    REJECT_COLOUR,
    SEQUENCE_TRACES,
    accepted_terms,
    accepted_terms_figure,
    check_report_figure,
    claim_decision_path,
    claim_flowchart_figure,
    event_ticks,
    lanes,
    load_decision_path,
    load_flowchart_figure,
    message_arrows,
    quorum_figure,
    sequence_figure,
)

EXAMPLES = Path(__file__).parent / "data" / "fence_examples.json"


def _decisions() -> tuple[list[ClaimDecision], list[LoadDecision]]:
    """Every decision of the fence test vectors, judged by the real fence."""
    claims: list[ClaimDecision] = []
    loads: list[LoadDecision] = []
    for row in json.loads(EXAMPLES.read_text()):
        fence = ClaimFence()
        for op in row["ops"]:
            if op["op"] == "claim":
                claims.append(fence.accept_claim(CoordinatorClaim.from_dict(op["claim"]),
                                                 op["now_unix_ms"]))
            elif op["op"] == "load":
                loads.append(fence.validate_load(LoadClaimRef.from_dict(op["load"]),
                                                 op["now_unix_ms"]))
    return claims, loads


CLAIM_DECISIONS, LOAD_DECISIONS = _decisions()


def _is_walk(path: tuple[str, ...], nodes: tuple, edges: tuple) -> bool:
    pairs = {(start, end) for start, end, _ in edges}
    starts = {start for start, _, _ in edges}
    first = nodes[0][0]
    return (path[0] == first and path[-1] not in starts
            and all(pair in pairs for pair in itertools.pairwise(path)))


def test_every_claim_decision_walks_the_flowchart_to_a_matching_outcome() -> None:
    reached = Counter()
    for decision in CLAIM_DECISIONS:
        path = claim_decision_path(decision)
        assert _is_walk(path, CLAIM_FLOW_NODES, CLAIM_FLOW_EDGES), path
        outcome = path[-1]
        reached[outcome] += 1
        assert outcome.startswith(("accept", "supersede")) == decision.accepted
        if decision.reason == "StaleTerm":
            assert outcome == "reject_stale"
        elif decision.reason == "ConflictingSameTerm":
            assert outcome == "reject_conflict"
        elif not decision.accepted:
            assert outcome == "reject_shape"
        elif decision.supersedes_term is not None:
            assert outcome == "supersede"
        elif decision.current is None:
            assert outcome == "accept_first"
        else:
            assert outcome == "accept_renewal"
    # The vectors reach every outcome of the chart.
    terminals = {node for node, *_ in CLAIM_FLOW_NODES} - {s for s, _, _ in CLAIM_FLOW_EDGES}
    assert set(reached) == terminals


def test_every_load_decision_walks_the_flowchart_to_a_matching_outcome() -> None:
    reached = Counter()
    for decision in LOAD_DECISIONS:
        path = load_decision_path(decision)
        assert _is_walk(path, LOAD_FLOW_NODES, LOAD_FLOW_EDGES), path
        outcome = path[-1]
        reached[outcome] += 1
        assert outcome.startswith("start") == decision.accepted
        assert (outcome == "start_unfenced") == decision.unfenced
        expected = {
            "MissingTerm": "reject_fields", "MissingCoordinatorId": "reject_fields",
            "MissingClaim": "reject_missing", "TermMismatch": "reject_mismatch",
            "CoordinatorMismatch": "reject_mismatch", "TopologyRunMismatch": "reject_mismatch",
            "ExpiredLease": "reject_expired",
        }
        if decision.reason is not None:
            assert outcome == expected[decision.reason]
    assert {"start", "reject_missing", "reject_mismatch", "reject_expired",
            "reject_fields"} <= set(reached)


def test_a_decision_that_names_no_rule_is_refused_by_the_flowchart() -> None:
    # Decisions built by hand (a deliberately broken rule in the checker) carry no
    # rule; the chart says so instead of guessing the branch from the reason.
    made = next(d for d in CLAIM_DECISIONS if d.reason == "StaleTerm")
    bare = ClaimDecision(made.accepted, made.reason, None, made.current, made.claim)
    with pytest.raises(InvalidFenceInput) as raised:
        claim_decision_path(bare)
    assert raised.value.field == "rule"
    impossible = replace(made, accepted=True)
    with pytest.raises(InvalidFenceInput, match="never accepts"):
        claim_decision_path(impossible)


def _fills(figure: go.Figure) -> list[str]:
    return [shape.fillcolor for shape in figure.layout.shapes]


def test_claim_flowchart_highlights_the_path_taken() -> None:
    stale = next(d for d in CLAIM_DECISIONS if d.reason == "StaleTerm")
    figure = claim_flowchart_figure(stale)
    assert "StaleTerm" in figure.layout.title.text
    names = [node for node, *_ in CLAIM_FLOW_NODES]
    fills = dict(zip(names, _fills(figure), strict=True))
    assert fills["reject_stale"] == REJECT_COLOUR
    assert sum(1 for f in fills.values() if f in (REJECT_COLOUR, ACCEPT_COLOUR)) == 1
    thick = [a for a in figure.layout.annotations if a.showarrow and a.arrowwidth == 3]
    assert len(thick) == len(claim_decision_path(stale)) - 1
    accepted = next(d for d in CLAIM_DECISIONS if d.supersedes_term is not None)
    fills = dict(zip(names, _fills(claim_flowchart_figure(accepted)), strict=True))
    assert fills["supersede"] == ACCEPT_COLOUR
    plain = claim_flowchart_figure(None)
    assert not [a for a in plain.layout.annotations if a.showarrow and a.arrowwidth == 3]


def test_load_flowchart_highlights_the_path_taken() -> None:
    expired = next(d for d in LOAD_DECISIONS if d.reason == "ExpiredLease")
    figure = load_flowchart_figure(expired)
    names = [node for node, *_ in LOAD_FLOW_NODES]
    fills = dict(zip(names, _fills(figure), strict=True))
    assert fills["reject_expired"] == REJECT_COLOUR
    assert "ExpiredLease" in figure.layout.title.text
    unfenced = LoadDecision(True, None, True, rule="unfenced")
    assert "unfenced" in load_flowchart_figure(unfenced).layout.title.text


@pytest.mark.parametrize(("planned", "accepts"), [(3, 2), (3, 1), (4, 2), (4, 3), (1, 1)])
def test_quorum_figure(planned: int, accepts: int) -> None:
    figure = quorum_figure(planned, accepts)
    bars, got = figure.data
    assert list(bars.y) == [quorum_requirement(n) for n in bars.x]
    reached = accepts >= quorum_requirement(planned)
    assert got.marker.color == (ACCEPT_COLOUR if reached else REJECT_COLOUR)
    assert ("may load" in figure.layout.title.text) == reached
    assert f"need {quorum_requirement(planned)} accepts" in figure.layout.title.text


@pytest.mark.parametrize(("planned", "accepts", "field"),
                         [(3, 4, "accepts"), (3, -1, "accepts"), (0, 0, "planned_stages")])
def test_quorum_figure_refuses_impossible_counts(planned: int, accepts: int, field: str) -> None:
    with pytest.raises(InvalidFenceInput) as raised:
        quorum_figure(planned, accepts)
    assert raised.value.field == field


@pytest.fixture(scope="module")
def scenario_logs() -> dict[int, pd.DataFrame]:
    return {number: run_scenario(number).events_frame() for number in range(1, 11)}


def test_message_arrows_pair_every_arrival_and_loss_with_its_send(
    scenario_logs: dict[int, pd.DataFrame],
) -> None:
    for number, events in scenario_logs.items():
        arrows = message_arrows(events)
        assert list(arrows.columns) == list(ARROW_COLUMNS)
        sends = events[events["kind"] == "send"]
        assert len(arrows) == len(sends), number
        answered = events[events["kind"].isin(RECEIPT_KINDS) & events["peer"].notna()]
        arrived = arrows[arrows["outcome"].isin(["accepted", "rejected", "delivered"])]
        assert len(arrived) == len(answered), number
        assert (arrows["outcome"] == "lost").sum() == (events["kind"] == "drop").sum(), number
        assert (arrows["end_seq"] >= arrows["send_seq"]).all()
        rejected = answered[answered["accepted"] == False]  # noqa: E712
        assert (arrows["outcome"] == "rejected").sum() == len(rejected), number


def test_message_arrows_up_to_an_event_leave_later_arrivals_in_flight(
    scenario_logs: dict[int, pd.DataFrame],
) -> None:
    events = scenario_logs[1]
    first_send = int(events.loc[events["kind"] == "send", "seq"].iloc[0])
    arrows = message_arrows(events, upto=first_send)
    assert len(arrows) == 1
    assert arrows["outcome"].tolist() == ["in flight"]
    assert message_arrows(events.iloc[0:0]).empty


def test_sequence_figure_draws_every_lane_and_trace(
    scenario_logs: dict[int, pd.DataFrame],
) -> None:
    events = scenario_logs[8]
    order = lanes(events)
    assert order[:2] == ["coord-a", "coord-b"]
    assert order[2:5] == ["stage-a", "stage-b", "stage-c"]
    assert order[-1] == "network"
    figure = sequence_figure(events, title="partition")
    assert [trace.name for trace in figure.data] == list(SEQUENCE_TRACES)
    assert list(figure.layout.yaxis.ticktext) == order
    by_name = {trace.name: trace for trace in figure.data}
    accepted = events[events["kind"].isin(RECEIPT_KINDS) & (events["accepted"] == True)]  # noqa: E712
    assert len(by_name["accepted"].x) == len(accepted)
    assert len(by_name["current"].x) == 0
    timed = sequence_figure(events, x="time_ms")
    assert max(timed.data[SEQUENCE_TRACES.index("accepted")].x) == accepted["time_ms"].max()


def test_sequence_figure_up_to_an_event_rings_it(scenario_logs: dict[int, pd.DataFrame]) -> None:
    events = scenario_logs[5]
    upto = int(events["seq"].iloc[20])
    figure = sequence_figure(events, upto=upto)
    by_name = {trace.name: trace for trace in figure.data}
    # The 21st event (seq 20) is drawn at 21 on the event axis, as the explorer counts it.
    assert list(by_name["current"].x) == [upto + 1]
    drawn = [x for name in ("accepted", "rejected", "node event") for x in by_name[name].x]
    assert drawn and max(drawn) <= upto + 1
    assert by_name["in flight"].x  # messages sent before event 20 still on their way
    with pytest.raises(InvalidFenceInput):
        sequence_figure(events, x="clock")


def test_accepted_terms_follow_the_stages(scenario_logs: dict[int, pd.DataFrame]) -> None:
    result = run_scenario(7)
    terms = accepted_terms(result.events_frame())
    last = terms.groupby("node")["term"].last().to_dict()
    assert last == {stage: term for stage, term in result.outcome.accepted_terms.items()
                    if term}
    figure = accepted_terms_figure(result.events_frame())
    lines = [trace for trace in figure.data if trace.name != "refused"]
    assert sorted(trace.name for trace in lines) == sorted(last)
    for trace in lines:
        assert trace.y[-1] == last[trace.name]
    refused = next(trace for trace in figure.data if trace.name == "refused")
    events = result.events_frame()
    assert len(refused.x) == int(((events["kind"].isin(["claim", "load", "stop"]))
                                  & (events["accepted"] == False)).sum())  # noqa: E712


def test_counterexample_logs_draw_like_scenario_logs() -> None:
    report = CheckReport(tuple(run for run in load_report().runs
                               if run[0].name == "different-plans"))
    example = report.verdict("majorities_overlap").counterexample
    assert example is not None
    events = example.events_frame()
    figure = sequence_figure(events, title="counterexample")
    assert list(figure.layout.yaxis.ticktext) == ["coord-a", "coord-b", "stage-0", "stage-1",
                                                  "stage-2"]
    arrows = message_arrows(events)
    assert (arrows["outcome"] == "accepted").sum() == 3
    chart = check_report_figure(report)
    assert list(chart.data[0].y) == ["different-plans"]
    assert list(chart.data[0].x) == [report.states_explored]
    assert "majorities_overlap" in chart.data[0].customdata[0]


EVIL_STAGE = '<a href="https://evil.example/x">CLICKME</a>'
EVIL_COORDINATOR = '<span style="font-size:90px;fill:red">%{x}</span>'


def test_node_ids_are_drawn_as_text_not_as_html() -> None:
    # Plotly reads HTML in labels, legends and hover text, and %{...} in hover templates.
    from planner.fence.coordinator import SplitPlan
    from planner.fence.simulator import Simulation

    sim = Simulation()
    for node in (EVIL_STAGE, "stage-b", "stage-c"):
        sim.add_stage(node)
    sim.add_coordinator(EVIL_COORDINATOR, SplitPlan(
        "m", "p", "s", "t", "r", (EVIL_STAGE, "stage-b", "stage-c")))
    sim.start_coordinator(0, EVIL_COORDINATOR)
    sim.run()
    events = sim.events_frame()
    run = NamedConfig(EVIL_STAGE, "", CheckConfig(stages=1, coordinators=1, max_term=1,
                                                  clock_bound=0))
    figures = [sequence_figure(events), accepted_terms_figure(events),
               check_report_figure(CheckReport(((run, check(run.config)),)))]
    for figure in figures:
        drawn = json.dumps(figure.to_plotly_json())
        assert "<a href" not in drawn and "<span" not in drawn
        assert "&lt;a href=" in drawn
        templates = [trace.hovertemplate or "" for trace in figure.data]
        assert not any("%{x}</span>" in template for template in templates)
    assert "&lt;span style" in json.dumps(figures[0].to_plotly_json())


def test_the_event_axis_counts_events_from_one(scenario_logs: dict[int, pd.DataFrame]) -> None:
    # The explorer's slider and title count from 1 ("event 7 of 39"): the axis agrees,
    # its first tick is event 1 and its last the log's last event.
    events = scenario_logs[5]
    count = len(events)
    for figure in (sequence_figure(events, upto=int(events["seq"].iloc[6])),
                   accepted_terms_figure(events)):
        layout = figure.layout.xaxis
        assert layout.tickvals[0] == 1 and layout.tickvals[-1] == count
        assert layout.title.text == "event (the first is 1)"
    figure = sequence_figure(events, upto=int(events["seq"].iloc[6]))
    by_name = {trace.name: trace for trace in figure.data}
    assert list(by_name["current"].x) == [7]
    assert list(figure.layout.xaxis.range) == [0.5, count + 0.5]
    every_x = [x for trace in figure.data for x in trace.x if x is not None]
    assert min(every_x) >= 1 and max(every_x) <= count + 1.5
    hovers = [text for trace in figure.data if trace.mode == "markers" for text in trace.text]
    assert any(text.startswith("event 1, ") for text in hovers), hovers[:3]
    assert not any(text.startswith("event 0") for text in hovers)
    timed = sequence_figure(events, x="time_ms")
    assert timed.layout.xaxis.title.text == "time (ms)"
    assert timed.layout.xaxis.tickvals is None


@pytest.mark.parametrize("count, ticks", [
    (1, [1]), (3, [1, 2, 3]), (10, list(range(1, 11))), (39, [1, 5, 10, 15, 20, 25, 30, 35, 39]),
    (40, [1, 5, 10, 15, 20, 25, 30, 35, 40]), (523, [1, 100, 200, 300, 400, 500]),
])
def test_event_ticks_start_at_the_first_event(count: int, ticks: list[int]) -> None:
    assert event_ticks(count) == ticks
