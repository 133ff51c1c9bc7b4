"""The speed and cost estimate: the module docstring's formulas, worked by hand."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import plan_topology
from planner.models import GpuModel, load_gpu_catalog, load_preset
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
    assert estimate.stages[0].hop_ms == load_calibration().backends["cuda"].hop_ms
    assert any("states no llama.cpp backend: cuda taken" in note for note in estimate.notes)
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
    catalog = [GpuModel("A", 10, "V", "n", id="a", memory_bandwidth_bytes_per_s=5 * 10**9,
                        memory_bandwidth_source="s", price_per_hour=1.0, price_source="s",
                        price_date="2026-01-01"),
               GpuModel("A big", 10, "V", "n", id="a-big", memory_bandwidth_bytes_per_s=7 * 10**9,
                        memory_bandwidth_source="s")]
    request = as_planning_input({**_request(), "nodes": [
        {"node_id": "a-00", "detected_vram_bytes": 10},
        {"node_id": "a-big-03", "detected_vram_bytes": 10},
        {"node_id": "a-x", "detected_vram_bytes": 10}]})
    speeds = node_speeds(request.nodes, catalog)
    assert speeds["a-00"].memory_bandwidth_bytes_per_s == 5 * 10**9
    assert speeds["a-big-03"].memory_bandwidth_bytes_per_s == 7 * 10**9
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
    # A dense model reads every weight but its input embedding (one row of it a token).
    dense = ModelTraffic.from_spec(load_preset("llama-3.1-70b"))
    assert dense.token_embedding_bytes == 128_256 * 8192 * 17 // 16
    assert dense.active_weight_bytes == dense.model_weight_bytes - dense.token_embedding_bytes


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
    Prompt,
    Rates,
    StageLoad,
    decode_step,
    prefill_ms,
    step_ms,
    step_work,
)

# 1 TB/s for weights and cache, 10 TFLOPS for products and attention, no fixed time.
PLAIN = Rates(read_ms_per_byte=1e-9, kv_ms_per_byte=1e-9, matrix_ms_per_flop=1e-10,
              attention_ms_per_flop=1e-10, layer_ms=0.0)


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


def test_lanes_of_a_mixture_of_experts_multiply_their_experts_as_their_other_weights(
        ) -> None:
    """A decode step reads the experts its lanes reach and multiplies them as its other
    weights, at the full rate beside the read (llama.cpp's matrix-vector kernels for up
    to 8 tokens, tiles of 8 tokens beyond); a prompt's micro-batch multiplies each expert
    reached in whole tiles of its backend's kernels, however few of a tile's tokens it
    has. The DGX Spark's parallel lanes of three mixtures of experts were estimated 50
    to 110 % too slow with the lanes' experts as small products (docs/speed.md)."""
    from planner.performance.roofline import routed_product_ms

    # 10 layers, 8 GB of which 6 GB routed experts, 2 of 8 used per token; 3.5e9
    # parameters per token, 1.5e9 of them in routed experts; no cache.
    traffic = ModelTraffic(8 * 10**9, 3_500_000_000, 1000, active_parameter_count=35 * 10**8,
                           expert_count=8, experts_used=2, parameter_count=8 * 10**9)
    load = StageLoad(layer_count=10, weight_bytes=8 * 10**9, routed_expert_bytes=6 * 10**9,
                     active_parameters=3.5e9, kv_bytes_per_token=0, attention_width=0,
                     routed_active_parameters=1.5e9)
    rates = Rates(read_ms_per_byte=1e-9, kv_ms_per_byte=1e-9, matrix_ms_per_flop=1e-11,
                  attention_ms_per_flop=1e-11, layer_ms=0.0, expert_tile_tokens=8.0)

    def ms(lanes: int) -> float:
        terms, _ = decode_step([load], [rates], [], traffic, lanes=lanes, cached=lanes)
        return float(terms[0].total_ms)

    # One token: 2 GB shared + 6 GB x 2/8 read at 1 TB/s, 2 x 3.5e9 FLOPs at 1e14.
    assert ms(1) == pytest.approx(3.5 + 0.07)
    # Two tokens: the experts reached, 6 GB x (1 - (6/8)^2) = 2.625 GB, and every
    # product, 2 x 3.5e9 x 2 FLOPs, at the full rate.
    assert ms(2) == pytest.approx(2.0 + 2.625 + 0.14)
    # A micro-batch of two tokens: each of the 3.5 experts reached multiplies 4 / 3.5
    # tokens in one tile of 8, computed whole: 8 / (4 / 3.5) times its tokens' FLOPs.
    batch = step_work(load, traffic, tokens=2, sequences=1, cached=2, attended=1,
                      overlapped=True)
    tokens = 4 / (8 * (1 - 0.75**2))
    assert float(batch.routed_flops) == pytest.approx(2 * 1.5e9 * 2)
    assert float(routed_product_ms(batch, rates)) == pytest.approx(
        2 * 1.5e9 * 2 * 1e-11 * 8 / tokens)
    # Twenty tokens, each using 2 of the 8 experts: an expert's count X is binomial
    # (20, 1/4) and it computes ceil(X / 8) whole tiles of 8, summed exactly here.
    many = step_work(load, traffic, tokens=20, sequences=1, cached=20, attended=10,
                     overlapped=True)
    tiles = sum(math.comb(20, x) * 0.25**x * 0.75**(20 - x) * math.ceil(x / 8)
                for x in range(21))
    assert float(routed_product_ms(many, rates)) == pytest.approx(
        2 * 1.5e9 * 20 * 1e-11 * 8 * tiles / 5, rel=0.02)
    # Without a tile (the CPU backend), every token at the full rate.
    assert float(routed_product_ms(many, replace(rates, expert_tile_tokens=0.0))) == (
        pytest.approx(2 * 1.5e9 * 20 * 1e-11))


def test_a_prompt_multiplies_the_output_head_for_its_output_token_only() -> None:
    """llama.cpp takes only the rows whose logits a batch asks for into the last layer's
    feed-forward network and the output head (``inp_out_ids``, since pull request 6122),
    and a prompt asks for its last token's only: its micro-batches leave their products
    out, a decoded token computes them, and a build before the change multiplies every
    prompt token by them."""
    from planner.performance import OUTPUT_ROWS_BUILD, computes_every_output

    # 5e8 parameters a token, 2e8 of them the head; no cache.
    traffic = ModelTraffic.dense(10**9, 1000, parameter_count=10**9)
    load = StageLoad(layer_count=10, weight_bytes=10**9, routed_expert_bytes=0,
                     active_parameters=5e8, kv_bytes_per_token=0, attention_width=0,
                     head_parameters=2e8)
    batch = step_work(load, traffic, tokens=512, sequences=1, cached=512, attended=256,
                      overlapped=True)
    assert float(batch.matrix_flops) == pytest.approx(2 * 3e8 * 512)
    assert float(batch.output_row_flops) == pytest.approx(2 * 2e8 * 512)
    # 3e11 FLOPs at 1e13 / s: 30.72 ms over the 1 ms read; every token through the head
    # on an old build: 51.2 ms.
    assert float(step_ms(batch, PLAIN)) == pytest.approx(30.72)
    old = Rates(**{**{name: getattr(PLAIN, name) for name in Rates.__dataclass_fields__},
                   "every_output": 1.0})
    assert float(step_ms(batch, old)) == pytest.approx(51.2)
    token = step_work(load, traffic, tokens=1, sequences=1, cached=1, attended=1,
                      overlapped=False)
    assert float(token.matrix_flops) == pytest.approx(2 * 5e8)
    # The stage holding the last of its 10 layers: attention's products are 2 x 1000 x
    # (100 queries + 25 keys and values) a layer, the 5e8 - 2e8 - 2.5e6 left are the
    # layers' networks, one tenth of them the last layer's.
    last = StageLoad(layer_count=10, weight_bytes=10**9, routed_expert_bytes=0,
                     active_parameters=5e8, kv_bytes_per_token=100 * 10,
                     attention_width=100 * 10, head_parameters=2e8, holds_last_layer=True)
    network = (5e8 - 2e8 - 2 * 1000 * (1000 + 250)) / 10
    ending = step_work(last, traffic, tokens=512, sequences=1, cached=512, attended=256,
                       overlapped=True)
    assert float(ending.matrix_flops) == pytest.approx(2 * (3e8 - network) * 512)
    assert float(ending.output_row_flops) == pytest.approx(2 * (2e8 + network) * 512)
    assert computes_every_output(OUTPUT_ROWS_BUILD - 1)
    assert not computes_every_output(OUTPUT_ROWS_BUILD)
    assert not computes_every_output(None)
    # The head is among the parameters a token computes with.
    with pytest.raises(PerformanceError) as caught:
        ModelTraffic(10**9, 10**9, 1000, active_parameter_count=10**8, parameter_count=10**9,
                     output_head_parameters=2 * 10**8)
    assert caught.value.details["field"] == "output_head_parameters"


def test_gemma_3_270m_s_prompt_leaves_its_tied_head_out() -> None:
    """gemma-3-270m's tied 262,144 x 640 embedding is 63 % of its parameters: its prompt
    on this machine's CPU was estimated 2.4 times too slow with every token multiplied by
    it, and is within 7 % without (tests/test_speed_cpu.py). The GGUF's head reaches the
    stages, and the prompt at a current build costs its layers' products alone."""
    import json
    from pathlib import Path

    from planner.models import ModelSpec
    from planner.performance import model_traffic, stage_loads

    spec = ModelSpec.from_dict(json.loads(
        (Path(__file__).parent / "data" / "gemma-3-270m-q4_k_m.json").read_text()))
    traffic = model_traffic(spec)
    assert traffic is not None and traffic.output_head_parameters == 262_144 * 640
    assert traffic.output_head_parameters / (traffic.active_parameter_count or 1) > 0.6
    request = as_planning_input({
        "native_context_length": spec.native_context_length,
        "layer_count": spec.layer_count, "model_weight_bytes": spec.model_weight_bytes,
        "layer_weight_bytes": list(spec.layer_weight_bytes or ()),
        "kv_bytes_per_token": spec.kv_bytes_per_token,
        "nodes": [{"node_id": "a", "detected_vram_bytes": 8 * GIB}]})
    plan = plan_topology(request)
    (load,) = stage_loads(request, plan, traffic)
    assert load.head_parameters == pytest.approx(traffic.output_head_parameters)
    assert load.holds_last_layer
    current = step_work(load, traffic, tokens=256, sequences=1, cached=256, attended=128,
                        overlapped=True)
    head = float(current.output_row_flops) / (2 * 256)
    assert head > traffic.output_head_parameters
    body = (traffic.active_parameter_count or 0) - head
    assert float(current.matrix_flops) == pytest.approx(2 * body * 256)
    # Its 18 layers: the head and one layer's network of the 100 M parameters beside it.
    assert head - traffic.output_head_parameters < body / 17


def test_prefill_pipelines_ubatches_through_the_stages() -> None:
    traffic = ModelTraffic.dense(2 * 10**9, 1000, parameter_count=10**9)
    one = [_one_load(20, 2 * 10**9, 1e9)]
    two = [_one_load(10, 10**9, 5e8)] * 2

    def ttft(loads: list[StageLoad], tokens: int, per_token: float = 0.0) -> float:
        hops = len(loads) - 1
        return prefill_ms(loads, [PLAIN] * len(loads), [0.0] * hops, [per_token] * hops,
                          traffic, Prompt(tokens, 0, 2048, 512))

    # One ubatch: two half stages take as long as one whole.
    assert ttft(two, 512) == pytest.approx(ttft(one, 512))
    # Four ubatches in a batch: the second stage works while the first takes the next.
    assert ttft(two, 2048) < 0.7 * ttft(one, 2048)
    # Each ubatch crosses the hop: 512 tokens x 0.001 ms each.
    assert ttft(two, 512, 0.001) == pytest.approx(ttft(one, 512) + 0.512)
    # A prompt's batches and micro-batches, as llama.cpp splits them.
    prompt = Prompt(5000, 100, 2048, 512)
    assert prompt.batch_count == 3
    sizes, before = prompt.batch_shape(2)
    assert list(sizes) == [512, 392] and list(before) == [4196, 4708]


def test_a_ubatch_computes_while_its_weights_stream_in() -> None:
    """A micro-batch's time is the larger of its read and its products, plus the rest; a
    decode step's products add to its read."""
    traffic = ModelTraffic.dense(10**9, 1000, parameter_count=5 * 10**8)
    load = _one_load()
    ubatch = step_work(load, traffic, tokens=512, sequences=1, cached=512, attended=256,
                       overlapped=True)
    # Read 1 ms; products 2 x 5e8 x 512 FLOPs at 1e13, 51.2 ms; the cache 512 x 10 kB,
    # 0.00512 ms; attention 4 x 1000 x 512 x 256 FLOPs, 0.0524 ms.
    assert float(step_ms(ubatch, PLAIN)) == pytest.approx(51.2 + 0.00512 + 0.052429, rel=1e-4)
    step = step_work(load, traffic, tokens=1, sequences=1, cached=1, attended=1,
                     overlapped=False)
    assert float(step_ms(step, PLAIN)) == pytest.approx(1.0 + 0.1 + 0.00001 + 0.0000004)


def test_compute_caps_large_batches() -> None:
    traffic = ModelTraffic.dense(10**9, 1000, parameter_count=5 * 10**8)
    rates = []
    for lanes in (1, 64, 1024, 8192):
        terms, _ = decode_step([_one_load()], [PLAIN], [], traffic, lanes=lanes,
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


def test_a_kind_without_an_fp16_figure_computes_at_a_stated_stand_in() -> None:
    """A kind that states no FP16 figure still gets a prefill estimate: from its shaders
    and clock when it gives them, else from its bandwidth at its vendor's median FLOPs
    per byte; the estimate says which, and quotes that stand-in's own (wider) error."""
    request = as_planning_input({**_request(), "minimum_nodes": 1, "nodes": [
        {"node_id": "card-00", "detected_vram_bytes": 80 * GIB}]})
    plan = plan_topology(request)
    base = {"name": "Card", "vendor": "AMD", "memory_bytes": 80 * GIB, "note": "n",
            "id": "card", "memory_bandwidth_bytes_per_s": 10**12,
            "memory_bandwidth_source": "s", "backend": "rocm", "memory_type": "gddr"}
    traffic = ModelTraffic.dense(40 * GIB, 1000, parameter_count=20 * 10**9)
    calibration = load_calibration()

    def estimate(**figures: object) -> object:
        gpu = GpuModel.from_dict({**base, **figures})
        return estimate_plan(request, plan, traffic, node_speeds(request.nodes, [gpu]),
                             prompt_tokens=1000)

    bare = estimate()
    assert bare.ttft_ms is not None
    assert any("taken from its memory bandwidth" in note for note in bare.notes)
    assert "FP16 throughput from memory bandwidth" in bare.error_note
    shaders = estimate(shader_count=4096, boost_clock_mhz=2500, shader_source="s")
    assert any("taken from its shaders and clock" in note for note in shaders.notes)
    stated = estimate(fp16_tflops=100, fp16_tflops_source="s")
    assert not any("states no fp16_tflops" in note for note in stated.notes)
    # The stated figure's compute, at least: 2 x 20e9 x 1000 at the matrix share.
    figures = calibration.backends["rocm"]
    assert stated.ttft_ms >= 2 * 20e9 * 1000 / (
        figures.matrix_efficiency * 100e12) * 1000
    assert stated.error_note.startswith("Median error on published measurements")


def test_a_cpu_computes_at_its_cores_rate_without_a_gpu_s_matrix_factor() -> None:
    """The stand-in factor is a GPU's (its FP16 matrix or packed units against its
    shaders' FP32 rate): a GPU kind's compute follows it, a CPU kind's vector rate from
    its cores does not (the CPU backend's matrix efficiency carries the rest)."""
    from dataclasses import replace

    from planner.performance import NodeSpeed, SpeedCalibration
    from planner.performance.device import matrix_tflops

    calibration = load_calibration()
    doubled = replace(calibration,
                      shader_units_factor=2 * calibration.shader_units_factor)
    gpu = NodeSpeed("card", 10**12, None, "card", "gddr", "rocm", None, 40.0, "AMD")
    cpu = NodeSpeed("cpu", 10**11, None, "cpu", "ddr", "cpu", None, 2.0, "AMD")

    def tflops(speed: NodeSpeed, figures: SpeedCalibration) -> tuple[float, str]:
        return matrix_tflops(speed, figures, speed.backend or "", True)

    assert tflops(gpu, doubled)[0] == pytest.approx(2 * tflops(gpu, calibration)[0])
    assert tflops(cpu, doubled) == tflops(cpu, calibration) == (2.0, "shaders")


def test_a_kind_stating_its_shaders_without_a_clock_computes_at_its_vendors_lane_rate(
) -> None:
    """Apple states its GPUs' cores but no clock: such a kind computes at its lanes (128
    a core) times the FP16 rate a lane of its vendor's measured kinds that state both, as
    if it stated that figure, and says so; a vendor without two such kinds leaves its kind
    at the stand-in from bandwidth, as does a calibration that has no lane rates."""
    from dataclasses import replace

    from planner.performance import NodeSpeed, RunSettings, calibrated_device
    from planner.performance.device import matrix_tflops

    calibration = load_calibration()
    per_lane = calibration.fallback_gflops_per_lane["Apple"]
    assert "AMD" not in calibration.fallback_gflops_per_lane
    gpu = GpuModel(name="Apple M3 Max 40-core GPU", memory_bytes=48 * GIB, vendor="Apple",
                   backend="metal", memory_type="lpddr",
                   memory_bandwidth_bytes_per_s=400 * 10**9, shader_count=40,
                   shader_source="40-core GPU; no clock stated")
    assert gpu.shader_lanes == 40 * 128 and gpu.vector_tflops is None
    cores = NodeSpeed.of_kind("mac", gpu)
    expected = 40 * 128 * per_lane / 1e3
    assert matrix_tflops(cores, calibration, "metal", True) == pytest.approx(
        (expected, "lanes"))
    notes: list[str] = []
    settings = RunSettings(backend="metal")
    device = calibrated_device(calibration, cores, settings, True, notes)
    stated = calibrated_device(calibration, replace(cores, fp16_tflops=expected), settings,
                               True, [])
    assert device.figure == "lanes"
    assert device.rates.matrix_ms_per_flop == pytest.approx(stated.rates.matrix_ms_per_flop)
    assert any("no clock stated" in note and "less sure" in note for note in notes)

    bandwidth_only = matrix_tflops(replace(cores, vendor="AMD"), calibration, "metal", True)
    assert bandwidth_only == pytest.approx(
        (400e9 * calibration.fallback_flops_per_byte["AMD"] / 1e12, "bandwidth"))
    older = replace(calibration, fallback_gflops_per_lane={})
    assert matrix_tflops(cores, older, "metal", True)[1] == "bandwidth"


def test_flash_attention_on_a_stand_in_gpu_computes_at_its_shaders_rate() -> None:
    """The stand-in factor is fitted on prompts' products: a kind computing at the
    stand-in from its shaders ran flash attention on those shaders, at their FP32 rate
    (the attention share of it), until llama.cpp's matrix kernel reached AMD's units
    (``attends_on_shaders``); from then, and without flash attention (scores are
    products), it attends at the stand-in. A kind stating its FP16 figure attends at that
    figure on any build."""
    from dataclasses import replace

    from planner.models.architectures import FMA_FLOPS, UNSTATED_FLOPS_PER_LANE_CLOCK
    from planner.performance import NodeSpeed, RunSettings, calibrated_device
    from planner.performance.settings import MATRIX_FLASH_ATTENTION_BUILD

    calibration = load_calibration()
    # Its stand-in: 40 TFLOPS of FP32 lanes at a matrix unit's rate (it names no
    # architecture) times the factor.
    stand_in = 40e12 / FMA_FLOPS * UNSTATED_FLOPS_PER_LANE_CLOCK * calibration.shader_units_factor
    figures = calibration.backends["rocm"]
    assert figures.attention_efficiency is not None and figures.matrix_efficiency is not None
    shaders = NodeSpeed("card", 10**12, None, "card", "gddr", "rocm", None, 40.0, "AMD")
    stated = replace(shaders, fp16_tflops=100.0)
    before = MATRIX_FLASH_ATTENTION_BUILD["rocm"] - 1

    def attention_ms_per_flop(speed: NodeSpeed, flash_attn: bool, build: int | None
                              ) -> float:
        settings = RunSettings(backend="rocm", flash_attn=flash_attn, build=build)
        device = calibrated_device(calibration, speed, settings, True, [])
        return float(device.rates.attention_ms_per_flop)

    assert attention_ms_per_flop(shaders, True, before) == pytest.approx(
        1000 / (figures.attention_efficiency * 40e12))
    for build in (before + 1, None):
        assert attention_ms_per_flop(shaders, True, build) == pytest.approx(
            1000 / (figures.attention_efficiency * stand_in))
    assert attention_ms_per_flop(shaders, False, before) == pytest.approx(
        1000 / (figures.matrix_efficiency * stand_in))
    for build in (before, None):
        assert attention_ms_per_flop(stated, True, build) == pytest.approx(
            1000 / (figures.attention_efficiency * 100e12))


def test_amd_attends_on_its_matrix_units_as_llama_cpp_routes_each_model() -> None:
    """Where a stand-in kind's flash attention runs: on ROCm, llama.cpp's matrix kernel
    takes a model that groups its queries (two query heads or more a KV head, key heads
    of at most 256 but not 40 or 72: fattn.cu) from b9187, and any other model stays on
    the shaders' tile kernel at every build; on Vulkan the cooperative-matrix kernel takes
    every model from b7865. A model stating no heads is taken to group them."""
    from dataclasses import replace

    from planner.models import load_preset
    from planner.performance import (
        NodeSpeed,
        RunSettings,
        calibrated_device,
        groups_queries,
        model_traffic,
    )

    gpt_oss = model_traffic(load_preset("gpt-oss-20b"))
    llama = model_traffic(load_preset("llama-3.1-8b"))
    deepseek = model_traffic(load_preset("deepseek-v2-lite"))
    assert gpt_oss is not None and llama is not None and deepseek is not None
    assert (gpt_oss.attention_heads, gpt_oss.kv_heads, gpt_oss.head_size) == (64, 8, 64)
    assert (deepseek.kv_heads, deepseek.head_size) == (1, 512 + 64)
    # Llama 3.1 groups 32 query heads on 8; without the grouping (Llama 2's 32 on 32),
    # at a key size the kernel does not tile, or as latent attention's 576-wide row, the
    # model stays on the tile kernel.
    assert groups_queries(gpt_oss) and groups_queries(llama)
    assert not groups_queries(replace(llama, kv_heads=32))
    assert not groups_queries(replace(llama, head_size=40))
    assert not groups_queries(replace(llama, head_size=72))
    assert groups_queries(replace(llama, head_size=256))
    assert not groups_queries(replace(llama, head_size=320))
    assert not groups_queries(deepseek)
    assert groups_queries(replace(llama, kv_heads=None)) and groups_queries(None)

    calibration = load_calibration()
    figures = {name: calibration.backends[name] for name in ("rocm", "vulkan")}
    shaders = NodeSpeed("card", 10**12, None, "card", "gddr", "rocm", None, 40.0, "AMD")
    on_shaders = {name: 1000 / (float(f.attention_efficiency or 0) * 40e12)
                  for name, f in figures.items()}

    def at_shaders(backend: str, build: int | None, grouped: bool) -> bool:
        settings = RunSettings(backend=backend, flash_attn=True, build=build)
        device = calibrated_device(calibration, shaders, settings, True, [], grouped)
        return bool(device.rates.attention_ms_per_flop == pytest.approx(on_shaders[backend]))

    assert at_shaders("rocm", 9112, True) and not at_shaders("rocm", 9187, True)
    assert not at_shaders("rocm", None, True)
    assert all(at_shaders("rocm", build, False) for build in (9112, 9187, None))
    for grouped in (True, False):
        assert at_shaders("vulkan", 7864, grouped)
        assert not at_shaders("vulkan", 7865, grouped)
        assert not at_shaders("vulkan", None, grouped)


def test_numbers_state_attention_windows_latent_ranks_and_expert_bytes() -> None:
    """A model typed as numbers gives what the estimate reads of its shape: attention's
    width from heads and head size, a sliding window's layers and their cache, latent
    attention's width from its ranks, the routed experts' and the embeddings' bytes."""
    from planner.performance import model_traffic

    numbers = {"model_weight_bytes": 40 * GIB, "hidden_size": 4096,
               "parameter_count": 20 * 10**9, "attention_heads": 32, "head_size": 128,
               "kv_heads": 8, "sliding_window": 1024, "sliding_window_layers": 10,
               "token_embedding_bytes": GIB, "routed_expert_bytes": 30 * GIB,
               "expert_count": 64, "experts_used": 4}
    traffic = model_traffic(None, numbers)
    assert traffic is not None
    assert traffic.attention_width == 32 * 128 and traffic.attention_heads == 32
    assert (traffic.kv_heads, traffic.head_size) == (8, 128)
    assert traffic.sliding_window == 1024 and traffic.window_layer_count == 10
    # Ten windowed layers, each an F16 row of 8 KV heads x 128 keys and values.
    assert traffic.window_kv_bytes_per_token == 10 * 8 * 128 * 2 * 2
    assert traffic.routed_bytes == 30 * GIB and traffic.token_embedding_bytes == GIB
    latent = model_traffic(None, {**numbers, "kv_lora_rank": 512, "rope_head_size": 64})
    assert latent is not None and latent.attention_width == 32 * (512 + 32)


def test_a_window_caps_what_its_layers_read_and_attend_to() -> None:
    """Layers over a sliding window read and attend to at most the window: deep in the
    cache a model with windowed layers decodes faster than the same model without. Its
    request states the cache of its full-attention layers (two of the four, 512 B a
    token); its traffic the windowed layers' (512 B a token, at most 1,024 tokens)."""
    def request(kv_bytes_per_token: int) -> Any:
        return as_planning_input({
            **_request(), "minimum_nodes": 1, "kv_bytes_per_token": kv_bytes_per_token,
            "nodes": [{"node_id": "rtx-4090-00", "detected_vram_bytes": 80 * GIB}],
            "native_context_length": 131072, "context_length_override": 131072})

    unwindowed, windowed_request = request(1024), request(512)
    full = ModelTraffic(40 * GIB, 40 * GIB, 4096, attention_width=4096, attention_heads=32)
    windowed = ModelTraffic(40 * GIB, 40 * GIB, 4096, attention_width=4096,
                            attention_heads=32, sliding_window=1024, window_layer_count=2,
                            window_kv_bytes_per_token=512)
    speeds = node_speeds(unwindowed.nodes, load_gpu_catalog())
    slow = estimate_plan(unwindowed, plan_topology(unwindowed), full,
                         speeds).estimated_tpot_ms
    fast = estimate_plan(windowed_request, plan_topology(windowed_request), windowed,
                         speeds).estimated_tpot_ms
    assert fast < slow


def _graph_layer_bytes(attention: Any, network: Any, hidden: int, tokens: int = 512
                      ) -> float:
    """Bytes every computing operation of one layer of llama.cpp's graph reads from
    activations (not weights, the cache or the graph's inputs) and writes, per token of
    a ``tokens``-token micro-batch: what a third layer adds to a graph of two (the last
    layer computes only the tokens that are output)."""
    from graph_node_counts import FREE_OPS

    from planner.llamacpp.graph.schedule import build_graph
    from planner.llamacpp.graph.shapes import BlockShape, GraphModel

    def stored(tensor: Any) -> bool:
        while tensor.view_src is not None:
            tensor = tensor.view_src
        return tensor.external or tensor.is_input

    def moved(layers: int) -> int:
        model = GraphModel(n_embd=hidden, n_vocab=32000,
                           blocks=(BlockShape(attention, network),) * layers)
        graph = build_graph(model, n_tokens=tokens, n_outputs=1, n_kv=2 * tokens,
                            flash_attn=True)
        return sum(node.nbytes + sum(src.nbytes for src in node.srcs if not stored(src))
                   for node in graph.nodes if node.op not in FREE_OPS)

    return (moved(3) - moved(2)) / tokens


@pytest.mark.parametrize(("hidden", "queries", "keys", "heads", "width", "experts", "used"), [
    (4096, 4096, 1024, 32, 14336, 0, 0),  # a llama 8B layer
    (2048, 4096, 512, 32, 768, 128, 8),  # a Qwen3-30B-A3B layer
    (2880, 4096, 512, 64, 2880, 32, 4),  # a gpt-oss-20b layer
], ids=["llama-8b", "qwen3-30b-a3b", "gpt-oss-20b"])
def test_a_micro_batch_moves_the_bytes_llama_cpp_s_graph_moves(
        hidden: int, queries: int, keys: int, heads: int, width: int, experts: int,
        used: int) -> None:
    """activation_bytes_per_token is llama.cpp's graph counted: a dense layer's and a
    mixture of experts' layer's bytes, from their widths and parameters alone, within
    1 % (a router's softmax and top-k are left out)."""
    from planner.llamacpp.graph.shapes import AttentionShape, FeedForwardShape
    from planner.performance import StageLoad, activation_bytes_per_token

    attention = AttentionShape(q_width=queries, k_width=keys, v_width=keys,
                               out_width=queries, n_head=heads)
    network = FeedForwardShape(n_ff=width, n_expert=experts, n_expert_used=used)
    routed = 3 * used * hidden * width
    parameters = (2 * hidden * queries + 2 * hidden * keys + hidden * experts
                  + (routed if experts else 3 * hidden * width))
    load = StageLoad(layer_count=1, weight_bytes=parameters, routed_expert_bytes=0,
                     active_parameters=parameters, kv_bytes_per_token=4 * keys,
                     attention_width=queries, routed_active_parameters=routed if experts
                     else 0.0)
    traffic = ModelTraffic(model_weight_bytes=parameters, active_weight_bytes=parameters,
                           hidden_size=hidden, expert_count=experts or None,
                           experts_used=used or None)
    assert activation_bytes_per_token(load, traffic) == pytest.approx(
        _graph_layer_bytes(attention, network, hidden), rel=0.01)


def test_the_error_quoted_says_which_rows_it_was_measured_on() -> None:
    """The error quoted for a backend and memory type with too few held-out rows of its own
    is its backend's over every memory type, or every backend's; the note labelled it as
    the pair's own ("metal on gddr memory: decode 15%" for a GDDR card on Metal, which no
    row measured; "rpc on gddr memory" beside "its error is not known")."""
    calibration = load_calibration()
    own = calibration.error_note([("cuda", "gddr", "stated")])
    assert "cuda on gddr memory: decode" in own and "(" not in own.split(": ", 1)[1]
    metal = calibration.error_note([("metal", "gddr", "stated")])
    decode = calibration.error("decode", "metal", "gddr")
    assert decode is not None and decode.memory_type == "all"
    assert (f"metal on gddr memory (metal on every memory type): decode "
            f"{decode.median_abs_error:.0%}, prefill") in metal
    rpc = calibration.error_note([("rpc", "gddr", "stated")])
    anything = calibration.error("decode", "rpc", "gddr")
    assert anything is not None and anything.backend == "all"
    assert (f"rpc on gddr memory (every backend and memory type): decode "
            f"{anything.median_abs_error:.0%}, prefill") in rpc
    # Phases measured on different rows each say their own.
    from dataclasses import replace

    from planner.performance.calibration import CrossValidatedError

    decode_own = replace(calibration, cross_validated=(
        *calibration.cross_validated,
        CrossValidatedError("decode", "metal", "gddr", "gpu", 12, 0.2)))
    mixed = decode_own.error_note([("metal", "gddr", "stated")])
    assert "metal on gddr memory: decode 20%, prefill " in mixed
    assert mixed.endswith("(metal on every memory type).")


def test_a_mixture_of_experts_prompt_quotes_the_error_of_such_prompts() -> None:
    """A prompt of a mixture of experts quotes the held-out error of mixtures of experts'
    prompts on its backend (else on every backend) where that is the larger, and says so;
    a dense model's prompt, and either's decode, quote the backend's own (the experts'
    few-token products are the estimate's least sure part: 21 % on CUDA against 13 %)."""
    from dataclasses import replace

    from planner.performance.calibration import MIXTURES_OF_EXPERTS, CrossValidatedError

    calibration = load_calibration()
    dense = calibration.error("prefill", "cuda", "gddr")
    experts = calibration.error("prefill", "cuda", "gddr", experts=True)
    assert dense is not None and experts is not None
    assert experts.model == MIXTURES_OF_EXPERTS and experts.backend == "cuda"
    assert experts.median_abs_error > dense.median_abs_error
    assert calibration.error("decode", "cuda", "gddr", experts=True) == calibration.error(
        "decode", "cuda", "gddr")
    note = calibration.error_note([("cuda", "gddr", "stated")], experts=True)
    assert (f"prefill {experts.median_abs_error:.0%} (mixtures of experts on cuda)"
            in note)
    assert "mixtures of experts" not in calibration.error_note([("cuda", "gddr", "stated")])
    # Where the backend's own error is the larger, it stands; a backend with too few
    # prompts of mixtures of experts quotes every backend's.
    smaller = replace(calibration, cross_validated=tuple(
        replace(e, median_abs_error=0.01) if e.model == MIXTURES_OF_EXPERTS else e
        for e in calibration.cross_validated))
    assert smaller.error("prefill", "cuda", "gddr", experts=True) == dense
    few = replace(calibration, cross_validated=(
        *(e for e in calibration.cross_validated
          if not (e.model == MIXTURES_OF_EXPERTS and e.backend == "metal")),
        CrossValidatedError("prefill", "metal", "all", "gpu", 3, 0.9, "all",
                            MIXTURES_OF_EXPERTS)))
    quoted = few.error("prefill", "metal", "lpddr", experts=True)
    assert quoted is not None and quoted.backend == "all" and quoted.model == "moe"
    stated = few.stated_error("prefill", None, "metal", "lpddr", experts=True)
    assert stated is not None and "(all, prompts of mixtures of experts)" in stated[1]


def test_an_estimate_of_a_mixture_of_experts_quotes_its_prompts_error() -> None:
    """Every surface quotes it: planner speed's estimate of gpt-oss-20b on an RTX 4090."""
    from planner.cli.speed import estimate_speed, resolve_model
    from planner.models import load_gpu_catalog

    (gpu,) = [g for g in load_gpu_catalog() if g.kind == "rtx-4090"]
    for name, said in (("gpt-oss-20b", True), ("llama-3.1-8b", False)):
        _, fields, traffic, *_ = resolve_model(name)
        assert traffic is not None and traffic.mixture_of_experts is said
        estimate, _ = estimate_speed(fields, traffic, gpu, 1, 4096, 1, 512)
        assert ("(mixtures of experts on cuda)" in estimate.error_note) is said


def test_sizing_and_candidates_quote_a_mixture_of_experts_prompts_error(
        tmp_path: Path) -> None:
    """Sizing (the API, as the workbench's panel shows it) and ``planner candidates``
    quote a mixture of experts' prompt error too, and a dense model's its backend's."""
    import subprocess
    import sys

    from planner.sizing import SizingTargets, size_fleet

    catalog = [g for g in load_gpu_catalog() if g.kind == "rtx-4090"]
    for name, said in (("gpt-oss-20b", True), ("llama-3.1-8b", False)):
        result = size_fleet(load_preset(name), catalog, SizingTargets(), top=1)
        assert ("(mixtures of experts on cuda)" in result.error_note) is said, name
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[model]\npreset = "gpt-oss-20b"\n\n[[nodes]]\nid = "a"\n'
                     'gpu = "rtx-4090"\nvram = "24 GiB"\n')
    shown = subprocess.run([sys.executable, "-m", "planner.cli", "candidates", str(fleet)],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "(mixtures of experts on cuda)" in shown.stdout


# ------------------------------------------------------- a routed expert's token tiles


@given(tokens=st.integers(1, 4096), experts=st.integers(2, 256),
       tile=st.sampled_from([8, 16, 32, 64, 128]), data=st.data())
@settings(max_examples=60, deadline=None)
def test_an_experts_tiles_are_the_binomial_expectation(tokens: int, experts: int, tile: int,
                                                       data: st.DataObject) -> None:
    """An expert's count of a micro-batch's ``tokens`` (each using ``used`` of the
    ``experts``) is binomial, and it computes ``ceil(count / tile)`` whole tiles: the
    estimate's expectation is the exact sum's, within the normal approximation of its
    tails."""
    from planner.performance.roofline import expected_expert_tiles

    used = data.draw(st.integers(1, experts))
    p = used / experts
    mean = tokens * p
    # The exact expectation, summed over the counts that carry any probability.
    low = max(0, int(mean - 12 * math.sqrt(mean + 1)))
    high = min(tokens, int(mean + 12 * math.sqrt(mean + 1)) + 1)
    log_pmf = [math.lgamma(tokens + 1) - math.lgamma(x + 1) - math.lgamma(tokens - x + 1)
               + (x * math.log(p) if x else 0.0)
               + ((tokens - x) * math.log1p(-p) if p < 1 else (0.0 if x == tokens
                                                               else -math.inf))
               for x in range(low, high + 1)]
    exact = sum(math.exp(lp) * math.ceil(x / tile)
                for x, lp in zip(range(low, high + 1), log_pmf, strict=True))
    estimated = float(expected_expert_tiles(tokens, p, tile))
    # Never fewer tiles than the tokens fill, and never a tile for an expert no token uses.
    assert estimated >= mean / tile - 1e-9
    assert estimated <= 1 - (1 - p) ** tokens + mean / tile + 1 + 1e-9
    assert estimated == pytest.approx(exact, rel=0.03, abs=0.02)


def test_each_backend_multiplies_an_experts_tokens_in_its_own_tiles() -> None:
    """A micro-batch of 512 tokens of Qwen3-30B-A3B (8 of 128 experts a token: 32 an
    expert) fills a quarter of CUDA's, ROCm's and Vulkan's 128-token tiles and Metal's
    32-token ones about two thirds (their counts spread either side of 32); the CPU
    multiplies each token alone. The routed products cost that many times their tokens'."""
    from planner.performance import EXPERT_TOKEN_TILES, expert_token_tile
    from planner.performance.roofline import Rates, Work, routed_product_ms

    assert EXPERT_TOKEN_TILES == {"cuda": 128, "rocm": 128, "vulkan": 128, "metal": 32}
    assert expert_token_tile("cpu") == 0
    work = Work(weight_bytes=0.0, matrix_flops=0.0, kv_bytes=0.0, attention_flops=0.0,
                layers=0, routed_flops=1e12, micro_batch_tokens=512.0,
                expert_share=8 / 128, overlapped=True)
    cost = {backend: float(routed_product_ms(work, Rates(
        read_ms_per_byte=0.0, kv_ms_per_byte=0.0, matrix_ms_per_flop=1e-12,
        attention_ms_per_flop=0.0, layer_ms=0.0,
        expert_tile_tokens=float(expert_token_tile(backend)))))
        for backend in ("cuda", "rocm", "vulkan", "metal", "cpu")}
    assert cost["cpu"] == pytest.approx(1.0)
    assert cost["cuda"] == cost["rocm"] == cost["vulkan"] == pytest.approx(4.0, rel=1e-6)
    assert 1.3 < cost["metal"] < 1.6


def test_a_decode_step_with_flash_attention_attends_as_its_cache_streams_in() -> None:
    """llama.cpp's flash attention for one token (its vector kernels) computes as it reads
    the cache: the step counts the slower of the cache read and attention's FLOPs. Without
    flash attention its products and softmax are kernels of their own, and add; a
    prompt's micro-batch adds them too."""
    from planner.performance.roofline import Rates, Work, step_terms

    work = Work(weight_bytes=0.0, matrix_flops=0.0, kv_bytes=1e9, attention_flops=3e12,
                layers=0, overlapped=False)
    rates = Rates(read_ms_per_byte=0.0, kv_ms_per_byte=1e-9, matrix_ms_per_flop=0.0,
                  attention_ms_per_flop=1e-12, layer_ms=0.0, streams_attention=1.0)
    assert float(step_terms(work, rates).total_ms) == pytest.approx(3.0)
    assert float(step_terms(replace(work, attention_flops=5e11), rates).total_ms) == (
        pytest.approx(1.0))
    apart = replace(rates, streams_attention=0.0)
    assert float(step_terms(work, apart).total_ms) == pytest.approx(4.0)
    batch = replace(work, overlapped=True)
    assert float(step_terms(batch, rates).total_ms) == pytest.approx(4.0)
