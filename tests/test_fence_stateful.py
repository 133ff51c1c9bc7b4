"""Long random runs against the stage runtime, with the fence's guarantees as invariants."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from planner.fence import CoordinatorClaim, LoadClaimRef, same_claim_epoch
from planner.fence.claims import ClaimKey
from planner.fence.runtime import StageRuntime, StopRequest

KEYS: tuple[ClaimKey, ...] = (("qwen", "hf://pkg", "sha-a"), ("llama", "hf://pkg", "sha-b"))
keys = st.sampled_from(KEYS)
terms = st.integers(0, 5)
coordinators = st.sampled_from(["c1", "c2", ""])
topologies = st.sampled_from(["t1", "t2"])
runs = st.sampled_from(["r1", "r2", ""])
hashes = st.sampled_from(["h1", "h2"])


class StageMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.stage = StageRuntime("stage-a")
        self.clock = 0
        self.highest_term: dict[ClaimKey, int] = defaultdict(int)
        self.accepted: dict[tuple[ClaimKey, int], list[CoordinatorClaim]] = defaultdict(list)

    @rule(ms=st.integers(0, 15))
    def advance_clock(self, ms: int) -> None:
        self.clock += ms

    @rule(key=keys, term=terms, coordinator=coordinators, topology=topologies, run=runs,
          participants=hashes, layout=hashes, lease=st.integers(-3, 30))
    def claim(self, key: ClaimKey, term: int, coordinator: str, topology: str, run: str,
              participants: str, layout: str, lease: int) -> None:
        claim = CoordinatorClaim(*key, topology, run, coordinator, term, participants, layout,
                                 self.clock + lease)
        before = self.stage
        self.stage, outcome = self.stage.accept_claim(claim, self.clock)
        if outcome.decision.accepted:
            assert claim.coordinator_term >= self.highest_term[key]
            self.highest_term[key] = claim.coordinator_term
            self.accepted[(key, term)].append(claim)
            for work in (*outcome.shut_down, *outcome.cancelled):
                assert work.key == key and work.fenced and work.coordinator_term < term
        else:
            assert self.stage == before

    @rule(key=keys, term=terms, coordinator=st.sampled_from([None, "", "c1", "c2"]),
          topology=topologies, run=runs, prepare=st.booleans())
    def load(self, key: ClaimKey, term: int, coordinator: str | None, topology: str, run: str,
             prepare: bool) -> None:
        self._load(LoadClaimRef(*key, topology, run, coordinator, term), prepare)

    @precondition(lambda self: bool(self.accepted))
    @rule(index=st.integers(0, 1_000), prepare=st.booleans())
    def load_for_an_accepted_claim(self, index: int, prepare: bool) -> None:
        """Replay the load of a claim accepted earlier: current, superseded or expired."""
        self._load(LoadClaimRef.for_claim(self._pick_accepted(index)), prepare)

    @precondition(lambda self: bool(self.accepted))
    @rule(index=st.integers(0, 1_000))
    def stop_for_an_accepted_claim(self, index: int) -> None:
        self._stop(StopRequest.for_claim(self._pick_accepted(index)))

    def _pick_accepted(self, index: int) -> CoordinatorClaim:
        every = [claim for claims in self.accepted.values() for claim in claims]
        return every[index % len(every)]

    def _load(self, load: LoadClaimRef, prepare: bool) -> None:
        key, term, coordinator = load.key, load.coordinator_term, load.coordinator_id
        held = self.stage.claim_for(key)
        self.stage, outcome = self.stage.load(load, self.clock, prepare=prepare)
        decision = outcome.decision
        if not decision.accepted:
            assert outcome.started is None
            return
        if decision.unfenced:
            assert term == 0 and not coordinator
            return
        # An accepted fenced load matches the stage's claim and is inside its lease,
        # on the stage's own clock, and is never below a term the stage accepted.
        assert held is not None
        assert (load.coordinator_term, load.coordinator_id, load.topology_id, load.run_id) == (
            held.coordinator_term, held.coordinator_id, held.topology_id, held.run_id)
        assert self.clock <= held.lease_until_unix_ms
        assert load.coordinator_term >= self.highest_term[key]

    @rule(key=keys, term=terms, coordinator=st.sampled_from([None, "c1", "c2"]),
          topology=topologies, run=runs)
    def stop(self, key: ClaimKey, term: int, coordinator: str | None, topology: str,
             run: str) -> None:
        self._stop(StopRequest(*key, topology, run, coordinator, term))

    def _stop(self, request: StopRequest) -> None:
        key, term, coordinator = request.key, request.coordinator_term, request.coordinator_id
        before = self.stage
        self.stage, outcome = self.stage.stop(request)
        if request.coordinator_term > 0 and term < before.accepted_term(key):
            assert not outcome.decision.accepted
            assert outcome.decision.reason == ("StaleTerm" if coordinator
                                               else "MissingCoordinatorId")
            assert outcome.stopped == () and outcome.cancelled == ()
            assert self.stage == before
        for work in (*outcome.stopped, *outcome.cancelled):
            assert work.coordinator_term == term and work.key == key

    @precondition(lambda self: bool(self.stage.preparing))
    @rule(index=st.integers(0, 10))
    def finish_preparation(self, index: int) -> None:
        work = self.stage.preparing[index % len(self.stage.preparing)]
        self.stage, promoted = self.stage.finish_preparation(work)
        assert promoted and work in self.stage.running

    @rule()
    def crash_with_a_durable_fence(self) -> None:
        self.stage = self.stage.crash(keep_claims=True)

    @invariant()
    def accepted_term_never_decreases(self) -> None:
        for key in KEYS:
            assert self.stage.accepted_term(key) == self.highest_term[key]

    @invariant()
    def same_term_claims_are_the_same_epoch(self) -> None:
        for claims in self.accepted.values():
            assert all(same_claim_epoch(claims[0], other) for other in claims[1:])

    @invariant()
    def fenced_work_only_runs_at_the_accepted_term(self) -> None:
        for work in (*self.stage.running, *self.stage.preparing):
            if work.fenced:
                assert work.coordinator_term == self.stage.accepted_term(work.key)


# One example is a run of up to 60 steps (about 0.2 s here); the deadline leaves room for
# a loaded machine without letting a slow step pass unnoticed.
StageMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=60,
                                          deadline=timedelta(seconds=5))
TestStageRuntime = pytest.mark.slow(StageMachine.TestCase)


def test_a_fence_forgotten_on_restart_no_longer_protects_the_term() -> None:
    """Why durability matters: after a restart that loses claims, a stale term gets in."""
    key = KEYS[0]
    newer = CoordinatorClaim(*key, "t2", "r2", "c2", 11, "h", "h", 100)
    older = CoordinatorClaim(*key, "t1", "r1", "c1", 10, "h", "h", 100)
    stage, _ = StageRuntime("stage-a").accept_claim(newer, 0)
    _, rejected = stage.accept_claim(older, 0)
    assert rejected.decision.reason == "StaleTerm"
    _, accepted = stage.crash(keep_claims=False).accept_claim(older, 0)
    assert accepted.decision.accepted
    _, still_rejected = stage.crash(keep_claims=True).accept_claim(older, 0)
    assert still_rejected.decision.reason == "StaleTerm"
