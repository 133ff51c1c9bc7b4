"""The fence explorer widgets, driven from code as a person would drive them."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from planner.fence import (
    CoordinatorClaim,
    LoadClaimRef,
    decide_claim,
    decide_load,
    quorum_requirement,
)
from planner.fence.check import (
    KNOWN_TO_FAIL_NAMES,
    PROPERTY_NAMES,
    CheckConfig,
    CheckReport,
    NamedConfig,
    check,
    load_report,
)
from planner.fence.check.report import REPORT_FILE
from planner.fence.errors import UnknownScenario
from planner.fence.scenarios import SCENARIO_LIST, run_scenario, scenario_table
from planner.figures.fence import SEQUENCE_TRACES
from planner.workbench.fence_explorer import (
    CLAIM_PRESETS,
    LOAD_PRESETS,
    CheckResults,
    ClaimExplorer,
    CounterexampleStepper,
    EventStepper,
    LoadExplorer,
    QuorumExplorer,
    ScenarioSection,
    ScenarioStepper,
    ScenarioTable,
)

KEY = {"model_id": "qwen3-coder-480b", "package_ref": "hf://Qwen/Qwen3-Coder-480B-GGUF",
       "manifest_sha256": "sha256:5be1c0a4"}


def test_claim_presets_decide_as_the_fence_does() -> None:
    explorer = ClaimExplorer()
    outcomes = set()
    for index, preset in enumerate(CLAIM_PRESETS):
        explorer.preset.value = index
        stored = None if preset.stored is None else CoordinatorClaim(
            **{**preset.incoming, **preset.stored})
        expected = decide_claim(stored, CoordinatorClaim(**preset.incoming),
                                preset.now_unix_ms)
        decision = explorer.decision
        assert decision is not None
        assert (decision.accepted, decision.reason, decision.supersedes_term) == (
            expected.accepted, expected.reason, expected.supersedes_term), preset.title
        assert expected.message in unescape(explorer.verdict.value)
        outcomes.add(explorer.path[-1])
    assert outcomes == {"accept_first", "accept_renewal", "supersede", "reject_stale",
                        "reject_conflict", "reject_shape"}


def test_editing_a_claim_moves_the_decision_to_another_branch() -> None:
    explorer = ClaimExplorer()
    explorer.preset.value = 1  # same epoch again
    assert explorer.path[-1] == "accept_renewal"
    explorer.incoming["coordinator_term"].value = "9"
    assert explorer.decision is not None and explorer.decision.reason == "StaleTerm"
    assert explorer.path[-1] == "reject_stale"
    assert "term < current term? --yes--> Reject: StaleTerm" in unescape(
        explorer.path_label.value)
    assert "StaleTerm" in explorer.figure.layout.title.text
    explorer.incoming["coordinator_term"].value = "12"
    assert explorer.decision.supersedes_term == 10
    assert explorer.path[-1] == "supersede"
    explorer.has_stored.value = False
    assert explorer.path[-1] == "accept_first"
    explorer.set_values(incoming={"topology_hash": ""})
    assert explorer.decision.reason == "MissingHashes"


def test_a_claim_at_the_lease_instant_is_expired() -> None:
    explorer = ClaimExplorer()
    explorer.set_values(has_stored=False, incoming={"lease_until_unix_ms": 5_000},
                        now_unix_ms=5_000)
    assert explorer.decision is not None and explorer.decision.reason == "ExpiredLease"
    explorer.now.value = "4999"
    assert explorer.decision.accepted


def test_load_presets_decide_as_the_fence_does() -> None:
    explorer = LoadExplorer()
    outcomes = set()
    for index, preset in enumerate(LOAD_PRESETS):
        explorer.preset.value = index
        stored = None if preset.stored is None else CoordinatorClaim(**KEY, **preset.stored)
        expected = decide_load(stored, LoadClaimRef(**KEY, **preset.load), preset.now_unix_ms)
        decision = explorer.decision
        assert decision is not None
        assert (decision.accepted, decision.reason, decision.unfenced) == (
            expected.accepted, expected.reason, expected.unfenced), preset.title
        outcomes.add(explorer.path[-1])
    assert outcomes == {"start", "start_unfenced", "reject_fields", "reject_missing",
                        "reject_mismatch", "reject_expired"}
    explorer.preset.value = 0
    explorer.now.value = str(int(explorer.stored["lease_until_unix_ms"].value) + 1)
    assert explorer.decision is not None and explorer.decision.reason == "ExpiredLease"


def test_quorum_sliders() -> None:
    explorer = QuorumExplorer(planned_stages=3, accepts=2)
    assert explorer.reached and "may load" in explorer.verdict.value
    explorer.planned.value = 4
    assert explorer.quorum == 3 and not explorer.reached
    assert "must not load" in explorer.verdict.value
    assert "need 3 accepts" in explorer.figure.layout.title.text
    explorer.accepts.value = 3
    assert explorer.reached
    explorer.planned.value = 2  # accepts is clamped to 2 and the view follows
    assert explorer.accepts.value == 2 and explorer.accepts.max == 2
    assert explorer.reached and "2 accepted" in explorer.figure.layout.title.text
    for planned in range(1, 10):
        explorer.planned.value = planned
        explorer.accepts.value = quorum_requirement(planned) - 1
        assert not explorer.reached
        explorer.accepts.value = quorum_requirement(planned)
        assert explorer.reached


def test_scenario_stepper_runs_every_scenario() -> None:
    stepper = ScenarioStepper(1)
    for scenario in SCENARIO_LIST:
        stepper.choice.value = scenario.number
        assert stepper.result is not None
        assert stepper.result.scenario.number == scenario.number
        assert len(stepper.events) == len(run_scenario(scenario.number).events_frame())
        assert (stepper.step.min, stepper.step.max) == (1, len(stepper.events))
        assert stepper.step.value == 1
        assert scenario.title in stepper.header.value
        assert "✘" not in stepper.outcome.value
        assert [t.name for t in stepper.figure.data] == list(SEQUENCE_TRACES)


def test_a_scenario_section_makes_its_stepper_when_opened() -> None:
    section = ScenarioSection(4)
    assert section.selected_index is None and section.content is None
    assert section.children[0].children == ()
    assert section.titles == ("Scenario 4: Coordinator disappears after the split is running: "
                              "step through its events",)
    section.selected_index = 0  # as a click on its title does
    stepper = section.content
    assert isinstance(stepper, ScenarioStepper) and section.children[0].children == (stepper,)
    assert stepper.result is not None and stepper.result.scenario.number == 4
    section.selected_index = None
    section.selected_index = 0
    assert section.content is stepper and section.stepper is stepper  # made once
    opened = ScenarioSection(1, opened=True)
    assert opened.selected_index == 0 and isinstance(opened.content, ScenarioStepper)
    with pytest.raises(UnknownScenario, match="no scenario 11"):
        ScenarioSection(11)


def test_scenario_stepper_moves_through_events() -> None:
    stepper = ScenarioStepper(5)
    stepper.next.click()
    stepper.next.click()
    # The slider counts events from 1, as the chart's title does: it reads 3 at event 3.
    assert stepper.step.value == 3
    assert f"(event 3 of {len(stepper.events)})" in stepper.figure.layout.title.text
    event = stepper.current_event
    assert event is not None and event["seq"] == stepper.events["seq"].iloc[2]
    # The line under the slider names the event by the slider's count too.
    assert "event 3: t=" in stepper.current.value
    current = next(t for t in stepper.figure.data if t.name == "current")
    # The ring sits where the event axis numbers it, at the slider's count.
    assert list(current.x) == [stepper.step.value]
    stepper.previous.click()
    assert stepper.step.value == 2
    for _ in range(3):
        stepper.previous.click()
    assert stepper.step.value == 1
    assert f"(event 1 of {len(stepper.events)})" in stepper.figure.layout.title.text
    stepper.everything.click()
    assert stepper.step.value == stepper.step.max
    last = stepper.current_event
    assert last is not None and int(last["seq"]) == int(stepper.events["seq"].iloc[-1])
    assert stepper.step.value == len(stepper.events)
    assert (f"(event {len(stepper.events)} of {len(stepper.events)})"
            in stepper.figure.layout.title.text)


def test_a_stepper_shown_a_shorter_log_starts_again_at_event_1() -> None:
    by_length = sorted(SCENARIO_LIST, key=lambda s: len(run_scenario(s.number).events_frame()))
    stepper = ScenarioStepper(by_length[-1].number)
    stepper.everything.click()
    longest = len(stepper.events)
    stepper.choice.value = by_length[0].number
    assert (stepper.step.value, stepper.step.min) == (1, 1)
    assert stepper.step.max == len(stepper.events) < longest
    assert f"(event 1 of {len(stepper.events)})" in stepper.figure.layout.title.text
    empty = EventStepper(stepper.events.iloc[:0])
    assert empty.current_event is None and empty.step.disabled


@pytest.fixture(scope="module")
def small_report() -> CheckReport:
    # Two runs of the saved report (test_fence_checker checks it is current).
    chosen = ("different-plans", "three-terms")
    saved = load_report()
    return CheckReport(tuple(run for run in saved.runs if run[0].name in chosen),
                       saved.model_fingerprint)


def test_counterexample_stepper(small_report: CheckReport) -> None:
    stepper = CounterexampleStepper(small_report)
    names = [value for _, value in stepper.choice.options]
    assert names == ["single_majority_belief", "majorities_overlap"]
    for name in names:
        stepper.choice.value = name
        example = small_report.verdict(name).counterexample
        assert example is not None and stepper.counterexample == example
        assert len(stepper.events) == len(example.events_frame())
        assert example.explanation in unescape(stepper.header.value)
        assert f"{len(example.steps)} steps" in stepper.header.value
        # The stepper counts events, more than the model's steps: the header says both
        # (it said "6 steps" beside "event 1 of 8").
        events = len(example.events_frame())
        assert f"{events} events on the chart" in stepper.header.value
        assert f"(event 1 of {events})" in stepper.figure.layout.title.text
        assert "violated:" in stepper.trace.value


def test_check_results_show_the_saved_report_at_once() -> None:
    panel = CheckResults()
    assert panel.report == load_report() and panel.saved and panel.stale is None
    assert f"{panel.report.states_explored:,} states" in panel.status.value
    assert "fx-accepted" in panel.status.value and "saved results" in panel.status.value
    assert panel.check_now.layout.display == "none"
    assert list(panel.figure.data[0].y) == [named.name for named, _ in panel.report.runs]
    assert all(name in panel.summary.value for name in PROPERTY_NAMES)
    # Counterexample lengths read as step counts: "6", never "6.0".
    cells = re.findall(r"<td>([^<]*)</td>", panel.summary.value)
    for name in KNOWN_TO_FAIL_NAMES:
        example = panel.report.verdict(name).counterexample
        assert example is not None and str(len(example.steps)) in cells, name
    assert not [cell for cell in cells if re.fullmatch(r"\d+\.0|&lt;NA&gt;|nan", cell)], cells
    assert all(named.name in panel.runs.value for named, _ in panel.report.runs)
    # The counterexample stepper is made when its section is opened.
    assert panel.counterexamples is not None and panel.counterexamples.content is None
    assert panel.counterexamples.selected_index is None
    panel.counterexamples.selected_index = 0  # as a click on its title does
    stepper = panel.counterexamples.content
    assert isinstance(stepper, CounterexampleStepper) and stepper.counterexample is not None
    assert panel.counterexamples.children[0].children == (stepper,)


SMALL = NamedConfig("small", "one stage, two coordinators, terms 1-2",
                    CheckConfig(stages=1, coordinators=2, max_term=2, clock_bound=0))


def test_stale_results_are_not_shown_as_proven_and_are_checked_in_the_background(
    tmp_path: Path,
) -> None:
    saved = load_report().to_dict()
    saved["model_fingerprint"] = "0" * 64  # computed by some other version of the code
    stale = tmp_path / REPORT_FILE
    stale.write_text(json.dumps(saved))
    panel = CheckResults(stale, configs=[SMALL])
    assert panel.report is None and not panel.saved
    assert panel.stale is not None and "model_fingerprint" in panel.stale
    assert "stale" in panel.status.value and "fx-rejected" in panel.status.value
    assert "holds" not in panel.summary.value + panel.runs.value + panel.status.value
    assert len(panel.figure.data) == 0 and panel.counterexamples is None
    assert panel.check_now.layout.display is None

    panel.check_now.click()
    assert panel.progress.layout.display is None
    assert panel.wait(timeout=120) and panel.error is None
    assert panel.report is not None and not panel.saved
    assert panel.progress.value == panel.progress.max == 1
    (named, result), = panel.report.runs
    assert named == SMALL and result == check(SMALL.config)
    assert "computed here" in panel.status.value and "not saved" in panel.status.value
    assert all(name in panel.summary.value for name in PROPERTY_NAMES)
    assert panel.check_now.layout.display == "none"


def test_missing_results_are_not_shown_as_proven(tmp_path: Path) -> None:
    panel = CheckResults(tmp_path / "missing.json")
    assert panel.report is None and panel.stale is not None
    assert "no saved checker report" in panel.stale and panel.summary.value == ""


def test_the_scenario_table_shows_every_text_whole() -> None:
    table = ScenarioTable()
    frame = scenario_table()
    assert list(table.frame["number"]) == [s.number for s in SCENARIO_LIST]
    text = unescape(re.sub(r"<[^>]+>", "", table.value))
    # A DataFrame's own view would cut these after 50 characters with "...".
    assert max(frame["summary"].str.len()) > 50
    for column in ("title", "expected", "summary"):
        for value in frame[column]:
            assert value in text, value
    assert "..." not in text


def test_a_huge_term_keeps_its_digits_and_a_bad_one_is_named() -> None:
    """A term past 2**53 showed 4611686018427388000 in its box where the verdict said
    4611686018427387904: the box held a JavaScript number."""
    explorer = ClaimExplorer()
    explorer.set_values(has_stored=True, incoming={"coordinator_term": 2**62})
    box = explorer.incoming["coordinator_term"]
    assert box.value == "4611686018427387904"
    assert explorer.decision is not None and explorer.decision.supersedes_term == 10
    box.value = "4611686018427387905"
    assert explorer.claims()[1].coordinator_term == 2**62 + 1
    box.value = "99999999999999999999"
    assert explorer.decision is None
    assert ("coordinator_term: must be at most 9,223,372,036,854,775,807 "
            "(got '99999999999999999999')") in unescape(explorer.verdict.value)
    box.value = "ten"
    assert "coordinator_term: must be a whole number (got 'ten')" in unescape(
        explorer.verdict.value)
    explorer.now.value = "-5"  # a clock may read before the epoch
    box.value = "12"
    assert explorer.decision is not None and explorer.decision.accepted
