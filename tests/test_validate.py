"""One integer rule everywhere: any integral type is accepted (numpy integers from a
DataFrame included) and stored as a Python int; bools and floats are refused; a bad
value is quoted in bounded length, however large."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pytest

import planner
from planner import _validate
from planner.errors import InvalidInput
from planner.fence import CoordinatorClaim, InvalidFenceInput, LoadClaimRef, decide_claim
from planner.fence.check import CheckConfig, CheckConfigError
from planner.models import ModelError, ModelSpec


class Failed(Exception):
    pass


def fail(problem: str, value: Any) -> Failed:
    return Failed(problem, value)


class Index:
    """An integral type that is neither int nor numpy."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


class BrokenIndex:
    def __index__(self) -> int:
        raise RuntimeError("no")


@pytest.mark.parametrize("value", [40, np.int64(40), np.int32(40), np.uint8(40),
                                   np.array(40), Index(40)])
def test_integral_types_become_python_ints(value: Any) -> None:
    result = _validate.integer(value, fail)
    assert result == 40 and type(result) is int


@pytest.mark.parametrize(("value", "problem"), [
    (True, _validate.NOT_AN_INTEGER),
    (np.bool_(True), _validate.NOT_AN_INTEGER),
    (40.0, _validate.FLOAT_INTEGER),
    (np.float64(40.0), _validate.FLOAT_INTEGER),
    (40.5, _validate.NOT_AN_INTEGER),
    (Decimal(40), _validate.NOT_AN_INTEGER),
    ("40", _validate.NOT_AN_INTEGER),
    (BrokenIndex(), _validate.NOT_AN_INTEGER),
    (None, "is required"),
    (-1, "must be at least 0"),
    (10**5000, "must be at most 1,000"),
], ids=lambda value: _validate.shown(value)[:20])
def test_refusals(value: Any, problem: str) -> None:
    with pytest.raises(Failed) as caught:
        _validate.integer(value, fail, maximum=1000)
    assert caught.value.args[0] == problem


def test_shown_is_bounded_for_any_value() -> None:
    assert _validate.shown(10**5000) == "an integer of 5,001 digits"
    assert _validate.shown(-(10**60)) == "a negative integer of 61 digits"
    assert len(_validate.shown("x" * 10_000)) <= _validate.MAX_SHOWN
    assert _validate.shown(12) == "12"


def _request(**numbers: Any) -> dict[str, Any]:
    return {
        "native_context_length": 262_144,
        "layer_count": 62,
        "model_weight_bytes": 315_680_000_000,
        "kv_bytes_per_token": 131_072,
        "minimum_nodes": 2,
        "nodes": [{"node_id": f"gpu-{i}", "detected_vram_bytes": 80 * 2**30,
                   "stage_transfer_latency_ms": 10} for i in range(5)],
        "target_decode_tpot_ms": 60,
        **numbers,
    }


def test_plan_topology_takes_numpy_integers_from_a_dataframe() -> None:
    plain = _request()
    frame = pd.DataFrame(plain["nodes"])
    from_numpy = {key: (np.int64(value) if isinstance(value, int) else value)
                  for key, value in plain.items()}
    from_numpy["nodes"] = [{column: frame.at[row, column] for column in frame.columns}
                           for row in frame.index]  # numpy ints, cell by cell
    assert isinstance(from_numpy["nodes"][0]["detected_vram_bytes"], np.integer)
    plan = planner.plan_topology(from_numpy)
    assert plan == planner.plan_topology(plain)
    request = planner.PlanningInput.from_dict(from_numpy)
    assert type(request.layer_count) is int
    assert type(request.nodes[0].detected_vram_bytes) is int
    json.dumps(request.to_dict())  # plain data again


@pytest.mark.parametrize("value", [True, 62.0, np.float64(62)])
def test_plan_topology_refuses_bools_and_floats(value: Any) -> None:
    with pytest.raises(InvalidInput) as caught:
        planner.plan_topology(_request(layer_count=value))
    assert caught.value.field == "layer_count"


def test_a_huge_layer_count_is_a_named_error() -> None:
    with pytest.raises(InvalidInput) as caught:
        planner.plan_topology(_request(layer_count=10**5000))
    assert caught.value.field == "layer_count"
    assert "an integer of 5,001 digits" in caught.value.message
    assert len(str(caught.value)) < 200


def _claim(**changes: Any) -> CoordinatorClaim:
    fields: dict[str, Any] = {
        "model_id": "m", "package_ref": "p", "manifest_sha256": "s", "topology_id": "t",
        "run_id": "r", "coordinator_id": "c", "coordinator_term": 3,
        "participant_set_hash": "h", "topology_hash": "th",
        "lease_until_unix_ms": 2_000_000, **changes}
    return CoordinatorClaim(**fields)


def test_fence_takes_numpy_integers() -> None:
    claim = _claim(coordinator_term=np.int64(3), lease_until_unix_ms=np.int64(2_000_000))
    assert type(claim.coordinator_term) is int
    assert claim == _claim()
    decision = decide_claim(None, claim, np.int64(1_000_000))
    assert decision.accepted
    json.dumps(decision.to_dict())
    load = LoadClaimRef(model_id="m", package_ref="p", manifest_sha256="s", topology_id="t",
                        run_id="r", coordinator_id="c", coordinator_term=np.uint16(3))
    assert type(load.coordinator_term) is int


@pytest.mark.parametrize("term", [True, 3.0, 10**5000, 2**63], ids=_validate.shown)
def test_fence_refuses_bools_floats_and_huge_terms(term: Any) -> None:
    with pytest.raises(InvalidFenceInput) as caught:
        _claim(coordinator_term=term)
    assert caught.value.field == "claim.coordinator_term"
    assert len(str(caught.value)) < 200


def test_checker_and_model_specs_take_numpy_integers() -> None:
    config = CheckConfig(stages=np.int64(2), coordinators=np.int8(1),
                         planned=((np.int64(0), np.int64(1)),))
    assert config == CheckConfig(stages=2, coordinators=1, planned=((0, 1),))
    with pytest.raises(CheckConfigError):
        CheckConfig(stages=True)
    spec = ModelSpec(name="m", architecture="llama", layer_count=np.int64(2),
                     native_context_length=np.int64(4096), model_weight_bytes=np.int64(10),
                     layer_weight_bytes=(np.int64(4), np.int64(6)),
                     kv_bytes_per_token=np.int64(8), kv_cache_type="f16",
                     kv_cache_table=(("f16", np.int64(8)),), source="test")
    assert type(spec.layer_count) is int and spec.layer_weight_bytes == (4, 6)
    with pytest.raises(ModelError):
        ModelSpec(name="m", architecture="llama", layer_count=2.0,
                  native_context_length=4096, model_weight_bytes=10, layer_weight_bytes=None,
                  kv_bytes_per_token=8, kv_cache_type="f16", kv_cache_table=(("f16", 8),),
                  source="test")
