"""Coordinator claim fencing: the stage fence (docs/rules.md §8) and the stage runtime around
it (docs/rules.md §9).

The fence rules are :func:`decide_claim` and :func:`decide_load`; :class:`ClaimFence` stores
what they accept and :class:`StageRuntime` adds the superseding rules (newer terms shut down
older work, stale stops stop nothing). That is all this package exports at the top, and
importing it loads nothing heavier than the rules.

The rest is imported on purpose, as submodules:

- :mod:`planner.fence.coordinator`: claiming a planned split and loading it with quorum;
- :mod:`planner.fence.simulator`: a deterministic mesh with delays, loss, partitions,
  crashes and skewed clocks (its event log is a pandas DataFrame);
- :mod:`planner.fence.scenarios`: the design's scenarios 1-10 as ready-made runs;
- :mod:`planner.fence.check`: an explicit-state model checker of the rules.
"""

from planner.fence.claims import (
    ClaimDecision,
    ClaimFence,
    ClaimKey,
    CoordinatorClaim,
    GenerationRef,
    LoadClaimRef,
    LoadDecision,
    decide_claim,
    decide_load,
    quorum_requirement,
    same_claim_epoch,
)
from planner.fence.errors import FenceError, InvalidFenceInput
from planner.fence.runtime import StageRuntime, StageWork, StopDecision, StopRequest, decide_stop

__all__ = [
    "ClaimDecision",
    "ClaimFence",
    "ClaimKey",
    "CoordinatorClaim",
    "FenceError",
    "GenerationRef",
    "InvalidFenceInput",
    "LoadClaimRef",
    "LoadDecision",
    "StageRuntime",
    "StageWork",
    "StopDecision",
    "StopRequest",
    "decide_claim",
    "decide_load",
    "decide_stop",
    "quorum_requirement",
    "same_claim_epoch",
]
