"""Speed floors: the fastest any plan could decode a token or fill a prompt on a GPU kind,
so that sizing leaves out fleets that cannot meet a TPOT or TTFT target without planning
them, and answers at once where no fleet can.

Both floors bound :mod:`planner.performance`'s estimate from below, whatever the split:

- **Decode.** A plan's estimated TPOT is at least its stages' reads and their compute:
  each stage reads its weights at ``e_w x BW`` and multiplies them at ``e_c x
  fp16_tflops`` (times the quantized kernels' share; a mixture of experts' routed
  experts not, as two or more lanes multiply them while they stream in, and such plans
  pay the batched expert kernel's time per layer), reads its KV cache at ``e_kv x BW``
  and computes attention over it at ``e_att x fp16_tflops`` (moving its scores where
  the calibration says so); the fixed per-layer times and the hops are not negative.
  Over all stages the reads cover the model once: its weights beside the token
  embeddings at the read share of the plan's lanes (more lanes read more experts; a
  plan meeting the targets runs at least :func:`least_lanes`) and the KV cache of the
  plan's context, whose attention pairs number at least ``(context - lanes + 1)`` per
  layer and unit of width. So ``TPOT >=`` the weights at the least per-byte time of
  the plan's kinds plus the cache at theirs, plus every layer at the least fixed time:
  a fleet meets a TPOT target only with a node fast enough to read the weights, and one
  to read the cache, within it given the other's best (:class:`DecodeFloor`).
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
    FALLBACK_BACKEND,
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
    token embeddings at the read share of ``lanes`` lanes, ``weight_bytes``; the KV
    cache, ``kv_bytes_per_token`` a cached token), the least ms each kind takes per
    weight byte read (its compute included) and per cache byte (``inf`` without a
    bandwidth), the least ms per attention pair and ``pairs_per_token`` (attention width
    times layers), and the least fixed per-layer time."""

    weight_bytes: float
    kv_bytes_per_token: int
    weight_ms_per_byte: tuple[float, ...]
    kv_read_ms_per_byte: tuple[float, ...]
    fixed_ms: float
    attention_ms_per_pair: tuple[float, ...] = ()
    pairs_per_token: int = 0
    lanes: int = 1

    def kv_ms_per_byte(self, context: int) -> tuple[float, ...]:
        """Each kind's least ms per cache byte of a plan at ``context`` or above: the
        read and the attention over it (``context - lanes + 1`` pairs per layer and unit
        of width at least, spread over the cache's bytes)."""
        if not self.attention_ms_per_pair or not self.kv_bytes_per_token:
            return self.kv_read_ms_per_byte
        pairs_per_byte = (self.pairs_per_token * max(0, context - self.lanes + 1)
                          / (self.kv_bytes_per_token * context))
        return tuple(read + pair * pairs_per_byte for read, pair
                     in zip(self.kv_read_ms_per_byte, self.attention_ms_per_pair,
                            strict=True))

    def least_ms(self, context: int, weight_kind: int | None = None,
                 kv_kind: int | None = None) -> float:
        """The least TPOT of a plan at ``context`` or above whose fastest weight reader is
        of kind ``weight_kind`` and fastest cache reader of ``kv_kind`` (by default the
        fastest kinds of all)."""
        kv_rates = self.kv_ms_per_byte(context)
        a = (min(self.weight_ms_per_byte) if weight_kind is None
             else self.weight_ms_per_byte[weight_kind])
        b = min(kv_rates) if kv_kind is None else kv_rates[kv_kind]
        return (self.weight_bytes * a + self.kv_bytes_per_token * context * b
                + self.fixed_ms) * _MARGIN


def least_lanes(probe: PlanningInput, minimum_lanes: int = 1) -> int:
    """The fewest lanes a plan of ``probe``'s model with at least ``minimum_lanes`` runs:
    where lanes change no layer's bytes, the planner always runs the most it tries."""
    lanes = lane_candidates(probe)
    if not probe.memory_rule.lanes_matter(probe):
        return lanes[0]
    return max(min(lanes), minimum_lanes)


def decode_floor(kinds: Sequence[GpuModel], traffic: ModelTraffic, probe: PlanningInput,
                 options: Mapping[str, Any], lanes: int = 1) -> DecodeFloor:
    """The :class:`DecodeFloor` of the model on ``kinds`` for plans of ``lanes`` lanes or
    more: a stage reads its weights at ``e_w x BW`` and its cache at ``e_kv x BW`` of its
    kind (one ``bandwidth_efficiency`` for both when given, and then no compute), and each
    layer takes the smallest calibrated ``layer_ms``."""
    body = max(1, sum(layer_weights(probe)) - (traffic.token_embedding_bytes or 0))
    read = body * traffic.read_share(lanes)
    efficiency = _efficiency_option(options)
    calibration = load_calibration()
    active = float(traffic.active_parameter_count or 0)
    if traffic.routed_bytes:
        # Two or more lanes multiply the routed experts while they stream in
        # (performance.stage_terms): only the other parameters' compute is sure to add
        # to the read, whatever the plan's lanes.
        active *= 1 - (traffic.routed_bytes * traffic.expert_share(1)
                       / (body * traffic.read_share(1)))
    width = (traffic.attention_width or traffic.hidden_size or 0) * probe.layer_count
    weight_rates, kv_rates, pair_rates = [], [], []
    for gpu in kinds:
        bandwidth = gpu.memory_bandwidth_bytes_per_s
        if not bandwidth:
            weight_rates.append(math.inf)
            kv_rates.append(math.inf)
            pair_rates.append(0.0)
            continue
        if efficiency is not None:
            weight_rates.append(1000 / (efficiency * bandwidth))
            kv_rates.append(1000 / (efficiency * bandwidth))
            pair_rates.append(0.0)
            continue
        device = calibrated_device(calibration, float(bandwidth), gpu.memory_type,
                                   gpu.backend, gpu.fp16_tflops, [])
        # A decode step multiplies every held weight once per lane at the full rate.
        rate = (float(device.matrix_rate(math.inf, traffic.quantized))
                if device.compute_flops_per_s is not None else 0.0)
        compute = 2 * active * lanes * 1000 / (rate * read) if rate and active else 0.0
        weight_rates.append(1000 / (device.weight_efficiency * bandwidth) + compute)
        kv_rates.append(1000 / (device.kv_efficiency * bandwidth))
        attention = device.attention_flops_per_s or device.compute_flops_per_s
        pair_rates.append((4 * 1000 / attention if attention else 0.0)
                          + device.attention_score_bytes * 1000
                          / (device.kv_efficiency * bandwidth))
    # Plans of two or more lanes of a mixture of experts also pay the batched expert
    # kernel's time per layer.
    batched = lanes > 1 and bool(traffic.routed_bytes)
    fixed = 0.0 if efficiency is not None or not kinds else probe.layer_count * min(
        calibration.fixed_ms(calibration.layer_ms, gpu.backend, [], "")
        + (calibration.expert_batch_ms.get(gpu.backend or FALLBACK_BACKEND, 0.0)
           if batched else 0.0) for gpu in kinds)
    return DecodeFloor(read, probe.kv_bytes_per_token, tuple(weight_rates),
                       tuple(kv_rates), fixed, tuple(pair_rates), width, lanes)


def least_hop_ms(kinds: Sequence[GpuModel], options: Mapping[str, Any]) -> float:
    """The least time a hop between two stages on ``kinds`` takes (its calibrated fixed
    time; none for the plain bandwidth-bound estimate): a plan of ``k`` stages pays
    ``k - 1`` of them."""
    if _efficiency_option(options) is not None or not kinds:
        return 0.0
    calibration = load_calibration()
    return min(calibration.fixed_ms(calibration.hop_ms, gpu.backend, [], "")
               for gpu in kinds) * _MARGIN


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

