"""The stage-control messages a coordinator and its stages exchange.

``round_id`` ties a reply to the coordinator's attempt that asked, so a late reply
to an abandoned attempt is recognised and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from planner.fence.claims import ClaimDecision, CoordinatorClaim, LoadClaimRef, LoadDecision
from planner.fence.runtime import StageWork, StopDecision, StopRequest


@dataclass(frozen=True, slots=True)
class ClaimCoordinator:
    claim: CoordinatorClaim
    round_id: int = 0
    name: ClassVar[str] = "ClaimCoordinator"

    @property
    def term(self) -> int:
        return self.claim.coordinator_term


@dataclass(frozen=True, slots=True)
class ClaimReply:
    decision: ClaimDecision
    term: int
    round_id: int = 0
    name: ClassVar[str] = "ClaimReply"


@dataclass(frozen=True, slots=True)
class LoadStage:
    load: LoadClaimRef
    round_id: int = 0
    name: ClassVar[str] = "LoadStage"

    @property
    def term(self) -> int:
        return self.load.coordinator_term


@dataclass(frozen=True, slots=True)
class LoadReply:
    decision: LoadDecision
    term: int
    round_id: int = 0
    name: ClassVar[str] = "LoadReply"


@dataclass(frozen=True, slots=True)
class StageReady:
    """A stage finished preparing the work a load started; it is now running."""

    work: StageWork
    name: ClassVar[str] = "StageReady"

    @property
    def term(self) -> int:
        return self.work.coordinator_term


@dataclass(frozen=True, slots=True)
class StopStage:
    request: StopRequest
    name: ClassVar[str] = "StopStage"

    @property
    def term(self) -> int:
        return self.request.coordinator_term


@dataclass(frozen=True, slots=True)
class StopReply:
    decision: StopDecision
    term: int
    name: ClassVar[str] = "StopReply"


Message = (ClaimCoordinator | ClaimReply | LoadStage | LoadReply | StageReady | StopStage
           | StopReply)
MESSAGE_TYPES: tuple[type[Message], ...] = (ClaimCoordinator, ClaimReply, LoadStage,
                                            LoadReply, StageReady, StopStage, StopReply)
MESSAGE_NAMES: tuple[str, ...] = tuple(kind.name for kind in MESSAGE_TYPES)
