"""Speed floors: the fastest any plan could decode a token or fill a prompt on a GPU kind,
so that sizing leaves out fleets that cannot meet a TPOT or TTFT target without planning
them, and answers at once where no fleet can.

Both floors come from the estimate's one formula (:mod:`planner.performance.roofline`):
the work of a step of the whole model as one stage (:func:`~planner.performance.step_work`),
each kind's rates (:func:`~planner.performance.model_device`) and the way the terms
add up (:func:`~planner.performance.step_terms`). A stage's weight read and its products
grow with the body bytes it holds, its cache read and attention with its layers, so a
plan's time is at least each term of the whole model at the fastest rate among the
plan's kinds:

- **Decode.** A plan's estimated TPOT is at least the model's weights beside the token
  embeddings (at the read share of the plan's lanes: more lanes read more experts; a
  plan meeting the targets runs at least :func:`least_lanes`) read and multiplied at the
  least per-byte time of the plan's kinds, plus the KV cache of the plan's context read
  and attended to at theirs (``context - lanes + 1`` query-key pairs or more per lane's
  token), plus every layer at the least fixed time; the hops are not negative. A fleet
  meets a TPOT target only with a node fast enough to read the weights, and one to read
  the cache, within it given the other's best (:class:`DecodeFloor`).
- **Prefill.** Every micro-batch of a prompt passes through every layer: the sum over the
  stages of the larger of a stage's read and its products is at least the larger of
  their sums, and a batch finishes no sooner than any of its micro-batches has passed
  every stage; batches follow one another, each at least as costly as the one before
  (attention grows with the cache), so a prompt of many batches is bounded by groups of
  batches each at its first (:class:`PrefillFloor`). A fleet meets a TTFT target only
  with a node fast enough to read, and one to compute, within it given the fastest
  kind's other rate. The micro-batches of a batch also wait on one another: the others
  pass the busiest stage after the first, and each crosses the hops
  (:meth:`PrefillFloor.pipeline_least_ms`), which refuses a target no split reaches.
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
    DEFAULT_SETTINGS,
    Device,
    ModelTraffic,
    NodeSpeed,
    Prompt,
    Rates,
    RunSettings,
    StageLoad,
    Work,
    load_calibration,
    model_device,
    plain_device,
    routed_full_rate_flops,
    stage_loads,
    step_terms,
    step_work,
)
from planner.planning.inputs import PlanningInput
from planner.planning.plan import Plan, Stage
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


def _settings(options: Mapping[str, Any]) -> RunSettings:
    settings = options.get("settings")
    return settings if isinstance(settings, RunSettings) else DEFAULT_SETTINGS


def _device(gpu: GpuModel, traffic: ModelTraffic, options: Mapping[str, Any]
            ) -> Device | None:
    """A kind's device as the estimate builds it (``None`` without a bandwidth)."""
    if not gpu.memory_bandwidth_bytes_per_s:
        return None
    efficiency = _efficiency_option(options)
    if efficiency is not None:
        return plain_device(gpu.memory_bandwidth_bytes_per_s, efficiency)
    return model_device(load_calibration(), NodeSpeed.of_kind(gpu.kind, gpu),
                        _settings(options), traffic, [])


def whole_model(probe: PlanningInput, traffic: ModelTraffic) -> StageLoad:
    """The whole model as one stage's load, attention over its full-attention layers only
    (a windowed layer attends to fewer tokens: left out, the floor stays below)."""
    stage = Stage("stage-0", 0, "probe", 0, probe.layer_count, sum(layer_weights(probe)))
    plan = Plan(probe.native_context_length, 1, (stage,), None, None)
    load = stage_loads(probe, plan, traffic)[0]
    return StageLoad(load.layer_count, load.weight_bytes, load.routed_expert_bytes,
                     load.active_parameters, load.kv_bytes_per_token, load.attention_width,
                     embedding_row_bytes=load.embedding_row_bytes,
                     routed_active_parameters=load.routed_active_parameters,
                     attention_heads=load.attention_heads,
                     head_parameters=load.head_parameters, holds_last_layer=True)


@dataclass(frozen=True, slots=True)
class DecodeFloor:
    """What every decode step of the model reads over all stages (the weights beside the
    token embeddings at the read share of ``lanes`` lanes, ``weight_bytes``; the KV
    cache, ``kv_bytes_per_token`` a cached token), the least ms each kind takes per
    weight byte read (its compute included) and per cache byte (``inf`` without a
    bandwidth), the least ms per attention pair and ``pairs_per_token`` (attention width
    times layers), and the least fixed per-layer time; ``streams_attention``, per kind,
    whether its attention computes as its cache streams in (flash attention: the slower
    of the two counts, :class:`planner.performance.StepTerms`)."""

    weight_bytes: float
    kv_bytes_per_token: int
    weight_ms_per_byte: tuple[float, ...]
    kv_read_ms_per_byte: tuple[float, ...]
    fixed_ms: float
    attention_ms_per_pair: tuple[float, ...] = ()
    pairs_per_token: int = 0
    lanes: int = 1
    streams_attention: tuple[bool, ...] = ()

    def kv_ms_per_byte(self, context: int) -> tuple[float, ...]:
        """Each kind's least ms per cache byte of a plan at ``context`` or above: the
        read and the attention over it (``context - lanes + 1`` pairs per layer and unit
        of width at least, spread over the cache's bytes), added, or the slower of the
        two where the kind streams its attention."""
        if not self.attention_ms_per_pair or not self.kv_bytes_per_token:
            return self.kv_read_ms_per_byte
        pairs_per_byte = (self.pairs_per_token * max(0, context - self.lanes + 1)
                          / (self.kv_bytes_per_token * context))
        streams = self.streams_attention or (False,) * len(self.kv_read_ms_per_byte)
        return tuple(max(read, pair * pairs_per_byte) if streamed
                     else read + pair * pairs_per_byte
                     for read, pair, streamed in zip(
                         self.kv_read_ms_per_byte, self.attention_ms_per_pair, streams,
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
    more: a decode step of ``lanes`` tokens of the whole model (:func:`whole_model`) at
    each kind's rates, split into what grows with the weights a stage holds (their read
    and products), with the cache it reads, and with the pairs it attends to; each layer
    at the smallest fixed time."""
    load = whole_model(probe, traffic)
    work = step_work(load, traffic, tokens=lanes, sequences=lanes, cached=1, attended=1,
                     overlapped=False)
    read = float(work.weight_bytes)
    weight_rates, kv_rates, pair_rates, fixed = [], [], [], []
    streams: list[bool] = []
    for gpu in kinds:
        device = _device(gpu, traffic, options)
        if device is None:
            weight_rates.append(math.inf)
            kv_rates.append(math.inf)
            pair_rates.append(0.0)
            streams.append(False)
            continue
        terms = step_terms(work, device.rates)
        weight_rates.append(float(terms.read_ms + terms.matrix_ms) / read)
        kv_rates.append(float(device.rates.kv_ms_per_byte))
        # Attention of one token over one cached token, over every layer.
        pair_rates.append(float(terms.attention_ms) / lanes)
        streams.append(bool(terms.streamed))
        fixed.append(float(terms.fixed_ms))
    return DecodeFloor(read, probe.kv_bytes_per_token, tuple(weight_rates),
                       tuple(kv_rates), min(fixed, default=0.0), tuple(pair_rates), 1, lanes,
                       tuple(streams))


def least_hop_ms(kinds: Sequence[GpuModel], options: Mapping[str, Any],
                 traffic: ModelTraffic | None = None) -> float:
    """The least time a hop between two stages on ``kinds`` takes (its calibrated fixed
    time; none for the plain bandwidth-bound estimate): a plan of ``k`` stages pays
    ``k - 1`` of them."""
    dense = traffic or ModelTraffic.dense(1)
    hops = [device.hop_ms for gpu in kinds
            if (device := _device(gpu, dense, options)) is not None]
    return min(hops, default=0.0) * _MARGIN


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


# The terms of a prefill micro-batch's time the floor counts, each at its own per-kind
# rate: weight bytes read, FLOPs of products, parameters staged as FP16, activation units
# moved, FLOPs of attention (with the scores it moves).
PREFILL_TERMS = ("read", "matrix", "staging", "activation", "attention")
# A prompt of more batches than this is bounded by as many groups of batches.
_BATCH_GROUPS = 64


@dataclass(frozen=True, slots=True)
class PrefillFloor:
    """What each micro-batch of a prompt costs over all stages: per batch (or group of
    batches) and micro-batch, the amount of each of :data:`PREFILL_TERMS`
    (``amounts[b][j]``), each kind's ms per unit of each (``rates[term][kind]``;
    ``inf`` on a kind without a bandwidth), and the least fixed per-layer time of a
    micro-batch over the model. ``batch_weights[b]`` is how many batches row ``b`` stands
    for, each at least as costly (a later batch attends to more cached tokens).

    A stage's micro-batch takes the larger of its read and its products (they overlap)
    plus the rest (:func:`planner.performance.step_terms`); summed over the stages, each
    term at the plan's fastest kind for it."""

    amounts: tuple[tuple[tuple[float, ...], ...], ...]
    rates: tuple[tuple[float, ...], ...]
    fixed_ms: float
    # Each batch's micro-batch sizes in tokens, each kind's least fixed time of a hop
    # between stages, and the time a hop takes per token it carries (the activations
    # over the link): what passing the micro-batches from stage to stage costs.
    ubatch_tokens: tuple[tuple[int, ...], ...] = ()
    hop_ms: tuple[float, ...] = ()
    hop_ms_per_token: float = 0.0
    batch_weights: tuple[int, ...] = ()

    @property
    def weights(self) -> tuple[int, ...]:
        return self.batch_weights or (1,) * len(self.amounts)

    @property
    def batch_count(self) -> int:
        """The prompt's batches."""
        return sum(self.weights)

    @property
    def read_ms_per_byte(self) -> tuple[float, ...]:
        return self.rates[0]

    def read_bytes(self) -> float:
        """The weight bytes the prompt's batches read at least: each batch's largest
        micro-batch's."""
        return sum(weight * max(ubatch[0] for ubatch in batch)
                   for batch, weight in zip(self.amounts, self.weights, strict=True))

    def held_byte_rates(self, body: float) -> tuple[tuple[float, ...], float]:
        """Each kind's least ms per body byte a stage on it holds, and the least ms of
        the rest of the prompt whatever the stages hold.

        :func:`planner.performance.stage_loads` gives a stage the read, matrix, staging
        and activation terms in proportion to the body bytes it holds, and attention in
        proportion to its layers. Per batch, one micro-batch (the costliest at the
        fastest rates) passes every stage; its stage on kind ``i`` holding ``h`` body
        bytes takes ``h / body`` of ``max(w r_i, m c_i) + p s_i + a v_i`` or more, while
        its attention (at the fastest kind's rate) and every layer's fixed time add up to
        the rest. So a plan's TTFT is at least ``sum_s h_s x rate[kind(s)] + rest``."""
        if not self.rates or not self.rates[0]:
            return (), 0.0
        fastest = [min(column) for column in self.rates]
        rates = [0.0] * len(self.rates[0])
        rest = 0.0
        for batch, weight in zip(self.amounts, self.weights, strict=True):
            w, m, p, a, q = max(batch, key=lambda ubatch: self._least_of(
                (*ubatch[:4], 0.0), fastest))
            for i in range(len(rates)):
                rates[i] += weight * self._least_of(
                    (w, m, p, a, 0.0), [column[i] for column in self.rates])
            rest += weight * (q * fastest[4] + self.fixed_ms)
        return tuple(rate / body * _MARGIN for rate in rates), rest * _MARGIN

    @staticmethod
    def _least_of(ubatch: Sequence[float], rate: Sequence[float]) -> float:
        """One micro-batch's time at these rates: the estimate's formula
        (:func:`planner.performance.step_terms`) on its terms, the fixed time apart."""
        read, matrix, staging, activation, attention = rate
        w, m, p, a, q = ubatch
        work = Work(weight_bytes=w, matrix_flops=m, kv_bytes=0.0, attention_flops=q,
                    layers=0, staged_parameters=p, activation_bytes=a, overlapped=True)
        return float(step_terms(work, _term_rates(read, matrix, staging, activation,
                                                  attention)).total_ms)

    def pipeline_least_ms(self, body: float, most_stages: int) -> float:
        """The least TTFT of a plan of at most ``most_stages`` stages on these kinds,
        counting what passing the micro-batches from stage to stage costs
        (:meth:`pipeline_least_ms_by_stages`)."""
        return self.pipeline_least_ms_by_stages(body, most_stages)[-1]

    def pipeline_least_ms_by_stages(self, body: float, most_stages: int) -> list[float]:
        """For ``k`` from 1 to ``most_stages``: the least TTFT of a plan of at most ``k``
        stages on these kinds, counting what passing the micro-batches from stage to stage
        costs.

        :func:`planner.performance.prefill_ms` starts a micro-batch on a stage once the
        stage has finished the one before and the micro-batch has crossed the hop to it,
        so a batch of ``m`` micro-batches on ``S`` stages ends no sooner than the first
        micro-batch's way down to any stage ``k``, ``k``'s work on all ``m``, and the last
        one's way on from ``k``: one micro-batch through every stage, ``m - 1`` more on the
        busiest stage, and ``S - 1`` hops. A stage holding ``h`` body bytes takes ``h x
        rho`` or more per micro-batch (:meth:`held_byte_rates`, at the batch's smallest
        micro-batch and the fastest kind), and the stages hold the whole body, so the
        busiest takes ``body x rho / S`` or more: more stages shorten it, each at the
        price of a hop. The least over every stage count."""
        rate = [min(column, default=math.inf) for column in self.rates]
        if not self.ubatch_tokens or any(math.isinf(r) for r in rate):
            return [math.inf] * max(1, most_stages)
        hop = min(self.hop_ms, default=0.0)
        batches: list[tuple[float, float, float, float, int]] = []
        for batch, tokens, weight in zip(self.amounts, self.ubatch_tokens, self.weights,
                                         strict=True):
            smallest = tuple(min(column) for column in zip(*batch, strict=True))
            busiest = min(self._least_of((*smallest[:4], 0.0),
                                         [column[i] for column in self.rates])
                          for i in range(len(self.rates[0])))
            batches.append((max(self._least_of(ubatch, rate) for ubatch in batch),
                            self._least_of(smallest, rate), (len(batch) - 1) * busiest,
                            hop + min(tokens) * self.hop_ms_per_token, weight))
        least: list[float] = []
        for stages in range(1, max(1, most_stages) + 1):
            ms = sum(weight * (max(whole, smallest + more / stages) + self.fixed_ms
                               + (stages - 1) * hop_ms)
                     for whole, smallest, more, hop_ms, weight in batches)
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
        return sum(weight * (max(self._least_of(ubatch, rate) for ubatch in batch)
                             + self.fixed_ms)
                   for batch, weight in zip(self.amounts, self.weights, strict=True)
                   ) * _MARGIN


def _term_rates(read: float, matrix: float, staging: float, activation: float,
                attention: float) -> Rates:
    """:data:`PREFILL_TERMS`' per-unit times as the estimate's :class:`Rates`: the staged
    parameters in ms each (their bytes at the read's rate folded in), the activations'
    bytes, attention's FLOPs with the scores they move."""
    per_read = 1 / read if read else 0.0
    return Rates(read_ms_per_byte=read, kv_ms_per_byte=0.0, matrix_ms_per_flop=matrix,
                 attention_ms_per_flop=attention, layer_ms=0.0,
                 activation_ms_per_byte=activation,
                 staging_bytes_per_parameter=staging * per_read)


def _batch_groups(count: int) -> list[tuple[int, int]]:
    """A prompt's batches as at most :data:`_BATCH_GROUPS` groups (first batch, size), the
    last batch alone (it may be shorter)."""
    if count <= _BATCH_GROUPS:
        return [(index, 1) for index in range(count)]
    full = count - 1
    size = -(-full // (_BATCH_GROUPS - 1))
    groups = [(start, min(size, full - start)) for start in range(0, full, size)]
    return [*groups, (full, 1)]


def prefill_floor(kinds: Sequence[GpuModel], traffic: ModelTraffic, probe: PlanningInput,
                  prompt_tokens: int, options: Mapping[str, Any] | None = None
                  ) -> PrefillFloor:
    """The :class:`PrefillFloor` of a ``prompt_tokens`` prompt of the model on ``kinds``
    (calibrated rates: a plain bandwidth-bound estimate makes no prefill estimate).

    Each micro-batch's terms are :func:`planner.performance.step_work` of the whole model
    (:func:`whole_model`): the weights its tokens reach, the products (a routed expert's
    small ones at the rate they reach), the parameters a staging kind copies as FP16,
    the activations, and attention over the cache before it (windows left out); each
    kind's rates are its :class:`~planner.performance.Rates`. A prompt of many batches is
    bounded by groups of batches, each at its first (:data:`_BATCH_GROUPS`)."""
    options = options or {}
    settings = _settings(options)
    load = whole_model(probe, traffic)
    prompt = Prompt(prompt_tokens, settings.depth, settings.batch, settings.ubatch)
    devices = [_device(gpu, traffic, options) for gpu in kinds]
    # A routed expert's products in the smallest tiles any kind computes them in (a CPU's
    # none: each token alone), so that the floor stays below each kind's estimate.
    tile = min((float(device.rates.expert_tile_tokens) for device in devices
                if device is not None), default=0.0)
    scores_per_flop = (load.attention_heads / (4 * load.attention_width)
                       if load.attention_width else 0.0)

    def ubatch(tokens: float, before: float) -> tuple[float, ...]:
        work = step_work(load, traffic, tokens=tokens, sequences=1, cached=before + tokens,
                         attended=before + tokens / 2, overlapped=True, stage_weights=True)
        routed = float(routed_full_rate_flops(work, tile))
        return (float(work.weight_bytes), float(work.matrix_flops) + routed,
                float(work.staged_parameters), float(work.activation_bytes),
                float(work.attention_flops))

    groups = _batch_groups(prompt.batch_count)
    amounts, tokens_of = [], []
    for first, _ in groups:
        sizes, before = prompt.batch_shape(first)
        amounts.append(tuple(ubatch(float(t), float(b)) for t, b in zip(sizes, before,
                                                                          strict=True)))
        tokens_of.append(tuple(int(t) for t in sizes))
    rates: list[list[float]] = [[] for _ in PREFILL_TERMS]
    # A micro-batch's fixed time at its fewest operations a layer (a layer of fewer than
    # a llama layer's counts less; a one-token step on a fusing backend, its fused count).
    one = step_work(load, traffic, tokens=1, sequences=1, cached=1, attended=1,
                    overlapped=True)
    least_layers = min(float(one.layers), float(one.fused_layers))
    fixed, hops = [], []
    for device in devices:
        if device is None or traffic.active_parameter_count is None:
            for column in rates:
                column.append(math.inf)
            continue
        r = device.rates
        rates[0].append(float(r.read_ms_per_byte))
        rates[1].append(float(r.matrix_ms_per_flop) or math.inf)
        # A kind that stages only its large micro-batches (Volta) may stage none: its
        # floor leaves staging out.
        stages_all = float(r.staging_from_tokens) == 0
        rates[2].append(float(r.staging_bytes_per_parameter * r.read_ms_per_byte)
                        if stages_all else 0.0)
        rates[3].append(float(r.activation_ms_per_byte))
        rates[4].append(float(r.attention_ms_per_flop
                              + scores_per_flop * r.score_bytes * r.kv_ms_per_byte))
        fixed.append(least_layers * float(r.layer_ms))
        hops.append(device.hop_ms)
    # A hop after a stage on a kind: its calibrated fixed time and the kind's own
    # stage-transfer latency, then the micro-batch's activations over the link.
    latencies = tuple(hop + (gpu.stage_transfer_latency_ms or 0)
                      for hop, gpu in zip(hops, [g for g, d in zip(kinds, devices,
                                                                   strict=True)
                                                 if d is not None], strict=False))
    link = options.get("link_bandwidth_bytes_per_s") or DEFAULT_LINK_BANDWIDTH_BYTES_PER_S
    per_token = (traffic.hidden_size or 0) * ACTIVATION_BYTES_PER_VALUE / float(link) * 1000
    return PrefillFloor(tuple(amounts), tuple(tuple(column) for column in rates),
                        min(fixed, default=0.0), tuple(tokens_of), latencies, per_token,
                        tuple(size for _, size in groups))


def prefill_floor_ms(gpu: GpuModel, traffic: ModelTraffic, probe: PlanningInput,
                     prompt_tokens: int) -> float:
    """The least TTFT of a ``prompt_tokens`` prompt on a plan of nodes of kind ``gpu``
    alone."""
    return prefill_floor([gpu], traffic, probe, prompt_tokens).least_ms()
