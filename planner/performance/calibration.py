"""The fitted figures of the speed estimate (:class:`SpeedCalibration`), their checks, and
the shipped calibration (``planner/data/speed-calibration.toml``)."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from planner.models.presets import data_dir
from planner.performance.errors import PerformanceError, check_efficiency

# Where a kind's memory type or backend was not measured, these stand in (and the
# estimate says so).
FALLBACK_MEMORY_TYPE = "gddr"
FALLBACK_BACKEND = "cuda"


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

    def __post_init__(self) -> None:
        for name in EFFICIENCY_TABLES:
            table = getattr(self, name)
            if not table:
                raise PerformanceError("InvalidCalibration", f"{name} is empty", field=name)
            for key, value in table.items():
                check_efficiency(value, f"{name}.{key}")
        for key, value in self.quantized_compute_factor.items():
            check_efficiency(value, f"quantized_compute_factor.{key}")
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
        """One sentence: the estimate's measured error for these memory types."""
        kinds = sorted({m for m in memory_types if m}) or ["all"]
        parts = []
        for phase in ("decode", "prefill"):
            shown = [f"{e.median_abs_error:.0%} ({e.memory_type}, {e.rows} rows)"
                     for e in (self.error(phase, kind) for kind in kinds) if e is not None]
            if shown:
                parts.append(f"{phase} {', '.join(shown)}")
        if not parts:
            return "The estimate's error was not measured."
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
                             for e in self.held_out]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "calibration") -> SpeedCalibration:
        known = (*EFFICIENCY_TABLES, "layer_ms", "hop_ms", "quantized_compute_factor",
                 "half_rate_tokens", "staging_bytes_per_parameter",
                 "attention_score_bytes", "activation_bytes", "expert_batch_ms",
                 "held_out")
        if not isinstance(data, Mapping):
            raise PerformanceError("InvalidCalibration", f"{source}: must be a table",
                                   field="calibration")
        for key in data:
            if key not in known:
                raise PerformanceError("InvalidCalibration",
                                       f"{source}: {key} is not a known field; expected "
                                       f"{', '.join(known)}", field=key)
        tables = {}
        for key in known[:-1]:
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
        return cls(**tables, held_out=tuple(held), source=source)


CALIBRATION_FILE = "speed-calibration.toml"


@lru_cache(maxsize=1)
def _shipped_calibration() -> SpeedCalibration:
    path = data_dir() / CALIBRATION_FILE
    with path.open("rb") as handle:
        return SpeedCalibration.from_dict(tomllib.load(handle), f"planner/data/{CALIBRATION_FILE}")


def load_calibration() -> SpeedCalibration:
    """The shipped calibration (``planner/data/speed-calibration.toml``)."""
    return _shipped_calibration()


