"""Coordinator claim fencing: the stage fence, stage runtime, coordinator and simulator.

The fence rules (SPEC section 8) are :func:`decide_claim` and :func:`decide_load`;
everything else in this package is built on them.
"""

from planner.fence.claims import (
    ClaimDecision,
    ClaimFence,
    ClaimKey,
    CoordinatorClaim,
    LoadClaimRef,
    LoadDecision,
    decide_claim,
    decide_load,
    quorum_requirement,
    same_claim_epoch,
)
from planner.fence.errors import FenceError, InvalidFenceInput, SimulationError, UnknownScenario

__all__ = [
    "ClaimDecision",
    "ClaimFence",
    "ClaimKey",
    "CoordinatorClaim",
    "FenceError",
    "InvalidFenceInput",
    "LoadClaimRef",
    "LoadDecision",
    "SimulationError",
    "UnknownScenario",
    "decide_claim",
    "decide_load",
    "quorum_requirement",
    "same_claim_epoch",
]
