"""Inputs at and past the planner's limits: refused by name at once, or planned exactly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pandas as pd
import pytest
import reference_planner as ref

import planner
from planner.errors import InvalidInput, PlanError
from planner.limits import MAX_NODE_BYTES, MAX_NODES
from planner.planning import search

EXABYTES = 2**53


def _request(nodes: list[dict[str, Any]], layers: int, weight: int) -> dict[str, Any]:
    return {"native_context_length": 512, "layer_count": layers, "model_weight_bytes": weight,
            "kv_bytes_per_token": layers, "nodes": nodes}


def test_nodes_of_8_pib_are_refused_before_any_search() -> None:
    # 1,030 nodes of 2**53 bytes: their summed usable bytes pass 64 bits.
    nodes = [{"node_id": f"n{i:04d}", "detected_vram_bytes": EXABYTES} for i in range(1030)]
    # Refused while the request is read (how soon: make bench).
    with pytest.raises(InvalidInput) as caught:
        planner.plan_topology(_request(nodes, 1030, 1030 * 2**40))
    assert caught.value.field == "nodes[0].detected_vram_bytes"
    assert caught.value.node_id == "n0000"
    assert f"at most {MAX_NODE_BYTES:,}" in caught.value.message


def test_mixed_nodes_near_8_pib_are_refused_not_wrapped() -> None:
    # 600 x 2**53 and 500 x (2**53 - 1) with 1,100 layers used to wrap silently.
    nodes = [{"node_id": f"a{i:03d}", "detected_vram_bytes": EXABYTES} for i in range(600)]
    nodes += [{"node_id": f"b{i:03d}", "max_vram_bytes": EXABYTES - 1,
               "detected_vram_bytes": MAX_NODE_BYTES} for i in range(500)]
    with pytest.raises(InvalidInput) as caught:
        planner.candidates(_request(nodes, 1100, 1100 * 2**45))
    assert caught.value.field == "nodes[0].detected_vram_bytes"
    capped = _request(nodes[600:], 1100, 1100 * 2**45)
    with pytest.raises(InvalidInput) as caught:
        planner.plan_topology(capped)
    assert caught.value.field == "nodes[0].max_vram_bytes"


def test_the_largest_nodes_plan_exactly() -> None:
    # Six nodes of 1 PiB, less a few bytes, and layers of almost 1 PiB: every sum is exact.
    nodes = [{"node_id": f"n{i}", "detected_vram_bytes": MAX_NODE_BYTES - i,
              "stage_transfer_latency_ms": i % 3} for i in range(6)]
    request = _request(nodes, 4, 4 * (MAX_NODE_BYTES - 2**20))
    assert planner.plan_topology(request).to_dict() == ref.plan(request)
    frame = planner.candidates(request)
    ref.assert_candidates_match(request, frame)


def test_more_than_the_node_cap_is_refused_by_name() -> None:
    nodes = [{"node_id": f"n{i:05d}", "detected_vram_bytes": 2**30}
             for i in range(MAX_NODES + 1)]
    with pytest.raises(PlanError) as caught:
        planner.plan_topology(_request(nodes, 4, 2**20))
    assert caught.value.code == "TooManyNodes"
    assert "10,001 nodes; at most 10,000" in caught.value.message
    ok = planner.plan_topology(_request(nodes[:MAX_NODES], 4, 2**20))
    assert ok.stage_count == 1


def test_a_fleet_file_past_the_node_cap_is_refused_before_expanding(tmp_path: Path) -> None:
    fleet = tmp_path / "big.toml"
    entries = "".join(f'[[nodes]]\nid = "g{i}"\ncount = 10000\nvram = "80 GiB"\n'
                      for i in range(1000))
    fleet.write_text('name = "big"\n[model]\npreset = "qwen3-coder-480b-a35b"\n' + entries)
    # 20,000 nodes at the second entry, of 10,000,000 in the file (how soon: make bench).
    done = subprocess.run([sys.executable, "-m", "planner.cli", "plan", str(fleet)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2
    assert "TooManyNodes" in done.stderr
    assert "20,000 nodes; at most 10,000" in done.stderr
    assert "nodes[1]" in done.stderr
    assert "Traceback" not in done.stderr


def _distinct_nodes(count: int, latency: bool) -> list[dict[str, Any]]:
    return [{"node_id": f"n{i:05d}", "detected_vram_bytes": 2**34 + i * 2**24,
             "stage_transfer_latency_ms": (i * 7) % 40 + 1 if latency else None}
            for i in range(count)]


def test_ten_thousand_distinct_nodes_over_256_layers_plan() -> None:
    # Refused as SearchTooLarge before the search was split into span classes.
    request = _request(_distinct_nodes(MAX_NODES, latency=True), 256, 256 * 2**30)
    plan = planner.plan_topology(request)
    usage = planner.stage_usage(planner.PlanningInput.from_dict(request), plan)
    assert usage["layer_start"].iloc[0] == 0 and usage["layer_end"].iloc[-1] == 256
    assert (usage["used_bytes"] <= usage["usable_vram_bytes"]).all()
    frame = planner.candidates(request)
    selected = frame[frame["selected"]]
    assert len(selected) == 1
    assert list(selected["node_ids"].iloc[0]) == list(plan.node_ids)
    assert (frame.loc[frame["feasible"], "min_remaining_bytes"] >= 0).all()


def test_a_search_past_its_step_budget_is_refused_by_name() -> None:
    request = {**_request(_distinct_nodes(300, latency=True), 64, 64 * 2**30),
               "native_context_length": 131072, "kv_bytes_per_token": 2**16}
    contexts = set(planner.candidates(request)["context_length"])
    assert len(contexts) > 1
    # What each context's search spends alone.
    single = []
    for context in contexts:
        budget = search.SearchBudget()
        search.ContextSearch(planner.PlanningInput.from_dict(request), context,
                             budget).best_for_counts(range(1, 65))
        single.append(budget.steps)
    assert sum(single) > max(single)
    # Each context alone fits this budget; every context of one request together does not.
    with mock.patch.object(search, "SEARCH_STEPS", max(single)), \
            pytest.raises(PlanError) as caught:
        planner.candidates(request)
    assert caught.value.code == "SearchTooLarge"
    for words in ("64 layers", "span classes", f"more than {max(single):,} walk steps"):
        assert words in caught.value.message
    assert caught.value.details["steps"] > max(single)


def _mesh_request() -> dict[str, Any]:
    """60 nodes of distinct sizes from 8 to 80 GiB on 62 layers of 5 GiB, latencies of
    1-40 ms: most stage counts have their own smallest maximum latency, past what the
    reference planner can check."""
    nodes = [{"node_id": f"n{i:02d}", "detected_vram_bytes": 2**33 + i * 1250 * 2**20,
              "stage_transfer_latency_ms": (i * 7) % 40 + 1} for i in range(60)]
    return {**_request(nodes, 62, 62 * 5 * 2**30), "native_context_length": 131072,
            "kv_bytes_per_token": 2**16}


def _held_states(request: dict[str, Any]) -> tuple[pd.DataFrame, int]:
    """The candidates table and the most states the search held at once."""
    held = [0]
    spend = search.ContextSearch._spend

    def counting(self: search.ContextSearch, steps: int, held_states: int = 0) -> None:
        held[0] = max(held[0], held_states)
        spend(self, steps, held_states)

    with mock.patch.object(search.ContextSearch, "_spend", counting):
        frame = planner.candidates(request)
    return frame, held[0]


def test_latency_thresholds_solved_together_match_one_at_a_time() -> None:
    request = _mesh_request()
    found = search.ContextSearch(planner.PlanningInput.from_dict(request), 131072)
    assert len(found.classes) > 10
    assert len(set(found.min_max_latency().values())) > 10
    together, held_together = _held_states(request)
    assert together["feasible"].sum() > 100
    # A batch of one row sends each threshold, and each remaining threshold of program
    # 3, through its own pass; three mixes both.
    for rows in (1, 3):
        with mock.patch.object(search, "_BATCH_ROWS", rows):
            alone, held_alone = _held_states(request)
        pd.testing.assert_frame_equal(alone, together)
        # States are held against each threshold's own pass, as if it were alone.
        assert held_alone == held_together
    # So a search is refused for the states it holds at the same size either way.
    state_bytes = search.SEARCH_BYTES // held_together
    with mock.patch.object(search, "_STATE_BYTES", state_bytes):
        planner.candidates(request)
    with mock.patch.object(search, "_STATE_BYTES", state_bytes + 1), \
            pytest.raises(PlanError) as caught:
        planner.candidates(request)
    assert caught.value.code == "SearchTooLarge"
    assert "for the states a walk can be in" in caught.value.message
