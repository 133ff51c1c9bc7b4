"""Every row of the shared planner test vectors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import DATA

import planner

ROWS = [
    row
    for name in ("planner_seed_scenarios.json", "planner_large_examples.json")
    for row in json.loads((DATA / name).read_text())
]


@pytest.mark.parametrize("row", ROWS, ids=[row["name"] for row in ROWS])
def test_vector(row: dict[str, Any]) -> None:
    expected = row["expected"]
    if not expected["ok"]:
        with pytest.raises(planner.PlanError) as caught:
            planner.plan_topology(row["input"])
        assert caught.value.code == expected["error"]
        return
    plan = planner.plan_topology(row["input"]).to_dict()
    assert set(plan) == {"context_length", "parallel_lanes", "stages",
                         "estimated_decode_network_ms_per_token", "decode_tpot_target_met"}
    for index, stage in enumerate(plan["stages"]):
        assert stage.pop("stage_id") == f"stage-{index}"
        assert stage.pop("stage_index") == index
    assert plan == {key: value for key, value in expected.items() if key != "ok"}


@pytest.mark.parametrize("row", ROWS, ids=[row["name"] for row in ROWS])
def test_vector_selected_candidate_matches_plan(row: dict[str, Any]) -> None:
    expected = row["expected"]
    if not expected["ok"] and expected["error"] != "NoValidTopology":
        with pytest.raises(planner.PlanError) as caught:
            planner.candidates(row["input"])
        assert caught.value.code == expected["error"]
        return
    frame = planner.candidates(row["input"])
    selected = frame[frame["selected"]]
    if not expected["ok"]:
        assert selected.empty
        assert not frame["feasible"].any()
        assert (frame["reason"].str.len() > 0).all()
        return
    assert len(selected) == 1
    chosen = selected.iloc[0]
    assert chosen["context_length"] == expected["context_length"]
    assert chosen["parallel_lanes"] == expected["parallel_lanes"]
    assert list(chosen["node_ids"]) == [stage["node_id"] for stage in expected["stages"]]


def test_no_valid_topology_message_says_how_close() -> None:
    row = next(r for r in ROWS if r["name"] == "qwen480b-4x70")
    with pytest.raises(planner.PlanError) as caught:
        planner.plan_topology(row["input"])
    error = caught.value
    assert error.details["minimum_context"] == 65536
    assert error.details["layers_fit"] == 56
    assert error.details["layer_count"] == 62
    assert "65,536" in error.message and "56 of 62 layers" in error.message


@pytest.mark.parametrize(("nodes", "layers", "minimum", "said"), [
    (1, 62, 2, "minimum_nodes is 2 but at most 1 stage is possible (1 node, 62 layers)"),
    (3, 2, 4, "minimum_nodes is 4 but at most 2 stages are possible (3 nodes, 2 layers)"),
    (2, 1, 2, "minimum_nodes is 2 but at most 1 stage is possible (2 nodes, 1 layer)"),
])
def test_too_few_nodes_or_layers_for_the_minimum_says_so_in_words(
        nodes: int, layers: int, minimum: int, said: str) -> None:
    """The message read "at most 1 stages are possible (1 nodes, 62 layers)" in reports of
    a fleet of one node under minimum_nodes = 2."""
    request = {"native_context_length": 8192, "layer_count": layers,
               "model_weight_bytes": layers * 2**20, "kv_bytes_per_token": 1024,
               "minimum_nodes": minimum,
               "nodes": [{"node_id": f"n{i}", "detected_vram_bytes": 2**30}
                         for i in range(nodes)]}
    with pytest.raises(planner.PlanError) as caught:
        planner.plan_topology(request)
    assert said in caught.value.message


def test_context_errors_carry_the_numbers() -> None:
    row = next(r for r in ROWS if r["name"] == "small-override-above-native")
    with pytest.raises(planner.PlanError) as caught:
        planner.plan_topology(row["input"])
    assert caught.value.details == {"requested": 131072, "native": 65536}
    assert "131,072" in str(caught.value) and "65,536" in str(caught.value)
    row = next(r for r in ROWS if r["name"] == "override-below-native-floor")
    with pytest.raises(planner.PlanError) as caught:
        planner.plan_topology(row["input"])
    assert caught.value.details == {"requested": 8192, "minimum": 16384}
