"""The stage runtime around the fence (docs/rules.md §9, the design's "Superseding").

A :class:`StageRuntime` is an immutable value: the accepted claims, the stage work
that is preparing and the stage work that is running. Every operation returns the
next runtime and an outcome saying what happened, so a simulator can keep a
history and a model checker can hash states.

Rules beyond the fence itself:

- accepting a claim with term ``t`` shuts down the fenced running work for that key
  with a term below ``t`` and cancels the fenced preparations below ``t``;
- an accepted load starts a preparation (or runs at once with ``prepare=False``); a
  finished preparation runs only if it was not cancelled meanwhile;
- a ``StopStage`` whose term is below the accepted claim's term is rejected as stale
  and stops nothing; unfenced work (term 0, no coordinator) is never touched by
  fenced claims or stops, just as unfenced loads never touch the fence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from planner.fence.claims import (
    COORDINATOR_MISMATCH,
    MISSING_COORDINATOR_ID,
    MISSING_TERM,
    STALE_TERM,
    ClaimDecision,
    ClaimKey,
    CoordinatorClaim,
    GenerationRef,
    LoadClaimRef,
    LoadDecision,
    decide_claim,
    decide_load,
    require_instance,
    require_str,
)
from planner.fence.errors import InvalidFenceInput

STOP_REASONS: tuple[str, ...] = (MISSING_TERM, MISSING_COORDINATOR_ID, STALE_TERM,
                                 COORDINATOR_MISMATCH)


@dataclass(frozen=True, slots=True)
class StageWork(GenerationRef):
    """One stage process for a model artifact, authorised by a load (running or preparing).

    An empty coordinator id is stored as ``None``: both mean "no coordinator".
    """

    kind: ClassVar[str] = "work"

    def __post_init__(self) -> None:
        GenerationRef.__post_init__(self)
        if self.coordinator_id == "":
            object.__setattr__(self, "coordinator_id", None)

    @property
    def sort_key(self) -> tuple[str, str, str, int, str, str, str]:
        return (*self.key, self.coordinator_term, self.coordinator_id or "", self.topology_id,
                self.run_id)

    @property
    def fenced(self) -> bool:
        return not self.is_unfenced

    @classmethod
    def from_load(cls, load: LoadClaimRef) -> StageWork:
        require_instance(load, LoadClaimRef, "load")
        return cls.of(load)

    def describe(self) -> str:
        if not self.fenced:
            return f"{self.model_id} unfenced ({self.topology_id}/{self.run_id})"
        return (f"{self.model_id} term {self.coordinator_term} from {self.coordinator_id} "
                f"({self.topology_id}/{self.run_id})")


@dataclass(frozen=True, slots=True)
class StopRequest(GenerationRef):
    """``StopStage``: stop the work of one split generation of a model artifact."""

    kind: ClassVar[str] = "stop"

    def matches(self, work: StageWork) -> bool:
        """The work this stop targets: same key and generation, or same unfenced run."""
        return (
            work.key == self.key
            and work.topology_id == self.topology_id
            and work.run_id == self.run_id
            and work.coordinator_term == self.coordinator_term
            and (work.coordinator_id or None) == (self.coordinator_id or None)
        )


@dataclass(frozen=True, slots=True)
class StopDecision:
    """What a stage answers to ``StopStage``: ``current`` is the stored claim the
    ``request`` was judged against (``None`` when there was none)."""

    accepted: bool
    reason: str | None
    current: CoordinatorClaim | None
    request: StopRequest

    @property
    def current_term(self) -> int | None:
        return None if self.current is None else self.current.coordinator_term

    @property
    def stop_term(self) -> int:
        """The term the stop carries."""
        return self.request.coordinator_term

    @property
    def message(self) -> str:
        term = self.request.coordinator_term
        if self.accepted:
            return f"stop for term {term} accepted"
        if self.reason == STALE_TERM:
            return f"stale stop: term {term} < accepted term {self.current_term}"
        if self.reason == COORDINATOR_MISMATCH and self.current is not None:
            return (f"stop from {self.request.coordinator_id!r} rejected: term {term} is held "
                    f"by {self.current.coordinator_id!r}")
        if self.reason == MISSING_TERM:
            return "rejected: a stop with a coordinator id needs a non-zero term"
        if self.reason == MISSING_COORDINATOR_ID:
            return "rejected: a fenced stop (term > 0) needs a coordinator id"
        return f"rejected: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """Plain data; ``stop_term`` and ``current_term`` are the two terms a stale stop
        compares (docs/rules.md §9)."""
        return {"accepted": self.accepted, "reason": self.reason,
                "stop_term": self.stop_term, "current_term": self.current_term,
                "message": self.message}


def decide_stop(current: CoordinatorClaim | None, request: StopRequest) -> StopDecision:
    """Judge a stop against the stored claim for its key.

    A stop needs no live lease (stopping is always safe for its own generation) but a
    stop older than the accepted term must not reach newer work.
    """

    require_instance(current, CoordinatorClaim, "current", optional=True)
    require_instance(request, StopRequest, "request")

    def reject(reason: str) -> StopDecision:
        return StopDecision(False, reason, current, request)

    if request.is_unfenced:
        return StopDecision(True, None, current, request)
    if request.coordinator_term == 0:
        return reject(MISSING_TERM)
    if not request.coordinator_id:
        return reject(MISSING_COORDINATOR_ID)
    if current is not None:
        if request.coordinator_term < current.coordinator_term:
            return reject(STALE_TERM)
        if (request.coordinator_term == current.coordinator_term
                and request.coordinator_id != current.coordinator_id):
            return reject(COORDINATOR_MISMATCH)
    return StopDecision(True, None, current, request)


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    decision: ClaimDecision
    shut_down: tuple[StageWork, ...] = ()
    cancelled: tuple[StageWork, ...] = ()


@dataclass(frozen=True, slots=True)
class LoadOutcome:
    """``started`` is the work an accepted load authorises, also when the stage already
    prepares or runs it (a repeated load then changes nothing); ``None`` when refused."""

    decision: LoadDecision
    started: StageWork | None = None


@dataclass(frozen=True, slots=True)
class StopOutcome:
    decision: StopDecision
    stopped: tuple[StageWork, ...] = ()
    cancelled: tuple[StageWork, ...] = ()


def _sorted(works: Iterable[StageWork]) -> tuple[StageWork, ...]:
    return tuple(sorted(set(works), key=lambda work: work.sort_key))


@dataclass(frozen=True, slots=True)
class StageRuntime:
    """One stage node: its fence (``claims``, one per key) and its stage work.

    Values are hashable and compare by content; ``claims``, ``preparing`` and
    ``running`` are kept sorted so equal states are equal tuples.
    """

    node_id: str
    claims: tuple[CoordinatorClaim, ...] = ()
    preparing: tuple[StageWork, ...] = ()
    running: tuple[StageWork, ...] = ()

    def __post_init__(self) -> None:
        require_str(self.node_id, "node_id", "stage")
        for name, kind in (("claims", CoordinatorClaim), ("preparing", StageWork),
                           ("running", StageWork)):
            items = getattr(self, name)
            if not isinstance(items, tuple | list):
                raise InvalidFenceInput(name, f"must be a tuple of {kind.__name__}s, not "
                                        f"{type(items).__name__}", value=items, where="stage")
            for index, item in enumerate(items):
                require_instance(item, kind, f"stage.{name}[{index}]")
            object.__setattr__(self, name, tuple(items))
        keys = [claim.key for claim in self.claims]
        if len(set(keys)) != len(keys):
            raise InvalidFenceInput("claims", "a stage keeps at most one claim per key",
                                    where=self.node_id)

    def claim_for(self, key: ClaimKey) -> CoordinatorClaim | None:
        for claim in self.claims:
            if claim.key == key:
                return claim
        return None

    def accepted_term(self, key: ClaimKey) -> int:
        """The accepted claim's term for ``key``, 0 when none."""
        claim = self.claim_for(key)
        return 0 if claim is None else claim.coordinator_term

    def accept_claim(
        self, claim: CoordinatorClaim, now_unix_ms: int
    ) -> tuple[StageRuntime, ClaimOutcome]:
        require_instance(claim, CoordinatorClaim, "claim")
        decision = decide_claim(self.claim_for(claim.key), claim, now_unix_ms)
        if not decision.accepted:
            return self, ClaimOutcome(decision)
        term = claim.coordinator_term

        def superseded(work: StageWork) -> bool:
            return work.key == claim.key and work.fenced and work.coordinator_term < term

        shut_down = tuple(w for w in self.running if superseded(w))
        cancelled = tuple(w for w in self.preparing if superseded(w))
        others = [c for c in self.claims if c.key != claim.key]
        claims = tuple(sorted([*others, claim], key=lambda c: c.key))
        nxt = replace(
            self,
            claims=claims,
            running=tuple(w for w in self.running if not superseded(w)),
            preparing=tuple(w for w in self.preparing if not superseded(w)),
        )
        return nxt, ClaimOutcome(decision, shut_down, cancelled)

    def load(
        self, load: LoadClaimRef, now_unix_ms: int, *, prepare: bool = True
    ) -> tuple[StageRuntime, LoadOutcome]:
        """Validate a load; when accepted its work starts preparing (or runs at once)."""
        require_instance(load, LoadClaimRef, "load")
        decision = decide_load(self.claim_for(load.key), load, now_unix_ms)
        if not decision.accepted:
            return self, LoadOutcome(decision)
        work = StageWork.from_load(load)
        if work in self.running or (prepare and work in self.preparing):
            return self, LoadOutcome(decision, work)
        if prepare:
            nxt = replace(self, preparing=_sorted((*self.preparing, work)))
        else:
            nxt = replace(self, running=_sorted((*self.running, work)),
                          preparing=tuple(w for w in self.preparing if w != work))
        return nxt, LoadOutcome(decision, work)

    def finish_preparation(self, work: StageWork) -> tuple[StageRuntime, bool]:
        """Promote a preparation to running; ``False`` when it was cancelled meanwhile."""
        if work not in self.preparing:
            return self, False
        nxt = replace(
            self,
            preparing=tuple(w for w in self.preparing if w != work),
            running=_sorted((*self.running, work)),
        )
        return nxt, True

    def stop(self, request: StopRequest) -> tuple[StageRuntime, StopOutcome]:
        require_instance(request, StopRequest, "request")
        decision = decide_stop(self.claim_for(request.key), request)
        if not decision.accepted:
            return self, StopOutcome(decision)
        stopped = tuple(w for w in self.running if request.matches(w))
        cancelled = tuple(w for w in self.preparing if request.matches(w))
        nxt = replace(
            self,
            running=tuple(w for w in self.running if not request.matches(w)),
            preparing=tuple(w for w in self.preparing if not request.matches(w)),
        )
        return nxt, StopOutcome(decision, stopped, cancelled)

    def crash(self, *, keep_claims: bool = False) -> StageRuntime:
        """A process crash: all work is gone; claims survive only if the fence is durable."""
        return StageRuntime(self.node_id, self.claims if keep_claims else ())

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "claims": [claim.to_dict() for claim in self.claims],
            "preparing": [work.to_dict() for work in self.preparing],
            "running": [work.to_dict() for work in self.running],
        }
