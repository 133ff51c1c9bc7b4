"""The fence's public calls refuse malformed arguments with a named error at the call,
instead of an AttributeError deep inside a rule, a silently wrong value, or a failure
that surfaces only later."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from planner.fence import (
    ClaimFence,
    CoordinatorClaim,
    FenceError,
    LoadClaimRef,
    StopRequest,
    decide_claim,
    decide_load,
    decide_stop,
    quorum_requirement,
)
from planner.fence.check import CheckConfig, CheckConfigError
from planner.fence.coordinator import SplitPlan
from planner.fence.messages import ClaimCoordinator
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
