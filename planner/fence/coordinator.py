"""The coordinator side: claim a planned split, count accepts, load only with quorum.

A :class:`Coordinator` is a small state machine driven by its caller (the simulator):
every method takes the coordinator's own clock and returns the actions to perform,
:class:`Send` a message, :class:`SetTimer` or :class:`Note` something worth logging.
It never reads a clock or touches a network itself.

Policy (:class:`CoordinatorPolicy`) decides what happens after a failed attempt:
retry later with a higher term, or stand down when a stage reports that another
coordinator already holds the same or a newer term (fighting it would only make the
split flap between coordinators).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from planner._validate import flag
from planner.fence.claims import (
    CONFLICTING_SAME_TERM,
    EXPIRED_LEASE,
    MISSING_CLAIM,
    STALE_TERM,
    ClaimDecision,
    CoordinatorClaim,
    LoadClaimRef,
    LoadDecision,
    fence_int,
    quorum_requirement,
    require_instance,
    require_str,
)
from planner.fence.errors import InvalidFenceInput, bad_input
from planner.fence.messages import ClaimCoordinator, LoadStage, Message, StopStage
from planner.fence.runtime import StageWork, StopRequest

FOUR_HOURS_MS = 4 * 60 * 60 * 1000


def _short_hash(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


class _StageLike(Protocol):
    @property
    def node_id(self) -> str: ...
    @property
    def layer_start(self) -> int: ...
    @property
    def layer_end(self) -> int: ...


def _layer_ranges(value: Any) -> tuple[tuple[int, int], ...]:
    """``(start, end)`` pairs of whole layers, each stage's ``[start, end)`` starting where
    the one before ended."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidFenceInput("layer_ranges", "must be a list of (start, end) pairs",
                                value=value, where="plan")
    ranges: list[tuple[int, int]] = []
    for index, pair in enumerate(value):
        name = f"layer_ranges[{index}]"
        if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise InvalidFenceInput(name, "must be a (start, end) pair", value=pair,
                                    where="plan")
        start = fence_int(pair[0], f"{name}[0]", "plan", minimum=0)
        end = fence_int(pair[1], f"{name}[1]", "plan", minimum=0)
        if end <= start:
            raise InvalidFenceInput(name, "must end after it starts (end is exclusive)",
                                    value=tuple(pair), where="plan")
        if ranges and start != ranges[-1][1]:
            raise InvalidFenceInput(name, f"must start at layer {ranges[-1][1]}, where the "
                                    "stage before ends", value=tuple(pair), where="plan")
        ranges.append((start, end))
    return tuple(ranges)


@dataclass(frozen=True, slots=True)
class SplitPlan:
    """One split generation a coordinator wants to own: the artifact and its stages.

    ``stage_nodes`` are the planned stage node ids in stage order; ``layer_ranges``
    (optional, one ``(start, end)`` per stage) feed the topology hash. The hashes are
    derived unless given, so two plans differ in hash exactly when they differ in
    participants or layout.
    """

    model_id: str
    package_ref: str
    manifest_sha256: str
    topology_id: str
    run_id: str
    stage_nodes: tuple[str, ...]
    layer_ranges: tuple[tuple[int, int], ...] = ()
    participant_set_hash: str = ""
    topology_hash: str = ""

    def __post_init__(self) -> None:
        for name in ("model_id", "package_ref", "manifest_sha256", "topology_id", "run_id",
                     "participant_set_hash", "topology_hash"):
            require_str(getattr(self, name), name, "plan")
        if isinstance(self.stage_nodes, str | bytes) or not isinstance(
                self.stage_nodes, Iterable):
            # A string is iterable: "abc" would otherwise become the stages a, b and c.
            raise InvalidFenceInput("stage_nodes", "must be a list of node ids",
                                    value=self.stage_nodes, where="plan")
        nodes = tuple(self.stage_nodes)
        object.__setattr__(self, "stage_nodes", nodes)
        if not nodes:
            raise InvalidFenceInput("stage_nodes", "a split needs at least one stage",
                                    where="plan")
        for node in nodes:
            if not isinstance(node, str) or not node:
                raise InvalidFenceInput("stage_nodes", "node ids must be non-empty strings",
                                        value=node, where="plan")
        if len(set(nodes)) != len(nodes):
            raise InvalidFenceInput("stage_nodes", "a node can hold only one stage",
                                    value=list(nodes), where="plan")
        ranges = _layer_ranges(self.layer_ranges)
        object.__setattr__(self, "layer_ranges", ranges)
        if ranges and len(ranges) != len(nodes):
            raise InvalidFenceInput("layer_ranges", f"needs one range per stage ({len(nodes)})",
                                    value=list(ranges), where="plan")
        if not self.participant_set_hash:
            object.__setattr__(self, "participant_set_hash",
                               _short_hash("participants", *sorted(nodes)))
        if not self.topology_hash:
            layout = [f"{n}:{a}-{b}" for n, (a, b) in zip(nodes, ranges, strict=False)]
            object.__setattr__(self, "topology_hash",
                               _short_hash("topology", self.topology_id, *nodes, *layout))

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.model_id, self.package_ref, self.manifest_sha256)

    @property
    def quorum(self) -> int:
        return quorum_requirement(len(self.stage_nodes))

    def claim(self, coordinator_id: str, term: int, lease_until_unix_ms: int) -> CoordinatorClaim:
        return CoordinatorClaim(
            model_id=self.model_id,
            package_ref=self.package_ref,
            manifest_sha256=self.manifest_sha256,
            topology_id=self.topology_id,
            run_id=self.run_id,
            coordinator_id=coordinator_id,
            coordinator_term=term,
            participant_set_hash=self.participant_set_hash,
            topology_hash=self.topology_hash,
            lease_until_unix_ms=lease_until_unix_ms,
        )

    @classmethod
    def from_stages(
        cls,
        stages: Iterable[_StageLike],
        *,
        model_id: str,
        package_ref: str,
        manifest_sha256: str,
        topology_id: str,
        run_id: str,
    ) -> SplitPlan:
        """Build from planned stages (anything with ``node_id``, ``layer_start``, ``layer_end``)."""
        stages = list(stages)
        return cls(
            model_id=model_id,
            package_ref=package_ref,
            manifest_sha256=manifest_sha256,
            topology_id=topology_id,
            run_id=run_id,
            stage_nodes=tuple(s.node_id for s in stages),
            layer_ranges=tuple((s.layer_start, s.layer_end) for s in stages),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "package_ref": self.package_ref,
            "manifest_sha256": self.manifest_sha256,
            "topology_id": self.topology_id,
            "run_id": self.run_id,
            "stage_nodes": list(self.stage_nodes),
            "layer_ranges": [list(r) for r in self.layer_ranges],
            "participant_set_hash": self.participant_set_hash,
            "topology_hash": self.topology_hash,
        }


@dataclass(frozen=True, slots=True)
class CoordinatorPolicy:
    """Timeouts and retry behaviour of a coordinator (all durations in ms)."""

    lease_ms: int = FOUR_HOURS_MS
    claim_timeout_ms: int = 2_000
    load_timeout_ms: int = 30_000
    retry_interval_ms: int = 10_000
    max_attempts: int = 3
    max_renewals: int = 2
    stand_down_on_newer_term: bool = True

    def __post_init__(self) -> None:
        for name in ("lease_ms", "claim_timeout_ms", "load_timeout_ms", "retry_interval_ms",
                     "max_attempts"):
            object.__setattr__(self, name,
                               fence_int(getattr(self, name), name, "policy", minimum=1))
        object.__setattr__(self, "max_renewals",
                           fence_int(self.max_renewals, "max_renewals", "policy", minimum=0))
        object.__setattr__(self, "stand_down_on_newer_term", flag(
            self.stand_down_on_newer_term, bad_input("stand_down_on_newer_term", "policy")))


class CoordinatorPhase(StrEnum):
    IDLE = "idle"
    CLAIMING = "claiming"
    LOADING = "loading"
    RUNNING = "running"
    INCOMPLETE = "incomplete"
    STANDBY = "standby"
    GAVE_UP = "gave_up"
    STOOD_DOWN = "stood_down"
    STOPPED = "stopped"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class Send:
    dst: str
    message: Message


@dataclass(frozen=True, slots=True)
class SetTimer:
    delay_ms: int
    timer: str
    round_id: int


@dataclass(frozen=True, slots=True)
class Note:
    """Something the coordinator decided, for the event log."""

    kind: str
    detail: str
    term: int | None = None
    accepted: bool | None = None
    reason: str | None = None


Action = Send | SetTimer | Note

_OTHER_OWNER_REASONS = (STALE_TERM, CONFLICTING_SAME_TERM)
_RECLAIM_REASONS = (EXPIRED_LEASE, MISSING_CLAIM)


@dataclass
class Coordinator:
    """A node that tries to own one planned split.

    ``term`` is the term of the current (or last) attempt; ``highest_seen_term`` the
    highest term any stage reported holding, so a retry can outbid it.
    """

    node_id: str
    plan: SplitPlan
    policy: CoordinatorPolicy = field(default_factory=CoordinatorPolicy)
    phase: CoordinatorPhase = CoordinatorPhase.IDLE
    term: int = 0
    highest_seen_term: int = 0
    round_id: int = 0
    attempts: int = 0
    renewals: int = 0
    claim: CoordinatorClaim | None = None
    accepted_by: set[str] = field(default_factory=set)
    rejected_by: dict[str, ClaimDecision] = field(default_factory=dict)
    loaded_by: set[str] = field(default_factory=set)
    load_rejected_by: dict[str, LoadDecision] = field(default_factory=dict)
    ready: set[str] = field(default_factory=set)
    quorum_terms: list[int] = field(default_factory=list)
    loads_sent: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.node_id, str) or not self.node_id:
            raise InvalidFenceInput("node_id", "a coordinator needs a node id",
                                    value=self.node_id, where="coordinator")
        require_instance(self.plan, SplitPlan, "coordinator.plan")
        require_instance(self.policy, CoordinatorPolicy, "coordinator.policy")

    @property
    def stages(self) -> tuple[str, ...]:
        return self.plan.stage_nodes

    @property
    def quorum(self) -> int:
        return self.plan.quorum

    @property
    def has_quorum(self) -> bool:
        return len(self.accepted_by) >= self.quorum

    # -- starting and retrying -------------------------------------------------------

    def start(self, now_unix_ms: int, term: int | None = None) -> list[Action]:
        """Begin claiming the plan; ``term`` defaults to one above any term seen so far."""
        if self.phase is CoordinatorPhase.DOWN:
            raise InvalidFenceInput("phase", f"coordinator {self.node_id} is down",
                                    where="coordinator")
        now_unix_ms = fence_int(now_unix_ms, "now_unix_ms", "coordinator")
        chosen = self.next_term() if term is None else term
        chosen = fence_int(chosen, "term", "coordinator", minimum=1)
        self.attempts = 1
        self.renewals = 0
        return self._begin_round(now_unix_ms, chosen, renewal=False)

    def next_term(self) -> int:
        return max(self.term, self.highest_seen_term) + 1

    def _begin_round(self, now: int, term: int, *, renewal: bool) -> list[Action]:
        self.round_id += 1
        self.term = term
        self.claim = self.plan.claim(self.node_id, term, now + self.policy.lease_ms)
        self.accepted_by = set()
        self.rejected_by = {}
        if not renewal:
            self.loaded_by = set()
            self.load_rejected_by = {}
            self.ready = set()
        self.phase = CoordinatorPhase.CLAIMING
        stages = len(self.stages)
        if renewal:
            note = Note("renew", f"claiming term {term} again with a fresh lease on {stages} "
                        f"stages (quorum {self.quorum})", term)
        else:
            note = Note("attempt", f"attempt {self.attempts}: claiming term {term} on {stages} "
                        f"stages (quorum {self.quorum})", term)
        message = ClaimCoordinator(self.claim, self.round_id)
        actions: list[Action] = [note]
        actions += [Send(stage, message) for stage in self.stages]
        actions.append(SetTimer(self.policy.claim_timeout_ms, "claim_timeout", self.round_id))
        return actions

    # -- replies -----------------------------------------------------------------------

    def on_claim_reply(self, stage: str, decision: ClaimDecision, round_id: int,
                       now_unix_ms: int) -> list[Action]:
        require_instance(decision, ClaimDecision, "decision")
        if decision.current_term is not None:
            self.highest_seen_term = max(self.highest_seen_term, decision.current_term)
        if (round_id != self.round_id or stage not in self.stages
                or self.phase not in (CoordinatorPhase.CLAIMING, CoordinatorPhase.LOADING)):
            return []
        actions: list[Action] = []
        if decision.accepted:
            self.accepted_by.add(stage)
            self.rejected_by.pop(stage, None)
            if self.phase is CoordinatorPhase.CLAIMING and self.has_quorum:
                actions += self._reach_quorum()
        else:
            self.rejected_by[stage] = decision
        answered = len(self.accepted_by) + len(self.rejected_by)
        if self.phase is CoordinatorPhase.CLAIMING and answered == len(self.stages):
            actions += self._conclude_without_quorum(now_unix_ms)
        return actions

    def _reach_quorum(self) -> list[Action]:
        assert self.claim is not None
        self.phase = CoordinatorPhase.LOADING
        self.quorum_terms.append(self.term)
        actions: list[Action] = [Note(
            "quorum",
            f"{len(self.accepted_by)}/{len(self.stages)} stages accepted term {self.term} "
            f"(quorum {self.quorum}): loading the split",
            self.term, True,
        )]
        load = LoadStage(LoadClaimRef.for_claim(self.claim), self.round_id)
        for stage in self.stages:
            if stage not in self.loaded_by:
                actions.append(Send(stage, load))
                self.loads_sent += 1
        self.load_rejected_by = {}
        actions.append(SetTimer(self.policy.load_timeout_ms, "load_timeout", self.round_id))
        return actions

    def _conclude_without_quorum(self, now: int) -> list[Action]:
        silent = [s for s in self.stages if s not in self.accepted_by and s not in self.rejected_by]
        detail = (f"{len(self.accepted_by)}/{len(self.stages)} stages accepted term {self.term}, "
                  f"quorum needs {self.quorum}: not loading")
        if silent:
            detail += f" (no answer from {', '.join(silent)})"
        actions: list[Action] = [Note("no_quorum", detail, self.term, False)]
        owners = {
            stage: d for stage, d in self.rejected_by.items() if d.reason in _OTHER_OWNER_REASONS
        }
        if self.policy.stand_down_on_newer_term and owners:
            stage, decision = sorted(owners.items())[0]
            holder = decision.current
            who = "" if holder is None else (
                f" term {holder.coordinator_term} held by {holder.coordinator_id}")
            self.phase = CoordinatorPhase.STOOD_DOWN
            actions.append(Note("stand_down", f"stage {stage} reports{who}: standing down",
                                self.term, reason=decision.reason))
        elif self.attempts < self.policy.max_attempts:
            self.phase = CoordinatorPhase.STANDBY
            actions.append(Note("retry", f"standby; retrying in {self.policy.retry_interval_ms} "
                                f"ms with a higher term", self.term))
            actions.append(SetTimer(self.policy.retry_interval_ms, "retry", self.round_id))
        else:
            self.phase = CoordinatorPhase.GAVE_UP
            actions.append(Note("give_up", f"no quorum after {self.attempts} attempt(s)",
                                self.term))
        return actions

    def on_load_reply(self, stage: str, decision: LoadDecision, term: int,
                      now_unix_ms: int) -> list[Action]:
        require_instance(decision, LoadDecision, "decision")
        active = (CoordinatorPhase.CLAIMING, CoordinatorPhase.LOADING, CoordinatorPhase.INCOMPLETE)
        if term != self.term or stage not in self.stages or self.phase not in active:
            return []
        if decision.accepted:
            self.loaded_by.add(stage)
            return []
        self.load_rejected_by[stage] = decision
        current = decision.current_term
        if current is not None and current > self.term:
            self.highest_seen_term = max(self.highest_seen_term, current)
            if self.policy.stand_down_on_newer_term:
                self.phase = CoordinatorPhase.STOOD_DOWN
                return [Note("stand_down", f"stage {stage} holds newer term {current}: "
                             "standing down", self.term, reason=decision.reason)]
        if (decision.reason in _RECLAIM_REASONS and self.phase is CoordinatorPhase.LOADING
                and self.renewals < self.policy.max_renewals):
            self.renewals += 1
            return self._begin_round(now_unix_ms, self.term, renewal=True)
        return []

    def on_stage_ready(self, stage: str, work: StageWork, now_unix_ms: int) -> list[Action]:
        require_instance(work, StageWork, "work")
        claim = self.claim
        if claim is None or stage not in self.stages:
            return []
        if (work.coordinator_term, work.coordinator_id, work.topology_id, work.run_id) != (
                claim.coordinator_term, claim.coordinator_id, claim.topology_id, claim.run_id):
            return []
        self.ready.add(stage)
        waiting = (CoordinatorPhase.CLAIMING, CoordinatorPhase.LOADING,
                   CoordinatorPhase.INCOMPLETE)
        if self.phase in waiting and self.ready.issuperset(self.stages):
            self.phase = CoordinatorPhase.RUNNING
            return [Note("split_started", f"all {len(self.stages)} stages run term {self.term}",
                         self.term, True)]
        return []

    def on_timer(self, timer: str, round_id: int, now_unix_ms: int) -> list[Action]:
        if round_id != self.round_id:
            return []
        if timer == "claim_timeout" and self.phase is CoordinatorPhase.CLAIMING:
            return self._conclude_without_quorum(now_unix_ms)
        if timer == "retry" and self.phase is CoordinatorPhase.STANDBY:
            self.attempts += 1
            return self._begin_round(now_unix_ms, self.next_term(), renewal=False)
        if timer == "load_timeout" and self.phase is CoordinatorPhase.LOADING:
            missing = [s for s in self.stages if s not in self.ready]
            self.phase = CoordinatorPhase.INCOMPLETE
            reasons = [f"{s}: {self.load_rejected_by[s].reason}" for s in missing
                       if s in self.load_rejected_by]
            detail = f"split did not start; not running: {', '.join(missing)}"
            if reasons:
                detail += f" ({'; '.join(reasons)})"
            return [Note("split_incomplete", detail, self.term, False)]
        return []

    # -- commands ----------------------------------------------------------------------

    def resend_loads(self, now_unix_ms: int, stages: Sequence[str] | None = None) -> list[Action]:
        """Send ``LoadStage`` for the last claim without claiming again.

        This is what a coordinator that missed a takeover does; stages that accepted a
        newer term must reject it.
        """
        if self.claim is None:
            raise InvalidFenceInput("claim", f"coordinator {self.node_id} has never claimed",
                                    where="coordinator")
        self.phase = CoordinatorPhase.LOADING
        load = LoadStage(LoadClaimRef.for_claim(self.claim), self.round_id)
        targets = list(self.stages if stages is None else stages)
        self.loads_sent += len(targets)
        return [Note("resend_loads", f"loading term {self.term} without a new claim", self.term),
                *(Send(stage, load) for stage in targets)]

    def stop_split(self, now_unix_ms: int) -> list[Action]:
        """Send ``StopStage`` for the last claim's generation to every planned stage."""
        if self.claim is None:
            raise InvalidFenceInput("claim", f"coordinator {self.node_id} has never claimed",
                                    where="coordinator")
        self.phase = CoordinatorPhase.STOPPED
        request = StopStage(StopRequest.for_claim(self.claim))
        return [Note("stop_split", f"stopping term {self.term}", self.term),
                *(Send(stage, request) for stage in self.stages)]

    def crash(self) -> None:
        self.phase = CoordinatorPhase.DOWN

    def restart(self) -> None:
        """Back up with its memory of the last term and claim, but no attempt in flight."""
        self.phase = CoordinatorPhase.IDLE
        self.round_id += 1

    def status(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "phase": str(self.phase),
            "term": self.term,
            "attempts": self.attempts,
            "accepted_by": sorted(self.accepted_by),
            "ready": sorted(self.ready),
            "quorum": self.quorum,
            "quorum_terms": list(self.quorum_terms),
            "loads_sent": self.loads_sent,
        }
