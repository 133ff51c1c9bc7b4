"""Speed floors: the fastest any plan could decode a token or fill a prompt on a GPU kind,
so that sizing leaves out fleets that cannot meet a TPOT or TTFT target without planning
them, and answers at once where no fleet can.

Both floors bound :mod:`planner.performance`'s estimate from below, whatever the split:

- **Decode.** A plan's estimated TPOT is at least its stages' reads: each stage reads its
  weights at ``e_w x BW`` and its KV cache at ``e_kv x BW`` of its GPU, and the other
  terms (compute, the fixed per-layer times, the hops) are not negative. Over all stages
  the reads cover the model once: its weights beside the token embeddings at one token's
  read share (more lanes read more) and the KV cache of the plan's context. So
  ``TPOT >= weights x min(1 / (e_w x BW)) + cache x min(1 / (e_kv x BW))``, each minimum
  over the plan's kinds, plus every layer at the least fixed time: a fleet meets a TPOT
  target only with a node fast enough to read the weights, and one to read the cache,
  within it given the other's best (:class:`DecodeFloor`).
- **Prefill.** Every ubatch of a prompt passes through every layer, at each stage's
  compute rate (``e_c x fp16_tflops``, times the quantized kernels' share; attention at
  ``e_att x fp16_tflops``); a batch finishes no sooner than its largest ubatch has
  passed, and batches follow one another. So ``TTFT >=`` the sum over the prompt's
  batches of their largest ubatch's FLOPs at the fastest rate of the plan's kinds
  (:func:`prefill_floor_ms`); a kind without ``fp16_tflops`` has no prefill estimate,
  and a plan on it never meets a TTFT target.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.models.gpus import GpuModel
from planner.performance import (
    ModelTraffic,
    calibrated_device,
    load_calibration,
    ubatches,
)
from planner.planning.inputs import PlanningInput
from planner.planning.rules import (
    kv_bytes_per_layer_token,
    lane_candidates,
    layer_bytes,
    layer_weights,
)

# The estimate splits the token embeddings off each stage in whole bytes: a relative
# margin far above that rounding keeps the floors below every estimate.
_MARGIN = 1 - 1e-9


def _efficiency_option(options: Mapping[str, Any]) -> float | None:
    value = options.get("bandwidth_efficiency")
    return None if value is None else float(value)


@dataclass(frozen=True, slots=True)
class DecodeFloor:
    """What every decode step of the model reads over all stages (the weights beside the
    token embeddings at one token's read share, ``weight_bytes``; the KV cache,
    ``kv_bytes_per_token`` a cached token), the least ms each kind takes per weight and
    per cache byte (``inf`` without a bandwidth), and the least fixed per-layer time."""

    weight_bytes: float
    kv_bytes_per_token: int
    weight_ms_per_byte: tuple[float, ...]
    kv_ms_per_byte: tuple[float, ...]
    fixed_ms: float

    def least_ms(self, context: int, weight_kind: int | None = None,
                 kv_kind: int | None = None) -> float:
        """The least TPOT of a plan at ``context`` or above whose fastest weight reader is
        of kind ``weight_kind`` and fastest cache reader of ``kv_kind`` (by default the
        fastest kinds of all)."""
        a = (min(self.weight_ms_per_byte) if weight_kind is None
             else self.weight_ms_per_byte[weight_kind])
        b = min(self.kv_ms_per_byte) if kv_kind is None else self.kv_ms_per_byte[kv_kind]
        return (self.weight_bytes * a + self.kv_bytes_per_token * context * b
                + self.fixed_ms) * _MARGIN


def decode_floor(kinds: Sequence[GpuModel], traffic: ModelTraffic, probe: PlanningInput,
                 options: Mapping[str, Any]) -> DecodeFloor:
    """The :class:`DecodeFloor` of the model on ``kinds``: a stage reads its weights at
    ``e_w x BW`` and its cache at ``e_kv x BW`` of its kind (one ``bandwidth_efficiency``
    for both when given), and each layer takes the smallest calibrated ``layer_ms``."""
    body = max(1, sum(layer_weights(probe)) - (traffic.token_embedding_bytes or 0))
    efficiency = _efficiency_option(options)
    calibration = load_calibration()
    weight_rates, kv_rates = [], []
    for gpu in kinds:
        bandwidth = gpu.memory_bandwidth_bytes_per_s
        if not bandwidth:
            weight_rates.append(math.inf)
            kv_rates.append(math.inf)
            continue
        if efficiency is None:
            e_w, e_kv, _, _ = calibration.efficiencies(gpu.memory_type, gpu.backend, [])
        else:
            e_w = e_kv = efficiency
        weight_rates.append(1000 / (e_w * bandwidth))
        kv_rates.append(1000 / (e_kv * bandwidth))
    fixed = 0.0 if efficiency is not None or not kinds else probe.layer_count * min(
        calibration.fixed_ms(calibration.layer_ms, gpu.backend, [], "") for gpu in kinds)
    return DecodeFloor(body * traffic.read_share(1), probe.kv_bytes_per_token,
                       tuple(weight_rates), tuple(kv_rates), fixed)


def most_read_per_held_byte(traffic: ModelTraffic, probe: PlanningInput,
                            contexts: Sequence[int]) -> tuple[float, float]:
    """The most weight and cache bytes a decode step reads per byte a stage holds, over
    every layer, the given contexts and lane counts: a stage on a node of ``u`` usable
    bytes reads at most these times ``u``."""
    weights = layer_weights(probe)
    share = traffic.read_share(max(lane_candidates(probe)))
    kv_layer = kv_bytes_per_layer_token(probe)
    most_weight = most_kv = 0.0
    for context in contexts:
        held = layer_bytes(probe, context, min(lane_candidates(probe)))
        for weight, bytes_held in zip(weights, held, strict=True):
            if bytes_held:
                most_weight = max(most_weight, weight * share / bytes_held)
                most_kv = max(most_kv, kv_layer * context / bytes_held)
    return most_weight, most_kv


def prefill_unknown(traffic: ModelTraffic | None, options: Mapping[str, Any]) -> str:
    """Why no plan of this model gets a prefill estimate ("" when plans can)."""
    if traffic is None:
        return ("the model's decode and prefill traffic is unknown (the model is typed as "
                "numbers; give a preset or GGUF model)")
    if traffic.active_parameter_count is None:
        return "the model's parameter count is unknown"
    if _efficiency_option(options) is not None:
        return "a plain bandwidth-bound estimate (bandwidth_efficiency) makes none"
    return ""


def prefill_floor_ms(gpu: GpuModel, traffic: ModelTraffic, probe: PlanningInput,
                     prompt_tokens: int) -> float:
    """The least TTFT of a ``prompt_tokens`` prompt on a plan whose fastest-computing node
    is of kind ``gpu`` (``inf`` without ``fp16_tflops``: no prefill estimate)."""
    if gpu.fp16_tflops is None or traffic.active_parameter_count is None:
        return math.inf
    device = calibrated_device(load_calibration(), float(gpu.memory_bandwidth_bytes_per_s or 1),
                               gpu.memory_type, gpu.backend, gpu.fp16_tflops, [])
    # A plan's stages may mix kinds: the faster of the kind's two rates bounds both terms.
    rate = max(float(device.matrix_rate(math.inf, traffic.quantized)),
               device.attention_flops_per_s or 0.0)
    if not rate:
        return math.inf
    width = (traffic.attention_width or traffic.hidden_size or 0) * probe.layer_count
    flops = sum(max(2 * traffic.active_parameter_count * tokens
                    + 4 * width * (tokens * depth + tokens * tokens / 2)
                    for tokens, depth in batch)
                for batch in ubatches(prompt_tokens))
    return flops / rate * 1000 * _MARGIN

