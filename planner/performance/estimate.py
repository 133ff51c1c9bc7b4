"""The estimate of one plan (:func:`estimate_plan`): each stage's node and its calibrated
device, the decode step and the prefill of the roofline terms, the hops, and the cost."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner._validate import integer
from planner.limits import MAX_BANDWIDTH_BYTES_PER_S, MIN_LINK_BANDWIDTH_BYTES_PER_S
from planner.models.gpus import GpuModel, node_gpu_kinds
from planner.performance._errors import PerformanceError, bad, check_efficiency, positive
from planner.performance.calibration import SpeedCalibration, load_calibration
from planner.performance.device import (
    NodeSpeed,
    calibration_error_note,
    model_device,
    plain_device,
)
from planner.performance.roofline import Device, Prompt, decode_step, prefill_ms
from planner.performance.settings import DEFAULT_SETTINGS, RunSettings
from planner.performance.traffic import ModelTraffic, stage_loads
from planner.planning.inputs import NodeBudget, PlanningInput
from planner.planning.plan import Plan
from planner.units import format_milliseconds

DEFAULT_LINK_BANDWIDTH_BYTES_PER_S = 1_250_000_000  # 10 Gb/s
ACTIVATION_BYTES_PER_VALUE = 4  # F32 activations between llama.cpp devices
# GPUs of one machine pass activations over PCIe 4.0 x16: 16 GT/s x 16 lanes, about
# 31.5 GB/s each way (docs/sources.md §3).
INTRA_HOST_LINK_BYTES_PER_S = 31_500_000_000
ESTIMATE_NOTE = ("Estimated, not measured: decode and prefill speed and cost come from "
                 "vendor bandwidth and FLOPS at efficiencies fitted to published llama.cpp "
                 "measurements (validation/speed); the error measured on GPUs and sources "
                 "the fit did not see is stated with each estimate.")


@dataclass(frozen=True, slots=True)
class StageEstimate:
    stage_id: str
    node_id: str
    weight_read_bytes: int
    kv_read_bytes: int
    memory_bandwidth_bytes_per_s: int
    stage_read_ms: float  # reading weights and cache
    hop_ms: float  # to the next stage; 0 for the last
    compute_ms: float = 0.0
    fixed_ms: float = 0.0

    @property
    def stage_ms(self) -> float:
        return self.stage_read_ms + self.compute_ms + self.fixed_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage_id": self.stage_id, "node_id": self.node_id,
            "weight_read_bytes": self.weight_read_bytes,
            "kv_read_bytes": self.kv_read_bytes,
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s,
            "stage_read_ms": self.stage_read_ms, "compute_ms": self.compute_ms,
            "fixed_ms": self.fixed_ms, "stage_ms": self.stage_ms, "hop_ms": self.hop_ms,
        }


@dataclass(frozen=True, slots=True)
class PlanEstimate:
    """The estimate for one plan. ``cost_per_hour_usd`` and
    ``cost_per_million_tokens_usd`` are ``None`` when a node paid for has no price;
    ``estimated_context_fill_ms`` (prefill of the plan's whole context, one sequence) and
    ``ttft_ms`` (prefill of ``prompt_tokens``) are ``None`` when a stage's kind has no
    ``fp16_tflops`` or the model no parameter count (the notes say which)."""

    stages: tuple[StageEstimate, ...]
    estimated_tpot_ms: float
    tokens_per_s: float
    parallel_lanes: int
    cost_per_hour_usd: float | None
    cost_per_million_tokens_usd: float | None
    bandwidth_efficiency: float | None  # the one efficiency asked for, else calibrated
    link_bandwidth_bytes_per_s: int
    notes: tuple[str, ...] = field(default=())
    estimated_context_fill_ms: float | None = None
    context_length: int = 0
    prompt_tokens: int | None = None
    ttft_ms: float | None = None
    error_note: str = ""
    settings: RunSettings = DEFAULT_SETTINGS

    @property
    def prefill_tokens_per_s(self) -> float | None:
        """Prompt tokens per second while filling the whole context."""
        if self.estimated_context_fill_ms is None or not self.context_length:
            return None
        return self.context_length * 1000 / self.estimated_context_fill_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimated_tpot_ms": self.estimated_tpot_ms,
            "tokens_per_s": self.tokens_per_s,
            "parallel_lanes": self.parallel_lanes,
            "estimated_context_fill_ms": self.estimated_context_fill_ms,
            "prefill_tokens_per_s": self.prefill_tokens_per_s,
            "prompt_tokens": self.prompt_tokens,
            "ttft_ms": self.ttft_ms,
            "cost_per_hour_usd": self.cost_per_hour_usd,
            "cost_per_million_tokens_usd": self.cost_per_million_tokens_usd,
            "bandwidth_efficiency": self.bandwidth_efficiency,
            "link_bandwidth_bytes_per_s": self.link_bandwidth_bytes_per_s,
            "settings": self.settings.to_dict(),
            "stages": [stage.to_dict() for stage in self.stages],
            "notes": [ESTIMATE_NOTE, *([self.error_note] if self.error_note else []),
                      *self.notes],
        }

    def summary(self) -> str:
        """One line for people, marked as an estimate."""
        cost = ("" if self.cost_per_hour_usd is None else
                f", USD {self.cost_per_hour_usd:,.2f}/h, "
                f"USD {self.cost_per_million_tokens_usd:,.2f} per million tokens")
        fill = ("" if self.estimated_context_fill_ms is None else
                f", filling the {self.context_length:,}-token context takes "
                f"{format_milliseconds(self.estimated_context_fill_ms, estimated=True)}")
        how = (f"at {self.bandwidth_efficiency:.0%} of peak memory bandwidth"
               if self.bandwidth_efficiency is not None else
               "calibrated on published llama.cpp measurements")
        return (f"estimated TPOT "
                f"{format_milliseconds(self.estimated_tpot_ms, estimated=True)}, "
                f"{self.tokens_per_s:,.1f} tokens/s over {self.parallel_lanes} lanes{fill}"
                f"{cost} (estimate {how})")



def cost_per_million_tokens(cost_per_hour_usd: float, tokens_per_s: float) -> float:
    """``cost_per_hour / (tokens_per_s x 3600) x 10**6`` (docs/sources.md §3)."""
    return cost_per_hour_usd / (tokens_per_s * 3600) * 1_000_000


def node_speeds(nodes: Iterable[NodeBudget], catalog: Sequence[GpuModel],
                node_kinds: Mapping[str, str] | None = None) -> dict[str, NodeSpeed]:
    """Each node's bandwidth, memory type, backend, FP16 throughput and price from its
    catalog kind (:func:`planner.models.gpus.node_gpu_kind`; ``node_kinds`` are the kinds
    nodes name, as a fleet file's ``gpu`` gives them); nodes of unknown kind are left
    out."""
    return {node_id: NodeSpeed.of_kind(node_id, gpu)
            for node_id, gpu in node_gpu_kinds(nodes, catalog, node_kinds).items()
            if gpu is not None}



def _devices(plan: Plan, speeds: Mapping[str, NodeSpeed], calibration: SpeedCalibration | None,
             efficiency: float | None, settings: RunSettings, traffic: ModelTraffic,
             notes: list[str]) -> tuple[list[Device], list[NodeSpeed]]:
    devices, used = [], []
    for stage in plan.stages:
        speed = speeds.get(stage.node_id)
        if speed is None or speed.memory_bandwidth_bytes_per_s is None:
            raise PerformanceError(
                "MissingNodeSpeed",
                f"node {stage.node_id} has no memory bandwidth: give it a catalog kind "
                f"(gpu = \"<kind>\" or node id <kind>-00) whose entry has "
                f"memory_bandwidth_bytes_per_s", node_id=stage.node_id)
        used.append(speed)
        if efficiency is not None or calibration is None:
            devices.append(plain_device(speed.memory_bandwidth_bytes_per_s, efficiency or 1.0))
            continue
        devices.append(model_device(calibration, speed, settings, traffic, notes))
    return devices, used


def _latency_notes(plan: Plan, latency: Mapping[str, float | None], notes: list[str]) -> None:
    without = [stage.node_id for stage in plan.stages[:-1] if latency.get(stage.node_id) is None]
    if len(without) == 1:
        notes.append(f"{without[0]} has no stage-transfer latency: its hop counts "
                     "0 ms of latency")
    elif without:
        notes.append(f"{', '.join(without)} have no stage-transfer latency: their "
                     "hops count 0 ms of latency")


def check_prompt(prompt_tokens: int, settings: RunSettings, context_length: int) -> None:
    """``PromptExceedsContext`` when a prompt after the settings' cached tokens does not
    fit in ``context_length`` tokens (llama.cpp refuses it)."""
    if prompt_tokens + settings.depth > context_length:
        after = (f" after {settings.depth:,} cached tokens" if settings.depth else "")
        raise PerformanceError(
            "PromptExceedsContext",
            f"prompt_tokens: a {prompt_tokens:,}-token prompt{after} does not fit in a "
            f"context of {context_length:,} tokens", field="prompt_tokens",
            value=prompt_tokens, context_length=context_length)


def estimate_plan(
    request: PlanningInput,
    plan: Plan,
    traffic: ModelTraffic,
    speeds: Mapping[str, NodeSpeed],
    *,
    bandwidth_efficiency: float | None = None,
    calibration: SpeedCalibration | None = None,
    link_bandwidth_bytes_per_s: int = DEFAULT_LINK_BANDWIDTH_BYTES_PER_S,
    paid_node_ids: Iterable[str] | None = None,
    prompt_tokens: int | None = None,
    context_fill: bool = True,
    settings: RunSettings = DEFAULT_SETTINGS,
) -> PlanEstimate:
    """The estimate for ``plan`` of ``request`` (formulas in the package docstring).

    ``speeds`` gives each stage's node its bandwidth, memory type, backend, FP16
    throughput and price (:func:`node_speeds`); ``calibration`` the fitted figures
    (default: the shipped ones), unless ``bandwidth_efficiency`` asks for the plain
    bandwidth-bound estimate at one efficiency; ``paid_node_ids`` are the nodes the cost
    counts (default: the plan's stages); ``prompt_tokens`` a prompt whose time to first
    token to estimate (after ``settings.depth`` cached tokens); without ``context_fill``
    the time to fill the context (a prefill as long as the context, the costliest part)
    is left out (``None``); ``settings`` how llama.cpp runs (backend, flash attention,
    micro-batch, build). Raises :class:`PerformanceError` ``MissingNodeSpeed`` when a
    stage's node has no memory bandwidth, ``PromptExceedsContext`` when the prompt does
    not fit in the plan's context.
    """
    efficiency = (None if bandwidth_efficiency is None else
                  check_efficiency(bandwidth_efficiency))
    if efficiency is None and calibration is None:
        calibration = load_calibration()
    link_bandwidth_bytes_per_s = integer(link_bandwidth_bytes_per_s,
                                         bad("link_bandwidth_bytes_per_s"),
                                         minimum=MIN_LINK_BANDWIDTH_BYTES_PER_S,
                                         maximum=MAX_BANDWIDTH_BYTES_PER_S)
    if not isinstance(settings, RunSettings):
        raise PerformanceError("InvalidPerformanceInput", "settings: must be RunSettings",
                               field="settings", value=settings)
    if prompt_tokens is not None:
        prompt_tokens = positive(prompt_tokens, "prompt_tokens")
        check_prompt(prompt_tokens, settings, plan.context_length)
    notes: list[str] = []
    devices, used = _devices(plan, speeds, calibration, efficiency, settings, traffic,
                             notes)
    loads = stage_loads(request, plan, traffic)
    latency = {node.node_id: node.stage_transfer_latency_ms for node in request.nodes}
    if traffic.hidden_size is None and plan.stage_count > 1:
        notes.append("the model's hidden size is unknown: hops carry no activation bytes")
    _latency_notes(plan, latency, notes)
    hop_fixed = [(latency.get(stage.node_id) or 0) + device.hop_ms
                 for stage, device in zip(plan.stages[:-1], devices, strict=False)]
    per_token = ((traffic.hidden_size or 0) * ACTIVATION_BYTES_PER_VALUE
                 / link_bandwidth_bytes_per_s * 1000)
    hop_per_token = [per_token] * len(hop_fixed)
    lanes = plan.parallel_lanes
    terms, hops = decode_step(loads, [d.rates for d in devices],
                              [fixed + lanes * per_token for fixed in hop_fixed], traffic,
                              lanes=lanes, cached=plan.context_length)
    if efficiency is None and traffic.active_parameter_count is None:
        notes.append("the model's parameter count is unknown: no compute ceiling and no "
                     "prefill estimate")
    stages = []
    for index, (stage, load, term) in enumerate(zip(plan.stages, loads, terms, strict=True)):
        rates = devices[index].rates
        stages.append(StageEstimate(
            stage.stage_id, stage.node_id, round(float(term.read_ms) / rates.read_ms_per_byte),
            round(float(load.kv_bytes(plan.context_length // lanes, lanes))),
            used[index].memory_bandwidth_bytes_per_s or 0,
            float(term.read_ms + term.kv_ms),
            hops[index] if index < len(hops) else 0.0,
            float(term.total_ms - term.read_ms - term.kv_ms - term.fixed_ms),
            float(term.fixed_ms)))
    tpot = math.fsum(s.stage_ms + s.hop_ms for s in stages)
    tokens_per_s = lanes * 1000 / tpot
    fill = ttft = None
    if efficiency is None and traffic.active_parameter_count is not None:
        def prefill(tokens: int, depth: int) -> float:
            return prefill_ms(loads, [d.rates for d in devices], hop_fixed, hop_per_token,
                              traffic, Prompt(tokens, depth, settings.batch, settings.ubatch),
                              stage_weights=[d.stages_weights for d in devices])
        fill = prefill(plan.context_length, 0) if context_fill else None
        ttft = prefill(prompt_tokens, settings.depth) if prompt_tokens is not None else None
    paid = list(paid_node_ids) if paid_node_ids is not None else list(plan.node_ids)
    prices = [speeds[n].price_per_hour if n in speeds else None for n in paid]
    if any(price is None for price in prices):
        unpriced = [n for n, price in zip(paid, prices, strict=True) if price is None]
        notes.append(f"no price for {', '.join(unpriced)}: cost not estimated")
        cost = per_million = None
    else:
        cost = math.fsum(p for p in prices if p is not None)
        per_million = cost_per_million_tokens(cost, tokens_per_s)
    error_note = ("" if calibration is None or efficiency is not None else
                  calibration_error_note(calibration, used,
                                         [(d.backend, s.memory_type, d.figure)
                                          for d, s in zip(devices, used, strict=True)],
                                         traffic))
    return PlanEstimate(tuple(stages), tpot, tokens_per_s, lanes, cost, per_million,
                        efficiency, link_bandwidth_bytes_per_s, tuple(dict.fromkeys(notes)),
                        fill, plan.context_length, prompt_tokens, ttft, error_note, settings)


def fleet_estimate(request: PlanningInput, plan: Plan, traffic: ModelTraffic,
                   speeds: Mapping[str, NodeSpeed], **options: Any) -> PlanEstimate:
    """The fleet's one speed and cost estimate, wherever it is shown (the workbench,
    reports, sizing): the TPOT of ``plan`` and the cost per hour of every node of the
    fleet ``request`` holds, since a node the plan leaves out (a spare) is paid for too.
    ``options`` are :func:`estimate_plan`'s."""
    return estimate_plan(request, plan, traffic, speeds,
                         paid_node_ids=[node.node_id for node in request.nodes], **options)



def try_estimate(request: PlanningInput, plan: Plan, traffic: ModelTraffic | None,
                 catalog: Sequence[GpuModel], *, node_kinds: Mapping[str, str] | None = None,
                 **options: Any) -> tuple[PlanEstimate | None, str]:
    """The fleet's estimate (:func:`fleet_estimate`) when every stage's node is a catalog
    kind with a bandwidth, else ``None`` and why (for tables and summaries that show the
    estimate when they can)."""
    if traffic is None:
        return None, ("the model's decode traffic is unknown (give a preset or GGUF model, "
                      "or the model's hidden_size and, for a mixture of experts, "
                      "active_weight_bytes, expert_count and experts_used, for a speed "
                      "estimate)")
    try:
        return fleet_estimate(request, plan, traffic,
                              node_speeds(request.nodes, catalog, node_kinds), **options), ""
    except PerformanceError as error:
        return None, error.message

