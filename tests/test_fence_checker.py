"""The explicit-state checker of the claim-fence rules.

Counterexamples are replayed here through the stage runtime of ``planner.fence``
(``StageRuntime``, which judges with the real fence), independently of the
checker's own transition code, and the violation is re-derived from that replay.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import planner
from planner.fence import (
    ClaimDecision,
    CoordinatorClaim,
    LoadClaimRef,
    LoadDecision,
    StageRuntime,
    StopDecision,
    StopRequest,
    decide_claim,
    decide_load,
    decide_stop,
    quorum_requirement,
)
from planner.fence.check import (
    DEFAULT_CONFIGS,
    KNOWN_TO_FAIL,
    KNOWN_TO_FAIL_NAMES,
    MUST_HOLD,
    MUST_HOLD_NAMES,
    PROPERTY_NAMES,
    CheckConfig,
    CheckConfigError,
    CheckProgress,
    CheckReport,
    Counterexample,
    NamedConfig,
    StaleCheckResults,
    StateBudgetExceeded,
    check,
    check_defaults,
    load_report,
    property_named,
    replay,
    write_report,
)
from planner.fence.check.configuration import START_UNIX_MS, TICK_MS, coordinator_id, stage_id
from planner.fence.check.exploration import DEFAULT_MAX_STATES, reachable_states
from planner.fence.check.model import (
    CAMPAIGN,
    DELIVER_CLAIM,
    DELIVER_LOAD,
    DELIVER_REPLY,
    DELIVER_STOP,
    DROP,
    SEND_LOAD,
    SEND_STOP,
    TICK,
    FenceModel,
    TraceStep,
)
from planner.fence.check.report import (
    EVENT_COLUMNS,
    REPORT_FILE,
    REPORT_FORMAT,
    model_fingerprint,
    report_path,
)


@pytest.fixture(scope="module")
def report() -> CheckReport:
    # The saved results; test_saved_results_are_what_the_checker_computes recomputes them.
    return load_report()


def _named(name: str) -> NamedConfig:
    return next(named for named in DEFAULT_CONFIGS if named.name == name)


# --- an independent replay through the stage runtime ---------------------------------


@dataclass
class Replayed:
    """What the real stage runtime makes of a trace."""

    stages: dict[str, StageRuntime]
    terms: dict[str, int] = field(default_factory=dict)
    accepts: dict[str, set[str]] = field(default_factory=dict)
    accepted_claims: dict[str, list[CoordinatorClaim]] = field(default_factory=dict)
    # (stage, load, true time, lease of the claim it was judged with, stage time)
    accepted_loads: list[tuple[str, LoadClaimRef, int, int, int]] = field(default_factory=list)
    stale_stops_that_stopped: list[str] = field(default_factory=list)


def replay_through_runtime(
    config: CheckConfig,
    example: Counterexample,
    *,
    claim_rule: Callable[..., ClaimDecision] | None = None,
    stop_rule: Callable[..., StopDecision] = decide_stop,
) -> Replayed:
    """Apply each step to StageRuntime values and check it against what was recorded.

    Also checks the trace is causal: every delivered message was sent and not yet
    delivered or lost, clocks only move forward and stage clocks keep their offset.
    """
    stage_names = [stage_id(i) for i in range(config.stages)]
    result = Replayed({name: StageRuntime(name) for name in stage_names})
    offsets = dict(zip(stage_names, example.clock_offsets_ms, strict=True))
    for offset in offsets.values():
        assert offset in ((0,) if not config.skew else
                          (0, config.skew_ticks * TICK_MS, -config.skew_ticks * TICK_MS))
    in_flight: Counter[tuple[str, str, str, int]] = Counter()
    now = START_UNIX_MS
    for number, step in enumerate(example.steps, 1):
        assert step.now_unix_ms >= now, f"step {number} goes back in time"
        now = step.now_unix_ms
        assert now <= START_UNIX_MS + config.clock_bound * TICK_MS
        if step.stage_now_unix_ms is not None:
            assert step.stage_now_unix_ms == now + offsets[step.stage_id]
        who, where = step.coordinator_id, step.stage_id
        if step.kind == CAMPAIGN:
            assert step.claim is not None and step.claim.coordinator_term == step.term
            result.terms[who] = step.term
            result.accepts[who] = set()
            for target in step.targets:
                in_flight[("ClaimCoordinator", who, target, step.term)] += 1
        elif step.kind in (SEND_LOAD, SEND_STOP):
            assert result.terms.get(who) == step.term
            if step.kind == SEND_LOAD:
                planned = config.planned_stages(int("ab".index(who[-1])))
                assert len(result.accepts[who]) >= quorum_requirement(len(planned))
            name = "LoadStage" if step.kind == SEND_LOAD else "StopStage"
            for target in step.targets:
                in_flight[(name, who, target, step.term)] += 1
        elif step.kind == DROP:
            key = (step.message, who, where, step.term)
            assert in_flight[key] > 0, f"step {number} loses a message never sent"
            in_flight[key] -= 1
        elif step.kind == TICK:
            pass
        elif step.kind == DELIVER_REPLY:
            key = ("ClaimReply", who, where, step.term)
            assert in_flight[key] > 0, f"step {number} delivers a reply never sent"
            in_flight[key] -= 1
            if result.terms.get(who) == step.term:
                result.accepts[who].add(where)
        else:
            key = (step.message, who, where, step.term)
            assert in_flight[key] > 0, f"step {number} delivers a message never sent"
            in_flight[key] -= 1
            runtime = result.stages[where]
            if step.kind == DELIVER_CLAIM:
                assert step.claim is not None
                if claim_rule is None:
                    runtime, outcome = runtime.accept_claim(step.claim, step.stage_now_unix_ms)
                    decision = outcome.decision
                    assert tuple(outcome.shut_down) == (
                        () if step.ended is None else (step.ended,))
                else:
                    decision = claim_rule(runtime.claim_for(step.claim.key), step.claim,
                                          step.stage_now_unix_ms)
                    if decision.accepted:
                        runtime = replace(runtime, claims=(step.claim,))
                assert (decision.accepted, decision.reason) == (step.accepted, step.reason)
                if decision.accepted:
                    result.accepted_claims.setdefault(where, []).append(step.claim)
                    in_flight[("ClaimReply", who, where, step.term)] += 1
            elif step.kind == DELIVER_LOAD:
                assert step.load is not None
                held = runtime.claim_for(step.load.key)
                runtime, load_outcome = runtime.load(step.load, step.stage_now_unix_ms,
                                                     prepare=False)
                decision_l = load_outcome.decision
                assert (decision_l.accepted, decision_l.reason) == (step.accepted, step.reason)
                if decision_l.accepted:
                    assert held is not None
                    result.accepted_loads.append(
                        (where, step.load, now, held.lease_until_unix_ms,
                         step.stage_now_unix_ms))
            elif step.kind == DELIVER_STOP:
                assert step.stop is not None
                key = step.stop.key
                held_term = runtime.accepted_term(key)
                decision_s = stop_rule(runtime.claim_for(key), step.stop)
                assert (decision_s.accepted, decision_s.reason) == (step.accepted, step.reason)
                if decision_s.accepted:
                    # The model's StopStage ends whatever the stage runs for the model.
                    ended = tuple(w for w in runtime.running if w.key == key)
                    assert ended == (() if step.ended is None else (step.ended,))
                    runtime = replace(runtime, running=tuple(
                        w for w in runtime.running if w.key != key))
                    if step.stop.coordinator_term < held_term and ended:
                        result.stale_stops_that_stopped.append(where)
            result.stages[where] = runtime
    return result


def _believers(config: CheckConfig, replayed: Replayed) -> dict[str, int]:
    believers = {}
    for index in range(config.coordinators):
        name = coordinator_id(index)
        quorum = quorum_requirement(len(config.planned_stages(index)))
        if len(replayed.accepts.get(name, ())) >= quorum:
            believers[name] = replayed.terms[name]
    return believers


def violated_by_replay(name: str, config: CheckConfig, replayed: Replayed) -> bool:
    """Each property, judged from scratch on the runtime replay."""
    if name == "single_majority_belief":
        return len(set(_believers(config, replayed).values())) > 1
    if name == "pipeline_runs_one_term":
        for index in range(config.coordinators):
            runs = [replayed.stages[stage_id(s)].running
                    for s in config.planned_stages(index)]
            if all(runs):
                terms = {work.coordinator_term for works in runs for work in works}
                if len(terms) > 1:
                    return True
        return False
    if name == "majorities_overlap":
        held: list[set[str]] = []
        for index in range(config.coordinators):
            name_c = coordinator_id(index)
            planned = config.planned_stages(index)
            mine = {
                stage_id(s) for s in planned
                if (claim := replayed.stages[stage_id(s)].claims[:1])
                and claim[0].coordinator_id == name_c
                and claim[0].coordinator_term == replayed.terms.get(name_c)
            }
            if len(mine) >= quorum_requirement(len(planned)):
                held.append(mine)
        return any(not a & b for a, b in itertools.combinations(held, 2))
    if name == "load_within_lease_on_true_clock":
        return any(true_now > lease for _, _, true_now, lease, _ in replayed.accepted_loads)
    if name == "term_never_decreases":
        return any(
            later.coordinator_term < earlier.coordinator_term
            for claims in replayed.accepted_claims.values()
            for earlier, later in itertools.pairwise(claims))
    if name == "stale_stop_stops_nothing":
        return bool(replayed.stale_stops_that_stopped)
    if name == "load_matches_claim_within_lease":
        return any(stage_now > lease
                   for _, _, _, lease, stage_now in replayed.accepted_loads)
    raise AssertionError(f"no independent judgement written for {name}")


# --- the default configurations --------------------------------------------------------


@pytest.mark.slow
def test_saved_results_are_what_the_checker_computes(report: CheckReport) -> None:
    # The fencing notebook shows the saved report; it must be today's checker's answer.
    computed = check_defaults(workers=2)
    assert computed.to_dict() == report.to_dict(), (
        f"data/{REPORT_FILE} is stale: regenerate it with `make fence-check`")
    assert computed == report


def test_saved_results_round_trip_and_refuse_stale_files(report: CheckReport,
                                                        tmp_path: Path) -> None:
    assert CheckReport.from_dict(report.to_dict()) == report
    saved = write_report(report, tmp_path / REPORT_FILE)
    assert load_report(saved) == report
    data = json.loads(saved.read_text())
    data["runs"][0]["config"]["max_term"] += 1
    saved.write_text(json.dumps(data))
    with pytest.raises(StaleCheckResults) as raised:
        load_report(saved)
    assert raised.value.code == "StaleCheckResults" and "make fence-check" in str(raised.value)
    saved.write_text("{")
    with pytest.raises(StaleCheckResults):
        load_report(saved)
    with pytest.raises(StaleCheckResults, match="no saved checker report"):
        load_report(tmp_path / "missing.json")


def test_saved_results_match_a_fresh_check_of_a_small_configuration(
    report: CheckReport,
) -> None:
    # The fast counterpart of the slow full recomputation: one default configuration.
    named = _named("different-plans")
    assert check(named.config) == report.result(named.name)
    assert report.model_fingerprint == model_fingerprint()


def test_saved_results_of_another_model_are_stale(report: CheckReport,
                                                 tmp_path: Path) -> None:
    data = report.to_dict()
    data["model_fingerprint"] = "0" * 64
    saved = tmp_path / REPORT_FILE
    saved.write_text(json.dumps(data))
    with pytest.raises(StaleCheckResults, match="model_fingerprint differs"):
        load_report(saved)
    del data["model_fingerprint"]
    saved.write_text(json.dumps(data))
    with pytest.raises(StaleCheckResults, match="not a checker report"):
        load_report(saved)


def _load_with_changed_code(tmp_path: Path, old: str, new: str) -> subprocess.CompletedProcess:
    """Load today's saved report with a copy of the package whose claims.py is edited."""
    package = Path(planner.__file__).parent
    copy = tmp_path / "edited"
    shutil.copytree(package, copy / "planner", ignore=shutil.ignore_patterns("__pycache__"))
    claims = copy / "planner" / "fence" / "claims.py"
    source = claims.read_text()
    assert source.count(old) == 1
    claims.write_text(source.replace(old, new))
    script = ("import sys\nfrom planner.fence.check import load_report\n"
              f"load_report({str(report_path())!r})\n"
              "import planner\nprint(planner.__file__)\n")
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(copy)}, cwd=tmp_path)


@pytest.mark.slow  # two interpreters with a copy of the package
def test_a_change_to_the_fence_rules_makes_the_saved_results_stale(tmp_path: Path) -> None:
    rule = "    return planned // 2 + 1\n"
    changed = _load_with_changed_code(tmp_path / "rule", rule,
                                      "    return planned // 2 + 2\n")
    assert changed.returncode != 0
    assert "StaleCheckResults" in changed.stderr and "model_fingerprint" in changed.stderr
    # Rewording a comment or a docstring changes nothing the checker finds.
    reworded = _load_with_changed_code(
        tmp_path / "comment", rule, "    # a majority, reworded\n" + rule)
    assert reworded.returncode == 0, reworded.stderr
    assert str(tmp_path / "comment") in reworded.stdout


def test_defaults_explore_a_meaningful_number_of_states(report: CheckReport) -> None:
    assert [named.name for named, _ in report.runs] == [n.name for n in DEFAULT_CONFIGS]
    for named, result in report.runs:
        assert result.complete, named.name
        assert result.states_explored > 2_000, named.name
        assert result.transitions > result.states_explored, named.name
        assert result.max_depth >= 15, named.name
    assert report.states_explored > 250_000


def test_every_must_hold_property_holds_on_every_default_configuration(
    report: CheckReport,
) -> None:
    for named, result in report.runs:
        for name in MUST_HOLD_NAMES:
            verdict = result.result(name)
            assert verdict.holds, f"{name} broken in {named.name}:\n{verdict.counterexample}"
            assert verdict.as_expected
            assert verdict.counterexample is None


def test_every_known_not_to_hold_property_has_a_counterexample(report: CheckReport) -> None:
    for name in KNOWN_TO_FAIL_NAMES:
        verdict = report.verdict(name)
        assert not verdict.holds, name
        assert verdict.as_expected
        assert verdict.counterexample is not None and verdict.counterexample.steps
        assert report.broken_in(name)


@pytest.mark.parametrize("name", KNOWN_TO_FAIL_NAMES)
def test_counterexamples_really_violate_when_replayed_through_the_runtime(
    report: CheckReport, name: str
) -> None:
    for config_name in report.broken_in(name):
        config = _named(config_name).config
        example = report.result(config_name).result(name).counterexample
        assert example is not None
        replayed = replay_through_runtime(config, example)
        assert violated_by_replay(name, config, replayed), str(example)
        # Without its last step the run does not yet violate: the trace is shortest.
        shorter = replace(example, steps=example.steps[:-1])
        assert not violated_by_replay(name, config, replay_through_runtime(config, shorter))


@pytest.mark.parametrize("name", KNOWN_TO_FAIL_NAMES)
def test_counterexamples_replay_through_the_model(report: CheckReport, name: str) -> None:
    config_name = report.broken_in(name)[0]
    config = _named(config_name).config
    example = report.result(config_name).result(name).counterexample
    assert example is not None
    states = replay(config, example)
    assert len(states) == len(example.steps) + 1
    model = FenceModel(config)
    last = example.steps[-1]
    assert property_named(name).violation(model, states[-2], last, states[-1]) is not None


def test_the_expected_counterexamples_say_what_happened(report: CheckReport) -> None:
    skew = report.verdict("load_within_lease_on_true_clock").counterexample
    assert skew is not None
    assert any(offset < 0 for offset in skew.clock_offsets_ms)
    late = skew.steps[-1]
    assert late.kind == DELIVER_LOAD and late.accepted
    assert late.stage_now_unix_ms is not None and late.stage_now_unix_ms < late.now_unix_ms

    plans = report.verdict("majorities_overlap").counterexample
    assert plans is not None
    assert report.broken_in("majorities_overlap") == ["different-plans"]
    accepted_by = {step.stage_id: step.coordinator_id for step in plans.steps
                   if step.kind == DELIVER_CLAIM and step.accepted}
    assert set(accepted_by.values()) == {"coord-a", "coord-b"}

    pipeline = report.verdict("pipeline_runs_one_term").counterexample
    assert pipeline is not None
    loads = [step for step in pipeline.steps if step.kind == DELIVER_LOAD and step.accepted]
    assert len({step.term for step in loads}) == 2


def test_counterexample_text_and_frames(report: CheckReport) -> None:
    example = report.verdict("single_majority_belief").counterexample
    assert example is not None
    text = str(example)
    assert text.splitlines()[0].startswith("start: stage clock offsets")
    assert text.splitlines()[-1] == f"violated: {example.explanation}"
    assert all(step.detail for step in example.steps)
    frame = example.events_frame()
    assert list(frame.columns) == list(EVENT_COLUMNS)
    assert frame["seq"].tolist() == list(range(len(frame)))
    assert set(frame["step"]) == set(range(1, len(example.steps) + 1))
    claims = frame[frame["kind"] == "claim"]
    assert claims["accepted"].tolist() == [
        step.accepted for step in example.steps if step.kind == DELIVER_CLAIM]
    steps = example.steps_frame()
    assert len(steps) == len(example.steps)
    assert example.to_dict()["steps"][0]["kind"] == example.steps[0].kind


def test_summary_frames(report: CheckReport) -> None:
    summary = report.summary_frame()
    assert summary["property"].tolist() == list(PROPERTY_NAMES)
    assert summary["as_expected"].all()
    expected = dict(zip(summary["property"], summary["expected"], strict=True))
    assert {expected[n] for n in MUST_HOLD_NAMES} == {MUST_HOLD}
    assert {expected[n] for n in KNOWN_TO_FAIL_NAMES} == {KNOWN_TO_FAIL}
    # Step counts are whole numbers, with no value where a property holds.
    steps = dict(zip(summary["property"], summary["shortest_counterexample_steps"],
                     strict=True))
    assert str(summary["shortest_counterexample_steps"].dtype) == "Int64"
    for name in PROPERTY_NAMES:
        example = report.verdict(name).counterexample
        if example is None:
            assert steps[name] is pd.NA, name
        else:
            assert steps[name] == len(example.steps), name
    runs = report.runs_frame()
    assert runs["states_explored"].sum() == report.states_explored
    with pytest.raises(CheckConfigError):
        report.result("no-such-configuration")


# --- the checker can fail ---------------------------------------------------------------


def accept_stale_terms(
    current: CoordinatorClaim | None, claim: CoordinatorClaim, now_unix_ms: int
) -> ClaimDecision:
    decision = decide_claim(current, claim, now_unix_ms)
    if decision.reason == "StaleTerm":
        return ClaimDecision(True, None, None, current, claim, now_unix_ms)
    return decision


def ignore_lease(
    current: CoordinatorClaim | None, load: LoadClaimRef, now_unix_ms: int
) -> LoadDecision:
    decision = decide_load(current, load, now_unix_ms)
    if decision.reason == "ExpiredLease":
        return LoadDecision(True, None, False, current, load, now_unix_ms)
    return decision


def accept_every_stop(current: CoordinatorClaim | None, request: StopRequest) -> StopDecision:
    return StopDecision(True, None, current, request)


def accept_conflicts(
    current: CoordinatorClaim | None, claim: CoordinatorClaim, now_unix_ms: int
) -> ClaimDecision:
    decision = decide_claim(current, claim, now_unix_ms)
    if decision.reason == "ConflictingSameTerm":
        return ClaimDecision(True, None, None, current, claim, now_unix_ms)
    return decision


# The smallest meshes on which each broken rule breaks a property the real rule keeps
# (under a second in all, so they run in the fast suite; the tests below explore more).
SMALL_BREAKS = [
    (CheckConfig(stages=1, coordinators=2, max_term=2, clock_bound=0, stops=False),
     {"claim_rule": accept_stale_terms}, "term_never_decreases"),
    (CheckConfig(stages=1, coordinators=1, max_term=1, clock_bound=2, stops=False),
     {"load_rule": ignore_lease}, "load_matches_claim_within_lease"),
    (CheckConfig(stages=1, coordinators=2, max_term=1, clock_bound=0, stops=False),
     {"claim_rule": accept_conflicts}, "same_term_same_claim"),
    (CheckConfig(stages=2, coordinators=2, max_term=1, clock_bound=0, stops=False),
     {"claim_rule": accept_conflicts}, "one_majority_per_term"),
    (CheckConfig(stages=1, coordinators=2, max_term=2, clock_bound=0),
     {"stop_rule": accept_every_stop}, "stale_stop_stops_nothing"),
]


@pytest.mark.parametrize(("config", "rules", "name"), SMALL_BREAKS,
                         ids=[f"{next(iter(r.values())).__name__}-{n}"
                              for _, r, n in SMALL_BREAKS])
def test_a_broken_rule_is_caught_on_a_small_mesh(config: CheckConfig, rules: dict[str, Any],
                                                 name: str) -> None:
    broken = check(config, properties=[name], **rules).result(name)
    assert not broken.holds and broken.counterexample is not None
    assert check(config, properties=[name]).result(name).holds


@pytest.mark.slow
def test_a_fence_that_accepts_stale_terms_is_caught() -> None:
    config = CheckConfig(stages=1, coordinators=2, max_term=2, clock_bound=0)
    result = check(config, claim_rule=accept_stale_terms)
    assert result.complete
    for name in ("term_never_decreases", "no_load_below_accepted_term"):
        verdict = result.result(name)
        assert not verdict.holds and not verdict.as_expected, name
    example = result.result("term_never_decreases").counterexample
    assert example is not None
    replayed = replay_through_runtime(config, example, claim_rule=accept_stale_terms)
    assert violated_by_replay("term_never_decreases", config, replayed)
    # The same trace is impossible under the real rule, which keeps both properties.
    with pytest.raises(CheckConfigError):
        replay(config, example)
    real = check(config)
    assert real.result("term_never_decreases").holds
    assert real.result("no_load_below_accepted_term").holds


@pytest.mark.slow
def test_a_fence_that_ignores_the_lease_is_caught() -> None:
    config = _named("lease-expiry").config
    result = check(config, load_rule=ignore_lease,
                   properties=["load_matches_claim_within_lease"])
    verdict = result.result("load_matches_claim_within_lease")
    assert not verdict.holds
    assert verdict.counterexample is not None
    assert "after its lease" in verdict.counterexample.explanation
    states = replay(config, verdict.counterexample, load_rule=ignore_lease)
    assert len(states) == len(verdict.counterexample.steps) + 1


@pytest.mark.slow
def test_a_fence_without_same_term_conflicts_is_caught() -> None:
    race = CheckConfig(stages=3, coordinators=2, max_term=1, clock_bound=0, stops=False)
    result = check(race, claim_rule=accept_conflicts)
    assert not result.result("same_term_same_claim").holds
    assert not result.result("one_majority_per_term").holds


def test_a_stop_rule_that_ignores_terms_is_caught() -> None:
    config = CheckConfig(stages=1, coordinators=2, max_term=2, clock_bound=0)
    name = "stale_stop_stops_nothing"
    verdict = check(config, stop_rule=accept_every_stop, properties=[name]).result(name)
    assert not verdict.holds and not verdict.as_expected
    example = verdict.counterexample
    assert example is not None
    last = example.steps[-1]
    assert last.kind == DELIVER_STOP and last.accepted and last.ended is not None
    assert last.term is not None and last.term < last.ended.coordinator_term
    assert "stale term-1 stop" in example.explanation
    replayed = replay_through_runtime(config, example, stop_rule=accept_every_stop)
    assert violated_by_replay(name, config, replayed)
    # Under the real rule the last step is a rejection, so the trace does not replay.
    with pytest.raises(CheckConfigError) as raised:
        replay(config, example)
    assert raised.value.field == f"steps[{len(example.steps)}]"
    assert check(config, properties=[name]).result(name).holds


# --- the exploration itself -------------------------------------------------------------


def test_counterexamples_are_shortest() -> None:
    config = _named("different-plans").config
    example = check(config, properties=["majorities_overlap"]).result(
        "majorities_overlap").counterexample
    assert example is not None
    model = FenceModel(config)
    prop = property_named("majorities_overlap")

    def violated_within(state, depth: int) -> bool:  # type: ignore[no-untyped-def]
        if depth == 0:
            return False
        for action in model.actions(state):
            after, step = model.apply(state, action)
            if prop.violation(model, state, step, after) or violated_within(after, depth - 1):
                return True
        return False

    start = model.initial_states()[0]
    assert not violated_within(start, len(example.steps) - 1)
    assert violated_within(start, len(example.steps))


@pytest.mark.slow
def test_explicit_loss_adds_states_but_no_fence_states() -> None:
    config = CheckConfig(stages=2, coordinators=1, max_term=2, clock_bound=1)
    lossy = replace(config, message_loss=True)
    without, with_loss = reachable_states(config), reachable_states(lossy)
    assert len(with_loss) > len(without)

    def fence_view(states: set) -> set:  # type: ignore[type-arg]
        return {(s.now_tick, s.coordinators, s.stages) for s in states}

    assert fence_view(with_loss) == fence_view(without)
    verdicts = [(r.name, r.holds) for r in check(config).properties]
    assert verdicts == [(r.name, r.holds) for r in check(lossy).properties]


def test_a_partial_check_stops_at_the_state_budget() -> None:
    result = check(_named("two-terms").config, max_states=500, partial=True)
    assert not result.complete
    assert result.states_explored == 500


def test_a_spent_state_budget_is_a_named_error_with_where_it_stopped() -> None:
    heard: list[CheckProgress] = []
    with pytest.raises(StateBudgetExceeded) as raised:
        check(_named("two-terms").config, max_states=2_000, progress=heard.append,
              progress_every=500)
    error = raised.value
    assert error.code == "CheckStateBudgetExceeded"
    assert error.details["max_states"] == 2_000 and error.progress.states_explored == 2_000
    assert "max_states" in error.message and "2,000 states" in error.message
    assert {500, 1_000, 1_500, 2_000} <= {p.states_explored for p in heard}
    assert all(a.states_explored <= b.states_explored for a, b in itertools.pairwise(heard))
    assert heard[-1] == error.progress and not heard[-1].done


def test_progress_is_reported_until_done() -> None:
    heard: list[CheckProgress] = []
    config = CheckConfig(stages=1, coordinators=1, max_term=2, clock_bound=1)
    result = check(config, progress=heard.append, progress_every=20)
    assert heard and heard[-1].done and not any(p.done for p in heard[:-1])
    assert heard[-1].states_explored == result.states_explored
    assert heard[-1].transitions == result.transitions
    assert all(a.states_explored <= b.states_explored for a, b in itertools.pairwise(heard))
    assert any(p.frontier > 0 for p in heard) and heard[-1].frontier == 0
    assert 0 < heard[-1].budget_used < 1
    by_name: list[tuple[str, CheckProgress]] = []
    check_defaults([NamedConfig("small", "", config)],
                   progress=lambda name, where: by_name.append((name, where)))
    assert by_name[-1][0] == "small" and by_name[-1][1].done


@pytest.mark.parametrize(
    ("call", "field_name"),
    [
        (lambda: check(CheckConfig(), max_states=0), "max_states"),
        (lambda: check(CheckConfig(), max_states=1.5), "max_states"),
        (lambda: check(CheckConfig(), partial="yes"), "partial"),
        (lambda: check(CheckConfig(), progress=5), "progress"),
        (lambda: check(CheckConfig(), progress_every=0), "progress_every"),
        (lambda: check_defaults([], max_states=-1), "max_states"),
        (lambda: CheckConfig.from_dict(5), "config"),
        (lambda: CheckConfig.from_dict(None), "config"),
        (lambda: check(5), "config"),  # type: ignore[arg-type]
        (lambda: check(CheckConfig(), claim_rule=5), "claim_rule"),  # type: ignore[arg-type]
        (lambda: check(CheckConfig(), stop_rule=None), "stop_rule"),  # type: ignore[arg-type]
        (lambda: check(CheckConfig(), properties="term_never_decreases"), "properties"),
        (lambda: reachable_states(5), "config"),  # type: ignore[arg-type]
        (lambda: check_defaults(5), "configs"),  # type: ignore[arg-type]
        (lambda: check_defaults([5]), "configs[0]"),  # type: ignore[list-item]
        (lambda: replay(CheckConfig(), None), "counterexample"),  # type: ignore[arg-type]
        (lambda: replay(5, None), "config"),  # type: ignore[arg-type]
        (lambda: CheckReport.from_dict({"format": REPORT_FORMAT, "runs": []}),
         "report.model_fingerprint"),
        (lambda: CheckReport.from_dict({"format": REPORT_FORMAT, "model_fingerprint": 5,
                                        "runs": []}), "report.model_fingerprint"),
        (lambda: CheckReport.from_dict({"format": REPORT_FORMAT, "model_fingerprint": "",
                                        "runs": 5}), "report.runs"),
        (lambda: CheckReport.from_dict({"format": REPORT_FORMAT, "model_fingerprint": "",
                                        "runs": [{"name": "x"}]}), "report.runs[0].purpose"),
        (lambda: NamedConfig.from_dict({}), "configuration.name"),
        (lambda: NamedConfig.from_dict({"name": "x", "purpose": "", "config": {},
                                        "colour": 1}), "configuration.colour"),
        (lambda: TraceStep.from_dict({"kind": "tick"}), "step.now_unix_ms"),
        (lambda: TraceStep.from_dict({"kind": "tick", "now_unix_ms": 0, "targets": 5}),
         "step.targets"),
        (lambda: Counterexample.from_dict({"property_name": "x"}), "counterexample.explanation"),
    ],
)
def test_check_refuses_bad_arguments_naming_them(call: Callable[[], object],
                                                 field_name: str) -> None:
    with pytest.raises(CheckConfigError) as raised:
        call()
    assert raised.value.field == field_name


def test_skew_multiplies_initial_states() -> None:
    config = CheckConfig(stages=2, coordinators=1, skew=True)
    offsets = config.clock_offsets()
    assert len(offsets) == 9
    assert offsets[0] == (0, 0)
    assert all(sum(1 for o in offsets[i] if o) <= sum(1 for o in offsets[i + 1] if o)
               for i in range(len(offsets) - 1))
    assert CheckConfig(stages=3).clock_offsets() == [(0, 0, 0)]


def test_replay_refuses_a_tampered_trace(report: CheckReport) -> None:
    example = report.verdict("majorities_overlap").counterexample
    assert example is not None
    flipped = replace(example.steps[2], accepted=not example.steps[2].accepted)
    tampered = replace(example, steps=(*example.steps[:2], flipped, *example.steps[3:]))
    with pytest.raises(CheckConfigError) as raised:
        replay(_named("different-plans").config, tampered)
    assert raised.value.field == "steps[3]"


# --- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field_name"),
    [
        ({"stages": 0}, "stages"),
        ({"stages": 4}, "stages"),
        ({"coordinators": 3}, "coordinators"),
        ({"max_term": 4}, "max_term"),
        ({"clock_bound": -1}, "clock_bound"),
        ({"skew": "yes"}, "skew"),
        ({"max_term": True}, "max_term"),
        ({"planned": ((0, 1),)}, "planned"),
        ({"planned": ((0, 1), (3,))}, "planned[1]"),
        ({"planned": ((0, 0), (1,))}, "planned[0]"),
        ({"planned": ((), (1,))}, "planned[0]"),
    ],
)
def test_config_refuses_what_it_cannot_explore(changes: dict, field_name: str) -> None:
    with pytest.raises(CheckConfigError) as raised:
        CheckConfig(**changes)
    assert raised.value.code == "InvalidCheckConfig"
    assert raised.value.field == field_name
    assert field_name in str(raised.value)


def test_config_round_trips_and_describes_itself() -> None:
    config = CheckConfig(stages=3, coordinators=2, planned=((0, 1, 2), (2,)), skew=True)
    assert CheckConfig.from_dict(config.to_dict()) == config
    with pytest.raises(CheckConfigError) as raised:
        CheckConfig.from_dict({"stage": 2})
    assert raised.value.field == "stage"
    text = config.describe()
    assert "coord-b plans stage-2" in text and "±1" in text
    assert config.quorum(0) == 2 and config.quorum(1) == 1
    claim = config.claim_for(1, 2, 1)
    assert claim.coordinator_id == "coord-b" and claim.coordinator_term == 2
    assert claim.lease_until_unix_ms == START_UNIX_MS + 2 * TICK_MS
    with pytest.raises(CheckConfigError):
        check(config, properties=["no_such_property"])
    with pytest.raises(CheckConfigError):
        check_defaults(workers=0)


@pytest.mark.slow
def test_result_serialises() -> None:
    result = check(_named("different-plans").config)
    data = result.to_dict()
    assert data["states_explored"] == result.states_explored
    assert [p["name"] for p in data["properties"]] == list(PROPERTY_NAMES)
    broken = [p for p in data["properties"] if not p["holds"]]
    assert [p["name"] for p in broken] == ["majorities_overlap"]
    assert broken[0]["counterexample"]["steps"]
    assert result.to_frame()["holds"].tolist() == [p["holds"] for p in data["properties"]]
    with pytest.raises(CheckConfigError):
        check(_named("different-plans").config,
              properties=["majorities_overlap"]).result("term_never_decreases")


def test_the_fence_page_describes_the_checker_as_it_is() -> None:
    readme = (Path(__file__).resolve().parents[1] / "docs" / "fence.md").read_text()
    section = readme.split("## The fence's model checker\n", 1)[1].split("\n## ", 1)[0]
    words = {1: "one", 4: "four", 6: "six", 7: "seven", 10: "ten"}
    assert f"judges {words[len(PROPERTY_NAMES)]} properties: " \
           f"{words[len(MUST_HOLD_NAMES)]} the fence must keep and " \
           f"{words[len(KNOWN_TO_FAIL_NAMES)]} it is known not to" in " ".join(section.split())
    assert f"the {words[len(DEFAULT_CONFIGS)]} default configurations" in section
    assert f"`max_states` states ({DEFAULT_MAX_STATES:,} by default)" in " ".join(
        section.split())
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/fence.md", "exec"), {})


@pytest.mark.slow  # three interpreters
def test_fence_check_refuses_a_path_it_cannot_write_before_checking(tmp_path: Path) -> None:
    # python -m planner.fence.check (make fence-check) explores for minutes: a bad target
    # is refused at once with exit code 2, and a bad worker count names the field.
    for argv, said in (([str(tmp_path / "no-such-folder" / REPORT_FILE)], "cannot write"),
                       ([str(tmp_path)], "cannot write"),
                       ([str(tmp_path / REPORT_FILE), "--workers", "0"], "workers")):
        done = subprocess.run([sys.executable, "-m", "planner.fence.check", *argv],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert said in done.stderr and "Traceback" not in done.stderr
        assert done.stderr.count("\n") == 1
    assert not (tmp_path / REPORT_FILE).exists()
