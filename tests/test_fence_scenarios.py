"""The design's scenarios 1-10, each asserted concretely against its run."""

from __future__ import annotations

import pytest

from planner.fence.errors import UnknownScenario
from planner.fence.scenarios import (
    MODEL_KEY,
    SCENARIO_LIST,
    SCENARIOS,
    STAGES,
    EventLog,
    ScenarioResult,
    get_scenario,
    run_scenario,
    scenario_table,
)
from planner.fence.simulator import EVENT_COLUMNS


def fenced(result: ScenarioResult, stage: str) -> list[tuple[int, str | None]]:
    return sorted((w.coordinator_term, w.coordinator_id) for w in result.stages[stage].running
                  if w.key == MODEL_KEY and w.fenced)


def test_there_are_ten_titled_scenarios() -> None:
    assert [s.number for s in SCENARIO_LIST] == list(range(1, 11))
    assert len(SCENARIOS) == 10
    for scenario in SCENARIO_LIST:
        assert scenario.title and len(scenario.description) > 40 and scenario.expected


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("number", range(1, 11))
def test_every_expected_result_holds_for_any_seed(number: int, seed: int) -> None:
    result = run_scenario(number, seed=seed)
    failed = [e.statement for e in result.outcome.expectations if not e.met]
    assert not failed, (number, seed, result.outcome.summary)
    assert len(result.outcome.expectations) >= 3


def test_the_checks_can_fail() -> None:
    fresh = run_scenario(1)
    too_many_down = get_scenario(3)
    verdicts = too_many_down.check(fresh.simulation, EventLog(fresh.events))
    assert not all(e.met for e in verdicts)
    assert not verdicts[1].met  # "no LoadStage is ever sent" is false in a fresh start


def test_1_fresh_split_startup() -> None:
    r = run_scenario(1)
    log = r.log
    assert [e.node for e in log.where("quorum")] == ["coord-1"]
    loads = log.where("load")
    assert sorted(e.node for e in loads) == sorted(STAGES)
    assert all(e.accepted and e.term == 1 and e.peer == "coord-1" for e in loads)
    assert all(fenced(r, s) == [(1, "coord-1")] for s in STAGES)
    assert r.outcome.split_started_by == (("coord-1", 1),)


def test_2_one_planned_stage_down() -> None:
    r = run_scenario(2)
    quorum = r.log.where("quorum", node="coord-1")
    assert len(quorum) == 1 and quorum[0].detail.startswith("2/3")
    assert r.outcome.loads_sent["coord-1"] == 3
    assert [e.message for e in r.log.where("drop", peer="stage-c")] == [
        "ClaimCoordinator", "LoadStage"]
    assert fenced(r, "stage-a") == fenced(r, "stage-b") == [(1, "coord-1")]
    assert fenced(r, "stage-c") == []
    assert r.outcome.coordinator_phases["coord-1"] == "incomplete"
    assert r.outcome.split_started_by == ()


def test_3_too_many_stages_down() -> None:
    r = run_scenario(3)
    assert not r.log.where("send", message="LoadStage")
    assert all(not r.stages[s].running and not r.stages[s].preparing for s in STAGES)
    assert [e.term for e in r.log.where("attempt")] == [1, 2, 3]
    assert all(e.detail.startswith("1/3") for e in r.log.where("no_quorum"))
    assert r.outcome.coordinator_phases["coord-1"] == "gave_up"
    assert r.outcome.quorum_reached == ()


def test_4_coordinator_disappears() -> None:
    r = run_scenario(4)
    crash = r.log.first_time("crash", node="coord-1")
    assert crash == 5_000
    assert r.log.first_time("split_started", node="coord-1") < crash  # type: ignore[operator]
    assert all(e.accepted and e.time_ms > 8_000 for e in r.log.where("claim", term=2))
    assert sorted(e.node for e in r.log.where("shutdown", term=1)) == sorted(STAGES)
    assert all(fenced(r, s) == [(2, "coord-2")] for s in STAGES)
    assert r.outcome.split_started_by == (("coord-1", 1), ("coord-2", 2))


def test_5_old_coordinator_comes_back() -> None:
    r = run_scenario(5)
    stale_stops = r.log.where("stop", term=10)
    assert len(stale_stops) == 3
    assert all(e.accepted is False and e.reason == "StaleTerm" for e in stale_stops)
    assert not r.log.where("stopped")
    stale_loads = r.log.where("load", term=10, after_ms=15_000)
    assert len(stale_loads) == 3 and all(e.reason == "TermMismatch" for e in stale_loads)
    assert all(fenced(r, s) == [(11, "coord-2")] for s in STAGES)
    assert r.outcome.coordinator_phases["coord-2"] == "running"


def test_6_same_term_race() -> None:
    r = run_scenario(6)
    holders = {e.node: e.peer for e in r.log.where("claim", term=7, accepted=True)}
    assert holders == {"stage-a": "coord-1", "stage-b": "coord-1", "stage-c": "coord-2"}
    conflicts = r.log.where("claim", reason="ConflictingSameTerm")
    assert sorted((e.node, e.peer) for e in conflicts) == [
        ("stage-a", "coord-2"), ("stage-b", "coord-2"), ("stage-c", "coord-1")]
    assert [e.node for e in r.log.where("quorum")] == ["coord-1"]
    assert r.outcome.loads_sent["coord-2"] == 0
    refused = r.log.where("load", node="stage-c")
    assert [(e.peer, e.reason) for e in refused] == [("coord-1", "CoordinatorMismatch")]
    assert fenced(r, "stage-c") == [] and r.outcome.coordinator_phases["coord-2"] == "stood_down"


def test_7_different_term_race() -> None:
    r = run_scenario(7)
    assert r.outcome.accepted_terms == {s: 4 for s in STAGES}
    supersede = [e for e in r.log.where("claim", term=4, accepted=True)
                 if "superseding term 3" in e.detail]
    assert sorted(e.node for e in supersede) == ["stage-a", "stage-b"]
    assert [e.node for e in r.log.where("claim", term=3, reason="StaleTerm")] == ["stage-c"]
    assert ("coord-1", 3) in r.outcome.quorum_reached  # coord-1 briefly held a majority...
    old_loads = r.log.where("load", term=3)
    assert len(old_loads) == 3 and not any(e.accepted for e in old_loads)  # ...but was fenced
    assert not r.log.where("running", term=3)
    assert all(fenced(r, s) == [(4, "coord-2")] for s in STAGES)


def test_8_network_partition() -> None:
    r = run_scenario(8)
    during = {"after_ms": 5_000, "before_ms": 20_000}
    assert r.log.where("quorum", node="coord-a", term=2, **during)
    assert sorted(e.node for e in r.log.where("running", term=2, **during)) == [
        "stage-a", "stage-b"]
    assert not r.log.where("send", node="coord-b", message="LoadStage", **during)
    assert not r.log.where("quorum", node="coord-b", **during)
    # stage-c never heard term 2: during the partition it still ran coord-b's term 1.
    assert not r.log.where("shutdown", node="stage-c", **during)
    stale = r.log.where("claim", term=1, reason="StaleTerm", after_ms=20_000)
    assert sorted(e.node for e in stale) == ["stage-a", "stage-b"]
    assert r.outcome.coordinator_phases["coord-b"] == "stood_down"
    assert all(fenced(r, s) == [(3, "coord-a")] for s in STAGES)


def test_9_lease_expiry() -> None:
    r = run_scenario(9)
    expired = r.log.where("load", reason="ExpiredLease")
    assert sorted(e.node for e in expired) == ["stage-b", "stage-c"]
    for event in expired:
        assert event.lease_until_ms is not None and event.clock_ms > event.lease_until_ms
    skewed = next(e for e in expired if e.node == "stage-b")
    assert skewed.time_ms < skewed.lease_until_ms < skewed.clock_ms  # type: ignore[operator]
    late = next(e for e in expired if e.node == "stage-c")
    assert late.time_ms >= 45_000
    renew = r.log.first_time("renew", node="coord-1")
    assert renew is not None and renew < late.time_ms
    for event in r.log.where("load", accepted=True):
        assert event.clock_ms <= event.lease_until_ms  # type: ignore[operator]
    assert all(fenced(r, s) == [(1, "coord-1")] for s in STAGES)


def test_10_unfenced_local_load() -> None:
    r = run_scenario(10)
    local = {e.node: e for e in r.log.where("load", term=0)}
    assert local["stage-a"].accepted and local["stage-b"].accepted
    assert "unfenced" in local["stage-a"].detail
    assert (local["stage-c"].accepted, local["stage-c"].reason) == (False, "MissingTerm")
    unfenced_a = [w for w in r.stages["stage-a"].running if not w.fenced]
    unfenced_b = [w for w in r.stages["stage-b"].running if not w.fenced]
    assert [w.model_id for w in unfenced_a] == ["llama-3.1-8b"]
    assert [w.key for w in unfenced_b] == [MODEL_KEY]
    assert all(fenced(r, s) == [(5, "coord-1")] for s in STAGES)


@pytest.mark.parametrize("ref", [8, "8", "network_partition", "Network-Partition", " 8 "])
def test_scenarios_are_found_by_number_or_name(ref: int | str) -> None:
    assert get_scenario(ref).number == 8


@pytest.mark.parametrize("ref", [0, 11, "raft", True, ""])
def test_unknown_scenarios_are_refused_with_the_choices(ref: int | str) -> None:
    with pytest.raises(UnknownScenario) as info:
        get_scenario(ref)
    assert info.value.code == "UnknownScenario"
    assert "1 fresh_split_startup" in str(info.value)


def test_results_are_reproducible_and_tabular() -> None:
    one, two = run_scenario(6, seed=3), run_scenario(6, seed=3)
    assert one.events_frame().equals(two.events_frame())
    assert tuple(one.events_frame().columns) == EVENT_COLUMNS
    assert one.steps()[0].startswith("t=0 ms coord-1 attempt term 7")
    data = one.outcome.to_dict()
    assert data["met"] is True and data["summary"].startswith("expected result holds")
    table = scenario_table([one, run_scenario(1)])
    assert list(table["number"]) == [6, 1] and table["met"].all()
