"""The one formula of a stage's time: what a step does (:class:`Work`), what each unit of
it costs on a device at a setting (:class:`Rates`), and how the terms add up
(:func:`step_ms`); a decode step (:func:`decode_step`) and a prompt's prefill
(:func:`prefill_ms`) are built from it, and so are the sizing floors
(:mod:`planner.sizing.floors`) and the calibration's fit (``validation/speed``).

Every field may be a number or a numpy array (one value per step, or per measured row),
so one formula serves one estimate and a fit over every measurement at once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.limits import DEFAULT_CACHE_TYPE
from planner.models.kv_cache import row_bytes
from planner.performance.graph_nodes import fixed_time_layers
from planner.performance.traffic import ModelTraffic, StageLoad

# The bytes one attention score moves without flash attention: llama.cpp writes the F32
# scores of each head (4 B), its softmax reads them and writes the probabilities (8 B),
# and the product with V reads those (4 B).
SCORE_BYTES_WITHOUT_FLASH_ATTENTION = 16
# The bytes a quantized weight's parameter moves when it is staged as FP16 before the
# product (llama.cpp's CUDA backend before MMQ became the default): its FP16 copy is
# written (2 B) and read back by cuBLAS (2 B).
STAGING_BYTES_PER_PARAMETER = 4
# The bytes a micro-batch's operations move between them, per token and layer, as
# llama.cpp's graph moves them (planner.llamacpp.graph; every operation that computes
# reads its activation inputs and writes its output, 4 bytes a value): per unit of hidden
# size, the two norms and their weights (32), the hidden state read by the query, key
# and value products and the attention's output written back (16) and the residual sums
# (24); a dense feed-forward network reads it twice and writes it once more (12), a
# mixture of experts per expert a token uses (24: its router reads it, its experts read
# it and write their outputs, each output is scaled by its weight and summed one by one);
# and per unit of the width the products make beyond it (queries, keys and values, the
# feed-forward intermediates), 24: written, rotated, cached, attended or activated, and
# read by the next product. tests/test_performance.py counts llama.cpp's graph again.
HIDDEN_ACTIVATION_BYTES = 72
DENSE_NETWORK_HIDDEN_BYTES = 12
EXPERT_HIDDEN_BYTES = 24
WIDTH_ACTIVATION_BYTES = 24
# A cached token's key and value of one unit of width each, at the default cache type
# (F16): the cache's bytes give the keys' and values' width (a quantized cache's count
# them short, by under 1 % of a layer's activation bytes).
_KEY_AND_VALUE_BYTES = 2 * row_bytes(DEFAULT_CACHE_TYPE, 1)


@dataclass(frozen=True, slots=True)
class Work:
    """What one step of one stage does: ``tokens`` tokens at once (a decode step of that
    many lanes, or a prompt's micro-batch), each field a number or an array.

    ``weight_bytes`` read (the shared weights, the routed experts the tokens reach, one
    embedding row a token); ``matrix_flops`` of products at the full rate and
    ``routed_flops`` of the routed experts' products of a micro-batch (the tokens
    routed to each, in its backend's tiles: ``expert_share``); ``staged_parameters``, the
    parameters of every weight a micro-batch multiplies (staged as FP16 where the
    rates say so); ``activation_bytes`` a micro-batch moves between its kernels
    (:func:`activation_bytes_per_token`); ``kv_bytes`` of
    cache read; ``attention_flops`` and ``score_values`` (heads times query-key pairs) of
    attention; ``layers``; ``overlapped``: a micro-batch, whose products compute while
    the weights stream in (a decode step's matrix-vector products add to the read);
    ``output_row_flops``: a micro-batch's products of the output head and the last layer's
    feed-forward network for every token, which only builds that ran every token through
    them computed (``Rates.every_output``); ``micro_batch_tokens``: a micro-batch's tokens
    (0 for a decode step), which decide whether it stages (``Rates.staging_from_tokens``);
    ``expert_share``: the share of a mixture of experts' routed experts a token uses, by
    which a micro-batch's tokens spread over them (:func:`routed_full_rate_flops`)."""

    weight_bytes: Any
    matrix_flops: Any
    kv_bytes: Any
    attention_flops: Any
    layers: Any
    routed_flops: Any = 0.0
    staged_parameters: Any = 0.0
    activation_bytes: Any = 0.0
    score_values: Any = 0.0
    overlapped: Any = False
    fused_layers: Any = None
    output_row_flops: Any = 0.0
    micro_batch_tokens: Any = 0.0
    expert_share: Any = 0.0


@dataclass(frozen=True, slots=True)
class Rates:
    """What each unit of :class:`Work` costs on one device at one setting, in ms: a byte of
    weights read, of cache read, a FLOP of products, of attention, a byte of activations
    moved; and the bytes a micro-batch moves per staged parameter and per score, each at
    the weights' or the cache's rate; a fixed time per layer. A routed expert's tokens
    are multiplied in whole tiles of ``expert_tile_tokens`` tokens (0: each token alone,
    at the full rate). ``fuses_moe``, ``every_output`` and ``streams_attention`` are 1 or
    0: a build that fuses a mixture of experts' kernels, one that multiplies a prompt's
    every token by the output head, and flash attention, whose one-token steps attend in
    one kernel that computes as it reads the cache (llama.cpp's vector kernels), so that
    the slower of the cache read and attention's FLOPs counts. A micro-batch stages its
    weights from ``staging_from_tokens`` tokens (0: every one)."""

    read_ms_per_byte: Any
    kv_ms_per_byte: Any
    matrix_ms_per_flop: Any
    attention_ms_per_flop: Any
    layer_ms: Any
    activation_ms_per_byte: Any = 0.0
    staging_bytes_per_parameter: Any = 0.0
    score_bytes: Any = 0.0
    expert_tile_tokens: Any = 0.0
    fuses_moe: Any = 0.0
    every_output: Any = 0.0
    streams_attention: Any = 0.0
    staging_from_tokens: Any = 0.0


def _upper_tail(z: Any) -> Any:
    """P(Z > z) of a standard normal Z (Abramowitz and Stegun 7.1.26, within 1.5e-7)."""
    x = np.abs(z) / math.sqrt(2)
    t = 1 / (1 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (
        -1.453152027 + t * 1.061405429))))
    half_erfc = 0.5 * poly * np.exp(-x * x)
    return np.where(z >= 0, half_erfc, 1 - half_erfc)


def expected_expert_tiles(tokens: Any, share: Any, tile_tokens: Any) -> Any:
    """The tiles of ``tile_tokens`` tokens one routed expert's products take, on average,
    in a micro-batch of ``tokens`` tokens each using ``share`` of the experts: an expert's
    count X is binomial (``tokens``, ``share``), and it takes ``ceil(X / tile_tokens)``
    tiles, ``P(X > 0) + P(X > T) + P(X > 2T) + ...`` on average (the tails beyond the
    first by the normal approximation, with continuity)."""
    n = np.asarray(tokens, dtype=float)
    p = np.clip(np.asarray(share, dtype=float), 1e-12, 1.0)
    tile = np.maximum(np.asarray(tile_tokens, dtype=float), 1.0)
    mean, spread = n * p, np.sqrt(np.maximum(n * p * (1 - p), 1e-12))
    tiles = 1 - (1 - p) ** n
    most = int(np.max(np.ceil((mean + 10 * spread) / tile))) + 1
    for j in range(1, most + 1):
        tiles = tiles + _upper_tail((j * tile + 0.5 - mean) / spread)
    return tiles


def routed_full_rate_flops(work: Work, tile_tokens: Any) -> Any:
    """The routed experts' products as the FLOPs of the tiles that compute them: the
    tokens of a micro-batch spread over its experts (``work.expert_share`` of them each),
    and each expert's fill whole tiles of ``tile_tokens`` tokens, each computed whole
    (:func:`expected_expert_tiles`, :func:`planner.performance.expert_token_tile`);
    ``tile_tokens`` 0 computes each token alone."""
    flops = np.asarray(work.routed_flops, dtype=float)
    tokens, share, tile = np.broadcast_arrays(
        np.asarray(work.micro_batch_tokens, dtype=float),
        np.asarray(work.expert_share, dtype=float), np.asarray(tile_tokens, dtype=float))
    tiled = np.broadcast_to((flops > 0) & (tile > 0) & (tokens > 0), tile.shape)
    if not np.any(tiled):
        return work.routed_flops
    factor = np.ones(tile.shape)
    mean = tokens[tiled] * share[tiled]
    factor[tiled] = (tile[tiled] * expected_expert_tiles(tokens[tiled], share[tiled],
                                                         tile[tiled]) / mean)
    return flops * (factor if factor.ndim else float(factor))


def routed_product_ms(work: Work, rates: Rates) -> Any:
    """The routed experts' products (:func:`routed_full_rate_flops`), in ms."""
    return (routed_full_rate_flops(work, rates.expert_tile_tokens)
            * rates.matrix_ms_per_flop)


@dataclass(frozen=True, slots=True)
class StepTerms:
    """The terms of one step's time in ms (numbers or arrays): the weights read, the
    products, the bytes moved beside the weights (staging, activations), the cache read,
    attention (its FLOPs and, without flash attention, its scores) and the fixed time;
    ``streamed``: a one-token step's flash attention, which computes as it reads the
    cache."""

    read_ms: Any
    matrix_ms: Any
    moved_ms: Any
    kv_ms: Any
    attention_ms: Any
    fixed_ms: Any
    overlapped: Any
    streamed: Any = False

    @property
    def total_ms(self) -> Any:
        """A micro-batch's products compute while its weights stream in (the slower of
        the two counts); a decode step's matrix-vector products add to the read; a decode
        step's flash attention computes while its cache streams in (the slower counts)."""
        matrix = np.where(self.overlapped, np.maximum(self.read_ms, self.matrix_ms),
                          self.read_ms + self.matrix_ms)
        cache = np.where(self.streamed, np.maximum(self.kv_ms, self.attention_ms),
                         self.kv_ms + self.attention_ms)
        return matrix + self.moved_ms + cache + self.fixed_ms


def _fixed_layers(work: Work, rates: Rates) -> Any:
    """The step's layers in llama layers of fixed time: its fused count on a device that
    fuses a mixture of experts' kernels (``rates.fuses_moe`` 1), else its own."""
    if work.fused_layers is None:
        return work.layers
    return work.layers + rates.fuses_moe * (work.fused_layers - work.layers)


def step_terms(work: Work, rates: Rates) -> StepTerms:
    """The terms of :func:`step_ms`."""
    staged = np.where(np.asarray(work.micro_batch_tokens) >= rates.staging_from_tokens,
                      work.staged_parameters, 0.0)
    moved = (staged * rates.staging_bytes_per_parameter * rates.read_ms_per_byte
             + work.activation_bytes * rates.activation_ms_per_byte)
    routed = (routed_product_ms(work, rates) if np.any(np.asarray(work.routed_flops) > 0)
              else 0.0)
    return StepTerms(
        read_ms=work.weight_bytes * rates.read_ms_per_byte,
        matrix_ms=((work.matrix_flops + rates.every_output * work.output_row_flops)
                   * rates.matrix_ms_per_flop + routed),
        moved_ms=moved,
        kv_ms=work.kv_bytes * rates.kv_ms_per_byte,
        attention_ms=(work.attention_flops * rates.attention_ms_per_flop
                      + work.score_values * rates.score_bytes * rates.kv_ms_per_byte),
        fixed_ms=_fixed_layers(work, rates) * rates.layer_ms,
        overlapped=work.overlapped,
        streamed=np.logical_and(np.logical_not(work.overlapped),
                                np.asarray(rates.streams_attention) > 0))


def step_ms(work: Work, rates: Rates) -> Any:
    """The time of one step of one stage, in ms: the estimate's one formula."""
    return step_terms(work, rates).total_ms


def activation_bytes_per_token(load: StageLoad, traffic: ModelTraffic) -> float:
    """The bytes a micro-batch's operations move between them for one token on a stage, as
    llama.cpp's graph moves them (:data:`HIDDEN_ACTIVATION_BYTES` and the figures beside
    it): per layer, per unit of hidden size, and per unit of the width its products make
    beyond it, the queries and the keys and values (their cache's bytes at F16) and the
    feed-forward intermediates, what the stage's parameters leave once the attention's
    products are counted. Every layer of a mixture of experts is taken as one of experts."""
    hidden = traffic.hidden_size or 0
    if not hidden:
        return 0.0
    queries, keys_values = _attention_widths(load)
    # The feed-forward intermediates are a third of the networks' parameters a unit of
    # hidden size (gate, up and down).
    intermediates = network_parameters(load, traffic) / hidden / 3
    network = (EXPERT_HIDDEN_BYTES * traffic.experts_used
               if traffic.experts_used and load.routed_active_parameters
               else DENSE_NETWORK_HIDDEN_BYTES)
    return (load.layer_count * hidden * (HIDDEN_ACTIVATION_BYTES + network)
            + WIDTH_ACTIVATION_BYTES * (queries + keys_values + intermediates))


def _attention_widths(load: StageLoad) -> tuple[float, float]:
    """The widths a stage's attention products make, summed over its layers: the queries,
    and the keys and values (their cache's bytes at F16)."""
    return (load.attention_width + load.window_attention_width,
            (load.kv_bytes_per_token + load.window_kv_bytes_per_token) / _KEY_AND_VALUE_BYTES)


def network_parameters(load: StageLoad, traffic: ModelTraffic) -> float:
    """The parameters of a stage's feed-forward networks one token computes with: what
    its parameters leave once the output head and attention's products are counted
    (queries, keys and values from the hidden state and the output back, 2 x hidden x
    their widths)."""
    queries, keys_values = _attention_widths(load)
    attention = 2 * (traffic.hidden_size or 0) * (queries + keys_values)
    return max(0.0, load.active_parameters - load.head_parameters - attention)


def last_layer_network(load: StageLoad, traffic: ModelTraffic) -> tuple[float, float]:
    """The parameters of the feed-forward network of the model's last layer on the stage
    that holds it (0 elsewhere), beside and in its routed experts: a layer's share of
    :func:`network_parameters`, of which its routed experts' share of the stage's."""
    if not load.holds_last_layer or not load.layer_count:
        return 0.0, 0.0
    per_layer = network_parameters(load, traffic) / load.layer_count
    routed = min(per_layer, load.routed_active_parameters / load.layer_count)
    return per_layer - routed, routed


def step_work(load: StageLoad, traffic: ModelTraffic, *, tokens: Any, sequences: Any,
              cached: Any, attended: Any, overlapped: bool,
              stage_weights: bool = False) -> Work:
    """The :class:`Work` of ``tokens`` tokens of ``sequences`` sequences computed at once on
    a stage: the weights a step of that many tokens reads, each sequence's cache of
    ``cached`` tokens, and attention of every token over ``attended`` cached tokens of
    its sequence on average. A micro-batch (``overlapped``) multiplies every routed
    expert its tokens reach as one small product each; a decode step's experts, one
    token a lane, are multiplied as its other weights are (llama.cpp's matrix-vector
    kernels read each reached expert once for up to 8 tokens, and with more its
    quantized kernels take tiles of 8 tokens: the read bounds them); ``stage_weights``
    counts the parameters its products stage as FP16. A micro-batch runs the output head
    and the last layer's feed-forward network for its batch's output token only
    (llama.cpp's ``inp_out_ids``): its products leave them out, and ``output_row_flops``
    keeps them (at the full rate) for the builds that ran every token through them; a
    decode step's every token is an output."""
    routed = load.routed_expert_bytes if traffic.routed_bytes else 0
    share = traffic.expert_share(tokens)
    shared = (load.weight_bytes - routed if routed else
              load.weight_bytes * traffic.read_share(tokens))
    weight_bytes = shared + routed * share + load.embedding_row_bytes * tokens
    routed_active = load.routed_active_parameters if routed and overlapped else 0.0
    # A micro-batch's output rows (its batch's last token) alone go through the output
    # head and the last layer's feed-forward network (its experts among them).
    last_shared, last_routed = (last_layer_network(load, traffic) if overlapped
                                else (0.0, 0.0))
    outputs_only = (load.head_parameters + last_shared + last_routed) if overlapped else 0.0
    routed_small = max(0.0, routed_active - last_routed)
    full_rate = load.active_parameters - outputs_only - routed_small
    full, windowed = load.kv_tokens(attended)
    pairs = tokens * (load.attention_width * full + load.window_attention_width * windowed)
    heads = tokens * (load.attention_heads * full + load.window_attention_heads * windowed)
    layers = fixed_time_layers(load.layer_count, traffic.layer_nodes)
    # The fused count is a one-token step's: llama.cpp fused the router for one token only
    # until its 2026 builds (pull requests 27621, 28422), and a step of several tokens is
    # counted unfused (its fixed time a small share of a micro-batch's).
    fused = fixed_time_layers(load.layer_count, traffic.fused_layer_nodes
                              or traffic.layer_nodes)
    staged: Any = 0.0
    if stage_weights:
        every_routed = load.routed_active_parameters * (
            (traffic.expert_count or 1) / (traffic.experts_used or 1))
        staged = (load.active_parameters - load.routed_active_parameters
                  - (outputs_only - last_routed) + every_routed * share)
    return Work(
        weight_bytes=weight_bytes,
        matrix_flops=2 * full_rate * tokens,
        output_row_flops=2 * outputs_only * tokens,
        micro_batch_tokens=tokens if overlapped else 0.0,
        routed_flops=2 * routed_small * tokens,
        expert_share=(traffic.experts_used or 1) / (traffic.expert_count or 1),
        staged_parameters=staged,
        activation_bytes=(tokens * activation_bytes_per_token(load, traffic)
                          if overlapped and traffic.hidden_size else 0.0),
        kv_bytes=load.kv_bytes(cached, sequences),
        attention_flops=4 * pairs,
        score_values=heads,
        layers=layers,
        fused_layers=np.where(np.asarray(tokens) == 1, fused, layers),
        overlapped=overlapped)


def decode_step(loads: Sequence[StageLoad], rates: Sequence[Rates],
                hops_ms: Sequence[float], traffic: ModelTraffic, *, lanes: int,
                cached: int) -> tuple[list[StepTerms], list[float]]:
    """Each stage's terms and each hop's time of one decode step: ``lanes`` tokens, each
    lane with ``cached / lanes`` tokens in the cache (``cached`` cells read in all);
    ``hops_ms`` are each hop's time for the step's activations."""
    per_lane = max(1.0, cached / lanes)
    terms = [step_terms(step_work(load, traffic, tokens=lanes, sequences=lanes,
                                  cached=per_lane, attended=per_lane, overlapped=False),
                        rate)
             for load, rate in zip(loads, rates, strict=True)]
    return terms, list(hops_ms)


# ------------------------------------------------------------------------------ prefill


def pipeline_ms(stage_ms: np.ndarray, hop_ms: np.ndarray) -> np.ndarray:
    """The time to pass micro-batches through stages as a pipeline: ``stage_ms[..., s, j]``
    is stage ``s``'s time on micro-batch ``j`` (0 for a micro-batch a batch does not have),
    ``hop_ms[..., h, j]`` the hop after stage ``h``. A stage starts a micro-batch when it
    has finished the one before and the micro-batch has crossed the hop to it; the result
    is when the last stage finishes, per leading index.

    ``finish[s, j] = max(ready[s, j], finish[s, j - 1]) + t[s, j]`` unrolls to
    ``C[j] + max over k <= j of (ready[s, k] - C[k - 1])`` with ``C`` the running sum of
    ``t[s]``: one running maximum per stage (llama.cpp keeps several micro-batches in
    flight across devices)."""
    stages = stage_ms.shape[-2]
    ready = np.zeros(stage_ms.shape[:-2] + stage_ms.shape[-1:])
    finish = ready
    for s in range(stages):
        if s:
            ready = finish + hop_ms[..., s - 1, :]
        times = stage_ms[..., s, :]
        running = np.cumsum(times, axis=-1)
        before = running - times
        finish = running + np.maximum.accumulate(ready - before, axis=-1)
    result: np.ndarray = finish[..., -1]
    return result


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt of ``tokens`` tokens after ``depth`` cached ones, in llama.cpp's batches of
    ``batch`` tokens and micro-batches of ``ubatch``."""

    tokens: int
    depth: int
    batch: int
    ubatch: int

    @property
    def batch_count(self) -> int:
        return -(-self.tokens // self.batch)

    def batch_shape(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Batch ``index``'s micro-batches: their tokens and the tokens cached before each
        (arrays of the same length)."""
        start = index * self.batch
        size = min(self.batch, self.tokens - start)
        offsets = np.arange(0, size, self.ubatch, dtype=float)
        tokens = np.minimum(self.ubatch, size - offsets)
        return tokens, self.depth + start + offsets


def batch_sum(prompt: Prompt, batch_ms: Callable[[Sequence[int]], np.ndarray],
              breaks: Sequence[float] = (), exact: int = 64) -> float:
    """The sum over a prompt's batches of ``batch_ms`` (which times a list of batches at
    once), with bounded work for a prompt of millions of batches.

    A batch's time is a maximum, over the ways through the pipeline, of sums of terms
    each linear in the tokens cached before it, or a maximum of such (a stage's read
    against its products): convex in the batch's index, wherever no term changes form.
    The forms change where the cache passes a sliding window (``breaks``, in cached
    tokens) and at the last batch (it may be shorter). Over a stretch of batches where
    it is convex, when the time at the middle batch lies on the line through the ends,
    it lies there at every batch, and the stretch sums in closed form; else it is split
    in two. Stretches of at most ``exact`` batches are summed batch by batch."""
    count = prompt.batch_count
    if count <= exact:
        return float(np.sum(batch_ms(range(count))))
    edges = {0, count - 1, count}
    for cached in breaks:
        index = int((cached - prompt.depth) // prompt.batch)
        edges.update(i for i in (index, index + 1) if 0 <= i < count)
    cuts = sorted(edges)
    total = 0.0
    memo: dict[int, float] = {}

    def at(indices: Sequence[int]) -> list[float]:
        wanted = sorted({i for i in indices if i not in memo})
        if wanted:
            memo.update(zip(wanted, (float(v) for v in batch_ms(wanted)), strict=True))
        return [memo[i] for i in indices]

    stack = [(a, b - 1) for a, b in itertools.pairwise(cuts) if b - 1 >= a]
    while stack:
        first, last = stack.pop()
        if last - first + 1 <= exact:
            total += math.fsum(at(list(range(first, last + 1))))
            continue
        middle = (first + last) // 2
        low, mid, high = at([first, middle, last])
        line = low + (high - low) * (middle - first) / (last - first)
        if abs(mid - line) <= 1e-9 * max(abs(line), 1e-12):
            total += (low + high) / 2 * (last - first + 1)
        else:
            stack += [(first, middle), (middle + 1, last)]
    return total


def prefill_ms(loads: Sequence[StageLoad], rates: Sequence[Rates],
               hop_fixed_ms: Sequence[float], hop_ms_per_token: Sequence[float],
               traffic: ModelTraffic, prompt: Prompt, *,
               stage_weights: Sequence[bool] | None = None) -> float:
    """Time to process ``prompt``: each batch's micro-batches flow through the stages as a
    pipeline (:func:`pipeline_ms`), each crossing every hop (a fixed time and its
    activations); the batches follow one another (summed with bounded work,
    :func:`batch_sum`)."""
    staged = stage_weights or [False] * len(loads)
    hops = len(loads) - 1

    def batch_ms(indices: Sequence[int]) -> np.ndarray:
        shapes = [prompt.batch_shape(i) for i in indices]
        width = max(len(tokens) for tokens, _ in shapes)
        tokens = np.zeros((len(shapes), width))
        before = np.zeros((len(shapes), width))
        for row, (size, cached) in enumerate(shapes):
            tokens[row, :len(size)] = size
            before[row, :len(size)] = cached
        present = tokens > 0
        times = np.zeros((len(shapes), len(loads), width))
        for s, (load, rate, stage) in enumerate(zip(loads, rates, staged, strict=True)):
            work = step_work(load, traffic, tokens=np.maximum(tokens, 1), sequences=1,
                             cached=before + tokens, attended=before + tokens / 2,
                             overlapped=True, stage_weights=stage)
            times[:, s, :] = np.where(present, step_ms(work, rate), 0.0)
        hop = np.zeros((len(shapes), max(hops, 1), width))
        for h in range(hops):
            hop[:, h, :] = np.where(present, hop_fixed_ms[h] + tokens * hop_ms_per_token[h],
                                    0.0)
        return pipeline_ms(times, hop)

    breaks = sorted({load.window for load in loads if load.window})
    return batch_sum(prompt, batch_ms, breaks)


@dataclass(frozen=True, slots=True)
class Device:
    """One stage's GPU as the estimate reads it: its :class:`Rates` at the run's settings,
    whether its products stage quantized weights as FP16, its fixed time per hop, which
    FP16 figure it computes with (``"stated"``, or a stand-in) and its backend."""

    rates: Rates
    stages_weights: bool = False
    hop_ms: float = 0.0
    figure: str = "stated"
    backend: str | None = None
