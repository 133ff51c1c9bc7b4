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
    load_calibration,
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
    lanes = plan.parallel_lanes
    # latency + each lane's F32 activations over 1 GB/s
    hop = 2 + lanes * 1000 * 4 / 1e9 * 1000
    assert estimate.stages[0].weight_read_bytes == weight
    assert estimate.stages[0].kv_read_bytes == kv
    assert estimate.stages[0].stage_read_ms == pytest.approx(first)
    assert estimate.stages[0].hop_ms == pytest.approx(hop)
    assert estimate.stages[1].hop_ms == 0
    assert estimate.estimated_tpot_ms == pytest.approx(first + second + hop)
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
    # No latency and no activation bytes: the hop is the calibrated fixed time of a
    # backend, CUDA's when the node's is unknown (and the estimate says so).
    assert estimate.stages[0].hop_ms == load_calibration().hop_ms["cuda"]
    assert any("no measurement of backend None" in note for note in estimate.notes)
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


# --- calibrated decode and prefill: the terms, each worked on a small case -------------

from planner.performance import (  # noqa: E402
    Device,
    StageLoad,
    decode_step,
    prefill_ms,
    ubatches,
)


def _one_load(layers: int = 10, weight: int = 10**9, active: float = 5e8) -> StageLoad:
    return StageLoad(layer_count=layers, weight_bytes=weight, routed_expert_bytes=0,
                     active_parameters=active, kv_bytes_per_token=1000 * layers,
                     attention_width=100 * layers)


def test_lanes_of_a_mixture_of_experts_read_the_expected_distinct_experts() -> None:
    # 8 GiB of which 6 GiB routed experts, 2 of 8 used per token: active = 2 + 6/4.
    traffic = ModelTraffic(8 * GIB, round(3.5 * GIB), 1000, expert_count=8, experts_used=2)
    assert traffic.routed_bytes == 6 * GIB
    for lanes in (1, 2, 4, 32):
        distinct = 1 - (1 - 2 / 8) ** lanes
        assert traffic.read_share(lanes) == pytest.approx((2 + 6 * distinct) / 8)
    dense = ModelTraffic.dense(8 * GIB, 1000)
    assert dense.read_share(32) == 1.0


def test_two_lanes_of_a_mixture_of_experts_run_the_batched_expert_kernel() -> None:
    """One token's routed experts run llama.cpp's matrix-vector kernel; two tokens' its
    matrix-matrix one: each layer pays expert_batch_ms, and each expert used computes
    its few tokens below the full rate while the experts stream in."""
    # 10 layers, 8 GB of which 6 GB routed experts, 2 of 8 used per token; 3.5e9
    # parameters per token, 1.5e9 of them in routed experts; no cache.
    traffic = ModelTraffic(8 * 10**9, 3_500_000_000, 1000, active_parameter_count=35 * 10**8,
                           expert_count=8, experts_used=2, parameter_count=8 * 10**9)
    load = StageLoad(layer_count=10, weight_bytes=8 * 10**9, routed_expert_bytes=6 * 10**9,
                     active_parameters=3.5e9, kv_bytes_per_token=0, attention_width=0,
                     routed_active_parameters=1.5e9)
    device = Device(10**12, 1.0, 1.0, 10**14, 0.0, half_rate_tokens=8.0,
                    expert_batch_ms=0.1)

    def step_ms(lanes: int) -> float:
        terms, _ = decode_step([load], [device], [], 0, [], traffic, lanes=lanes,
                               cached=lanes)
        return float(terms[0].total_ms)

    # One token: 2 GB shared + 6 GB x 2/8 read at 1 TB/s, 2 x 3.5e9 FLOPs at 1e14.
    assert step_ms(1) == pytest.approx(3.5 + 0.07)
    # Two tokens: the experts reached, 6 GB x (1 - (6/8)^2) = 2.625 GB; each of the
    # 3.5 experts reached computes 4/3.5 tokens at 1e14 x t / (t + 8), 0.48 ms, hidden
    # behind their read; the shared weights' compute adds 0.08 ms, the kernel 10 x 0.1.
    assert step_ms(2) == pytest.approx(2.0 + 0.08 + 2.625 + 1.0)
    # A dense model's lanes pay no such time.
    dense = ModelTraffic.dense(8 * 10**9, 1000, parameter_count=8 * 10**9)
    plain = StageLoad(layer_count=10, weight_bytes=8 * 10**9, routed_expert_bytes=0,
                      active_parameters=8e9, kv_bytes_per_token=0, attention_width=0)
    terms, _ = decode_step([plain], [device], [], 0, [], dense, lanes=2, cached=2)
    assert float(terms[0].total_ms) == pytest.approx(8.0 + 2 * 8e9 * 2 / 1e14 * 1000)


def test_prefill_pipelines_ubatches_through_the_stages() -> None:
    traffic = ModelTraffic.dense(2 * 10**9, 1000, parameter_count=10**9)
    device = Device(10**12, 1.0, 1.0, 10**13, 0.0)
    one = [_one_load(20, 2 * 10**9, 1e9)]
    two = [_one_load(10, 10**9, 5e8)] * 2
    args = dict(hops_ms=[], hop_bytes_per_token=0, link_bytes_per_s=[], traffic=traffic)
    split = dict(hops_ms=[0.0], hop_bytes_per_token=0, link_bytes_per_s=[1e9],
                 traffic=traffic)
    # One ubatch: two half stages take as long as one whole.
    single = prefill_ms(one, [device], prompt_tokens=512, **args)
    assert prefill_ms(two, [device] * 2, prompt_tokens=512, **split) == pytest.approx(single)
    # Four ubatches in a batch: the second stage works while the first takes the next.
    long_one = prefill_ms(one, [device], prompt_tokens=2048, **args)
    long_two = prefill_ms(two, [device] * 2, prompt_tokens=2048, **split)
    assert long_two < 0.7 * long_one
    # Each ubatch crosses the hop: 512 tokens x 1000 B over 1 GB/s, 0.512 ms each.
    slow = dict(split, hop_bytes_per_token=1000)
    assert prefill_ms(two, [device] * 2, prompt_tokens=512, **slow) == pytest.approx(
        single + 0.512)
    assert [len(b) for b in ubatches(5000)] == [4, 4, 2]
    assert ubatches(600, 100)[0] == [(512, 100), (88, 612)]


def test_compute_caps_large_batches() -> None:
    traffic = ModelTraffic.dense(10**9, 1000, parameter_count=5 * 10**8)
    device = Device(10**12, 1.0, 1.0, 10**13, 0.0)
    rates = []
    for lanes in (1, 64, 1024, 8192):
        terms, _ = decode_step([_one_load()], [device], [], 0, [], traffic, lanes=lanes,
                               cached=lanes)
        rates.append(lanes * 1000 / terms[0].total_ms)
    # tokens/s grow with lanes but never past the compute ceiling 1e13 / (2 x 5e8).
    assert rates == sorted(rates)
    assert rates[-1] < 10**13 / (2 * 5 * 10**8)
    assert rates[-1] > 0.8 * 10**13 / (2 * 5 * 10**8)


def test_token_embeddings_are_read_one_row_per_token() -> None:
    request = as_planning_input({**_request(), "minimum_nodes": 1, "nodes": [
        {"node_id": "rtx-4090-00", "detected_vram_bytes": 80 * GIB}]})
    plan = plan_topology(request)
    catalog = [GpuModel.from_dict({
        "name": "NVIDIA GeForce RTX 4090", "vendor": "NVIDIA", "memory_bytes": 24 * GIB,
        "note": "n", "id": "rtx-4090", "memory_bandwidth_bytes_per_s": 10**12,
        "memory_bandwidth_source": "s", "backend": "cuda", "memory_type": "gddr"})]
    speeds = node_speeds(request.nodes, catalog)
    whole = ModelTraffic.dense(40 * GIB, 1000)
    lean = ModelTraffic(40 * GIB, 40 * GIB, 1000, token_embedding_bytes=4 * GIB)
    read_whole = estimate_plan(request, plan, whole, speeds).stages[0].weight_read_bytes
    read_lean = estimate_plan(request, plan, lean, speeds).stages[0].weight_read_bytes
    lanes = plan.parallel_lanes
    assert read_whole - read_lean == pytest.approx(4 * GIB - lanes * 2 * 1000, abs=2)


def test_prefill_needs_fp16_throughput_and_says_so() -> None:
    request = as_planning_input({**_request(), "minimum_nodes": 1, "nodes": [
        {"node_id": "card-00", "detected_vram_bytes": 80 * GIB}]})
    plan = plan_topology(request)
    base = {"name": "Card", "vendor": "V", "memory_bytes": 80 * GIB, "note": "n",
            "id": "card", "memory_bandwidth_bytes_per_s": 10**12,
            "memory_bandwidth_source": "s", "backend": "cuda", "memory_type": "hbm"}
    traffic = ModelTraffic.dense(40 * GIB, 1000, parameter_count=20 * 10**9)
    without = estimate_plan(request, plan, traffic,
                            node_speeds(request.nodes, [GpuModel.from_dict(base)]),
                            prompt_tokens=1000)
    assert without.estimated_context_fill_ms is None and without.ttft_ms is None
    assert any("no fp16_tflops" in note for note in without.notes)
    fast = GpuModel.from_dict({**base, "fp16_tflops": 100, "fp16_tflops_source": "s"})
    found = estimate_plan(request, plan, traffic, node_speeds(request.nodes, [fast]),
                          prompt_tokens=1000)
    assert found.ttft_ms is not None and found.estimated_context_fill_ms is not None
    assert 0 < found.ttft_ms < found.estimated_context_fill_ms
    assert found.prefill_tokens_per_s == pytest.approx(
        plan.context_length * 1000 / found.estimated_context_fill_ms)
    # The compute a prompt needs at the calibrated share, at least: 2 x 20e9 x 1000.
    calibration = load_calibration()
    assert found.ttft_ms >= 2 * 20e9 * 1000 / (
        calibration.compute_efficiency["hbm/cuda"] * 100e12) * 1000
    assert "Median error on held-out" in found.to_dict()["notes"][1]
