"""The stage-control messages a coordinator and its stages exchange.

``round_id`` ties a reply to the coordinator's attempt that asked, so a late reply
to an abandoned attempt is recognised and ignored. A message is checked when it is
built (its payload's type, whole-number terms and rounds), so a malformed one is refused
where it is made rather than when the simulation delivers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from planner.fence.claims import (
    ClaimDecision,
    CoordinatorClaim,
    LoadClaimRef,
    LoadDecision,
    fence_int,
    require_instance,
)
from planner.fence.runtime import StageWork, StopDecision, StopRequest


@dataclass(frozen=True, slots=True)
class ClaimCoordinator:
    claim: CoordinatorClaim
    round_id: int = 0
    name: ClassVar[str] = "ClaimCoordinator"

    def __post_init__(self) -> None:
        _check(self, "claim", CoordinatorClaim, ("round_id",))

    @property
    def term(self) -> int:
        return self.claim.coordinator_term


@dataclass(frozen=True, slots=True)
class ClaimReply:
    decision: ClaimDecision
    term: int
    round_id: int = 0
    name: ClassVar[str] = "ClaimReply"

    def __post_init__(self) -> None:
        _check(self, "decision", ClaimDecision, ("term", "round_id"))


@dataclass(frozen=True, slots=True)
class LoadStage:
    load: LoadClaimRef
    round_id: int = 0
    name: ClassVar[str] = "LoadStage"

    def __post_init__(self) -> None:
        _check(self, "load", LoadClaimRef, ("round_id",))

    @property
    def term(self) -> int:
        return self.load.coordinator_term


@dataclass(frozen=True, slots=True)
class LoadReply:
    decision: LoadDecision
    term: int
    round_id: int = 0
    name: ClassVar[str] = "LoadReply"

    def __post_init__(self) -> None:
        _check(self, "decision", LoadDecision, ("term", "round_id"))


@dataclass(frozen=True, slots=True)
class StageReady:
    """A stage finished preparing the work a load started; it is now running."""

    work: StageWork
    name: ClassVar[str] = "StageReady"

    def __post_init__(self) -> None:
        _check(self, "work", StageWork, ())

    @property
    def term(self) -> int:
        return self.work.coordinator_term


@dataclass(frozen=True, slots=True)
class StopStage:
    request: StopRequest
    name: ClassVar[str] = "StopStage"

    def __post_init__(self) -> None:
        _check(self, "request", StopRequest, ())

    @property
    def term(self) -> int:
        return self.request.coordinator_term


@dataclass(frozen=True, slots=True)
class StopReply:
    decision: StopDecision
    term: int
    name: ClassVar[str] = "StopReply"

    def __post_init__(self) -> None:
        _check(self, "decision", StopDecision, ("term",))


def _check(message: Any, payload: str, kind: type, counts: tuple[str, ...]) -> None:
    name = type(message).name
    require_instance(getattr(message, payload), kind, f"{name}.{payload}")
    for field_name in counts:
        object.__setattr__(message, field_name, fence_int(getattr(message, field_name),
                                                          field_name, name, minimum=0))


Message = (ClaimCoordinator | ClaimReply | LoadStage | LoadReply | StageReady | StopStage
           | StopReply)
MESSAGE_TYPES: tuple[type[Message], ...] = (ClaimCoordinator, ClaimReply, LoadStage,
                                            LoadReply, StageReady, StopStage, StopReply)
MESSAGE_NAMES: tuple[str, ...] = tuple(kind.name for kind in MESSAGE_TYPES)
