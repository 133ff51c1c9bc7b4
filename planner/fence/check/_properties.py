"""What the checker judges on every step: the :data:`PROPERTIES`, each a
:class:`Property` the fence must keep (:data:`MUST_HOLD`) or is known not to keep
(:data:`KNOWN_TO_FAIL`), with the function that explains a breach."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.fence.check.configuration import (
    CheckConfigError,
    coordinator_id,
    stage_id,
    unix_ms_tick,
)
from planner.fence.check.model import (
    DELIVER_CLAIM,
    DELIVER_LOAD,
    DELIVER_REPLY,
    DELIVER_STOP,
    FenceModel,
    ModelState,
    TraceStep,
)
from planner.fence.claims import same_claim_epoch

MUST_HOLD = "must hold"
KNOWN_TO_FAIL = "known not to hold"


Violation = Callable[[FenceModel, ModelState, TraceStep, ModelState], str | None]


@dataclass(frozen=True)
class Property:
    """A statement about every reachable step; ``violation`` explains a breach or is None.

    ``kinds`` are the only step kinds that can break it (the others are not judged).
    """

    name: str
    title: str
    expectation: str
    kinds: frozenset[str]
    violation: Violation = field(repr=False, compare=False)


def _term_never_decreases(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_CLAIM or not step.accepted:
        return None
    index = step.stage_index
    old, new = before.stages[index].claim, after.stages[index].claim
    if old is not None and new is not None and new.term < old.term:
        return f"{step.stage_id}'s accepted term fell from {old.term} to {new.term}"
    return None


def _same_term_same_claim(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_CLAIM or not step.accepted or step.claim is None:
        return None
    for grant in before.stages[step.stage_index].accepted:
        earlier = model.claim(grant)
        if (earlier.coordinator_term == step.claim.coordinator_term
                and not same_claim_epoch(earlier, step.claim)):
            return (f"{step.stage_id} accepted two different claims for term {grant.term}: "
                    f"{earlier.coordinator_id}'s {earlier.run_id} and "
                    f"{step.claim.coordinator_id}'s {step.claim.run_id}")
    return None


def _accepted_fenced_load(step: TraceStep) -> bool:
    return (step.kind == DELIVER_LOAD and bool(step.accepted) and step.load is not None
            and not step.load.is_unfenced)


_LOAD_FIELDS = ("model_id", "package_ref", "manifest_sha256", "topology_id", "run_id",
                "coordinator_id", "coordinator_term")


def _load_matches_claim_within_lease(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if not _accepted_fenced_load(step):
        return None
    load, claim = step.load, model.stage_claim(before, step.stage_index)
    assert load is not None and step.stage_now_unix_ms is not None
    if claim is None:
        return f"{step.stage_id} accepted a term-{load.coordinator_term} load with no claim"
    mismatched = [name for name in _LOAD_FIELDS if getattr(load, name) != getattr(claim, name)]
    if mismatched:
        return (f"{step.stage_id} accepted a load whose {', '.join(mismatched)} differ(s) from "
                f"its term-{claim.coordinator_term} claim")
    if step.stage_now_unix_ms > claim.lease_until_unix_ms:
        return (f"{step.stage_id} accepted a load at stage clock "
                f"t={unix_ms_tick(step.stage_now_unix_ms)} after its lease ended at "
                f"t={unix_ms_tick(claim.lease_until_unix_ms)}")
    return None


def _no_load_below_accepted_term(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if not _accepted_fenced_load(step) or step.load is None:
        return None
    accepted = before.stages[step.stage_index].accepted
    highest = max((grant.term for grant in accepted), default=0)
    if step.load.coordinator_term < highest:
        return (f"{step.stage_id} accepted a term-{step.load.coordinator_term} load after "
                f"accepting term {highest}")
    return None


def _stale_stop_stops_nothing(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_STOP or step.term is None:
        return None
    index = step.stage_index
    held = before.stages[index].claim
    if held is None or step.term >= held.term:
        return None
    if before.stages[index].running != after.stages[index].running:
        return (f"a stale term-{step.term} stop ended {step.stage_id}'s running work although "
                f"the stage holds term {held.term}")
    return None


def _stages_granting(model: FenceModel, state: ModelState, coordinator: int,
                     term: int) -> list[int]:
    """Planned stages that have ever accepted ``coordinator``'s claim for ``term``."""
    return [
        stage for stage in model.planned[coordinator]
        if any(g.coordinator == coordinator and g.term == term
               for g in state.stages[stage].accepted)
    ]


def _one_majority_per_term(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_CLAIM or not step.accepted or step.term is None:
        return None
    term = step.term
    for first, second in itertools.combinations(range(model.config.coordinators), 2):
        if model.planned[first] != model.planned[second]:
            continue
        won_first = _stages_granting(model, after, first, term)
        won_second = _stages_granting(model, after, second, term)
        if len(won_first) >= model.quorum[first] and len(won_second) >= model.quorum[second]:
            return (f"in term {term} both {coordinator_id(first)} "
                    f"({', '.join(map(stage_id, won_first))}) and {coordinator_id(second)} "
                    f"({', '.join(map(stage_id, won_second))}) won a majority of the same "
                    f"planned stages")
    return None


def _believes_majority(model: FenceModel, state: ModelState, coordinator: int) -> bool:
    held = state.coordinators[coordinator]
    return held.term > 0 and len(held.accepts) >= model.quorum[coordinator]


def _single_majority_belief(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_REPLY:
        return None
    believers = [c for c in range(model.config.coordinators) if _believes_majority(model, after, c)]
    for first, second in itertools.combinations(believers, 2):
        a, b = after.coordinators[first], after.coordinators[second]
        if a.term != b.term:
            return (f"{coordinator_id(first)} believes it holds a majority in term {a.term} "
                    f"while {coordinator_id(second)} believes it holds one in term {b.term}")
    return None


def _pipeline_runs_one_term(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_LOAD or not step.accepted:
        return None
    for index, planned in enumerate(model.planned):
        running = [after.stages[stage].running for stage in planned]
        if any(work is None for work in running):
            continue
        terms = {work[1] for work in running if work is not None}
        if len(terms) > 1:
            listed = ", ".join(
                f"{stage_id(stage)} runs term {work[1]}"
                for stage, work in zip(planned, running, strict=True) if work is not None)
            return (f"every stage of {coordinator_id(index)}'s plan is running, but not the "
                    f"same term: {listed}")
    return None


def _current_majority(model: FenceModel, state: ModelState, coordinator: int) -> list[int]:
    term = state.coordinators[coordinator].term
    return [
        stage for stage in model.planned[coordinator]
        if (grant := state.stages[stage].claim) is not None
        and grant.coordinator == coordinator and grant.term == term
    ]


def _majorities_overlap(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_CLAIM or not step.accepted:
        return None
    for first, second in itertools.combinations(range(model.config.coordinators), 2):
        held_first = _current_majority(model, after, first)
        held_second = _current_majority(model, after, second)
        if (len(held_first) >= model.quorum[first]
                and len(held_second) >= model.quorum[second]
                and not set(held_first) & set(held_second)):
            return (f"{coordinator_id(first)} holds a majority of its plan "
                    f"({', '.join(map(stage_id, held_first))}) while {coordinator_id(second)} "
                    f"holds a majority of its own ({', '.join(map(stage_id, held_second))}); "
                    f"the two majorities share no stage")
    return None


def _load_within_lease_on_true_clock(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if not _accepted_fenced_load(step):
        return None
    claim = model.stage_claim(before, step.stage_index)
    if claim is not None and step.now_unix_ms > claim.lease_until_unix_ms:
        assert step.stage_now_unix_ms is not None
        return (f"{step.stage_id} accepted a load at true time t={step.tick}, after the lease "
                f"ended at t={unix_ms_tick(claim.lease_until_unix_ms)}; the stage's own clock "
                f"read t={unix_ms_tick(step.stage_now_unix_ms)}")
    return None


_CLAIMS = frozenset({DELIVER_CLAIM})
_LOADS = frozenset({DELIVER_LOAD})
PROPERTIES: tuple[Property, ...] = (
    Property("term_never_decreases", "a stage's accepted term never decreases", MUST_HOLD,
             _CLAIMS, _term_never_decreases),
    Property("same_term_same_claim",
             "two claims a stage accepted with the same term are the same claim", MUST_HOLD,
             _CLAIMS, _same_term_same_claim),
    Property("load_matches_claim_within_lease",
             "no accepted load mismatches the stage's claim or arrives after its lease on the "
             "stage's clock", MUST_HOLD, _LOADS, _load_matches_claim_within_lease),
    Property("no_load_below_accepted_term",
             "after a stage accepts term t it accepts no load below t", MUST_HOLD, _LOADS,
             _no_load_below_accepted_term),
    Property("stale_stop_stops_nothing", "a stale stop never stops anything", MUST_HOLD,
             frozenset({DELIVER_STOP}), _stale_stop_stops_nothing),
    Property("one_majority_per_term",
             "for one planned stage set, at most one coordinator wins a majority in a term",
             MUST_HOLD, _CLAIMS, _one_majority_per_term),
    Property("single_majority_belief",
             "no two coordinators believe they hold a majority at the same moment with "
             "different terms", KNOWN_TO_FAIL, frozenset({DELIVER_REPLY}),
             _single_majority_belief),
    Property("pipeline_runs_one_term",
             "the stages of a running pipeline all run the same term", KNOWN_TO_FAIL, _LOADS,
             _pipeline_runs_one_term),
    Property("majorities_overlap",
             "majorities of two different planned stage sets always overlap", KNOWN_TO_FAIL,
             _CLAIMS, _majorities_overlap),
    Property("load_within_lease_on_true_clock",
             "no load is accepted after its lease on the true clock, even with skewed clocks",
             KNOWN_TO_FAIL, _LOADS, _load_within_lease_on_true_clock),
)
PROPERTY_NAMES: tuple[str, ...] = tuple(p.name for p in PROPERTIES)
MUST_HOLD_NAMES: tuple[str, ...] = tuple(p.name for p in PROPERTIES if p.expectation == MUST_HOLD)
KNOWN_TO_FAIL_NAMES: tuple[str, ...] = tuple(
    p.name for p in PROPERTIES if p.expectation == KNOWN_TO_FAIL)


def property_named(name: str) -> Property:
    for prop in PROPERTIES:
        if prop.name == name:
            return prop
    raise CheckConfigError("property", f"unknown property; expected one of "
                           f"{', '.join(PROPERTY_NAMES)}", name)
