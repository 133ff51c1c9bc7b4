"""The stage runtime around the fence: superseding, stale stops, unfenced work."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from planner.fence import CoordinatorClaim, InvalidFenceInput, LoadClaimRef
from planner.fence.runtime import StageRuntime, StageWork, StopRequest, decide_stop

NOW = 5_000


def claim(term: int, *, coordinator: str = "coord-1", model: str = "qwen",
          run: str | None = None, lease: int = NOW + 60_000) -> CoordinatorClaim:
    return CoordinatorClaim(model, "hf://pkg", "sha", f"topo-{term}", run or f"run-{term}",
                            coordinator, term, "ph", "th", lease)


def load_for(c: CoordinatorClaim) -> LoadClaimRef:
    return LoadClaimRef.for_claim(c)


UNFENCED = LoadClaimRef("qwen", "hf://pkg", "sha", "local", "local-1", None, 0)


def running_stage(c: CoordinatorClaim, *, prepare: bool = False) -> StageRuntime:
    stage, outcome = StageRuntime("stage-a").accept_claim(c, NOW)
    assert outcome.decision.accepted
    stage, loaded = stage.load(load_for(c), NOW, prepare=prepare)
    assert loaded.decision.accepted and loaded.started == StageWork.from_load(load_for(c))
    return stage


def test_accepted_load_prepares_then_runs() -> None:
    c = claim(1)
    stage = running_stage(c, prepare=True)
    work = StageWork.from_load(load_for(c))
    assert stage.preparing == (work,) and stage.running == ()
    stage, promoted = stage.finish_preparation(work)
    assert promoted and stage.running == (work,) and stage.preparing == ()


def test_rejected_load_starts_nothing() -> None:
    stage, _ = StageRuntime("stage-a").accept_claim(claim(2), NOW)
    after, outcome = stage.load(load_for(claim(1)), NOW)
    assert not outcome.decision.accepted and outcome.decision.reason == "TermMismatch"
    assert outcome.started is None and after == stage


def test_repeated_load_starts_no_second_copy() -> None:
    c = claim(10)
    stage = running_stage(c)
    again, outcome = stage.load(load_for(c), NOW, prepare=True)
    assert outcome.decision.accepted and again == stage


def test_newer_term_shuts_down_older_running_work_of_that_key_only() -> None:
    old = claim(10)
    stage = running_stage(old)
    other_model = claim(1, model="llama")
    stage, _ = stage.accept_claim(other_model, NOW)
    stage, _ = stage.load(load_for(other_model), NOW, prepare=True)

    newer = claim(11, coordinator="coord-2")
    stage, outcome = stage.accept_claim(newer, NOW)
    assert outcome.decision.accepted and outcome.decision.supersedes_term == 10
    assert outcome.shut_down == (StageWork.from_load(load_for(old)),)
    assert outcome.cancelled == ()
    assert stage.running == ()
    assert stage.preparing == (StageWork.from_load(load_for(other_model)),)
    assert stage.accepted_term(newer.key) == 11 and stage.accepted_term(other_model.key) == 1


def test_newer_term_cancels_a_preparation_that_then_never_runs() -> None:
    old = claim(3)
    stage = running_stage(old, prepare=True)
    work = StageWork.from_load(load_for(old))
    stage, outcome = stage.accept_claim(claim(4), NOW)
    assert outcome.cancelled == (work,) and outcome.shut_down == ()
    stage, promoted = stage.finish_preparation(work)
    assert not promoted and stage.running == ()


def test_renewal_and_rejected_claims_shut_nothing_down() -> None:
    c = claim(5)
    stage = running_stage(c)
    renewed, outcome = stage.accept_claim(replace(c, lease_until_unix_ms=NOW + 99_000), NOW)
    assert outcome.decision.accepted and outcome.shut_down == () and renewed.running
    same, stale = renewed.accept_claim(claim(4), NOW)
    assert not stale.decision.accepted and same == renewed


def test_unfenced_loads_bypass_the_fence_and_survive_newer_terms() -> None:
    stage, outcome = StageRuntime("stage-a").load(UNFENCED, NOW, prepare=False)
    assert outcome.decision.unfenced and outcome.started is not None
    assert not outcome.started.fenced
    stage, superseding = stage.accept_claim(claim(7), NOW)
    assert superseding.shut_down == () and stage.running == (outcome.started,)


def test_stale_stop_is_rejected_and_stops_nothing() -> None:
    old, new = claim(10), claim(11, coordinator="coord-2")
    stage = running_stage(old)
    stage, _ = stage.accept_claim(new, NOW)
    stage, _ = stage.load(load_for(new), NOW, prepare=False)
    after, outcome = stage.stop(StopRequest.for_claim(old))
    assert (outcome.decision.accepted, outcome.decision.reason) == (False, "StaleTerm")
    assert outcome.stopped == () and after == stage
    assert outcome.decision.message == "stale stop: term 10 < accepted term 11"
    # Like a StaleTerm claim, a stale stop reports both terms as plain data.
    data = outcome.decision.to_dict()
    assert (data["reason"], data["stop_term"], data["current_term"]) == ("StaleTerm", 10, 11)


def test_current_stop_stops_its_own_generation() -> None:
    c = claim(4)
    stage = running_stage(c)
    after, outcome = stage.stop(StopRequest.for_claim(c))
    assert outcome.decision.accepted
    assert outcome.stopped == (StageWork.from_load(load_for(c)),) and after.running == ()
    # The claim stays: stopping work is not releasing ownership.
    assert after.accepted_term(c.key) == 4


def test_stop_leaves_other_generations_and_unfenced_work_alone() -> None:
    c = claim(4)
    stage = running_stage(c)
    stage, _ = stage.load(UNFENCED, NOW, prepare=False)
    other_run = StopRequest(**{**load_for(c).to_dict(), "run_id": "run-other"})
    after, outcome = stage.stop(other_run)
    assert outcome.decision.accepted and outcome.stopped == () and after == stage
    after, outcome = stage.stop(StopRequest(**UNFENCED.to_dict()))
    assert outcome.stopped == (StageWork.from_load(UNFENCED),)
    assert after.running == (StageWork.from_load(load_for(c)),)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"coordinator_term": 0}, "MissingTerm"),
        ({"coordinator_id": None}, "MissingCoordinatorId"),
        ({"coordinator_id": "coord-x"}, "CoordinatorMismatch"),
        ({"coordinator_term": 3}, "StaleTerm"),
    ],
)
def test_stop_rejections(changes: dict[str, Any], reason: str) -> None:
    c = claim(4)
    request = StopRequest(**{**load_for(c).to_dict(), **changes})
    decision = decide_stop(c, request)
    assert (decision.accepted, decision.reason) == (False, reason)


def test_stop_with_a_newer_term_than_the_claim_is_accepted() -> None:
    c = claim(4)
    decision = decide_stop(c, StopRequest(**{**load_for(c).to_dict(), "coordinator_term": 9}))
    assert decision.accepted


def test_crash_loses_work_and_by_default_claims() -> None:
    stage = running_stage(claim(2))
    assert stage.crash() == StageRuntime("stage-a")
    durable = stage.crash(keep_claims=True)
    assert durable.running == () and durable.claims == stage.claims


def test_runtimes_are_hashable_values_and_order_independent() -> None:
    a, b = claim(1, model="a"), claim(1, model="b")
    one, _ = StageRuntime("s").accept_claim(a, NOW)
    one, _ = one.accept_claim(b, NOW)
    two, _ = StageRuntime("s").accept_claim(b, NOW)
    two, _ = two.accept_claim(a, NOW)
    assert one == two and hash(one) == hash(two)
    assert len({one, two}) == 1
    assert one.to_dict()["claims"][0]["model_id"] == "a"


def test_runtime_refuses_two_claims_for_one_key() -> None:
    with pytest.raises(InvalidFenceInput) as info:
        StageRuntime("s", claims=(claim(1), claim(2)))
    assert "one claim per key" in str(info.value)


def test_stop_request_validation_and_round_trip() -> None:
    request = StopRequest.for_claim(claim(3))
    assert StopRequest.from_dict(request.to_dict()) == request
    with pytest.raises(InvalidFenceInput) as info:
        StopRequest(**{**request.to_dict(), "coordinator_term": -2})
    assert info.value.field == "stop.coordinator_term"
