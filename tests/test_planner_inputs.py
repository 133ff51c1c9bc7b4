"""Malformed requests are refused with the field, node and value named."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import planner
from planner import InvalidInput, NodeBudget, PlanningInput

BASE: dict[str, Any] = {
    "native_context_length": 65536,
    "layer_count": 4,
    "model_weight_bytes": 4 * 2**30,
    "kv_bytes_per_token": 1024,
    "minimum_nodes": 1,
    "nodes": [
        {"node_id": "a", "detected_vram_bytes": 80 * 2**30, "max_vram_bytes": None,
         "runtime_headroom_bytes": 0, "stage_transfer_latency_ms": None},
        {"node_id": "b", "detected_vram_bytes": 80 * 2**30},
    ],
}


def request(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data.update(changes)
    return data


def node_change(index: int, **changes: Any) -> dict[str, Any]:
    data = request()
    data["nodes"][index].update(changes)
    return data


@pytest.mark.parametrize(("data", "field", "node_id", "words"), [
    (node_change(1, detected_vram_bytes=-1), "nodes[1].detected_vram_bytes", "b", "at least 0"),
    (node_change(0, detected_vram_bytes=1.5), "nodes[0].detected_vram_bytes", "a", "integer"),
    (node_change(0, detected_vram_bytes=80.0), "nodes[0].detected_vram_bytes", "a", "float"),
    (node_change(0, detected_vram_bytes="80 GiB"), "nodes[0].detected_vram_bytes", "a",
     "integer"),
    (node_change(1, max_vram_bytes=True), "nodes[1].max_vram_bytes", "b", "integer"),
    (node_change(1, runtime_headroom_bytes=-5), "nodes[1].runtime_headroom_bytes", "b",
     "at least 0"),
    (node_change(0, stage_transfer_latency_ms=-1), "nodes[0].stage_transfer_latency_ms", "a",
     "at least 0"),
    (node_change(1, node_id="a"), "nodes[1].node_id", "a", "duplicate"),
    (node_change(1, node_id=""), "nodes[1].node_id", None, "non-empty"),
    (node_change(1, node_id="   "), "nodes[1].node_id", None, "non-empty"),
    (node_change(1, node_id=7), "nodes[1].node_id", None, "non-empty"),
    (node_change(1, vram="80 GiB"), "nodes[1].vram", "b", "unknown field"),
    (request(layer_weight_bytes=[1, 2, 3]), "layer_weight_bytes", None, "3 entries"),
    (request(layer_weight_bytes=[1, 2, -3, 4]), "layer_weight_bytes[2]", None, "at least 0"),
    (request(layer_weight_bytes="1,2,3,4"), "layer_weight_bytes", None, "list"),
    (request(layer_count=-1), "layer_count", None, "at least 0"),
    (request(layer_count=4.5), "layer_count", None, "integer"),
    (request(native_context_length=None), "native_context_length", None, "required"),
    (request(kv_bytes_per_token=2**60), "kv_bytes_per_token", None, "at most"),
    (request(minimum_nodes=-2), "minimum_nodes", None, "at least 0"),
    (request(context_length_override=-1), "context_length_override", None, "at least 0"),
    (request(target_decode_tpot_ms="fast"), "target_decode_tpot_ms", None, "integer"),
    (request(nodes={"a": 1}), "nodes", None, "list"),
    (request(nodes=["a"]), "nodes[0]", None, "object"),
    (request(extra_field=1), "extra_field", None, "unknown field"),
])
def test_malformed_input_names_field_and_node(data: dict[str, Any], field: str,
                                              node_id: str | None, words: str) -> None:
    for call in (planner.plan_topology, planner.candidates, PlanningInput.from_dict):
        with pytest.raises(InvalidInput) as caught:
            call(data)
        error = caught.value
        assert isinstance(error, planner.PlanError) and isinstance(error, ValueError)
        assert error.code == "InvalidInput"
        assert error.field == field
        assert error.node_id == node_id
        assert field in str(error) and words in str(error)
        if node_id is not None:
            assert repr(node_id) in str(error)


def test_missing_required_fields_are_named() -> None:
    data = request()
    del data["kv_bytes_per_token"]
    with pytest.raises(InvalidInput, match="kv_bytes_per_token: is required"):
        planner.plan_topology(data)
    data = request()
    del data["nodes"][0]["detected_vram_bytes"]
    with pytest.raises(InvalidInput) as caught:
        planner.plan_topology(data)
    assert caught.value.field == "nodes[0].detected_vram_bytes"
    assert caught.value.node_id == "a"


def test_optional_fields_default_sensibly() -> None:
    data = {
        "native_context_length": 65536, "layer_count": 4, "model_weight_bytes": 4 * 2**30,
        "kv_bytes_per_token": 1024,
        "nodes": [{"node_id": "a", "detected_vram_bytes": 80 * 2**30,
                   "runtime_headroom_bytes": None}],
    }
    parsed = PlanningInput.from_dict(data)
    assert parsed.minimum_nodes == 1
    assert parsed.nodes[0].runtime_headroom_bytes == 0
    assert parsed.nodes[0].max_vram_bytes is None
    assert planner.plan_topology(data).node_ids == ("a",)


def test_dataclasses_validate_on_construction_too() -> None:
    with pytest.raises(InvalidInput) as caught:
        NodeBudget("gpu-1", detected_vram_bytes=-1)
    assert caught.value.node_id == "gpu-1"
    nodes = (NodeBudget("x", 1), NodeBudget("x", 2))
    with pytest.raises(InvalidInput, match="duplicate"):
        PlanningInput(65536, 4, 1, 1, nodes)


def test_round_trip_through_dict() -> None:
    parsed = PlanningInput.from_dict(request(layer_weight_bytes=[1, 2, 3, 4]))
    assert PlanningInput.from_dict(parsed.to_dict()) == parsed
    plan = planner.plan_topology(parsed)
    assert planner.Plan.from_dict(plan.to_dict()) == plan


def test_usable_bytes_applies_cap_then_headroom() -> None:
    node = NodeBudget("n", detected_vram_bytes=120, max_vram_bytes=80, runtime_headroom_bytes=16)
    assert node.capped_vram_bytes == 80
    assert node.usable_bytes == 64
    assert NodeBudget("m", 10, None, 16).usable_bytes == 0


def test_wrong_length_per_layer_weights_are_refused_not_ignored() -> None:
    # Silently falling back to an even split would plan with numbers the user did not give.
    with pytest.raises(InvalidInput, match="has 2 entries but layer_count is 4"):
        planner.plan_topology(request(layer_weight_bytes=[1, 2]))


def test_zero_layer_count_reports_missing_layers_before_weight_length() -> None:
    with pytest.raises(planner.PlanError) as caught:
        planner.plan_topology(request(layer_count=0, layer_weight_bytes=[1, 2]))
    assert caught.value.code == "MissingLayers"


@pytest.mark.parametrize("field", ["layer_kv_bytes_per_token", "layer_state_bytes_per_sequence"])
def test_per_layer_kv_and_state_need_one_entry_per_layer(field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        planner.plan_topology(request(**{field: [0, 0]}))
    assert caught.value.field == field and "has 2 entries but layer_count is 4" in str(
        caught.value)
    with pytest.raises(InvalidInput) as caught:
        planner.plan_topology(request(**{field: [0, -1, 0, 0]}))
    assert caught.value.field == f"{field}[1]"


def test_per_layer_kv_must_add_up_to_the_model_figure() -> None:
    kv = BASE["kv_bytes_per_token"]
    with pytest.raises(InvalidInput) as caught:
        planner.plan_topology(request(layer_kv_bytes_per_token=[kv, 1, 0, 0]))
    assert caught.value.field == "layer_kv_bytes_per_token"
    assert f"but kv_bytes_per_token is {kv:,}" in caught.value.message


def test_a_model_without_kv_states_it_per_layer() -> None:
    # A recurrent model keeps no KV cache: 0 per token is missing only when no layer
    # says so.
    with pytest.raises(planner.PlanError) as caught:
        planner.plan_topology(request(kv_bytes_per_token=0))
    assert caught.value.code == "MissingKvBytesPerToken"
    recurrent = request(kv_bytes_per_token=0, layer_kv_bytes_per_token=[0, 0, 0, 0],
                        layer_state_bytes_per_sequence=[2**20] * 4)
    plan = planner.plan_topology(recurrent)
    again = planner.PlanningInput.from_dict(recurrent)
    assert planner.PlanningInput.from_dict(again.to_dict()) == again
    assert again.to_dict()["layer_state_bytes_per_sequence"] == [2**20] * 4
    assert plan.context_length == BASE["native_context_length"]


def test_the_uniform_request_keeps_the_spec_fields_only() -> None:
    data = planner.PlanningInput.from_dict(request()).to_dict()
    assert "layer_kv_bytes_per_token" not in data
    assert "layer_state_bytes_per_sequence" not in data
