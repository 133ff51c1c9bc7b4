"""The claim fence (docs/rules.md §8): test vectors, every rule on its own, and properties."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.fence import (
    ClaimDecision,
    ClaimFence,
    CoordinatorClaim,
    InvalidFenceInput,
    LoadClaimRef,
    LoadDecision,
    decide_claim,
    decide_load,
    quorum_requirement,
    same_claim_epoch,
)
from planner.fence.claims import (
    CLAIM_REASONS,
    CLAIM_RULES,
    LOAD_RULES,
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
)

VECTORS = json.loads((Path(__file__).parent / "data" / "fence_examples.json").read_text())
NOW = 1_000_000


def make_claim(**changes: Any) -> CoordinatorClaim:
    base = CoordinatorClaim(
        model_id="qwen", package_ref="hf://pkg", manifest_sha256="sha-a",
        topology_id="topo-1", run_id="run-1", coordinator_id="node-a", coordinator_term=10,
        participant_set_hash="ph-1", topology_hash="th-1", lease_until_unix_ms=NOW + 60_000,
    )
    return replace(base, **changes)


def make_load(claim: CoordinatorClaim | None = None, **changes: Any) -> LoadClaimRef:
    return replace(LoadClaimRef.for_claim(claim or make_claim()), **changes)


# -- the shared vectors ------------------------------------------------------------------


@pytest.mark.parametrize("row", VECTORS, ids=[row["name"] for row in VECTORS])
def test_fence_vector(row: dict[str, Any]) -> None:
    fence = ClaimFence()
    for index, op in enumerate(row["ops"]):
        decision: ClaimDecision | LoadDecision
        if op["op"] == "claim":
            decision = fence.accept_claim(CoordinatorClaim.from_dict(op["claim"]),
                                          op["now_unix_ms"])
        else:
            assert op["op"] == "load"
            decision = fence.validate_load(LoadClaimRef.from_dict(op["load"]), op["now_unix_ms"])
        got = decision.to_dict()
        for field, expected in op["expected"].items():
            assert got[field] == expected, (index, field, decision.message)


# -- claim shape checks, in order ----------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"model_id": ""}, "MissingModelId"),
        ({"package_ref": ""}, "MissingPackageRef"),
        ({"manifest_sha256": ""}, "MissingManifestSha256"),
        ({"topology_id": ""}, "MissingTopologyRun"),
        ({"run_id": ""}, "MissingTopologyRun"),
        ({"coordinator_id": ""}, "MissingCoordinatorId"),
        ({"coordinator_term": 0}, "MissingTerm"),
        ({"participant_set_hash": ""}, "MissingHashes"),
        ({"topology_hash": ""}, "MissingHashes"),
        ({"lease_until_unix_ms": NOW}, "ExpiredLease"),
        ({"lease_until_unix_ms": NOW - 1}, "ExpiredLease"),
        # Several problems: the first in the order of docs/rules.md §8.1 wins.
        ({"package_ref": "", "coordinator_term": 0, "topology_hash": ""}, "MissingPackageRef"),
        ({"coordinator_id": "", "coordinator_term": 0}, "MissingCoordinatorId"),
        ({"coordinator_term": 0, "lease_until_unix_ms": 0}, "MissingTerm"),
    ],
)
def test_claim_shape_reasons(changes: dict[str, Any], reason: str) -> None:
    decision = decide_claim(None, make_claim(**changes), NOW)
    assert (decision.accepted, decision.reason, decision.supersedes_term) == (False, reason, None)


def test_shape_rejection_reports_no_current_claim_even_when_one_is_stored() -> None:
    fence = ClaimFence()
    stored = make_claim()
    assert fence.accept_claim(stored, NOW).accepted
    decision = fence.accept_claim(make_claim(coordinator_term=11, topology_hash=""), NOW)
    assert decision.reason == "MissingHashes"
    assert decision.current is None and decision.current_term is None
    assert fence.current_claim_for("qwen", "hf://pkg", "sha-a") == stored


def test_claim_at_lease_instant_is_rejected_but_load_at_it_is_accepted() -> None:
    claim = make_claim(lease_until_unix_ms=NOW + 5)
    assert not decide_claim(None, claim, NOW + 5).accepted
    assert decide_claim(None, claim, NOW + 4).accepted
    assert decide_load(claim, make_load(claim), NOW + 5).accepted
    late = decide_load(claim, make_load(claim), NOW + 6)
    assert (late.accepted, late.reason) == (False, "ExpiredLease")


# -- claims against the stored claim ---------------------------------------------------------


def test_first_claim_is_accepted_and_supersedes_nothing() -> None:
    decision = decide_claim(None, make_claim(), NOW)
    assert decision.accepted and decision.supersedes_term is None and decision.current is None
    assert decision.message == "accepted term 10: first claim for this model artifact"


def test_lower_term_is_stale_and_reports_both_terms() -> None:
    stored = make_claim(coordinator_term=11)
    decision = decide_claim(stored, make_claim(coordinator_term=10), NOW)
    assert (decision.accepted, decision.reason) == (False, "StaleTerm")
    assert decision.current == stored and decision.current_term == 11
    assert decision.message == "stale coordinator term 10 < 11"


@pytest.mark.parametrize(
    "field", ["topology_id", "run_id", "coordinator_id", "participant_set_hash", "topology_hash"]
)
def test_same_term_different_epoch_conflicts(field: str) -> None:
    stored = make_claim()
    other = replace(stored, **{field: "different"})
    decision = decide_claim(stored, other, NOW)
    assert (decision.accepted, decision.reason, decision.current) == (
        False, "ConflictingSameTerm", stored)
    assert field in decision.message and "'different'" in decision.message


def test_same_epoch_renews_the_lease_and_supersedes_nothing() -> None:
    fence = ClaimFence()
    fence.accept_claim(make_claim(lease_until_unix_ms=NOW + 10), NOW)
    renewed = make_claim(lease_until_unix_ms=NOW + 99_000)
    decision = fence.accept_claim(renewed, NOW + 5)
    assert decision.accepted and decision.supersedes_term is None
    assert "renewed" in decision.message
    assert fence.current_claim_for(*renewed.key) == renewed
    # A renewal may also shorten the lease: it replaces the stored claim either way.
    shorter = make_claim(lease_until_unix_ms=NOW + 7)
    assert fence.accept_claim(shorter, NOW + 6).accepted
    assert fence.current_claim_for(*renewed.key) == shorter


def test_higher_term_supersedes_the_stored_term() -> None:
    fence = ClaimFence()
    fence.accept_claim(make_claim(coordinator_term=3), NOW)
    newer = make_claim(coordinator_term=9, coordinator_id="node-b", topology_id="topo-2")
    decision = fence.accept_claim(newer, NOW)
    assert decision.accepted and decision.supersedes_term == 3 and decision.current_term == 3
    assert decision.message == "accepted term 9, superseding term 3"
    assert fence.current_claim_for(*newer.key) == newer


def test_claims_are_kept_per_key() -> None:
    fence = ClaimFence()
    fence.accept_claim(make_claim(coordinator_term=5), NOW)
    other_manifest = make_claim(manifest_sha256="sha-b", coordinator_term=1)
    decision = fence.accept_claim(other_manifest, NOW)
    assert decision.accepted and decision.supersedes_term is None
    assert set(fence.claims()) == {("qwen", "hf://pkg", "sha-a"), ("qwen", "hf://pkg", "sha-b")}


def test_rejected_claims_leave_the_store_unchanged() -> None:
    fence = ClaimFence()
    stored = make_claim(coordinator_term=5)
    fence.accept_claim(stored, NOW)
    fence.accept_claim(make_claim(coordinator_term=4), NOW)
    fence.accept_claim(make_claim(coordinator_term=5, run_id="run-2"), NOW)
    assert fence.claims() == {stored.key: stored}


def test_claims_returns_a_copy() -> None:
    fence = ClaimFence()
    fence.accept_claim(make_claim(), NOW)
    copy = fence.claims()
    copy.clear()
    assert len(fence.claims()) == 1


# -- loads ------------------------------------------------------------------------------------


@pytest.mark.parametrize("coordinator_id", [None, ""])
def test_term_zero_without_coordinator_is_unfenced_even_with_a_claim(
    coordinator_id: str | None,
) -> None:
    load = make_load(coordinator_term=0, coordinator_id=coordinator_id, topology_id="other")
    for stored in (None, make_claim()):
        decision = decide_load(stored, load, NOW)
        assert (decision.accepted, decision.reason, decision.unfenced) == (True, None, True)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"coordinator_term": 0}, "MissingTerm"),
        ({"coordinator_id": None}, "MissingCoordinatorId"),
        ({"coordinator_id": ""}, "MissingCoordinatorId"),
        ({"coordinator_term": 9}, "TermMismatch"),
        ({"coordinator_term": 11}, "TermMismatch"),
        ({"coordinator_id": "node-z"}, "CoordinatorMismatch"),
        ({"topology_id": "topo-9"}, "TopologyRunMismatch"),
        ({"run_id": "run-9"}, "TopologyRunMismatch"),
        # Order: the term is compared before the coordinator, the coordinator before the run.
        ({"coordinator_term": 9, "coordinator_id": "node-z"}, "TermMismatch"),
        ({"coordinator_id": "node-z", "run_id": "run-9"}, "CoordinatorMismatch"),
    ],
)
def test_load_rejections(changes: dict[str, Any], reason: str) -> None:
    stored = make_claim()
    decision = decide_load(stored, make_load(stored, **changes), NOW)
    assert (decision.accepted, decision.reason, decision.unfenced) == (False, reason, False)


def test_load_without_claim_and_matching_load() -> None:
    missing = decide_load(None, make_load(), NOW)
    assert (missing.accepted, missing.reason) == (False, "MissingClaim")
    ok = decide_load(make_claim(), make_load(), NOW)
    assert (ok.accepted, ok.reason, ok.unfenced) == (True, None, False)


def test_load_messages_name_the_numbers() -> None:
    stored = make_claim(coordinator_term=11, lease_until_unix_ms=NOW)
    mismatch = decide_load(stored, make_load(stored, coordinator_term=10), NOW)
    assert mismatch.message == "rejected: load term 10 != claim term 11"
    assert mismatch.current_term == 11
    expired = decide_load(stored, make_load(stored), NOW + 1)
    assert str(NOW) in expired.message and str(NOW + 1) in expired.message


# -- helpers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("planned", "quorum"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3),
                                                 (10, 6)])
def test_quorum_requirement(planned: int, quorum: int) -> None:
    assert quorum_requirement(planned) == quorum


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "3", None])
def test_quorum_requirement_refuses_bad_counts(bad: Any) -> None:
    with pytest.raises(InvalidFenceInput) as info:
        quorum_requirement(bad)
    assert info.value.code == "InvalidFenceInput" and "planned_stages" in str(info.value)


def test_same_claim_epoch_ignores_only_the_lease() -> None:
    claim = make_claim()
    assert same_claim_epoch(claim, replace(claim, lease_until_unix_ms=1))
    for field, value in [("coordinator_term", 11), ("topology_id", "x"), ("run_id", "x"),
                         ("coordinator_id", "x"), ("participant_set_hash", "x"),
                         ("topology_hash", "x"), ("manifest_sha256", "x")]:
        assert not same_claim_epoch(claim, replace(claim, **{field: value})), field


def test_round_trip_and_key() -> None:
    claim = make_claim()
    assert CoordinatorClaim.from_dict(claim.to_dict()) == claim
    assert claim.key == ("qwen", "hf://pkg", "sha-a")
    load = make_load(coordinator_id=None, coordinator_term=0)
    assert LoadClaimRef.from_dict(load.to_dict()) == load and load.is_unfenced


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: make_claim(coordinator_term=-1), "claim.coordinator_term"),
        (lambda: make_claim(coordinator_term=1.5), "claim.coordinator_term"),
        (lambda: make_claim(coordinator_term=True), "claim.coordinator_term"),
        (lambda: make_claim(model_id=None), "claim.model_id"),
        (lambda: make_claim(lease_until_unix_ms="soon"), "claim.lease_until_unix_ms"),
        (lambda: make_load(coordinator_id=7), "load.coordinator_id"),
        (lambda: CoordinatorClaim.from_dict({**make_claim().to_dict(), "extra": 1}),
         "claim.extra"),
        (lambda: CoordinatorClaim.from_dict(
            {k: v for k, v in make_claim().to_dict().items() if k != "run_id"}), "claim.run_id"),
        (lambda: decide_claim(None, make_claim(), "now"), "clock.now_unix_ms"),
        (lambda: decide_claim(make_claim(model_id="other"), make_claim(), NOW), "current"),
        (lambda: decide_load(make_claim(model_id="other"), make_load(), NOW), "current"),
    ],
)
def test_malformed_input_is_refused_naming_the_field(build: Any, field: str) -> None:
    with pytest.raises(InvalidFenceInput) as info:
        build()
    assert info.value.field == field
    assert field in str(info.value)


def test_stale_term_reports_both_terms_and_the_current_claim() -> None:
    # docs/rules.md §8.1: a lower term is StaleTerm, reporting both terms and the stored claim.
    stored = make_claim(coordinator_term=11)
    data = decide_claim(stored, make_claim(coordinator_term=10), NOW).to_dict()
    assert data["reason"] == "StaleTerm"
    assert (data["claim_term"], data["current_term"]) == (10, 11)
    assert data["current"] == stored.to_dict()


def test_term_mismatch_reports_the_load_term_and_the_claim_term() -> None:
    # docs/rules.md §8.2: a term that differs is TermMismatch, reporting load_term and claim_term.
    stored = make_claim(coordinator_term=11)
    data = decide_load(stored, make_load(stored, coordinator_term=12), NOW).to_dict()
    assert data["reason"] == "TermMismatch"
    assert (data["load_term"], data["claim_term"]) == (12, 11)
    older = decide_load(stored, make_load(stored, coordinator_term=3), NOW).to_dict()
    assert (older["load_term"], older["claim_term"]) == (3, 11)
    # With no stored claim there is no claim term to report.
    missing = decide_load(None, make_load(stored), NOW).to_dict()
    assert (missing["reason"], missing["load_term"], missing["claim_term"]) == (
        "MissingClaim", 11, None)


def test_decisions_name_the_rule_that_decided() -> None:
    stored = make_claim(coordinator_term=11)
    cases = [
        (decide_claim(None, make_claim(model_id=""), NOW), RULE_SHAPE),
        (decide_claim(stored, make_claim(lease_until_unix_ms=NOW), NOW), RULE_SHAPE),
        (decide_claim(None, stored, NOW), RULE_FIRST_CLAIM),
        (decide_claim(stored, make_claim(coordinator_term=10), NOW), RULE_STALE_TERM),
        (decide_claim(stored, make_claim(coordinator_term=12), NOW), RULE_NEWER_TERM),
        (decide_claim(stored, replace(stored, lease_until_unix_ms=NOW + 1), NOW),
         RULE_SAME_EPOCH),
        (decide_claim(stored, replace(stored, run_id="other"), NOW), RULE_SAME_EPOCH),
    ]
    for decision, rule in cases:
        assert decision.rule == rule, decision.message
        assert decision.to_dict()["rule"] == rule
    assert {rule for _, rule in cases} == set(CLAIM_RULES)
    loads = [
        (decide_load(None, make_load(coordinator_id=None, coordinator_term=0), NOW),
         RULE_UNFENCED),
        (decide_load(stored, make_load(stored, coordinator_term=0), NOW), RULE_FENCED_FIELDS),
        (decide_load(stored, make_load(stored, coordinator_id=""), NOW), RULE_FENCED_FIELDS),
        (decide_load(None, make_load(stored), NOW), RULE_CLAIM_EXISTS),
        (decide_load(stored, make_load(stored, coordinator_term=3), NOW), RULE_MATCH),
        (decide_load(stored, make_load(stored, run_id="x"), NOW), RULE_MATCH),
        (decide_load(stored, make_load(stored), stored.lease_until_unix_ms + 1), RULE_LEASE),
        (decide_load(stored, make_load(stored), NOW), RULE_LEASE),
    ]
    for decision, rule in loads:
        assert decision.rule == rule, decision.message
        assert decision.to_dict()["rule"] == rule
    assert {rule for _, rule in loads} == set(LOAD_RULES)


def test_decisions_serialise_with_a_message() -> None:
    decision = decide_claim(make_claim(coordinator_term=2), make_claim(coordinator_term=1), NOW)
    data = decision.to_dict()
    assert data["reason"] == "StaleTerm" and data["current_term"] == 2
    assert data["current"]["coordinator_term"] == 2
    assert data["message"] == "stale coordinator term 1 < 2"
    json.dumps(data)


# -- properties -------------------------------------------------------------------------------

texts = st.sampled_from(["", "a", "b"])
claims = st.builds(
    CoordinatorClaim,
    model_id=st.just("m"), package_ref=st.just("p"), manifest_sha256=st.just("s"),
    topology_id=texts, run_id=texts, coordinator_id=texts,
    coordinator_term=st.integers(0, 4), participant_set_hash=texts, topology_hash=texts,
    lease_until_unix_ms=st.integers(0, 20),
)


@given(st.lists(st.tuples(claims, st.integers(0, 20)), max_size=12))
def test_stored_term_never_decreases_and_same_term_means_same_epoch(
    ops: list[tuple[CoordinatorClaim, int]],
) -> None:
    fence = ClaimFence()
    stored: CoordinatorClaim | None = None
    for claim, now in ops:
        decision = fence.accept_claim(claim, now)
        current = fence.current_claim_for("m", "p", "s")
        if decision.accepted:
            assert current == claim
            assert claim.lease_until_unix_ms > now and claim.coordinator_term > 0
            if stored is not None:
                assert claim.coordinator_term >= stored.coordinator_term
                if claim.coordinator_term == stored.coordinator_term:
                    assert same_claim_epoch(claim, stored)
                    assert decision.supersedes_term is None
                else:
                    assert decision.supersedes_term == stored.coordinator_term
            stored = claim
        else:
            assert current == stored
            assert decision.reason in CLAIM_REASONS


@given(claims, st.integers(0, 4), texts, texts, st.integers(0, 25))
def test_an_accepted_fenced_load_always_matches_a_live_claim(
    claim: CoordinatorClaim, term: int, coordinator: str, run: str, now: int
) -> None:
    load = LoadClaimRef("m", "p", "s", claim.topology_id, run, coordinator or None, term)
    decision = decide_load(claim, load, now)
    if decision.accepted and not decision.unfenced:
        assert load.coordinator_term == claim.coordinator_term > 0
        assert (load.coordinator_id, load.run_id) == (claim.coordinator_id, claim.run_id)
        assert now <= claim.lease_until_unix_ms
    if decision.unfenced:
        assert term == 0 and not coordinator
