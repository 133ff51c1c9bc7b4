"""Coordinator claim fencing: the stage fence, stage runtime, coordinator and simulator.

The fence rules (SPEC section 8) are :func:`decide_claim` and :func:`decide_load`;
everything else in this package is built on them:

- :mod:`planner.fence.claims`: claims, loads, decisions, the per-stage :class:`ClaimFence`;
- :mod:`planner.fence.runtime`: a stage's running and preparing work around its fence;
- :mod:`planner.fence.coordinator`: claiming a planned split and loading it with quorum;
- :mod:`planner.fence.simulator`: a deterministic mesh with delays, loss, partitions,
  crashes and skewed clocks;
- :mod:`planner.fence.scenarios`: the design's scenarios 1-10 as ready-made runs.
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
from planner.fence.coordinator import Coordinator, CoordinatorPhase, CoordinatorPolicy, SplitPlan
from planner.fence.errors import FenceError, InvalidFenceInput, SimulationError, UnknownScenario
from planner.fence.runtime import StageRuntime, StageWork, StopDecision, StopRequest, decide_stop
from planner.fence.scenarios import (
    SCENARIO_LIST,
    SCENARIOS,
    Scenario,
    ScenarioOutcome,
    ScenarioResult,
    get_scenario,
    run_all,
    run_scenario,
    scenario_table,
)
from planner.fence.simulator import MessageRule, NetworkConfig, SimEvent, Simulation

__all__ = [
    "SCENARIOS",
    "SCENARIO_LIST",
    "ClaimDecision",
    "ClaimFence",
    "ClaimKey",
    "Coordinator",
    "CoordinatorClaim",
    "CoordinatorPhase",
    "CoordinatorPolicy",
    "FenceError",
    "GenerationRef",
    "InvalidFenceInput",
    "LoadClaimRef",
    "LoadDecision",
    "MessageRule",
    "NetworkConfig",
    "Scenario",
    "ScenarioOutcome",
    "ScenarioResult",
    "SimEvent",
    "Simulation",
    "SimulationError",
    "SplitPlan",
    "StageRuntime",
    "StageWork",
    "StopDecision",
    "StopRequest",
    "UnknownScenario",
    "decide_claim",
    "decide_load",
    "decide_stop",
    "get_scenario",
    "quorum_requirement",
    "run_all",
    "run_scenario",
    "same_claim_epoch",
    "scenario_table",
]
