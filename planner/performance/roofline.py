"""The roofline terms of one stage's time (weights and cache read at a share of peak
bandwidth, matrix and attention FLOPs at a share of peak FP16 throughput, fixed times),
and how they add up to a decode step and to a prompt's prefill."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.limits import DEFAULT_BATCH, DEFAULT_UBATCH
from planner.performance.calibration import FALLBACK_BACKEND, SpeedCalibration
from planner.performance.traffic import ModelTraffic, StageLoad

# A prompt's batches and their ubatches: llama.cpp's defaults (-b, -ub).
BATCH_TOKENS = DEFAULT_BATCH
UBATCH_TOKENS = DEFAULT_UBATCH


@dataclass(frozen=True, slots=True)
class Device:
    """What the estimate reads of one stage's GPU, with the calibrated figures applied."""

    bandwidth_bytes_per_s: float
    weight_efficiency: float
    kv_efficiency: float
    compute_flops_per_s: float | None  # e_c x fp16_tflops, None without a figure
    layer_ms: float
    attention_flops_per_s: float | None = None  # e_att x fp16_tflops
    quantized_compute_factor: float = 1.0
    half_rate_tokens: float = 0.0
    staging_bytes_per_parameter: float = 0.0
    attention_score_bytes: float = 0.0
    activation_bytes: float = 0.0
    expert_batch_ms: float = 0.0

    def matrix_rate(self, tokens: Any, quantized: bool) -> Any:
        """FLOP/s of a matrix product over ``tokens`` tokens (``inf``: the full rate)."""
        rate = (self.compute_flops_per_s or 0.0) * (
            self.quantized_compute_factor if quantized else 1.0)
        if not isinstance(tokens, np.ndarray) and math.isinf(tokens):
            return rate
        return rate * tokens / (tokens + self.half_rate_tokens)


@dataclass(frozen=True, slots=True)
class StageTerms:
    """The terms of one stage's time for one decode step or prefill ubatch, in ms. A
    decode step's matrix-vector kernels read each weight once and do little work with
    it: its compute adds to the read. A ubatch's matrix-matrix kernels compute while the
    weights stream in (``overlap``): the slower of the two counts."""

    weight_ms: Any  # a number, or an array of one per ubatch
    kv_ms: Any
    compute_ms: Any
    attention_ms: Any
    fixed_ms: float
    overlap: bool = False
    staging_ms: Any = 0.0  # a ubatch's quantized weights staged as FP16
    activation_ms: Any = 0.0  # a ubatch's activations moved between its kernels
    # A decode step of several tokens multiplies its routed experts with the
    # matrix-matrix kernel, which computes while the experts stream in: their read and
    # compute, apart from weight_ms and compute_ms (0 otherwise).
    routed_weight_ms: Any = 0.0
    routed_compute_ms: Any = 0.0

    @property
    def total_ms(self) -> Any:
        matrix = (np.maximum(self.weight_ms, self.compute_ms) if self.overlap else
                  self.weight_ms + self.compute_ms)
        return (matrix + np.maximum(self.routed_weight_ms, self.routed_compute_ms)
                + self.staging_ms + self.activation_ms + self.kv_ms + self.attention_ms
                + self.fixed_ms)


def stage_terms(load: StageLoad, device: Device, traffic: ModelTraffic, *, tokens: Any,
                kv_read_tokens: Any, attention_pairs: Any, cached: Any,
                overlap: bool = False) -> StageTerms:
    """One stage's time for ``tokens`` tokens computed at once (a decode step of
    ``tokens`` lanes, or a ubatch): the weights a step of that many tokens reads, the
    cache of ``cached`` tokens read ``kv_read_tokens / cached`` times over, and
    ``attention_pairs`` (query, cached token) pairs of attention compute.

    A mixture of experts' routed experts are read once each, as many as the tokens'
    independent routings reach (:meth:`ModelTraffic.expert_share`). One token's run
    llama.cpp's matrix-vector kernel; two or more tokens' its matrix-matrix one
    (``mul_mat_id`` with MMQ, as a ubatch's), one small product per expert used: each
    computes only the tokens routed to it, below the full rate
    (:meth:`Device.matrix_rate`), and each layer pays ``expert_batch_ms`` to route the
    tokens to their experts."""
    read_rate = device.weight_efficiency * device.bandwidth_bytes_per_s
    routed = load.routed_expert_bytes if traffic.routed_bytes else 0
    share = traffic.expert_share(tokens)
    shared: Any = (load.weight_bytes - routed if routed else
                   load.weight_bytes * traffic.read_share(tokens))
    shared_ms = (shared + load.embedding_row_bytes * tokens) / read_rate * 1000
    routed_ms = routed * share / read_rate * 1000
    # Several tokens' routed experts: the matrix-matrix kernel (a ubatch's always).
    batched = bool(routed) and (overlap or bool(np.all(np.asarray(tokens) > 1)))
    weight_ms = shared_ms + routed_ms
    kv = load.kv_bytes(cached) * (kv_read_tokens / np.maximum(cached, 1))
    if overlap and traffic.quantized and device.staging_bytes_per_parameter:
        # A ubatch's quantized weights staged as FP16 before the product: the
        # parameters of every weight it reads (the routed experts its tokens use).
        routed_all = load.routed_active_parameters * (
            (traffic.expert_count or 1) / (traffic.experts_used or 1))
        staged = (load.active_parameters - load.routed_active_parameters
                  + routed_all * share)
        staging_ms = (staged * device.staging_bytes_per_parameter
                      / (device.weight_efficiency * device.bandwidth_bytes_per_s) * 1000)
    else:
        staging_ms = 0.0
    activation_ms = 0.0
    if overlap and device.activation_bytes and traffic.hidden_size:
        activation_ms = (tokens * load.active_parameters / traffic.hidden_size
                         * device.activation_bytes
                         / (device.weight_efficiency * device.bandwidth_bytes_per_s) * 1000)
    kv_ms = kv / (device.kv_efficiency * device.bandwidth_bytes_per_s) * 1000
    compute_ms = attention_ms = routed_compute_ms = 0.0
    if device.compute_flops_per_s is not None:
        # Batched routed experts each multiply only the tokens routed to them (the
        # step's k x tokens routings over the experts they reach): small products,
        # below the full rate. One token's kernels are matrix-vector ones, whose compute
        # is the plain rate's.
        routed_active = load.routed_active_parameters if batched else 0.0
        reached = np.maximum(share * (traffic.expert_count or 1), 1e-9)
        routed_tokens = np.maximum(tokens * (traffic.experts_used or 1) / reached, 1e-9)
        full = device.matrix_rate(math.inf, traffic.quantized)
        compute_ms = 1000 * 2 * (load.active_parameters - routed_active) * tokens / full
        routed_compute_ms = (1000 * 2 * routed_active * tokens
                             / device.matrix_rate(routed_tokens, traffic.quantized)
                             if routed_active else 0.0)
        attention = device.attention_flops_per_s or device.compute_flops_per_s
        attention_ms = 4 * attention_pairs / attention * 1000
    if device.attention_score_bytes:
        attention_ms = attention_ms + (attention_pairs * device.attention_score_bytes / (
            device.kv_efficiency * device.bandwidth_bytes_per_s) * 1000)
    fixed_ms = load.layer_count * (device.layer_ms
                                   + (device.expert_batch_ms if batched else 0.0))
    if overlap:
        return StageTerms(weight_ms, kv_ms, compute_ms + routed_compute_ms, attention_ms,
                          fixed_ms, True, staging_ms, activation_ms)
    if batched:
        return StageTerms(shared_ms, kv_ms, compute_ms, attention_ms, fixed_ms,
                          routed_weight_ms=routed_ms, routed_compute_ms=routed_compute_ms)
    return StageTerms(weight_ms, kv_ms, compute_ms, attention_ms, fixed_ms)


def decode_step(loads: Sequence[StageLoad], devices: Sequence[Device],
                hops_ms: Sequence[float], hop_bytes_per_token: int,
                link_bytes_per_s: Sequence[float], traffic: ModelTraffic, *, lanes: int,
                cached: int) -> tuple[list[StageTerms], list[float]]:
    """Stage terms and hop times of one decode step: ``lanes`` tokens, each lane with
    ``cached / lanes`` tokens in the cache (``cached`` cells read in all)."""
    terms = []
    for load, device in zip(loads, devices, strict=True):
        full, windowed = load.kv_tokens(max(1, cached // lanes))
        pairs = lanes * (load.attention_width * full + load.window_attention_width * windowed)
        terms.append(stage_terms(load, device, traffic, tokens=lanes, kv_read_tokens=cached,
                                 attention_pairs=pairs, cached=cached))
    hops = [fixed + lanes * hop_bytes_per_token / link * 1000
            for fixed, link in zip(hops_ms, link_bytes_per_s, strict=True)]
    return terms, hops



def ubatches(prompt_tokens: int, depth: int = 0, *, batch_tokens: int = BATCH_TOKENS,
             ubatch_tokens: int = UBATCH_TOKENS) -> list[list[tuple[int, int]]]:
    """A prompt's batches, each a list of ``(tokens, depth)`` ubatches, as llama.cpp
    splits it."""
    batches = []
    done = 0
    while done < prompt_tokens:
        size = min(batch_tokens, prompt_tokens - done)
        batch = []
        for start in range(0, size, ubatch_tokens):
            batch.append((min(ubatch_tokens, size - start), depth + done + start))
        batches.append(batch)
        done += size
    return batches


def prefill_ms(loads: Sequence[StageLoad], devices: Sequence[Device],
               hops_ms: Sequence[float], hop_bytes_per_token: int,
               link_bytes_per_s: Sequence[float], traffic: ModelTraffic, *,
               prompt_tokens: int, depth: int = 0, batch_tokens: int = BATCH_TOKENS,
               ubatch_tokens: int = UBATCH_TOKENS) -> float:
    """Time to process a prompt of ``prompt_tokens`` after ``depth`` cached tokens: the
    ubatches of each batch flow through the stages as a pipeline (a stage starts a ubatch
    when it has finished the previous one and the ubatch has crossed the hop to it); the
    batches follow one another. Computed for all batches at once: ``tokens[b, j]`` and
    ``at[b, j]`` are the size and depth of batch ``b``'s ubatch ``j`` (0 tokens where a
    batch has fewer)."""
    batches = ubatches(prompt_tokens, depth, batch_tokens=batch_tokens,
                       ubatch_tokens=ubatch_tokens)
    width = max(len(batch) for batch in batches)
    tokens = np.zeros((len(batches), width))
    at = np.zeros((len(batches), width))
    for b, batch in enumerate(batches):
        for j, (size, first) in enumerate(batch):
            tokens[b, j], at[b, j] = size, first
    present = tokens > 0
    times = []
    for load, device in zip(loads, devices, strict=True):
        windowed_prior = np.minimum(at, load.window) if load.window else 0 * at
        pairs = (load.attention_width * (tokens * at + tokens * tokens / 2)
                 + load.window_attention_width * tokens * (
                     np.minimum(windowed_prior + tokens / 2, load.window) if load.window
                     else 0 * at))
        step = stage_terms(load, device, traffic, tokens=tokens, kv_read_tokens=at + tokens,
                           attention_pairs=pairs, cached=at + tokens, overlap=True).total_ms
        times.append(np.where(present, step, 0.0))
    hops = [np.where(present, fixed + tokens * hop_bytes_per_token / link * 1000, 0.0)
            for fixed, link in zip(hops_ms, link_bytes_per_s, strict=True)]
    free = [np.zeros(len(batches)) for _ in loads]
    for j in range(width):
        ready = np.zeros(len(batches))
        for index in range(len(loads)):
            if index:
                ready = ready + hops[index - 1][:, j]
            start = np.maximum(ready, free[index])
            finish = start + times[index][:, j]
            free[index] = np.where(present[:, j], finish, free[index])
            ready = finish
    return float(np.max(np.stack(free), axis=0).sum())



def calibrated_device(calibration: SpeedCalibration, bandwidth_bytes_per_s: float,
                      memory_type: str | None, backend: str | None,
                      fp16_tflops: float | None, notes: list[str]) -> Device:
    """A GPU kind's :class:`Device` with the calibration's figures for its memory type
    and backend."""
    e_w, e_kv, e_c, e_att = calibration.efficiencies(memory_type, backend, notes)
    flops = None if fp16_tflops is None else fp16_tflops * 1e12
    matrix = None if flops is None else e_c * flops
    return Device(bandwidth_bytes_per_s, e_w, e_kv, matrix,
                  calibration.fixed_ms(calibration.layer_ms, backend, notes, "per-layer time"),
                  None if flops is None else e_att * flops,
                  calibration.quantized_compute_factor.get(backend or FALLBACK_BACKEND, 1.0),
                  calibration.half_rate_tokens.get(backend or FALLBACK_BACKEND, 0.0),
                  calibration.staging_bytes_per_parameter.get(
                      SpeedCalibration.key(memory_type, backend), 0.0),
                  calibration.attention_score_bytes.get(
                      SpeedCalibration.key(memory_type, backend), 0.0),
                  calibration.activation_bytes.get(
                      SpeedCalibration.key(memory_type, backend), 0.0),
                  calibration.expert_batch_ms.get(backend or FALLBACK_BACKEND, 0.0))

