"""The speed and cost estimate: the module docstring's formulas, worked by hand."""

from __future__ import annotations

import pytest

from planner import plan_topology
from planner.models import GpuModel, load_preset
from planner.performance import (
    ESTIMATE_COLUMNS,
    ModelTraffic,
    NodeSpeed,
    PerformanceError,
    cost_per_million_tokens,
    estimate_plan,
    node_speeds,
    try_estimate,
    with_candidate_estimates,
    with_stage_estimates,
)
from planner.planning import as_planning_input, candidates, stage_usage

GIB = 2**30


def _request(latency: int | None = 2) -> dict:
    # 4 layers of 10 GiB, 1 KiB of KV per token for all layers (256 B a layer).
    return {
        "native_context_length": 4096, "layer_count": 4,
        "model_weight_bytes": 40 * GIB, "kv_bytes_per_token": 1024,
        "minimum_nodes": 2,
        "nodes": [{"node_id": "fast-00", "detected_vram_bytes": 25 * GIB,
                   "stage_transfer_latency_ms": latency},
                  {"node_id": "slow-00", "detected_vram_bytes": 25 * GIB}],
    }


def test_two_stage_estimate_worked_by_hand() -> None:
    request = as_planning_input(_request())
    plan = plan_topology(request)
    assert [(s.node_id, s.layer_count) for s in plan.stages] == [("fast-00", 2),
                                                                  ("slow-00", 2)]
    traffic = ModelTraffic(40 * GIB, 10 * GIB, hidden_size=1000)  # a quarter is active
    speeds = {"fast-00": NodeSpeed("fast-00", 2_000_000_000_000, 3.0),
              "slow-00": NodeSpeed("slow-00", 1_000_000_000_000, 1.0)}
    estimate = estimate_plan(request, plan, traffic, speeds, bandwidth_efficiency=0.5,
                             link_bandwidth_bytes_per_s=1_000_000_000)
    context = plan.context_length
    assert context == 4096
    weight = 20 * GIB // 4                      # the stage's 20 GiB, a quarter active
    kv = 256 * context * 2                      # 2 layers x 256 B x context
    first = (weight + kv) / (0.5 * 2e12) * 1000
    second = (weight + kv) / (0.5 * 1e12) * 1000
    hop = 2 + 1000 * 4 / 1e9 * 1000             # latency + F32 activations over 1 GB/s
    assert estimate.stages[0].weight_read_bytes == weight
    assert estimate.stages[0].kv_read_bytes == kv
    assert estimate.stages[0].stage_read_ms == pytest.approx(first)
    assert estimate.stages[0].hop_ms == pytest.approx(hop)
    assert estimate.stages[1].hop_ms == 0
    assert estimate.estimated_tpot_ms == pytest.approx(first + second + hop)
    lanes = plan.parallel_lanes
    assert estimate.tokens_per_s == pytest.approx(lanes * 1000 / (first + second + hop))
    assert estimate.cost_per_hour_usd == 4.0
    assert estimate.cost_per_million_tokens_usd == pytest.approx(
        4.0 / (estimate.tokens_per_s * 3600) * 1e6)
    assert "estimate" in estimate.summary()
    assert estimate.to_dict()["notes"][0].startswith("Estimated")


def test_unknown_latency_and_hidden_size_are_said() -> None:
    request = as_planning_input(_request(latency=None))
    plan = plan_topology(request)
    speeds = {n: NodeSpeed(n, 10**12, None) for n in ("fast-00", "slow-00")}
    estimate = estimate_plan(request, plan, ModelTraffic.dense(40 * GIB), speeds)
    assert estimate.stages[0].hop_ms == 0
    assert any("no stage-transfer latency" in note for note in estimate.notes)
    assert any("hidden size is unknown" in note for note in estimate.notes)
    assert estimate.cost_per_hour_usd is None
    assert any("no price" in note for note in estimate.notes)


def test_missing_bandwidth_names_the_node() -> None:
    request = as_planning_input(_request())
    plan = plan_topology(request)
    with pytest.raises(PerformanceError) as caught:
        estimate_plan(request, plan, ModelTraffic.dense(40 * GIB),
                      {"fast-00": NodeSpeed("fast-00", 10**12, 1.0)})
    assert caught.value.code == "MissingNodeSpeed"
    assert caught.value.details["node_id"] == "slow-00"


@pytest.mark.parametrize("efficiency", [0, 1.5, True, "0.7"])
def test_bad_efficiency_is_refused(efficiency: object) -> None:
    request = as_planning_input(_request())
    plan = plan_topology(request)
    speeds = {n: NodeSpeed(n, 10**12, 1.0) for n in ("fast-00", "slow-00")}
    with pytest.raises(PerformanceError) as caught:
        estimate_plan(request, plan, ModelTraffic.dense(40 * GIB), speeds,
                      bandwidth_efficiency=efficiency)  # type: ignore[arg-type]
    assert caught.value.code == "InvalidPerformanceInput"
    assert caught.value.details["field"] == "bandwidth_efficiency"


def test_nodes_match_catalog_kinds_by_id() -> None:
    catalog = [GpuModel("A", 10, "V", "n", id="a", memory_bandwidth_bytes_per_s=5,
                        memory_bandwidth_source="s", price_per_hour=1.0, price_source="s",
                        price_date="2026-01-01"),
               GpuModel("A big", 10, "V", "n", id="a-big", memory_bandwidth_bytes_per_s=7,
                        memory_bandwidth_source="s")]
    request = as_planning_input({**_request(), "nodes": [
        {"node_id": "a-00", "detected_vram_bytes": 10},
        {"node_id": "a-big-03", "detected_vram_bytes": 10},
        {"node_id": "a-x", "detected_vram_bytes": 10}]})
    speeds = node_speeds(request.nodes, catalog)
    assert speeds["a-00"].memory_bandwidth_bytes_per_s == 5
    assert speeds["a-big-03"].memory_bandwidth_bytes_per_s == 7
    assert "a-x" not in speeds


def test_moe_preset_reads_only_its_active_share() -> None:
    spec = load_preset("qwen3-coder-480b-a35b")
    traffic = ModelTraffic.from_spec(spec)
    assert traffic.hidden_size == 6144
    # The design's 315.68 GB shared by parameters (config.json shapes): a token reads the
    # attention, norms and routers whole (11,137,054,208 parameters), 8 of the 160 routed
    # experts (468,084,326,400 parameters) and one row of token_embd (933,494,784).
    total = 11_137_054_208 + 468_084_326_400 + 933_494_784
    expected = spec.model_weight_bytes * (11_137_054_208 + 468_084_326_400 * 8 / 160) / total
    assert abs(traffic.active_weight_bytes - expected) < 2
    dense = ModelTraffic.from_spec(load_preset("llama-3.1-70b"))
    assert dense.active_weight_bytes == dense.model_weight_bytes


def test_tables_gain_estimate_columns() -> None:
    catalog = [GpuModel("Fast", 25 * GIB, "V", "n", id="fast",
                        memory_bandwidth_bytes_per_s=10**12, memory_bandwidth_source="s",
                        price_per_hour=2.0, price_source="s", price_date="2026-01-01"),
               GpuModel("Slow", 25 * GIB, "V", "n", id="slow",
                        memory_bandwidth_bytes_per_s=10**12, memory_bandwidth_source="s",
                        price_per_hour=1.0, price_source="s", price_date="2026-01-01")]
    request = as_planning_input(_request())
    traffic = ModelTraffic.dense(40 * GIB, 1000)
    table = with_candidate_estimates(candidates(request), request, traffic, catalog)
    for column in ESTIMATE_COLUMNS:
        assert column in table.columns
    chosen = table[table["selected"]].iloc[0]
    plan = plan_topology(request)
    estimate, why = try_estimate(request, plan, traffic, catalog)
    assert why == "" and estimate is not None
    assert chosen["estimated_tpot_ms"] == pytest.approx(estimate.estimated_tpot_ms)
    assert chosen["cost_per_hour_usd"] == pytest.approx(3.0)
    assert table[~table["feasible"]]["estimated_tpot_ms"].isna().all()
    stages = with_stage_estimates(stage_usage(request, plan), estimate)
    assert list(stages["stage_read_ms"]) == [s.stage_read_ms for s in estimate.stages]
    none, why = try_estimate(request, plan, traffic, [])
    assert none is None and "fast-00" in why


def test_cost_per_million_tokens() -> None:
    # 3.6 USD an hour at 1 token/s: 3,600 tokens cost 3.6 USD, a million 1,000 USD.
    assert cost_per_million_tokens(3.6, 1.0) == pytest.approx(1000.0)
