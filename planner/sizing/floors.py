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
- **Prefill.** Every ubatch of a prompt passes through every layer: each stage reads its
  weights (the shared ones whole, the routed experts the ubatch's tokens reach) at
  ``e_w x BW`` while it computes at ``e_c x fp16_tflops`` (times the quantized kernels'
  share; attention at ``e_att x fp16_tflops``), the slower of the two counting, and pays
  its fixed per-layer time. The sum of the larger of two terms over the stages is at
  least the larger of their sums, and a batch finishes no sooner than any of its
  ubatches has passed every stage; batches follow one another. So ``TTFT >=`` the sum
  over the prompt's batches of the largest, over their ubatches, of the whole model's
  read at the plan's fastest-reading kind and its FLOPs at the fastest-computing kind,
  plus every layer at the least fixed time (:class:`PrefillFloor`). A fleet meets a TTFT
  target only with a node fast enough to read, and one to compute, within it given the
  fastest kind's other rate. The ubatches of a batch also wait on one another: the
  others pass the busiest stage after the first, and each crosses the hops
  (:meth:`PrefillFloor.pipeline_least_ms`), which refuses a target no split reaches. A
  kind without ``fp16_tflops`` has no prefill estimate, and a plan on it never meets a
  TTFT target.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.models.gpus import GpuModel
from planner.performance import (
    ACTIVATION_BYTES_PER_VALUE,
    DEFAULT_LINK_BANDWIDTH_BYTES_PER_S,
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
                            contexts: Sequence[int], weight_share: float | None = None
                            ) -> tuple[float, float]:
    """The most weight and cache bytes a decode step reads per byte a stage holds, over
    every layer, the given contexts and lane counts: a stage on a node of ``u`` usable
    bytes reads at most these times ``u``. ``weight_share``: the share of the weights
    read (by default the most any lane count of a decode step reads)."""
    weights = layer_weights(probe)
    share = (traffic.read_share(max(lane_candidates(probe))) if weight_share is None
             else weight_share)
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


# The terms of a prefill ubatch's time the floor counts, each at its own per-kind rate.
PREFILL_TERMS = ("read", "matrix", "staging", "activation", "attention")


@dataclass(frozen=True, slots=True)
class PrefillFloor:
    """What each ubatch of a prompt costs over all stages, per batch and ubatch: the
    amount of each of :data:`PREFILL_TERMS` (``amounts[b][j]``: weight bytes read, matrix
    FLOPs, parameters staged as FP16, activation units moved, attention pairs), each
    kind's least ms per unit of each (``rates[term][kind]``; ``inf`` on a kind with no
    prefill estimate), and the least fixed per-layer time of a ubatch over the model.

    A stage's ubatch takes the larger of its read and its matrix products (they overlap)
    plus the rest; summed over the stages, each term at the plan's fastest kind for it."""

    amounts: tuple[tuple[tuple[float, ...], ...], ...]
    rates: tuple[tuple[float, ...], ...]
    fixed_ms: float
    # Each batch's ubatch sizes in tokens, each kind's least fixed time of a hop between
    # stages, and the time a hop takes per token it carries (the activations over the
    # link): what passing the ubatches from stage to stage costs.
    ubatch_tokens: tuple[tuple[int, ...], ...] = ()
    hop_ms: tuple[float, ...] = ()
    hop_ms_per_token: float = 0.0

    @property
    def read_ms_per_byte(self) -> tuple[float, ...]:
        return self.rates[0]

    def read_bytes(self) -> float:
        """The weight bytes the prompt's batches read at least: each batch's largest
        ubatch's."""
        return sum(max(ubatch[0] for ubatch in batch) for batch in self.amounts)

    def held_byte_rates(self, body: float) -> tuple[tuple[float, ...], float]:
        """Each kind's least ms per body byte a stage on it holds, and the least ms of
        the rest of the prompt whatever the stages hold.

        :func:`planner.performance.stage_loads` gives a stage the read, matrix, staging
        and activation terms in proportion to the body bytes it holds, and attention in
        proportion to its layers. Per batch, one ubatch (the costliest at the fastest
        rates) passes every stage; its stage on kind ``i`` holding ``h`` body bytes
        takes ``h / body`` of ``max(w r_i, m c_i) + p s_i + a v_i`` or more, while its
        attention (at the fastest kind's rate) and every layer's fixed time add up to
        the rest. So a plan's TTFT is at least ``sum_s h_s x rate[kind(s)] + rest``."""
        if not self.rates or not self.rates[0]:
            return (), 0.0
        fastest = [min(column) for column in self.rates]
        rates = [0.0] * len(self.rates[0])
        rest = 0.0
        for batch in self.amounts:
            w, m, p, a, q = max(batch, key=lambda ubatch: max(
                ubatch[0] * fastest[0], ubatch[1] * fastest[1]) + sum(
                    amount * rate for amount, rate in zip(ubatch[2:], fastest[2:],
                                                          strict=True)))
            for i in range(len(rates)):
                rates[i] += (max(w * self.rates[0][i], m * self.rates[1][i])
                             + p * self.rates[2][i] + a * self.rates[3][i])
            rest += q * fastest[4] + self.fixed_ms
        return tuple(rate / body * _MARGIN for rate in rates), rest * _MARGIN

    def _least_of(self, ubatch: Sequence[float], rate: Sequence[float]) -> float:
        read, matrix, staging, activation, attention = rate
        w, m, p, a, q = ubatch
        return max(w * read, m * matrix) + p * staging + a * activation + q * attention

    def pipeline_least_ms(self, body: float, most_stages: int) -> float:
        """The least TTFT of a plan of at most ``most_stages`` stages on these kinds,
        counting what passing the ubatches from stage to stage costs
        (:meth:`pipeline_least_ms_by_stages`)."""
        return self.pipeline_least_ms_by_stages(body, most_stages)[-1]

    def pipeline_least_ms_by_stages(self, body: float, most_stages: int) -> list[float]:
        """For ``k`` from 1 to ``most_stages``: the least TTFT of a plan of at most ``k``
        stages on these kinds, counting what passing the ubatches from stage to stage
        costs.

        :func:`planner.performance.prefill_ms` starts a ubatch on a stage once the stage
        has finished the one before and the ubatch has crossed the hop to it, so a batch
        of ``m`` ubatches on ``S`` stages ends no sooner than the first ubatch's way down
        to any stage ``k``, ``k``'s work on all ``m``, and the last one's way on from
        ``k``: one ubatch through every stage, ``m - 1`` more on the busiest stage, and
        ``S - 1`` hops. A stage holding ``h`` body bytes takes ``h x rho`` or more per
        ubatch (:meth:`held_byte_rates`, at the batch's smallest ubatch and the fastest
        kind), and the stages hold the whole body, so the busiest takes ``body x rho /
        S`` or more: more stages shorten it, each at the price of a hop. The least over
        every stage count."""
        rate = [min(column, default=math.inf) for column in self.rates]
        if not self.ubatch_tokens or any(math.isinf(r) for r in rate):
            return [math.inf] * max(1, most_stages)
        hop = min(self.hop_ms, default=0.0)
        batches: list[tuple[float, float, float, float]] = []
        for batch, tokens in zip(self.amounts, self.ubatch_tokens, strict=True):
            smallest = tuple(min(column) for column in zip(*batch, strict=True))
            w, m, p, a, _ = smallest
            busiest = min(max(w * self.rates[0][i], m * self.rates[1][i])
                          + p * self.rates[2][i] + a * self.rates[3][i]
                          for i in range(len(self.rates[0])))
            batches.append((max(self._least_of(ubatch, rate) for ubatch in batch),
                            self._least_of(smallest, rate), (len(batch) - 1) * busiest,
                            hop + min(tokens) * self.hop_ms_per_token))
        least: list[float] = []
        for stages in range(1, max(1, most_stages) + 1):
            ms = sum(max(whole, smallest + more / stages) + self.fixed_ms
                     + (stages - 1) * hop_ms for whole, smallest, more, hop_ms in batches)
            least.append(min(ms * _MARGIN, least[-1]) if least else ms * _MARGIN)
        return least

    def least_ms(self, **kinds: int) -> float:
        """The least TTFT of a plan whose fastest kind for each term named (``read=i``,
        ``matrix=j``, ...) is that kind, and for every other term the fastest of all."""
        if not self.rates or not self.rates[0]:
            return math.inf
        rate = [self.rates[t][kinds[name]] if name in kinds else min(self.rates[t])
                for t, name in enumerate(PREFILL_TERMS)]
        if any(math.isinf(r) for r in rate):
            return math.inf
        read, matrix, staging, activation, attention = rate
        return sum(max(max(w * read, m * matrix) + p * staging + a * activation
                       + q * attention for w, m, p, a, q in batch) + self.fixed_ms
                   for batch in self.amounts) * _MARGIN


def prefill_floor(kinds: Sequence[GpuModel], traffic: ModelTraffic, probe: PlanningInput,
                  prompt_tokens: int, options: Mapping[str, Any] | None = None
                  ) -> PrefillFloor:
    """The :class:`PrefillFloor` of a ``prompt_tokens`` prompt of the model on ``kinds``
    (calibrated rates: a plain bandwidth-bound estimate makes no prefill estimate).

    As :func:`planner.performance.stage_terms` costs a ubatch of ``t`` tokens at depth
    ``d``: the shared weights whole and the routed experts its tokens reach; ``2 x
    active x t`` FLOPs of matrix products at the full rate (the routed experts' small
    products are slower); the parameters of every weight read staged as FP16 when the
    model is quantized; ``t x active / hidden_size`` activation units; ``width x (t d +
    t^2/2)`` attention pairs over the layers."""
    calibration = load_calibration()
    body = max(1, sum(layer_weights(probe)) - (traffic.token_embedding_bytes or 0))
    width = (traffic.attention_width or traffic.hidden_size or 0) * probe.layer_count
    active = float(traffic.active_parameter_count or 0)
    routed_active = 0.0
    if traffic.routed_bytes:
        routed_active = active * traffic.routed_bytes * traffic.expert_share(1) / (
            body * traffic.read_share(1))
    every_expert = (traffic.expert_count or 1) / (traffic.experts_used or 1)

    def ubatch(tokens: int, depth: int) -> tuple[float, ...]:
        share = traffic.expert_share(tokens)
        staged = (active - routed_active + routed_active * every_expert * share
                  if traffic.quantized else 0.0)
        moved = tokens * active / traffic.hidden_size if traffic.hidden_size else 0.0
        return (body * traffic.read_share(tokens), 2 * active * tokens, staged, moved,
                width * (tokens * depth + tokens * tokens / 2))

    amounts = tuple(tuple(ubatch(tokens, depth) for tokens, depth in batch)
                    for batch in ubatches(prompt_tokens))
    rates: list[list[float]] = [[] for _ in PREFILL_TERMS]
    for gpu in kinds:
        bandwidth = gpu.memory_bandwidth_bytes_per_s
        if gpu.fp16_tflops is None or traffic.active_parameter_count is None or not bandwidth:
            for column in rates:
                column.append(math.inf)
            continue
        device = calibrated_device(calibration, float(bandwidth), gpu.memory_type,
                                   gpu.backend, gpu.fp16_tflops, [])
        read = 1000 / (device.weight_efficiency * bandwidth)
        matrix = float(device.matrix_rate(math.inf, traffic.quantized))
        attention = device.attention_flops_per_s or device.compute_flops_per_s
        rates[0].append(read)
        rates[1].append(1000 / matrix if matrix else math.inf)
        rates[2].append(device.staging_bytes_per_parameter * read)
        rates[3].append(device.activation_bytes * read)
        rates[4].append((4 * 1000 / attention if attention else math.inf)
                        + device.attention_score_bytes * 1000
                        / (device.kv_efficiency * bandwidth))
    fixed = 0.0 if not kinds else probe.layer_count * min(
        calibration.fixed_ms(calibration.layer_ms, gpu.backend, [], "") for gpu in kinds)
    # A hop after a stage on a kind: its calibrated fixed time and the kind's own
    # stage-transfer latency, then the ubatch's activations over the link.
    hops = tuple(calibration.fixed_ms(calibration.hop_ms, gpu.backend, [], "")
                 + (gpu.stage_transfer_latency_ms or 0) for gpu in kinds)
    link = (options or {}).get("link_bandwidth_bytes_per_s") or DEFAULT_LINK_BANDWIDTH_BYTES_PER_S
    per_token = (traffic.hidden_size or 0) * ACTIVATION_BYTES_PER_VALUE / float(link) * 1000
    tokens = tuple(tuple(size for size, _ in batch) for batch in ubatches(prompt_tokens))
    return PrefillFloor(amounts, tuple(tuple(column) for column in rates), fixed, tokens,
                        hops, per_token)


def prefill_floor_ms(gpu: GpuModel, traffic: ModelTraffic, probe: PlanningInput,
                     prompt_tokens: int) -> float:
    """The least TTFT of a ``prompt_tokens`` prompt on a plan of nodes of kind ``gpu``
    alone (``inf`` without ``fp16_tflops``: no prefill estimate)."""
    return prefill_floor([gpu], traffic, probe, prompt_tokens).least_ms()
