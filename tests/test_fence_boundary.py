"""The fence's public calls refuse malformed arguments with a named error at the call,
instead of an AttributeError deep inside a rule, a silently wrong value, or a failure
that surfaces only later."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from planner.fence import (
    ClaimFence,
    CoordinatorClaim,
    FenceError,
    LoadClaimRef,
    StageRuntime,
    StageWork,
    StopRequest,
    decide_claim,
    decide_load,
    decide_stop,
    quorum_requirement,
    same_claim_epoch,
)
from planner.fence.check import CheckConfig, CheckConfigError
from planner.fence.coordinator import Coordinator, CoordinatorPolicy, SplitPlan
from planner.fence.messages import ClaimCoordinator, ClaimReply, StopStage
from planner.fence.scenarios import run_scenario
from planner.fence.simulator import MessageRule, NetworkConfig, Simulation

NOW = 1_000


def claim() -> CoordinatorClaim:
    return CoordinatorClaim("m", "p", "s", "t", "r", "c", 1, "ph", "th", NOW + 10)


def split(**changes: Any) -> SplitPlan:
    values: dict[str, Any] = {"model_id": "m", "package_ref": "p", "manifest_sha256": "s",
                              "topology_id": "t", "run_id": "r", "stage_nodes": ("a", "b")}
    return SplitPlan(**{**values, **changes})


def mesh() -> Simulation:
    sim = Simulation()
    sim.add_stage("s1")
    sim.add_stage("s2")
    return sim


CASES: list[tuple[str, Callable[[], object], str]] = [
    ("claim is None", lambda: decide_claim(None, None, NOW), "claim"),  # type: ignore[arg-type]
    ("claim is a dict", lambda: decide_claim(None, claim().to_dict(), NOW), "claim"),  # type: ignore[arg-type]
    ("stored claim is a dict", lambda: decide_claim(claim().to_dict(), claim(), NOW),  # type: ignore[arg-type]
     "current"),
    ("load is None", lambda: decide_load(None, None, NOW), "load"),  # type: ignore[arg-type]
    ("load is a claim", lambda: decide_load(None, claim(), NOW), "load"),  # type: ignore[arg-type]
    ("stop is a load", lambda: decide_stop(None, LoadClaimRef.for_claim(claim())),  # type: ignore[arg-type]
     "request"),
    ("fence holds a dict", lambda: ClaimFence({claim().key: claim().to_dict()}),  # type: ignore[dict-item]
     "claims[('m', 'p', 's')]"),
    ("fence from a list", lambda: ClaimFence([claim()]), "claims"),  # type: ignore[arg-type]
    ("layer range of one number", lambda: split(layer_ranges=(0, 30)), "plan.layer_ranges[0]"),
    ("layer range as text", lambda: split(layer_ranges="0-30"), "plan.layer_ranges"),
    ("layer range of floats", lambda: split(layer_ranges=((0, 1.5), (1.5, 3))),
     "plan.layer_ranges[0][1]"),
    ("empty layer range", lambda: split(layer_ranges=((0, 0), (0, 3))),
     "plan.layer_ranges[0]"),
    ("overlapping layer ranges", lambda: split(layer_ranges=((0, 30), (20, 62))),
     "plan.layer_ranges[1]"),
    ("negative layer", lambda: split(layer_ranges=((-1, 30), (30, 62))),
     "plan.layer_ranges[0][0]"),
    ("stage nodes as one string", lambda: split(stage_nodes="abc"), "plan.stage_nodes"),
    ("drop probability None", lambda: NetworkConfig(drop_probability=None),  # type: ignore[arg-type]
     "network.drop_probability"),
    ("drop probability text", lambda: NetworkConfig(drop_probability="0.5"),  # type: ignore[arg-type]
     "network.drop_probability"),
    ("drop probability NaN", lambda: NetworkConfig(drop_probability=float("nan")),
     "network.drop_probability"),
    ("rule applies -1 times", lambda: MessageRule(times=-1), "rule.times"),
    ("rule applies 0 times", lambda: MessageRule(times=0), "rule.times"),
    ("rule for an unknown message", lambda: MessageRule(message="Hello"), "rule.message"),
    ("rule with a negative delay", lambda: MessageRule(extra_delay_ms=-5),
     "rule.extra_delay_ms"),
    ("rule drop as text", lambda: MessageRule(drop="yes"), "rule.drop"),  # type: ignore[arg-type]
    ("run until a fractional ms", lambda: mesh().run(until_ms=1.5), "run.until_ms"),  # type: ignore[arg-type]
    ("send garbage", lambda: mesh().send(0, "s1", "s2", "hello"), "send.message"),  # type: ignore[arg-type]
    ("send a bare claim", lambda: mesh().send(0, "s1", "s2", claim()), "send.message"),  # type: ignore[arg-type]
    ("quorum of no stages", lambda: quorum_requirement(0), "planned_stages"),
    ("quorum of 2.0 stages", lambda: quorum_requirement(2.0), "planned_stages"),  # type: ignore[arg-type]
    ("fence judges no claim", lambda: ClaimFence().accept_claim(None, NOW),  # type: ignore[arg-type]
     "claim"),
    ("fence judges no load", lambda: ClaimFence().validate_load(None, NOW), "load"),  # type: ignore[arg-type]
    ("epoch of no claim", lambda: same_claim_epoch(None, claim()), "a"),  # type: ignore[arg-type]
    ("epoch against a dict", lambda: same_claim_epoch(claim(), claim().to_dict()), "b"),  # type: ignore[arg-type]
    ("stage judges no claim", lambda: StageRuntime("s").accept_claim(None, NOW),  # type: ignore[arg-type]
     "claim"),
    ("stage loads nothing", lambda: StageRuntime("s").load(None, NOW), "load"),  # type: ignore[arg-type]
    ("stage stops with a claim", lambda: StageRuntime("s").stop(claim()), "request"),  # type: ignore[arg-type]
    ("stage named by a number", lambda: StageRuntime(5), "stage.node_id"),  # type: ignore[arg-type]
    ("stage holds a string", lambda: StageRuntime("s", claims=("x",)), "stage.claims[0]"),  # type: ignore[arg-type]
    ("stage runs a load", lambda: StageRuntime("s", running=(LoadClaimRef.for_claim(claim()),)),  # type: ignore[arg-type]
     "stage.running[0]"),
    ("stage prepares a dict", lambda: StageRuntime("s", preparing=({},)),  # type: ignore[arg-type]
     "stage.preparing[0]"),
    ("stage claims as a dict", lambda: StageRuntime("s", claims={"a": claim()}),  # type: ignore[arg-type]
     "stage.claims"),
    ("work from no load", lambda: StageWork.from_load(None), "load"),  # type: ignore[arg-type]
    ("partition of a number", lambda: mesh().partition(0, 5), "partition.groups[0]"),  # type: ignore[arg-type]
    ("partition of a string", lambda: mesh().partition(0, "s1"), "partition.groups[0]"),  # type: ignore[arg-type]
    ("rule that is text", lambda: mesh().add_rule("drop everything"), "rule"),  # type: ignore[arg-type]
    ("plan hash as a number", lambda: split(topology_hash=5), "plan.topology_hash"),
    ("coordinator without a plan", lambda: Coordinator("c", "plan"), "coordinator.plan"),  # type: ignore[arg-type]
    ("coordinator policy as text", lambda: Coordinator("c", split(), "fast"),  # type: ignore[arg-type]
     "coordinator.policy"),
    ("mesh coordinator without a plan", lambda: mesh().add_coordinator("c", "plan"),  # type: ignore[arg-type]
     "coordinator.plan"),
    ("mesh coordinator policy as text",
     lambda: mesh().add_coordinator("c", split(stage_nodes=("s1", "s2")), policy="fast"),  # type: ignore[arg-type]
     "coordinator.policy"),
    ("coordinator started at a text clock", lambda: Coordinator("c", split()).start("now"),  # type: ignore[arg-type]
     "coordinator.now_unix_ms"),
    ("claim reply without a decision",
     lambda: Coordinator("c", split()).on_claim_reply("a", None, 0, NOW),  # type: ignore[arg-type]
     "decision"),
    ("load reply without a decision",
     lambda: Coordinator("c", split()).on_load_reply("a", None, 0, NOW),  # type: ignore[arg-type]
     "decision"),
    ("stage ready without work", lambda: Coordinator("c", split()).on_stage_ready("a", None, NOW),  # type: ignore[arg-type]
     "work"),
    ("stand down as text", lambda: CoordinatorPolicy(stand_down_on_newer_term="no"),  # type: ignore[arg-type]
     "policy.stand_down_on_newer_term"),
    ("network as text", lambda: Simulation(network="lossy"), "simulation.network"),  # type: ignore[arg-type]
    ("durable fence as text", lambda: Simulation(durable_fence="yes"),  # type: ignore[arg-type]
     "simulation.durable_fence"),
    ("local load of text", lambda: mesh().local_load(0, "s1", "load"), "LoadStage.load"),  # type: ignore[arg-type]
    ("claim message without a claim", lambda: ClaimCoordinator(None), "ClaimCoordinator.claim"),  # type: ignore[arg-type]
    ("claim message in a fractional round", lambda: ClaimCoordinator(claim(), 1.5),  # type: ignore[arg-type]
     "ClaimCoordinator.round_id"),
    ("reply without a term", lambda: ClaimReply(decide_claim(None, claim(), NOW), None),  # type: ignore[arg-type]
     "ClaimReply.term"),
    ("stop message of a load", lambda: StopStage(LoadClaimRef.for_claim(claim())),  # type: ignore[arg-type]
     "StopStage.request"),
]


@pytest.mark.parametrize(("call", "field_name"), [(c, f) for _, c, f in CASES],
                         ids=[name for name, _, _ in CASES])
def test_malformed_arguments_get_a_named_error(call: Callable[[], object],
                                               field_name: str) -> None:
    with pytest.raises(FenceError) as raised:
        call()
    error = raised.value
    assert error.code == "InvalidFenceInput"
    assert error.field == field_name  # type: ignore[attr-defined]
    assert str(error).startswith(f"InvalidFenceInput: {field_name}:")


def test_check_config_from_a_non_mapping_is_refused() -> None:
    for bad in (5, None, "stages=3", [("stages", 3)]):
        with pytest.raises(CheckConfigError) as raised:
            CheckConfig.from_dict(bad)  # type: ignore[arg-type]
        assert raised.value.code == "InvalidCheckConfig" and raised.value.field == "config"


def test_a_string_of_node_ids_is_not_split_into_stages() -> None:
    with pytest.raises(FenceError, match="list of node ids"):
        split(stage_nodes="abc")
    assert split(stage_nodes=["abc"]).stage_nodes == ("abc",)


def test_well_formed_arguments_still_work() -> None:
    sim = mesh()
    sim.send(0, "s1", "s2", ClaimCoordinator(claim()))
    sim.run(until_ms=5)
    assert sim.now_ms == 5 and isinstance(sim.now_ms, int)
    assert MessageRule(times=None).times is None and MessageRule(times=2).times == 2
    assert NetworkConfig(drop_probability=1).drop_probability == 1
    assert split(layer_ranges=[(0, 30), (30, 62)]).layer_ranges == ((0, 30), (30, 62))
    assert ClaimFence({claim().key: claim()}).claims() == {claim().key: claim()}
    assert decide_stop(None, StopRequest.for_claim(claim())).accepted


def test_numpy_integers_count_as_integers_everywhere_in_the_fence() -> None:
    # Values read from a DataFrame are numpy integers (docs/rules.md §2).
    assert quorum_requirement(np.int64(3)) == 2 and type(quorum_requirement(np.int8(4))) is int
    assert run_scenario(np.int64(1)).scenario.number == 1
    with pytest.raises(FenceError):
        quorum_requirement(np.bool_(True))  # type: ignore[arg-type]
