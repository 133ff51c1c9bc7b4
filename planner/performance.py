"""An ESTIMATE of decode and prefill speed and of cost for a plan (pure: no widgets, no
plotting), calibrated on published llama.cpp measurements.

**Decode** (one step: one new token for each of the plan's ``B`` busy lanes). Each stage
``i`` of ``L_i`` layers on a GPU of peak bandwidth ``BW_i`` and dense FP16 throughput
``TF_i`` takes

``stage_ms[i] = weight_read / (e_w x BW_i) + kv_read / (e_kv x BW_i)
+ flops / (e_c x TF_i) + L_i x layer_ms``

- ``weight_read``: the stage's weights without the token embeddings (a token looks up one
  row of those, at most ``hidden_size x 2`` bytes, counted per lane); of a mixture of
  experts, the shared weights plus the expected share of its routed experts that the
  step's ``B`` tokens use, ``1 - (1 - k/n)^B`` of ``n`` experts with ``k`` used per
  token (independent routing: two lanes rarely pick the same experts). A spec that gives
  only ``active_weight_bytes`` reads that share, whatever ``B``. Two or more lanes run
  the routed experts with llama.cpp's matrix-matrix kernel: their read overlaps their
  compute (each expert's few tokens below the full rate), and each layer pays
  ``expert_batch_ms`` (per backend) that one token's matrix-vector kernel does not.
- ``kv_read``: the stage's KV cache at the plan's context (the last token of a full
  context, the slowest), read at its own efficiency ``e_kv``: attention reads the cache
  less efficiently than matrix kernels read weights (published depth sweeps slow decode
  more than the bytes say).
- ``flops = 2 x active parameters x B + 4 x attention width x cached tokens`` per layer:
  the compute that caps large batches (with ``e_c x TF`` the ceiling; a kind without
  ``fp16_tflops`` has no ceiling, and the estimate says so).
- ``layer_ms``: a fixed time per layer and step (kernel launches, synchronisation) that
  bandwidth does not explain: a small model on a fast GPU is slower than its bytes say.

``hop_ms = hop_ms(backend) + stage_transfer_latency_ms + B x hidden_size x 4 / link``
for each of the ``stages - 1`` hops (llama.cpp passes F32 activations, one row of
``n_embd`` values per token). ``estimated_tpot_ms = sum(stage_ms) + sum(hop_ms)``,
``tokens_per_s = B x 1000 / estimated_tpot_ms``.

**Prefill** (a prompt of ``P`` tokens): llama.cpp splits it into batches of
:data:`BATCH_TOKENS` and those into ubatches of :data:`UBATCH_TOKENS`; a ubatch of ``u``
tokens at depth ``d`` takes, on each stage, the same formula with every weight read once
(all experts a ubatch routes to), the cache up to ``d + u`` read once, and
``flops = 2 x active parameters x u + 4 x attention width x (u x d + u^2 / 2)`` per
layer (attention's term grows with the prompt), and three transfers beside the weights,
each a fitted number of bytes per memory type and backend: quantized weights staged as
FP16 before the product (``staging_bytes_per_parameter`` per parameter the ubatch
multiplies, at ``e_w``), the activations passed between the ubatch's kernels
(``activation_bytes`` per token and unit of matrix width, active parameters /
``hidden_size``, at ``e_w``) and attention's scores written and read back
(``attention_score_bytes`` per unit of ``attention width x (query, cached token)``
pairs, at ``e_kv``; a decode step pays it too). The ubatches of a batch flow through the
stages as a pipeline (llama.cpp keeps several in flight across devices), each crossing
every hop (``u x hidden_size x 4`` bytes): a prompt of one ubatch gains nothing from more
stages, a long one approaches the slowest stage's rate. ``ttft_ms`` is the prefill of a
prompt; ``estimated_context_fill_ms`` the prefill of the plan's whole context.

The efficiencies ``e_w``, ``e_kv``, ``e_c`` (per memory type and backend) and the fixed
``layer_ms`` and ``hop_ms`` (per backend) are fitted to published measurements
(``validation/speed/``) and shipped in ``planner/data/speed-calibration.toml`` with
their held-out error (:class:`SpeedCalibration`). ``bandwidth_efficiency=x`` instead
applies one efficiency to weights and cache and no fixed times: the plain
bandwidth-bound estimate.

``cost_per_hour_usd = sum(price_per_hour)`` over the nodes paid for, and
``cost_per_million_tokens_usd = cost_per_hour_usd / (tokens_per_s x 3600) x 10**6``.

Everything here is an estimate and is labelled so wherever it is shown
(:data:`ESTIMATE_NOTE`, :meth:`SpeedCalibration.error_note`).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from planner._validate import Fail, integer, number, shown
from planner.errors import CodedError
from planner.limits import DEFAULT_BATCH, DEFAULT_UBATCH, MAX_BANDWIDTH_BYTES_PER_S
from planner.models.gpus import GpuModel, node_gpu_kinds
from planner.models.presets import data_dir
from planner.models.spec import ModelSpec
from planner.planning.inputs import NodeBudget, PlanningInput
from planner.planning.plan import Plan
from planner.planning.rules import (
    at_context,
    build_stages,
    kv_bytes_per_layer_token,
    layer_bytes,
    layer_weights,
    request_for_stages,
    walk_stages,
)

DEFAULT_LINK_BANDWIDTH_BYTES_PER_S = 1_250_000_000  # 10 Gb/s
ACTIVATION_BYTES_PER_VALUE = 4  # F32 activations between llama.cpp devices
EMBEDDING_ROW_BYTES_PER_VALUE = 2  # one token-embedding row, at most F16
# GPUs of one machine pass activations over PCIe 4.0 x16: 16 GT/s x 16 lanes, about
# 31.5 GB/s each way (docs/sources.md §3).
INTRA_HOST_LINK_BYTES_PER_S = 31_500_000_000
# A prompt's batches and their ubatches: llama.cpp's defaults (-b, -ub).
BATCH_TOKENS = DEFAULT_BATCH
UBATCH_TOKENS = DEFAULT_UBATCH
ESTIMATE_NOTE = ("Estimated, not measured: decode and prefill speed and cost come from "
                 "vendor bandwidth and FLOPS at efficiencies fitted to published llama.cpp "
                 "measurements (validation/speed); the error measured on held-out "
                 "measurements is stated with each estimate.")

ESTIMATE_COLUMNS = ("estimated_tpot_ms", "tokens_per_s", "estimated_context_fill_ms",
                    "cost_per_hour_usd", "cost_per_million_tokens_usd")
# Where a kind's memory type or backend was not measured, these stand in (and the
# estimate says so).
FALLBACK_MEMORY_TYPE = "gddr"
FALLBACK_BACKEND = "cuda"


class PerformanceError(CodedError):
    """A speed estimate that cannot be made.

    ``code`` is stable: ``InvalidPerformanceInput`` (a bad efficiency, bandwidth or model
    figure, naming the field), ``MissingNodeSpeed`` (a stage's node has no memory
    bandwidth; ``node_id`` names it) or ``InvalidCalibration`` (a calibration file that
    cannot be used, naming the field).
    """

    codes = ("InvalidPerformanceInput", "MissingNodeSpeed", "InvalidCalibration")


def _bad(name: str) -> Fail:
    return lambda problem, value: PerformanceError(
        "InvalidPerformanceInput", f"{name}: {problem} (got {shown(value)})",
        field=name, value=value)


def _positive(value: Any, name: str) -> int:
    return integer(value, _bad(name), minimum=1)


def _check_efficiency(efficiency: Any, name: str = "bandwidth_efficiency") -> float:
    return float(number(efficiency, _bad(name), above=0, maximum=1))


@dataclass(frozen=True, slots=True)
class ModelTraffic:
    """What a model's steps move and compute: its weight bytes and the share one token
    reads, the activations' width, and (optional) parameters, routed experts, token
    embeddings and attention width for the compute terms."""

    model_weight_bytes: int
    active_weight_bytes: int
    hidden_size: int | None
    active_parameter_count: int | None = None
    expert_count: int | None = None
    experts_used: int | None = None
    token_embedding_bytes: int | None = None
    # Query heads x head size; the hidden size when not given.
    attention_width: int | None = None
    parameter_count: int | None = None
    # All routed experts' bytes when the model states them (a preset's parts, a GGUF's
    # ``*_exps`` tensors); else derived from ``active_weight_bytes`` (:attr:`routed_bytes`).
    routed_expert_bytes: int | None = None

    @property
    def quantized(self) -> bool:
        """Weights stored below 12 bits per parameter on average (llama.cpp multiplies
        them with its quantized kernels, not FP16 GEMM); unknown counts as not."""
        if self.parameter_count is None:
            return False
        return self.model_weight_bytes * 8 < 12 * self.parameter_count

    def __post_init__(self) -> None:
        for name in ("model_weight_bytes", "active_weight_bytes"):
            object.__setattr__(self, name, _positive(getattr(self, name), name))
        if self.active_weight_bytes > self.model_weight_bytes:
            raise PerformanceError("InvalidPerformanceInput",
                                   "active_weight_bytes exceeds model_weight_bytes",
                                   field="active_weight_bytes")
        for name in ("hidden_size", "active_parameter_count", "expert_count",
                     "experts_used", "token_embedding_bytes", "attention_width",
                     "parameter_count"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _positive(getattr(self, name), name))
        if (self.expert_count is None) != (self.experts_used is None):
            raise PerformanceError("InvalidPerformanceInput",
                                   "expert_count and experts_used go together",
                                   field="experts_used")
        if (self.expert_count is not None and self.experts_used is not None
                and self.experts_used > self.expert_count):
            raise PerformanceError("InvalidPerformanceInput",
                                   f"experts_used exceeds expert_count {self.expert_count}",
                                   field="experts_used", value=self.experts_used)
        if self.routed_expert_bytes is not None:
            object.__setattr__(self, "routed_expert_bytes", integer(
                self.routed_expert_bytes, _bad("routed_expert_bytes"), minimum=0,
                maximum=self.model_weight_bytes))
        if (self.token_embedding_bytes or 0) >= self.model_weight_bytes:
            raise PerformanceError("InvalidPerformanceInput",
                                   "token_embedding_bytes must be below model_weight_bytes",
                                   field="token_embedding_bytes")

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> ModelTraffic:
        """A model's traffic; a spec without ``active_weight_bytes`` reads every weight."""
        return cls(spec.model_weight_bytes,
                   spec.active_weight_bytes or spec.model_weight_bytes, spec.hidden_size,
                   active_parameter_count=spec.active_parameter_count,
                   expert_count=spec.expert_count, experts_used=spec.experts_used,
                   token_embedding_bytes=spec.token_embedding_bytes,
                   parameter_count=spec.parameter_count,
                   routed_expert_bytes=spec.routed_expert_bytes)

    @classmethod
    def dense(cls, model_weight_bytes: int, hidden_size: int | None = None,
              parameter_count: int | None = None) -> ModelTraffic:
        return cls(model_weight_bytes, model_weight_bytes, hidden_size,
                   active_parameter_count=parameter_count, parameter_count=parameter_count)

    @property
    def routed_bytes(self) -> int:
        """Bytes of the routed experts, all of them: as the model states them, else
        from ``active = model - routed + routed x k / n`` (numbers typed by hand); 0 for a
        dense model or one whose experts are not given."""
        if self.expert_count is None or self.experts_used is None or (
                self.experts_used >= self.expert_count):
            return 0
        if self.routed_expert_bytes is not None:
            return self.routed_expert_bytes
        unread = self.model_weight_bytes - self.active_weight_bytes
        share = 1 - self.experts_used / self.expert_count
        return min(self.model_weight_bytes, round(unread / share))

    def expert_share(self, tokens: int) -> float:
        """Expected share of the routed experts ``tokens`` independently routed tokens
        use: ``1 - (1 - k/n)^tokens``."""
        if self.expert_count is None or self.experts_used is None:
            return 1.0
        return 1 - (1 - self.experts_used / self.expert_count) ** tokens

    def read_share(self, tokens: int) -> float:
        """The share of the weights beside the token embeddings that a step of
        ``tokens`` tokens reads: the shared weights whole and the expected share of the
        routed experts; without them, all of it when the embeddings are known (they are
        apart), else the ``active_weight_bytes`` share."""
        body = self.model_weight_bytes - (self.token_embedding_bytes or 0)
        routed = self.routed_bytes
        if routed:
            return (body - routed + routed * self.expert_share(tokens)) / body
        if self.token_embedding_bytes is not None:
            return 1.0
        return self.active_weight_bytes / self.model_weight_bytes


# The numbers of a fleet file's ``[model]`` that ask for a speed estimate: numbers
# without any of them are a model whose traffic is unknown (a mixture of experts typed
# as its bytes alone would be estimated reading every weight).
SPEED_FIELDS = ("hidden_size", "active_weight_bytes", "parameter_count", "expert_count",
                "experts_used")


def model_traffic(spec: ModelSpec | None, numbers: Mapping[str, Any] | None = None
                  ) -> ModelTraffic | None:
    """A model's traffic: from its spec (preset or GGUF), else from numbers typed by hand
    that state at least one of :data:`SPEED_FIELDS` (a fleet file's ``[model]``:
    ``model_weight_bytes`` and the optional ``active_weight_bytes``, ``hidden_size``,
    ``parameter_count``, ``expert_count``, ``experts_used``); ``None`` otherwise. A
    hand-typed mixture of experts computes with ``parameter_count x active_weight_bytes /
    model_weight_bytes`` parameters per token."""
    if spec is not None:
        return ModelTraffic.from_spec(spec)
    if not numbers or "model_weight_bytes" not in numbers or all(
            numbers.get(name) is None for name in SPEED_FIELDS):
        return None
    weight = numbers["model_weight_bytes"]
    active = numbers.get("active_weight_bytes") or weight
    parameters = numbers.get("parameter_count")
    return ModelTraffic(weight, active, numbers.get("hidden_size"),
                        active_parameter_count=(None if parameters is None else
                                                max(1, round(parameters * active / weight))),
                        expert_count=numbers.get("expert_count"),
                        experts_used=numbers.get("experts_used"),
                        parameter_count=parameters)


@dataclass(frozen=True, slots=True)
class NodeSpeed:
    """What the estimate needs to know about one node (from its catalog kind)."""

    node_id: str
    memory_bandwidth_bytes_per_s: int | None
    price_per_hour: float | None
    kind: str | None = None
    memory_type: str | None = None
    backend: str | None = None
    fp16_tflops: float | None = None

    @classmethod
    def of_kind(cls, node_id: str, gpu: GpuModel) -> NodeSpeed:
        return cls(node_id, gpu.memory_bandwidth_bytes_per_s, gpu.price_per_hour, gpu.kind,
                   gpu.memory_type, gpu.backend, gpu.fp16_tflops)


@dataclass(frozen=True, slots=True)
class HeldOutError:
    """The estimate's error on measurements the fit did not see: ``median_abs_error``
    of (estimate - measured) / measured over ``rows`` rows of one phase (``decode`` or
    ``prefill``) and memory type (``all`` for every one)."""

    phase: str
    memory_type: str
    rows: int
    median_abs_error: float


# The efficiency tables of a calibration, each per ``memory_type/backend``: weights and KV
# cache read (shares of peak bandwidth), matrix and attention compute (shares of
# fp16_tflops).
EFFICIENCY_TABLES = ("weight_efficiency", "kv_efficiency", "compute_efficiency",
                     "attention_efficiency")


@dataclass(frozen=True, slots=True)
class SpeedCalibration:
    """The fitted figures: efficiencies per ``memory_type/backend`` (``e_w`` weights,
    ``e_kv`` cache, ``e_c`` compute, shares of peak), fixed times per backend
    (``layer_ms`` per layer and step or ubatch, ``hop_ms`` per hop), and the held-out
    error the fit was measured with."""

    weight_efficiency: Mapping[str, float]
    kv_efficiency: Mapping[str, float]
    compute_efficiency: Mapping[str, float]
    attention_efficiency: Mapping[str, float]
    layer_ms: Mapping[str, float]
    hop_ms: Mapping[str, float]
    # Per backend: the share of compute_efficiency quantized weights' kernels reach.
    quantized_compute_factor: Mapping[str, float] = field(default_factory=dict)
    # Per backend: the tokens at which a matrix product runs at half its full rate (a
    # product over m tokens runs at m / (m + half) of it): a routed expert multiplies
    # only the tokens routed to it, a decode step only its lanes.
    half_rate_tokens: Mapping[str, float] = field(default_factory=dict)
    # Per ``memory_type/backend``: bytes per parameter a prefill ubatch moves, beside
    # the weights' own read, to turn quantized weights into FP16 before multiplying
    # them (llama.cpp builds of 2024 did so for batches over 32 tokens on tensor-core
    # GPUs: read the quantized block, write its FP16 copy). 0 where kernels multiply
    # quantized weights directly.
    staging_bytes_per_parameter: Mapping[str, float] = field(default_factory=dict)
    # Per ``memory_type/backend``: bytes attention moves per (query, cached token) pair
    # and unit of attention width, read at the cache's efficiency: without flash
    # attention llama.cpp writes each head's scores to memory, softmaxes them there and
    # reads them back (4 B a score, ``head size`` width units a head).
    attention_score_bytes: Mapping[str, float] = field(default_factory=dict)
    # Per ``memory_type/backend``: bytes a prefill ubatch moves per token and unit of
    # matrix width (active parameters / hidden size: the summed output widths of a
    # layer's products) between its kernels, read at the weights' efficiency: llama.cpp's
    # matrix-matrix products convert each product's F32 input to F16 and its F16 output
    # back, and the norms, RoPE, activations and residual adds each read and write the
    # ubatch. Bandwidth-bound, so it does not shrink with a GPU's FLOPS: on an H100 it
    # is a larger share of a ubatch than on an A100 of the same bandwidth.
    activation_bytes: Mapping[str, float] = field(default_factory=dict)
    # Per backend: ms per layer a step of two or more tokens pays to run its routed
    # experts through the matrix-matrix kernel (llama.cpp's mul_mat_id: sorting the
    # tokens by expert and laying their activations out for MMQ), which a single
    # token's matrix-vector kernel does not (llama.cpp pull request 18958 measured the
    # dip this makes at two tokens).
    expert_batch_ms: Mapping[str, float] = field(default_factory=dict)
    held_out: tuple[HeldOutError, ...] = ()
    source: str = "planner/data/speed-calibration.toml"
    measured_here: tuple[str, ...] = ()
    """The ``memory_type/backend`` keys whose figures and held-out errors come from the
    user's own measurements (``planner calibrate``), not the published ones."""

    def __post_init__(self) -> None:
        for name in EFFICIENCY_TABLES:
            table = getattr(self, name)
            if not table:
                raise PerformanceError("InvalidCalibration", f"{name} is empty", field=name)
            for key, value in table.items():
                _check_efficiency(value, f"{name}.{key}")
        for key, value in self.quantized_compute_factor.items():
            _check_efficiency(value, f"quantized_compute_factor.{key}")
        for key, value in self.staging_bytes_per_parameter.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    0 <= value <= 8):
                raise PerformanceError("InvalidCalibration",
                                       f"staging_bytes_per_parameter.{key} must be in "
                                       "[0, 8] bytes", field=f"staging_bytes_per_parameter.{key}",
                                       value=value)
        for key, value in self.activation_bytes.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    0 <= value <= 256):
                raise PerformanceError("InvalidCalibration",
                                       f"activation_bytes.{key} must be in [0, 256] bytes",
                                       field=f"activation_bytes.{key}", value=value)
        for key, value in self.attention_score_bytes.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    0 <= value <= 1):
                raise PerformanceError("InvalidCalibration",
                                       f"attention_score_bytes.{key} must be in [0, 1] bytes",
                                       field=f"attention_score_bytes.{key}", value=value)
        for name in ("layer_ms", "hop_ms", "expert_batch_ms"):
            for key, value in getattr(self, name).items():
                if isinstance(value, bool) or not isinstance(value, int | float) or not (
                        0 <= value < 1000):
                    raise PerformanceError("InvalidCalibration",
                                           f"{name}.{key} must be in [0, 1000) ms",
                                           field=f"{name}.{key}", value=value)

    @property
    def max_read_efficiency(self) -> float:
        """The highest share of peak bandwidth any weight or cache read reaches: a bound
        below every stage's read time."""
        return max([*self.weight_efficiency.values(), *self.kv_efficiency.values()])

    @staticmethod
    def key(memory_type: str | None, backend: str | None) -> str:
        return f"{memory_type or FALLBACK_MEMORY_TYPE}/{backend or FALLBACK_BACKEND}"

    def _pick(self, table: Mapping[str, float], memory_type: str | None,
              backend: str | None, notes: list[str], what: str) -> float:
        wanted = self.key(memory_type, backend)
        if memory_type is None or backend is None:
            notes.append(f"a GPU kind states no memory type or backend: {wanted}'s "
                         "figures used")
        if wanted in table:
            return table[wanted]
        # The same memory type on another backend, else the fallback pair.
        same = sorted(k for k in table if k.split("/")[0] == (memory_type or ""))
        used = same[0] if same else self.key(None, None)
        if used not in table:
            used = sorted(table)[0]
        notes.append(f"{what}: no measurement of {wanted}; {used}'s figure used")
        return table[used]

    def efficiencies(self, memory_type: str | None, backend: str | None,
                     notes: list[str]) -> tuple[float, float, float, float]:
        """``(e_w, e_kv, e_c, e_att)`` of a memory type and backend."""
        return tuple(self._pick(getattr(self, name), memory_type, backend, notes,
                                name.replace("_", " "))
                     for name in EFFICIENCY_TABLES)  # type: ignore[return-value]

    def fixed_ms(self, table: Mapping[str, float], backend: str | None,
                 notes: list[str], what: str) -> float:
        if backend is not None and backend in table:
            return table[backend]
        notes.append(f"{what}: no measurement of backend {backend}; "
                     f"{FALLBACK_BACKEND}'s figure used")
        return table.get(FALLBACK_BACKEND, 0.0)

    def error(self, phase: str, memory_type: str | None) -> HeldOutError | None:
        """The held-out error of ``phase`` for ``memory_type`` (else all memory types)."""
        found = {(e.phase, e.memory_type): e for e in self.held_out}
        return found.get((phase, memory_type or "")) or found.get((phase, "all"))

    def error_note(self, memory_types: Iterable[str | None] = ()) -> str:
        """One sentence: the estimate's measured error for these memory types (and
        whether it is the user's own, :attr:`measured_here`)."""
        kinds = sorted({m for m in memory_types if m}) or ["all"]
        parts = []
        for phase in ("decode", "prefill"):
            shown = [f"{e.median_abs_error:.0%} ({e.memory_type}, {e.rows} rows)"
                     for e in (self.error(phase, kind) for kind in kinds) if e is not None]
            if shown:
                parts.append(f"{phase} {', '.join(shown)}")
        if not parts:
            return "The estimate's error was not measured."
        own = sorted({key.split("/")[0] for key in self.measured_here} & set(kinds))
        if own:
            return (f"Uses your own measurements for {', '.join(own)} ({self.source}); median "
                    "error on held-out runs (yours for those, published ones for the "
                    "rest): " + "; ".join(parts) + ".")
        return ("Median error on held-out published measurements: " + "; ".join(parts)
                + ".")

    def to_dict(self) -> dict[str, Any]:
        return {**{name: dict(getattr(self, name)) for name in EFFICIENCY_TABLES},
                "layer_ms": dict(self.layer_ms), "hop_ms": dict(self.hop_ms),
                "quantized_compute_factor": dict(self.quantized_compute_factor),
                "half_rate_tokens": dict(self.half_rate_tokens),
                "staging_bytes_per_parameter": dict(self.staging_bytes_per_parameter),
                "attention_score_bytes": dict(self.attention_score_bytes),
                "activation_bytes": dict(self.activation_bytes),
                "expert_batch_ms": dict(self.expert_batch_ms),
                "held_out": [{"phase": e.phase, "memory_type": e.memory_type,
                              "rows": e.rows, "median_abs_error": e.median_abs_error}
                             for e in self.held_out],
                "measured_here": list(self.measured_here)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "calibration") -> SpeedCalibration:
        known = (*EFFICIENCY_TABLES, "layer_ms", "hop_ms", "quantized_compute_factor",
                 "half_rate_tokens", "staging_bytes_per_parameter",
                 "attention_score_bytes", "activation_bytes", "expert_batch_ms",
                 "measured_here", "held_out")
        if not isinstance(data, Mapping):
            raise PerformanceError("InvalidCalibration", f"{source}: must be a table",
                                   field="calibration")
        for key in data:
            if key not in known:
                raise PerformanceError("InvalidCalibration",
                                       f"{source}: {key} is not a known field; expected "
                                       f"{', '.join(known)}", field=key)
        tables = {}
        for key in known[:-2]:
            table = data.get(key, {})
            if not isinstance(table, Mapping):
                raise PerformanceError("InvalidCalibration", f"{source}: {key} must be a "
                                       "table", field=key)
            tables[key] = dict(table)
        held = []
        for entry in data.get("held_out", []):
            try:
                held.append(HeldOutError(str(entry["phase"]), str(entry["memory_type"]),
                                         int(entry["rows"]),
                                         float(entry["median_abs_error"])))
            except (KeyError, TypeError, ValueError):
                raise PerformanceError("InvalidCalibration", f"{source}: held_out entries "
                                       "need phase, memory_type, rows and "
                                       "median_abs_error", field="held_out") from None
        here = data.get("measured_here", [])
        if isinstance(here, str) or not isinstance(here, list) or not all(
                isinstance(key, str) and key in tables["weight_efficiency"] for key in here):
            raise PerformanceError("InvalidCalibration", f"{source}: measured_here must list "
                                   "keys of weight_efficiency", field="measured_here")
        return cls(**tables, held_out=tuple(held), source=source, measured_here=tuple(here))


CALIBRATION_FILE = "speed-calibration.toml"


@lru_cache(maxsize=1)
def _shipped_calibration() -> SpeedCalibration:
    path = data_dir() / CALIBRATION_FILE
    with path.open("rb") as handle:
        return SpeedCalibration.from_dict(tomllib.load(handle), f"planner/data/{CALIBRATION_FILE}")


_in_effect: list[SpeedCalibration] = []
"""The user's calibrations put in effect (:func:`use_calibration`), innermost last, above
the process's own (:func:`set_calibration`) at index 0: process-wide, so that the
workbench's callbacks see the one its page chose."""


def load_calibration() -> SpeedCalibration:
    """The calibration in effect: the user's own (:func:`use_calibration`,
    :func:`set_calibration`), else the shipped one
    (``planner/data/speed-calibration.toml``)."""
    return _in_effect[-1] if _in_effect else _shipped_calibration()


def set_calibration(calibration: SpeedCalibration | None) -> None:
    """Make ``calibration`` the process's own, under any :func:`use_calibration` block
    (``None``: the shipped one again)."""
    if calibration is not None and not isinstance(calibration, SpeedCalibration):
        raise PerformanceError("InvalidCalibration", "must be a SpeedCalibration",
                               field="calibration")
    _process[:] = [calibration] if calibration is not None else []
    _in_effect[:] = [*_process, *_scoped]


_process: list[SpeedCalibration] = []
_scoped: list[SpeedCalibration] = []


def shipped_calibration() -> SpeedCalibration:
    """The shipped calibration, whatever is in effect."""
    return _shipped_calibration()


@contextmanager
def use_calibration(calibration: SpeedCalibration | None) -> Iterator[None]:
    """Make ``calibration`` (a user's, :func:`read_calibration`) the one every estimate
    of this process uses in the block (``None``: leave the one in effect)."""
    if calibration is None:
        yield
        return
    if not isinstance(calibration, SpeedCalibration):
        raise PerformanceError("InvalidCalibration", "must be a SpeedCalibration",
                               field="calibration")
    _scoped.append(calibration)
    _in_effect[:] = [*_process, *_scoped]
    try:
        yield
    finally:
        _scoped.remove(calibration)
        _in_effect[:] = [*_process, *_scoped]


def read_calibration(path: str | Path) -> SpeedCalibration:
    """A calibration file (``planner calibrate``'s, in the shipped file's format);
    ``InvalidCalibration`` names what cannot be used."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise PerformanceError("InvalidCalibration", f"{file}: cannot be read: {error}",
                               field="calibration") from None
    except tomllib.TOMLDecodeError as error:
        raise PerformanceError("InvalidCalibration", f"{file}: not valid TOML: {error}",
                               field="calibration") from None
    try:
        return SpeedCalibration.from_dict(data, str(file))
    except PerformanceError as error:
        message = error.message if str(file) in error.message else f"{file}: {error.message}"
        raise PerformanceError("InvalidCalibration", message,
                               field=error.details.get("field", "calibration")) from None


@dataclass(frozen=True, slots=True)
class StageLoad:
    """One stage's share of a model: its layers, the weight bytes it holds (without token
    embeddings) and of those its routed experts', the parameters one token computes
    with, its KV bytes per cached token, and its attention width summed over layers.
    ``window`` layers (a sliding window of ``window`` tokens) keep
    ``window_kv_bytes_per_token`` and ``window_attention_width`` apart."""

    layer_count: int
    weight_bytes: int
    routed_expert_bytes: int
    active_parameters: float
    kv_bytes_per_token: int
    attention_width: int
    window_kv_bytes_per_token: int = 0
    window_attention_width: int = 0
    window: int = 0
    embedding_row_bytes: int = 0  # on the first stage: one token's embedding row
    routed_active_parameters: float = 0.0  # of active_parameters, in routed experts

    def kv_tokens(self, cached: Any) -> tuple[Any, Any]:
        """Cached tokens a full-attention and a windowed layer hold (numbers or arrays)."""
        return cached, np.minimum(cached, self.window) if self.window else 0 * cached

    def kv_bytes(self, cached: Any) -> Any:
        full, windowed = self.kv_tokens(cached)
        return self.kv_bytes_per_token * full + self.window_kv_bytes_per_token * windowed


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


def even_layers(layer_count: int, devices: int) -> list[int]:
    """Layers per device of an even split (``-sm layer`` on equal GPUs): the first
    ``layer_count % devices`` devices take one more."""
    base, extra = divmod(layer_count, devices)
    return [base + (1 if index < extra else 0) for index in range(devices)]


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
                f"{format_duration_ms(self.estimated_context_fill_ms)}")
        how = (f"at {self.bandwidth_efficiency:.0%} of peak memory bandwidth"
               if self.bandwidth_efficiency is not None else
               "calibrated on published llama.cpp measurements")
        return (f"estimated TPOT {self.estimated_tpot_ms:,.1f} ms, "
                f"{self.tokens_per_s:,.1f} tokens/s over {self.parallel_lanes} lanes{fill}"
                f"{cost} (estimate {how})")


def format_duration_ms(ms: float) -> str:
    """``850 ms``, ``12.3 s``, ``4.2 min``."""
    if ms < 1000:
        return f"{ms:,.0f} ms"
    if ms < 120_000:
        return f"{ms / 1000:,.1f} s"
    return f"{ms / 60_000:,.1f} min"


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


def stage_loads(request: PlanningInput, plan: Plan, traffic: ModelTraffic) -> list[StageLoad]:
    """Each stage's share of the model (:class:`StageLoad`), from the request's per-layer
    weights and KV. The token embeddings leave the stage holding layer 0 when the
    request's weights are per layer (a GGUF puts them there), else every stage in
    proportion."""
    weights = layer_weights(request)
    kv_layer = kv_bytes_per_layer_token(request)
    embedding = traffic.token_embedding_bytes or 0
    model = sum(weights)
    body = max(1, model - embedding)
    width = traffic.attention_width or traffic.hidden_size or 0
    routed = traffic.routed_bytes
    loads = []
    for stage in plan.stages:
        held = sum(weights[stage.layer_start:stage.layer_end])
        if request.layer_weight_bytes is not None:
            held -= embedding if stage.layer_start == 0 else 0
        else:
            held -= round(embedding * held / model)
        held = max(0, held)
        active = (None if traffic.active_parameter_count is None else
                  traffic.active_parameter_count * held / body)
        # Of those, the routed experts' share, taken as their share of the bytes one
        # token reads (a model states no split of its active parameters).
        one_token = body * traffic.read_share(1)
        routed_active = (0.0 if active is None or not routed else
                         active * routed * traffic.expert_share(1) / one_token)
        loads.append(StageLoad(
            layer_count=stage.layer_count, weight_bytes=held,
            routed_active_parameters=routed_active,
            routed_expert_bytes=round(routed * held / body),
            active_parameters=active if active is not None else 0.0,
            kv_bytes_per_token=kv_layer * stage.layer_count,
            attention_width=width * stage.layer_count,
            embedding_row_bytes=(EMBEDDING_ROW_BYTES_PER_VALUE * (traffic.hidden_size or 0)
                                 if embedding and stage.layer_start == 0 else 0)))
    return loads


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


def _devices(plan: Plan, speeds: Mapping[str, NodeSpeed], calibration: SpeedCalibration | None,
             efficiency: float | None, notes: list[str]) -> tuple[list[Device], list[NodeSpeed]]:
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
            devices.append(Device(speed.memory_bandwidth_bytes_per_s, efficiency or 1.0,
                                  efficiency or 1.0, None, 0.0))
            continue
        devices.append(calibrated_device(calibration, speed.memory_bandwidth_bytes_per_s,
                                         speed.memory_type, speed.backend, speed.fp16_tflops,
                                         notes))
    return devices, used


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
) -> PlanEstimate:
    """The estimate for ``plan`` of ``request`` (formulas in the module docstring).

    ``speeds`` gives each stage's node its bandwidth, memory type, backend, FP16
    throughput and price (:func:`node_speeds`); ``calibration`` the fitted figures
    (default: the shipped ones), unless ``bandwidth_efficiency`` asks for the plain
    bandwidth-bound estimate at one efficiency; ``paid_node_ids`` are the nodes the cost
    counts (default: the plan's stages); ``prompt_tokens`` a prompt whose time to first
    token to estimate; without ``context_fill`` the time to fill the context (a prefill
    as long as the context, the costliest part) is left out (``None``). Raises
    :class:`PerformanceError` ``MissingNodeSpeed`` when a stage's node has no memory
    bandwidth.
    """
    efficiency = (None if bandwidth_efficiency is None else
                  _check_efficiency(bandwidth_efficiency))
    if efficiency is None and calibration is None:
        calibration = load_calibration()
    link_bandwidth_bytes_per_s = integer(link_bandwidth_bytes_per_s,
                                         _bad("link_bandwidth_bytes_per_s"), minimum=1,
                                         maximum=MAX_BANDWIDTH_BYTES_PER_S)
    if prompt_tokens is not None:
        prompt_tokens = _positive(prompt_tokens, "prompt_tokens")
    notes: list[str] = []
    devices, used = _devices(plan, speeds, calibration, efficiency, notes)
    loads = stage_loads(request, plan, traffic)
    latency = {node.node_id: node.stage_transfer_latency_ms for node in request.nodes}
    if traffic.hidden_size is None and plan.stage_count > 1:
        notes.append("the model's hidden size is unknown: hops carry no activation bytes")
    hops_ms = []
    without_latency = [stage.node_id for stage in plan.stages[:-1]
                       if latency.get(stage.node_id) is None]
    if len(without_latency) == 1:
        notes.append(f"{without_latency[0]} has no stage-transfer latency: its hop counts "
                     "0 ms of latency")
    elif without_latency:
        notes.append(f"{', '.join(without_latency)} have no stage-transfer latency: their "
                     "hops count 0 ms of latency")
    for stage, speed in zip(plan.stages[:-1], used, strict=False):
        stage_latency = latency.get(stage.node_id)
        fixed = 0.0 if calibration is None or efficiency is not None else (
            calibration.fixed_ms(calibration.hop_ms, speed.backend, notes, "hop time"))
        hops_ms.append((stage_latency or 0) + fixed)
    links = [float(link_bandwidth_bytes_per_s)] * len(hops_ms)
    hop_bytes = (traffic.hidden_size or 0) * ACTIVATION_BYTES_PER_VALUE
    lanes = plan.parallel_lanes
    terms, hops = decode_step(loads, devices, hops_ms, hop_bytes, links, traffic,
                              lanes=lanes, cached=plan.context_length)
    if efficiency is None and any(d.compute_flops_per_s is None for d in devices):
        notes.append("a stage's GPU kind has no fp16_tflops: no compute ceiling and no "
                     "prefill estimate")
    if efficiency is None and traffic.active_parameter_count is None:
        notes.append("the model's parameter count is unknown: no compute ceiling and no "
                     "prefill estimate")
    stages = []
    for index, (stage, load, term) in enumerate(zip(plan.stages, loads, terms, strict=True)):
        read_ms = term.weight_ms + term.routed_weight_ms
        weight_read = round(read_ms / 1000 * devices[index].weight_efficiency
                            * devices[index].bandwidth_bytes_per_s)
        # Compute is what the step takes beyond its reads and fixed time (a batched
        # expert product's compute overlaps its read).
        stages.append(StageEstimate(
            stage.stage_id, stage.node_id, weight_read, load.kv_bytes(plan.context_length),
            used[index].memory_bandwidth_bytes_per_s or 0, read_ms + term.kv_ms,
            hops[index] if index < len(hops) else 0.0,
            float(term.total_ms - read_ms - term.kv_ms - term.fixed_ms), term.fixed_ms))
    tpot = sum(s.stage_ms + s.hop_ms for s in stages)
    tokens_per_s = lanes * 1000 / tpot
    fill = ttft = None
    if (efficiency is None and traffic.active_parameter_count is not None
            and all(d.compute_flops_per_s is not None for d in devices)):
        def prefill(tokens: int) -> float:
            return prefill_ms(loads, devices, hops_ms, hop_bytes, links, traffic,
                              prompt_tokens=tokens)
        fill = prefill(plan.context_length) if context_fill else None
        ttft = prefill(prompt_tokens) if prompt_tokens is not None else None
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
                  calibration.error_note(s.memory_type for s in used))
    return PlanEstimate(tuple(stages), tpot, tokens_per_s, lanes, cost, per_million,
                        efficiency, link_bandwidth_bytes_per_s, tuple(dict.fromkeys(notes)),
                        fill, plan.context_length, prompt_tokens, ttft, error_note)


def fleet_estimate(request: PlanningInput, plan: Plan, traffic: ModelTraffic,
                   speeds: Mapping[str, NodeSpeed], **options: Any) -> PlanEstimate:
    """The fleet's one speed and cost estimate, wherever it is shown (the workbench,
    reports, sizing): the TPOT of ``plan`` and the cost per hour of every node of the
    fleet ``request`` holds, since a node the plan leaves out (a spare) is paid for too.
    ``options`` are :func:`estimate_plan`'s."""
    return estimate_plan(request, plan, traffic, speeds,
                         paid_node_ids=[node.node_id for node in request.nodes], **options)


def fleet_model_traffic(model: Any, base_dir: Any = None) -> ModelTraffic | None:
    """The traffic of a fleet file's model (``planner.fleet.ModelChoice``): a preset's or
    GGUF file's, or its numbers' (:func:`model_traffic`). Raises what loading the model
    raises."""
    return model_traffic(model.spec(base_dir), model.numbers)


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


def stage_estimates(estimate: PlanEstimate) -> pd.DataFrame:
    """One row per stage: ``stage_id``, ``node_id``, ``weight_read_bytes``,
    ``kv_read_bytes``, ``memory_bandwidth_bytes_per_s``, ``stage_read_ms``,
    ``compute_ms``, ``fixed_ms``, ``stage_ms``, ``hop_ms`` (estimates, per decode step)."""
    columns = ["stage_id", "node_id", "weight_read_bytes", "kv_read_bytes",
               "memory_bandwidth_bytes_per_s", "stage_read_ms", "compute_ms", "fixed_ms",
               "stage_ms", "hop_ms"]
    return pd.DataFrame([s.to_dict() for s in estimate.stages], columns=columns)


def with_stage_estimates(stage_table: pd.DataFrame, estimate: PlanEstimate | None) -> pd.DataFrame:
    """A stage table (``planner.stage_usage``) with the estimate's per-stage columns
    ``stage_read_ms`` and ``hop_ms`` added (NA without an estimate)."""
    table = stage_table.copy()
    if estimate is None:
        table["stage_read_ms"] = pd.Series([pd.NA] * len(table), dtype="Float64")
        table["hop_ms"] = pd.Series([pd.NA] * len(table), dtype="Float64")
        return table
    by_stage = {s.stage_id: s for s in estimate.stages}
    table["stage_read_ms"] = [by_stage[i].stage_read_ms for i in table["stage_id"]]
    table["hop_ms"] = [by_stage[i].hop_ms for i in table["stage_id"]]
    return table


def with_candidate_estimates(frame: pd.DataFrame, request: PlanningInput,
                             traffic: ModelTraffic | None, catalog: Sequence[GpuModel],
                             *, node_kinds: Mapping[str, str] | None = None,
                             **options: Any) -> pd.DataFrame:
    """The candidates table (``planner.candidates``) with :data:`ESTIMATE_COLUMNS` for
    every feasible row whose nodes are catalog kinds (NA elsewhere); each row is
    estimated as the plan its node set and shape would give, at the fleet's cost
    (:func:`fleet_estimate`: every node of the fleet is paid for)."""
    weights = layer_weights(request)
    # The budgets and layer bytes the search walked, per shape: after the memory rule's
    # fixed costs per node (none under the design rule).
    walked: dict[tuple[int, int, bool], tuple[dict[str, NodeBudget], tuple[int, ...]]] = {}
    speeds = node_speeds(request.nodes, catalog, node_kinds)
    values: dict[str, list[Any]] = {column: [] for column in ESTIMATE_COLUMNS}
    for row in frame.itertuples(index=False):
        estimate = None
        # Rows with a node of unknown bandwidth are left NA before any walking: most
        # fleets typed by hand name no catalog kind, and this runs on every edit.
        if row.feasible and traffic is not None and all(
                node_id in speeds and speeds[node_id].memory_bandwidth_bytes_per_s
                for node_id in row.node_ids):
            shape = (int(row.context_length), int(row.parallel_lanes))
            # The rule of the row's stage count (llama.cpp's one device has no pipeline).
            staged = request_for_stages(request, int(row.stage_count))
            walk_key = (*shape, staged is request)
            if walk_key not in walked:
                walked[walk_key] = (
                    {node.node_id: node for node in at_context(staged, *shape).nodes},
                    layer_bytes(staged, *shape))
            budgets, costs = walked[walk_key]
            ordered = [budgets[node_id] for node_id in row.node_ids]
            walk = walk_stages([node.usable_bytes for node in ordered], costs)
            if walk.fits:
                plan = Plan(shape[0], shape[1],
                            build_stages(ordered, walk.spans, weights), None, None)
                estimate = fleet_estimate(request, plan, traffic, speeds, **options)
        for column in ESTIMATE_COLUMNS:
            value = None if estimate is None else getattr(estimate, column)
            values[column].append(pd.NA if value is None else value)
    table = frame.copy()
    for column in ESTIMATE_COLUMNS:
        table[column] = pd.array(values[column], dtype="Float64")
    return table
