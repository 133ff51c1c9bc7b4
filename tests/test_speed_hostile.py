"""The speed estimate under hostile input: prompt sizes that would exhaust memory, prompts
longer than the context, and figures past their physical bounds are each answered within
the project's limits or refused by name, never with a Python warning, a traceback or a
silently absurd figure."""

from __future__ import annotations

import math
import warnings

import pytest
from test_cli import assert_user_error, run

from planner.errors import CodedError
from planner.models import GpuModel, ModelError, load_gpu_catalog, load_preset
from planner.performance import (
    ModelTraffic,
    PerformanceError,
    Prompt,
    RunSettings,
    estimate_plan,
    node_speeds,
    prefill_ms,
    stage_loads,
)
from planner.planning import as_planning_input
from planner.planning.plan import Plan
from planner.planning.rules import build_stages, layer_weights
from planner.sizing import SizingTargets, size_fleet
from planner.targets import TargetsError

GIB = 2**30


def _plan(layers: int, nodes: int, context: int) -> tuple[object, Plan]:
    request = as_planning_input({
        "native_context_length": 2**31, "layer_count": layers,
        "model_weight_bytes": 140 * GIB, "kv_bytes_per_token": 327680,
        "nodes": [{"node_id": f"h100-sxm-80gb-{i:02d}", "detected_vram_bytes": 80 * GIB}
                  for i in range(nodes)]})
    spans = [layers // nodes + (1 if i < layers % nodes else 0) for i in range(nodes)]
    plan = Plan(context, 1, build_stages(request.nodes, spans, layer_weights(request)),
                None, None)
    return request, plan


def test_a_prompt_of_two_billion_tokens_is_estimated_in_bounded_work() -> None:
    """2**31 tokens on 80 stages: a million batches, summed in closed form where their time
    grows linearly (it used to allocate an array per micro-batch and end in MemoryError
    after 40 s at 5 GB)."""
    request, plan = _plan(80, 80, 2**31)
    catalog = load_gpu_catalog()
    traffic = ModelTraffic.dense(140 * GIB, hidden_size=8192, parameter_count=70 * 10**9)
    estimate = estimate_plan(request, plan, traffic, node_speeds(request.nodes, catalog),
                             prompt_tokens=2**31, context_fill=False)
    assert estimate.ttft_ms is not None and math.isfinite(estimate.ttft_ms)
    # Quadratic attention: twice the prompt takes more than twice as long.
    half = estimate_plan(request, plan, traffic, node_speeds(request.nodes, catalog),
                         prompt_tokens=2**30, context_fill=False)
    assert half.ttft_ms is not None and estimate.ttft_ms > 2 * half.ttft_ms


def test_the_closed_form_sum_equals_the_batch_by_batch_sum() -> None:
    """A prompt of 300 batches on three uneven stages, with a sliding window: the sum with
    bounded work equals the sum over every batch."""
    spec = load_preset("gpt-oss-20b")
    request = as_planning_input({**spec.planning_fields(), "nodes": [
        {"node_id": f"n{i}", "detected_vram_bytes": 80 * GIB} for i in range(3)]})
    plan = Plan(2**20, 1, build_stages(request.nodes, [5, 9, 10], layer_weights(request)),
                None, None)
    traffic = ModelTraffic.from_spec(spec)
    loads = stage_loads(request, plan, traffic)
    from planner.performance import calibrated_device, load_calibration
    from planner.performance.device import NodeSpeed
    gpu = next(g for g in load_gpu_catalog() if g.kind == "rtx-4090")
    device = calibrated_device(load_calibration(), NodeSpeed.of_kind("n", gpu),
                               RunSettings(), traffic.quantized, [])
    prompt = Prompt(300 * 2048 - 100, 4000, 2048, 512)
    args = (loads, [device.rates] * 3, [0.3, 0.5], [0.001, 0.002], traffic)
    bounded = prefill_ms(*args, prompt)
    import planner.performance.roofline as roofline
    every = roofline.batch_sum(prompt, _batches(args, prompt), exact=10**9)
    assert bounded == pytest.approx(every, rel=1e-9)


def _batches(args: tuple, prompt: Prompt):  # type: ignore[no-untyped-def]
    """The batch timer prefill_ms builds, taken out through a sum that records it."""
    import planner.performance.roofline as roofline
    captured = {}
    original = roofline.batch_sum

    def capture(prompt: Prompt, batch_ms, breaks=(), exact=64):  # type: ignore[no-untyped-def]
        captured["batch_ms"] = batch_ms
        return 0.0

    roofline.batch_sum = capture
    try:
        roofline.prefill_ms(*args, prompt)
    finally:
        roofline.batch_sum = original
    return captured["batch_ms"]


def test_a_prompt_longer_than_the_context_is_refused_by_name() -> None:
    request, plan = _plan(8, 2, 4096)
    traffic = ModelTraffic.dense(140 * GIB, hidden_size=8192, parameter_count=70 * 10**9)
    with pytest.raises(PerformanceError) as caught:
        estimate_plan(request, plan, traffic, node_speeds(request.nodes, load_gpu_catalog()),
                      prompt_tokens=2_000_000)
    assert caught.value.code == "PromptExceedsContext"
    with pytest.raises(PerformanceError) as caught:
        estimate_plan(request, plan, traffic, node_speeds(request.nodes, load_gpu_catalog()),
                      prompt_tokens=4000, settings=RunSettings(depth=100))
    assert caught.value.code == "PromptExceedsContext"


@pytest.mark.parametrize(("args", "named"), [
    (("--prompt-tokens", "2000000"), "--prompt-tokens"),
    (("--context", "4096", "--prompt-tokens", "4000", "--depth", "200"), "--prompt-tokens"),
    (("--depth", "4096"), "--depth"),
    (("--context", "1M"), "native context"),
    (("--ubatch", "0"), "--ubatch"),
    (("--build", "0"), "--build"),
    (("--file-size", "0"), "--file-size"),
])
def test_the_speed_command_refuses_what_does_not_fit_by_name(args: tuple[str, ...],
                                                              named: str) -> None:
    assert_user_error(run("speed", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", *args), 2,
                      named)


def test_sizing_refuses_a_prompt_longer_than_the_native_context() -> None:
    with pytest.raises(TargetsError) as caught:
        size_fleet(load_preset("llama-3.1-70b"), load_gpu_catalog(),
                   SizingTargets(target_ttft_ms=10**6, prompt_tokens=200_000))
    assert caught.value.code == "PromptExceedsNativeContext"
    assert "200,000" in caught.value.message and "131,072" in caught.value.message


def test_sizing_plans_a_ttft_target_at_a_context_that_holds_the_prompt() -> None:
    """A 100,000-token prompt: every fleet sized for it plans at least that context (it
    used to answer with fleets planned at 65,536, which cannot hold the prompt)."""
    found = size_fleet(load_preset("llama-3.1-70b"), load_gpu_catalog(),
                       SizingTargets(target_ttft_ms=10**6, prompt_tokens=100_000), top=3,
                       pareto=False)
    assert found.fleets
    assert all(fleet.plan.context_length >= 100_000 for fleet in found.fleets)


@pytest.mark.parametrize(("field", "value"), [
    ("fp16_tflops", 1e-300), ("fp16_tflops", 1e-12), ("memory_bandwidth_bytes_per_s", 1),
    ("memory_bandwidth_bytes_per_s", 10**8), ("fp16_tflops", float("nan")),
])
def test_figures_past_their_physical_bounds_are_refused_by_name(field: str,
                                                                value: float) -> None:
    figures = {"memory_bandwidth_bytes_per_s": 10**12, field: value}
    with pytest.raises(ModelError) as caught:
        GpuModel("Card", 24 * GIB, backend="cuda", **figures)
    assert caught.value.code == "InvalidGpuCatalog"
    assert field in caught.value.message


@pytest.mark.parametrize("threads", [0, -1, 513, 2**64, True, "8", 4.0])
def test_threads_outside_ggmls_are_refused_by_name(threads: object) -> None:
    with pytest.raises(PerformanceError) as caught:
        RunSettings(threads=threads)  # type: ignore[arg-type]
    assert caught.value.code == "InvalidPerformanceInput"
    assert caught.value.details["field"] == "threads"
    assert RunSettings(threads=512).threads == 512 and RunSettings().threads is None


@pytest.mark.parametrize(("field", "value"), [
    ("hidden_size", 2**53), ("attention_width", 2**40), ("expert_count", 10**9),
    ("attention_heads", 10**9), ("parameter_count", 10**6),
])
def test_model_figures_past_their_bounds_are_refused_by_name(field: str, value: int) -> None:
    numbers = {"hidden_size": 8192, "parameter_count": 70 * 10**9, field: value}
    if field == "expert_count":
        numbers["experts_used"] = 2
    with pytest.raises(PerformanceError) as caught:
        ModelTraffic(140 * GIB, 140 * GIB, numbers.pop("hidden_size"), **numbers)
    assert caught.value.code == "InvalidPerformanceInput"
    assert caught.value.details["field"] == field


def test_extreme_allowed_figures_give_finite_estimates_without_warnings() -> None:
    """The slowest device, the largest model and the longest prompt the bounds allow:
    a finite estimate, and no RuntimeWarning (turned into an error here)."""
    gpu = GpuModel("Slow", 2**50, memory_bandwidth_bytes_per_s=10**9, fp16_tflops=0.001,
                   backend="cuda", memory_type="gddr")
    request = as_planning_input({
        "native_context_length": 2**31, "layer_count": 4096,
        "model_weight_bytes": 2**53, "kv_bytes_per_token": 2**40,
        "nodes": [{"node_id": "slow-00", "detected_vram_bytes": 2**50}]})
    plan = Plan(2**31, 1, build_stages(request.nodes, [4096], layer_weights(request)),
                None, None)
    traffic = ModelTraffic(2**53, 2**53, 2**20, active_parameter_count=2**56,
                           parameter_count=2**56, attention_width=2**22,
                           attention_heads=2**16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        estimate = estimate_plan(request, plan, traffic, node_speeds(request.nodes, [gpu]),
                                 prompt_tokens=2**31, context_fill=False,
                                 settings=RunSettings(flash_attn=False, ubatch=1))
    assert math.isfinite(estimate.estimated_tpot_ms) and estimate.ttft_ms is not None
    assert math.isfinite(estimate.ttft_ms)


def test_a_denormal_figure_never_reaches_sizing() -> None:
    """A catalog kind stating a denormal FP16 figure is refused where it is read, naming
    the field (the sizing refusal used to say the kind "has no fp16_tflops")."""
    with pytest.raises(CodedError) as caught:
        GpuModel("Card", 24 * GIB, memory_bandwidth_bytes_per_s=10**12, fp16_tflops=5e-324,
                 price_per_hour=1.0)
    assert "fp16_tflops" in caught.value.message


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_BANDWIDTHS = st.sampled_from([10**9, 10**9 + 1, 10**12, 2**53])
_TFLOPS = st.sampled_from([0.001, 0.0011, 1.0, 1e6])


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(bandwidth=_BANDWIDTHS, tflops=_TFLOPS,
       hidden=st.sampled_from([1, 2**20]), width=st.sampled_from([1, 2**22]),
       prompt=st.sampled_from([1, 2**16, 2**31]), context=st.sampled_from([1, 2**16, 2**31]),
       ubatch=st.sampled_from([1, 512, 2**20]), flash=st.booleans())
def test_speed_fields_at_their_bounds_give_a_finite_estimate_or_a_named_refusal(
        bandwidth: int, tflops: float, hidden: int, width: int, prompt: int, context: int,
        ubatch: int, flash: bool) -> None:
    """Every speed figure at either end of its bound, and prompts beside and past the
    context: a finite estimate, or a CodedError naming the problem; never a warning."""
    gpu = GpuModel("Edge", 2**50, memory_bandwidth_bytes_per_s=bandwidth, fp16_tflops=tflops,
                   backend="cuda", memory_type="gddr")
    request = as_planning_input({
        "native_context_length": 2**31, "layer_count": 2, "model_weight_bytes": 2**40,
        "kv_bytes_per_token": 2**20,
        "nodes": [{"node_id": "edge-00", "detected_vram_bytes": 2**50}]})
    plan = Plan(context, 1, build_stages(request.nodes, [2], layer_weights(request)),
                None, None)
    traffic = ModelTraffic(2**40, 2**40, hidden, active_parameter_count=2**38,
                           parameter_count=2**38, attention_width=width, attention_heads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            estimate = estimate_plan(request, plan, traffic, node_speeds(request.nodes, [gpu]),
                                     prompt_tokens=prompt, context_fill=False,
                                     settings=RunSettings(flash_attn=flash, ubatch=ubatch,
                                                          batch=max(2048, ubatch)))
        except PerformanceError as error:
            assert error.code == "PromptExceedsContext" and prompt > context
            return
    assert prompt <= context
    assert math.isfinite(estimate.estimated_tpot_ms) and estimate.ttft_ms is not None
    assert math.isfinite(estimate.ttft_ms) and estimate.ttft_ms > 0
