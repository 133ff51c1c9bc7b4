"""The fitted figures of the speed estimate (:class:`SpeedCalibration`), their checks, and
the shipped calibration (``planner/data/speed-calibration.toml``).

Each figure has a physical meaning and is fitted on published measurements of several
GPUs (``validation/speed/calibration.py``):

- per llama.cpp backend (:class:`BackendFigures`): the shares of a GPU's peak memory
  bandwidth its kernels reach reading weights and reading the KV cache, the shares of
  its peak FP16 throughput its matrix products and its attention reach, the rate of its
  products on quantized weights against FP16 ones, a fixed time per layer of every step
  (kernel launches and synchronisation), and a fixed time per hop between devices;
- per memory type: the share of the bandwidth reached on it against GDDR (HBM's wide,
  slow channels need more reads in flight than llama.cpp's kernels keep);
- shared by every backend: what a GPU that states no FP16 figure is taken to compute
  (:mod:`planner.models.gpus`):
  ``shader_units_factor``, the share of the peak its shaders' units give (lanes x clock x
  the FP16 FLOPs a lane and clock of the units llama.cpp reaches,
  :mod:`planner.models.architectures`) that its products reach beside a stated figure.

Not fitted but read off the measured kinds, the stand-ins of a GPU that states neither
an FP16 figure nor its shaders and clock: per vendor, the median FP16 FLOPs per byte of
bandwidth (``fallback_flops_per_byte``) and, for a kind that states its shaders but no
clock, per FP32 lane (``fallback_gflops_per_lane``) of its measured kinds that state
them.

The bytes a micro-batch moves between its kernels are not fitted: they are counted on
llama.cpp's graph (:func:`planner.performance.activation_bytes_per_token`). Nor is what a
routed expert's few tokens cost: they fill whole tiles of its backend's kernels
(:func:`planner.performance.expert_token_tile`).

Beside them, the estimate's error measured by cross-validation, per backend, memory type
and phase (:class:`CrossValidatedError`), which every estimate states with itself.

A user's own calibration (``planner calibrate``) is the shipped one with, per GPU kind
they measured, two factors of their own (:class:`KindCalibration`) and the error their
runs measured them with. :func:`use_calibration` and :func:`set_calibration` put one in
effect for every estimate of the process (:func:`load_calibration`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from planner._validate import integer, number, shown
from planner.limits import MAX_BENCH_RUNS
from planner.models.architectures import FMA_FLOPS, UNSTATED_FLOPS_PER_LANE_CLOCK
from planner.models.presets import data_dir
from planner.performance._errors import PerformanceError

CALIBRATION_FILE = "speed-calibration.toml"
PHASES = ("decode", "prefill")
# The memory type the others are measured against (its factor is 1 by definition).
REFERENCE_MEMORY_TYPE = "gddr"
# A cross-validated error is quoted for a backend and memory type from this many held-out
# rows on; with fewer, the backend's over every memory type is quoted.
QUOTED_FROM_ROWS = 10
# The ``model`` of the cross-validated errors of mixtures of experts' prompts, which an
# estimate of such a prompt quotes where they are the larger (their experts' small
# products are the estimate's least sure part).
MIXTURES_OF_EXPERTS = "moe"
# How each constant is bounded: what a share of a peak, a time or a size can be.
_SHARE = (0.0, 1.0)


@dataclass(frozen=True, slots=True)
class BackendFigures:
    """One llama.cpp backend's fitted figures (the module docstring says what each is).
    The cache is read at ``kv_efficiency`` with flash attention and at
    ``kv_efficiency_without_flash_attention`` without (llama.cpp then stores V
    transposed, and the product with it reads it so); attention computes at
    ``attention_efficiency`` of the FP16 figure with flash attention, and without it at
    ``matrix_efficiency`` (its products are matrix products then). A figure is ``None``
    where nothing measured it (no prefill, no split, no run in that attention mode)."""

    weight_efficiency: float
    layer_ms: float
    kv_efficiency: float | None = None
    kv_efficiency_without_flash_attention: float | None = None
    matrix_efficiency: float | None = None
    attention_efficiency: float | None = None
    quantized_matrix_factor: float = 1.0
    hop_ms: float | None = None

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if value is None and item.name in _OPTIONAL:
                continue
            low, high = _BACKEND_BOUNDS[item.name]
            object.__setattr__(self, item.name, _figure(value, item.name, low, high))

    def to_dict(self) -> dict[str, float]:
        return {item.name: getattr(self, item.name) for item in fields(self)
                if getattr(self, item.name) is not None}


_OPTIONAL = ("kv_efficiency", "kv_efficiency_without_flash_attention", "matrix_efficiency",
             "attention_efficiency", "hop_ms")
_BACKEND_BOUNDS = {"weight_efficiency": _SHARE, "kv_efficiency": _SHARE,
                   "kv_efficiency_without_flash_attention": _SHARE,
                   "matrix_efficiency": _SHARE, "attention_efficiency": _SHARE,
                   "quantized_matrix_factor": (0.0, 4.0), "layer_ms": (-1e-12, 10.0),
                   "hop_ms": (-1e-12, 100.0)}
_SHARED_BOUNDS = {"shader_units_factor": (0.0, 4.0)}
_MEMORY_FACTOR_BOUNDS = (0.0, 2.0)
# Every fitted figure's range, by name: the one place the fit
# (validation/speed/calibration.py) and these checks take it from.
FIGURE_BOUNDS: dict[str, tuple[float, float]] = {
    **_BACKEND_BOUNDS, "memory_factor": _MEMORY_FACTOR_BOUNDS, **_SHARED_BOUNDS}
# Shared figures earlier versions fitted and wrote, read and left unused: the bytes a
# micro-batch moves between its kernels are counted on llama.cpp's graph now
# (roofline.activation_bytes_per_token), and a routed expert's few tokens fill its
# backend's tiles (settings.expert_token_tile) where a fitted half-rate stood for them.
_RETIRED_SHARED = ("activation_bytes", "half_rate_tokens")
# Earlier files' stand-in factor multiplied a GPU's FP32 shader rate (a fused multiply-add,
# 2 FLOPs a lane and clock); shader_units_factor multiplies its units' rate, which for a
# kind naming no architecture is UNSTATED_FLOPS_PER_LANE_CLOCK. Such a file's factor is
# read re-expressed, so that it estimates such a kind as it did.
_FP32_FACTOR = "fallback_matrix_factor"


@dataclass(frozen=True, slots=True)
class CrossValidatedError:
    """The estimate's median absolute error, (estimated - measured) / measured in time, on
    ``rows`` measurements of one phase held out of the fit: every measurement of a GPU
    predicted by a fit without that GPU (``held_out = "gpu"``), or of a source without
    that source (``"source"``). ``backend`` and ``memory_type`` are ``"all"`` for every
    one; ``figure`` is ``"stated"`` for GPUs with a published FP16 figure, else the
    fallback the estimate used (``"shaders"``, ``"lanes"``, ``"bandwidth"``), or ``"all"``
    for every one; ``model`` is ``"all"`` for every model, or :data:`MIXTURES_OF_EXPERTS`
    for the prompts of models whose tokens reach some of their experts only."""

    phase: str
    backend: str
    memory_type: str
    held_out: str
    rows: int
    median_abs_error: float
    figure: str = "stated"
    model: str = "all"

    def to_dict(self) -> dict[str, Any]:
        data = {"phase": self.phase, "backend": self.backend,
                "memory_type": self.memory_type, "held_out": self.held_out,
                "rows": self.rows, "median_abs_error": self.median_abs_error,
                "figure": self.figure}
        return data if self.model == "all" else {**data, "model": self.model}


@dataclass(frozen=True, slots=True)
class KindCalibration:
    """One GPU kind's own factors, fitted by ``planner calibrate`` on a user's llama-bench
    runs of it: ``read_factor`` scales its backend's read efficiencies (weights and KV
    cache), ``compute_factor`` its compute efficiencies (matrix products and attention),
    each effective share held at 1 of the kind's peak. A phase's error is the median
    absolute error of its runs, each estimated by a fit without it (``None``: the phase
    was not fitted, and the published error stands)."""

    read_factor: float = 1.0
    compute_factor: float = 1.0
    decode_error: float | None = None
    decode_runs: int = 0
    prefill_error: float | None = None
    prefill_runs: int = 0

    def __post_init__(self) -> None:
        for name in ("read_factor", "compute_factor"):
            object.__setattr__(self, name, _figure(getattr(self, name), name, 0.0, 1000.0))
        for phase in PHASES:
            error = getattr(self, f"{phase}_error")
            if error is not None:
                object.__setattr__(self, f"{phase}_error",
                                   _figure(error, f"{phase}_error", -1e-12, 100.0))
            name = f"{phase}_runs"
            object.__setattr__(self, name, integer(getattr(self, name), _invalid(name),
                                                   minimum=0, maximum=MAX_BENCH_RUNS))

    def error(self, phase: str) -> tuple[float, int] | None:
        """The median error of ``phase`` and the runs it was measured on, if fitted."""
        error = getattr(self, f"{phase}_error")
        return None if error is None else (error, getattr(self, f"{phase}_runs"))

    def to_dict(self) -> dict[str, Any]:
        return {item.name: getattr(self, item.name) for item in fields(self)
                if getattr(self, item.name) is not None}


def _measured_on(entry: CrossValidatedError, backend: str | None,
                 memory_type: str | None) -> str:
    """Where a quoted error was measured when not on ``backend`` and ``memory_type``
    themselves (too few held-out rows of their own): the backend's rows on every memory
    type, or every row."""
    if entry.model == MIXTURES_OF_EXPERTS:
        return (f" (mixtures of experts on {backend})" if entry.backend == backend
                else " (mixtures of experts on every backend)")
    if (entry.backend, entry.memory_type) == (backend, memory_type):
        return ""
    if entry.backend == backend:
        return f" ({backend} on every memory type)"
    return " (every backend and memory type)"


def _most_specific(found: Sequence[CrossValidatedError], backend: str | None,
                   memory_type: str | None) -> CrossValidatedError | None:
    """Of ``found``, the larger error (by GPU or by source) of the most specific group
    with enough rows: the backend and memory type, else the backend, else every row."""
    for wanted in ((backend, memory_type), (backend, "all"), ("all", "all")):
        group = [e for e in found if (e.backend, e.memory_type) == wanted
                 and e.rows >= (QUOTED_FROM_ROWS if wanted != ("all", "all") else 1)]
        if group:
            return max(group, key=lambda e: e.median_abs_error)
    return None


@dataclass(frozen=True, slots=True)
class SpeedCalibration:
    """The fitted figures (the module docstring says what each is) and the
    cross-validated error they were measured with."""

    backends: Mapping[str, BackendFigures]
    memory_factors: Mapping[str, float]
    shader_units_factor: float
    # Per GPU vendor (and "all"): the median FP16 FLOPs per byte of memory bandwidth of
    # the measured kinds that state an FP16 figure, a kind that states neither it nor
    # its shaders computes at (planner.performance.device).
    fallback_flops_per_byte: Mapping[str, float]
    # Per GPU vendor (and "all"): the median FP16 GFLOPS per FP32 lane of the measured
    # kinds that state an FP16 figure and their shaders, a kind that states its shaders
    # but no clock computes at (planner.performance.device; absent from older files).
    fallback_gflops_per_lane: Mapping[str, float] = field(default_factory=dict)
    cross_validated: tuple[CrossValidatedError, ...] = ()
    source: str = f"planner/data/{CALIBRATION_FILE}"
    kinds: Mapping[str, KindCalibration] = field(default_factory=dict)
    """The GPU kinds measured by the user (``planner calibrate``), by catalog id."""

    def __post_init__(self) -> None:
        if not self.backends:
            raise PerformanceError("InvalidCalibration", "backends is empty",
                                   field="backends")
        for name, (low, high) in _SHARED_BOUNDS.items():
            object.__setattr__(self, name, _figure(getattr(self, name), name, low, high))
        if "all" not in self.fallback_flops_per_byte:
            raise PerformanceError("InvalidCalibration", "fallback_flops_per_byte.all is "
                                   "missing", field="fallback_flops_per_byte.all")
        for table in ("fallback_flops_per_byte", "fallback_gflops_per_lane"):
            for vendor, value in getattr(self, table).items():
                if (isinstance(value, bool) or not isinstance(value, int | float)
                        or not 0 < value <= 1e5):
                    raise PerformanceError(
                        "InvalidCalibration", f"{table}.{vendor} must be above 0 and at "
                        "most 100,000", field=f"{table}.{vendor}", value=value)
        low, high = _MEMORY_FACTOR_BOUNDS
        for kind, value in self.memory_factors.items():
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not low < value <= high):
                raise PerformanceError("InvalidCalibration",
                                       f"memory_factors.{kind} must be above {low:g} and at "
                                       f"most {high:g}", field=f"memory_factors.{kind}",
                                       value=value)

    def median_figure(self, name: str) -> float | None:
        """The median of one figure over the backends that have it."""
        values = sorted(v for v in (getattr(f, name) for f in self.backends.values())
                        if v is not None)
        return values[len(values) // 2] if values else None

    def backend(self, backend: str, notes: list[str]) -> BackendFigures:
        """The figures of ``backend``; of one never measured, each figure's median over
        the measured backends (and the notes say so)."""
        if backend in self.backends:
            return self.backends[backend]
        notes.append(f"llama.cpp's {backend} backend was never measured: each of its "
                     "figures is the median of the measured backends', and the error "
                     "quoted is that over every backend")
        medians: dict[str, Any] = {item.name: self.median_figure(item.name)
                                   for item in fields(BackendFigures)}
        return BackendFigures(**medians)

    def memory_factor(self, memory_type: str | None, notes: list[str]) -> float:
        """The share of the bandwidth reached on ``memory_type`` against GDDR."""
        if memory_type is None or memory_type == REFERENCE_MEMORY_TYPE:
            if memory_type is None:
                notes.append(f"a GPU kind states no memory type: taken as "
                             f"{REFERENCE_MEMORY_TYPE}")
            return 1.0
        if memory_type not in self.memory_factors:
            notes.append(f"memory type {memory_type} was never measured: taken as "
                         f"{REFERENCE_MEMORY_TYPE}")
            return 1.0
        return self.memory_factors[memory_type]

    def error(self, phase: str, backend: str | None, memory_type: str | None,
              figure: str = "stated", experts: bool = False) -> CrossValidatedError | None:
        """The larger of the two cross-validated errors (by GPU and by source) of
        ``phase`` for the most specific group with enough rows: the backend and memory
        type, else the backend, else every row; for a fallback FP16 figure, its own. A
        prompt of a mixture of experts (``experts``) quotes the error of such prompts on
        its backend (else on every backend) where that is the larger."""
        found = [e for e in self.cross_validated
                 if e.phase == phase and e.figure == figure and e.model == "all"]
        quoted = _most_specific(found, backend, memory_type)
        if not experts or phase != "prefill":
            return quoted
        own = _most_specific([e for e in self.cross_validated if e.phase == phase
                              and e.model == MIXTURES_OF_EXPERTS], backend, "all")
        if own is None or (quoted is not None
                           and quoted.median_abs_error >= own.median_abs_error):
            return quoted
        return own

    def error_note(self, groups: Iterable[tuple[str | None, str | None, str]],
                   experts: bool = False) -> str:
        """One sentence: the cross-validated error of each (backend, memory type, FP16
        figure) the estimate used, for a mixture of experts (``experts``) or not."""
        parts = []
        for backend, memory_type, figure in sorted(set(groups), key=str):
            said = []
            for phase in PHASES:
                entry = self.error(phase, backend, memory_type,
                                   figure if phase == "prefill" else "stated", experts)
                if entry is not None:
                    said.append((f"{phase} {entry.median_abs_error:.0%}",
                                 _measured_on(entry, backend, memory_type)))
            if not said:
                continue
            how = (f", FP16 throughput from {FP16_FIGURE_SOURCES[figure]}"
                   if figure in FP16_FIGURE_SOURCES else "")
            # Where every phase's error was measured on the same other rows, they are
            # said once.
            once = {where for _, where in said}
            common = once.pop() if len(once) == 1 else ""
            parts.append(f"{backend or 'unknown backend'} on {memory_type or 'unknown'} "
                         f"memory{how}{common}: "
                         + ", ".join(error + ("" if common else where)
                                     for error, where in said))
        if not parts:
            return "The estimate's error was not measured."
        return ("Median error on published measurements of GPUs and sources the fit did "
                "not see (cross-validated): " + "; ".join(parts) + ".")

    def stated_error(self, phase: str, kind: str | None, backend: str | None,
                     memory_type: str | None, figure: str = "stated",
                     experts: bool = False) -> tuple[float, str] | None:
        """The error an estimate of ``phase`` on one GPU kind states, and where it was
        measured: the user's own runs of the kind (:attr:`kinds`), else the published
        runs cross-validated (:meth:`error`; ``experts``: of a mixture of experts)."""
        own = self.kinds.get(kind) if kind is not None else None
        measured = own.error(phase) if own is not None else None
        if measured is not None:
            return measured[0], (f"median of your {measured[1]} runs of {kind}, each left "
                                 f"out in turn ({self.source})")
        entry = self.error(phase, backend, memory_type,
                           figure if phase == "prefill" else "stated", experts)
        if entry is None:
            return None
        which = ("prompts of mixtures of experts" if entry.model == MIXTURES_OF_EXPERTS
                 else f"{entry.memory_type} memory")
        return entry.median_abs_error, (f"median of {entry.rows} published runs held out "
                                        f"by {entry.held_out} ({entry.backend}, {which})")

    def own_error_note(self, kinds: Iterable[str | None]) -> str:
        """One sentence for the kinds among ``kinds`` the user measured (empty if none)."""
        own = sorted({kind for kind in kinds if kind is not None and kind in self.kinds})
        parts = []
        for kind in own:
            said = [f"{phase} {found[0]:.0%} over {found[1]} runs" for phase in PHASES
                    if (found := self.kinds[kind].error(phase)) is not None]
            parts.append(f"{kind}" + (f" ({', '.join(said)}, each left out in turn)"
                                      if said else ""))
        if not parts:
            return ""
        return (f"Uses your own measurements for {'; '.join(parts)} ({self.source}).")

    def to_dict(self) -> dict[str, Any]:
        return {**self._published_dict(),
                **({"kinds": {kind: own.to_dict() for kind, own in sorted(self.kinds.items())}}
                   if self.kinds else {})}

    def _published_dict(self) -> dict[str, Any]:
        return {"backends": {name: figures.to_dict()
                             for name, figures in sorted(self.backends.items())},
                "memory_factors": dict(sorted(self.memory_factors.items())),
                "shared": {name: getattr(self, name) for name in _SHARED_BOUNDS},
                "fallback_flops_per_byte": dict(sorted(self.fallback_flops_per_byte.items())),
                **({"fallback_gflops_per_lane": dict(sorted(
                    self.fallback_gflops_per_lane.items()))}
                   if self.fallback_gflops_per_lane else {}),
                "cross_validated": [e.to_dict() for e in self.cross_validated]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "calibration"
                  ) -> SpeedCalibration:
        known = ("backends", "memory_factors", "shared", "fallback_flops_per_byte",
                 "fallback_gflops_per_lane", "cross_validated", "kinds")
        if not isinstance(data, Mapping):
            raise PerformanceError("InvalidCalibration", f"{source}: must be a table",
                                   field="calibration")
        for key in data:
            if key not in known:
                raise PerformanceError("InvalidCalibration",
                                       f"{source}: {key} is not a known field; expected "
                                       f"{', '.join(known)}", field=key)
        backends = {}
        for name, table in _table(data, "backends", source).items():
            if not isinstance(table, Mapping):
                raise PerformanceError("InvalidCalibration",
                                       f"{source}: backends.{name} must be a table",
                                       field=f"backends.{name}")
            allowed = {item.name for item in fields(BackendFigures)}
            unknown = sorted(set(table) - allowed)
            if unknown:
                raise PerformanceError("InvalidCalibration",
                                       f"{source}: backends.{name}.{unknown[0]} is not a "
                                       "known figure", field=f"backends.{name}.{unknown[0]}")
            try:
                backends[name] = BackendFigures(**table)
            except TypeError as error:
                raise PerformanceError("InvalidCalibration",
                                       f"{source}: backends.{name}: {error}",
                                       field=f"backends.{name}") from None
            except PerformanceError as error:
                raise PerformanceError("InvalidCalibration",
                                       f"{source}: backends.{name}.{error.message}",
                                       field=f"backends.{name}.{error.details['field']}"
                                       ) from None
        shared = dict(_table(data, "shared", source))
        fp32_factor = shared.pop(_FP32_FACTOR, None)
        if fp32_factor is not None and "shader_units_factor" not in shared:
            if isinstance(fp32_factor, bool) or not isinstance(fp32_factor, int | float):
                raise PerformanceError("InvalidCalibration",
                                       f"{source}: shared.{_FP32_FACTOR} must be a number "
                                       f"(got {fp32_factor!r})", field=f"shared.{_FP32_FACTOR}")
            shared["shader_units_factor"] = (fp32_factor * FMA_FLOPS
                                             / UNSTATED_FLOPS_PER_LANE_CLOCK)
        unknown = sorted(set(shared) - set(_SHARED_BOUNDS) - set(_RETIRED_SHARED))
        if unknown:
            raise PerformanceError("InvalidCalibration",
                                   f"{source}: shared.{unknown[0]} is not a known figure; "
                                   f"expected {', '.join(_SHARED_BOUNDS)}",
                                   field=f"shared.{unknown[0]}")
        missing = [name for name in _SHARED_BOUNDS if name not in shared]
        if missing:
            raise PerformanceError("InvalidCalibration",
                                   f"{source}: shared.{missing[0]} is missing",
                                   field=f"shared.{missing[0]}")
        errors = []
        for entry in data.get("cross_validated", []):
            model = entry.get("model", "all") if isinstance(entry, dict) else None
            if model not in ("all", MIXTURES_OF_EXPERTS):
                raise PerformanceError(
                    "InvalidCalibration", f"{source}: a cross_validated entry's model must "
                    f"be 'all' or '{MIXTURES_OF_EXPERTS}' (got {model!r})",
                    field="cross_validated.model", value=model)
            try:
                errors.append(CrossValidatedError(
                    str(entry["phase"]), str(entry["backend"]), str(entry["memory_type"]),
                    str(entry["held_out"]), int(entry["rows"]),
                    float(entry["median_abs_error"]), str(entry.get("figure", "stated")),
                    str(entry.get("model", "all"))))
            except (KeyError, TypeError, ValueError):
                raise PerformanceError(
                    "InvalidCalibration", f"{source}: cross_validated entries need phase, "
                    "backend, memory_type, held_out, rows and median_abs_error",
                    field="cross_validated") from None
        return cls(backends, dict(_table(data, "memory_factors", source)),
                   **{name: shared[name] for name in _SHARED_BOUNDS},
                   fallback_flops_per_byte=dict(_table(data, "fallback_flops_per_byte",
                                                       source)),
                   fallback_gflops_per_lane=dict(_table(data, "fallback_gflops_per_lane",
                                                        source)),
                   cross_validated=tuple(errors), source=source,
                   kinds=_kinds(_table(data, "kinds", source), source))


# Where each stand-in FP16 figure comes from, as the estimate's notes and error notes say
# it (planner.performance.device.fp16_figure names the figures).
FP16_FIGURE_SOURCES = {"shaders": "shaders and clock",
                       "lanes": "shaders at their vendor's measured rate per lane (no "
                                "clock stated)",
                       "bandwidth": "memory bandwidth"}


def _invalid(name: str) -> Callable[[str, Any], PerformanceError]:
    def fail(problem: str, got: Any) -> PerformanceError:
        return PerformanceError("InvalidCalibration", f"{name}: {problem} (got {shown(got)})",
                                field=name, value=got)
    return fail


def _figure(value: Any, name: str, low: float, high: float) -> float:
    """A fitted figure above ``low`` and at most ``high`` (``InvalidCalibration``)."""
    return float(number(value, lambda problem, got: PerformanceError(
        "InvalidCalibration", f"{name}: {problem} (got {shown(got)})", field=name,
        value=got), above=low, maximum=high))


def _kinds(table: Mapping[str, Any], source: str) -> dict[str, KindCalibration]:
    kinds = {}
    allowed = {item.name for item in fields(KindCalibration)}
    for kind, entry in table.items():
        if not isinstance(entry, Mapping):
            raise PerformanceError("InvalidCalibration", f"{source}: kinds.{kind} must be a "
                                   "table", field=f"kinds.{kind}")
        unknown = sorted(set(entry) - allowed)
        if unknown:
            raise PerformanceError("InvalidCalibration", f"{source}: kinds.{kind}."
                                   f"{unknown[0]} is not a known figure",
                                   field=f"kinds.{kind}.{unknown[0]}")
        try:
            kinds[str(kind)] = KindCalibration(**entry)
        except PerformanceError as error:
            raise PerformanceError("InvalidCalibration",
                                   f"{source}: kinds.{kind}.{error.message}",
                                   field=f"kinds.{kind}.{error.details['field']}") from None
    return kinds


def _table(data: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    table = data.get(key, {})
    if not isinstance(table, Mapping):
        raise PerformanceError("InvalidCalibration", f"{source}: {key} must be a table",
                               field=key)
    return table


@lru_cache(maxsize=1)
def _shipped_calibration() -> SpeedCalibration:
    path = data_dir() / CALIBRATION_FILE
    with path.open("rb") as handle:
        return SpeedCalibration.from_dict(tomllib.load(handle), f"planner/data/{CALIBRATION_FILE}")


def shipped_calibration() -> SpeedCalibration:
    """The shipped calibration (``planner/data/speed-calibration.toml``), whatever is in
    effect."""
    return _shipped_calibration()


# The user's calibrations in effect: the process's own (set_calibration) under those of
# use_calibration blocks, innermost last. Process-wide, so that the workbench's callbacks
# see the one its page chose.
_process: list[SpeedCalibration] = []
_scoped: list[SpeedCalibration] = []


def load_calibration() -> SpeedCalibration:
    """The calibration in effect: the user's own (:func:`use_calibration`,
    :func:`set_calibration`), else the shipped one."""
    if _scoped:
        return _scoped[-1]
    return _process[0] if _process else _shipped_calibration()


def _checked(calibration: SpeedCalibration) -> SpeedCalibration:
    if not isinstance(calibration, SpeedCalibration):
        raise PerformanceError("InvalidCalibration", "must be a SpeedCalibration",
                               field="calibration", value=calibration)
    return calibration


def set_calibration(calibration: SpeedCalibration | None) -> None:
    """Make ``calibration`` the process's own, under any :func:`use_calibration` block
    (``None``: the shipped one again)."""
    _process[:] = [] if calibration is None else [_checked(calibration)]


@contextmanager
def use_calibration(calibration: SpeedCalibration | None) -> Iterator[None]:
    """Make ``calibration`` (a user's, :func:`read_calibration`) the one every estimate of
    this process uses in the block (``None``: leave the one in effect)."""
    if calibration is None:
        yield
        return
    _scoped.append(_checked(calibration))
    try:
        yield
    finally:
        _scoped.pop()


def read_calibration(path: str | Path) -> SpeedCalibration:
    """A calibration file (``planner calibrate``'s, in the shipped file's format);
    ``InvalidCalibration`` names the file and what cannot be used."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise PerformanceError("InvalidCalibration", f"{file}: cannot be read: {error}",
                               field="calibration") from None
    try:
        return SpeedCalibration.from_dict(data, str(file))
    except PerformanceError as error:
        message = error.message if str(file) in error.message else f"{file}: {error.message}"
        raise PerformanceError("InvalidCalibration", message,
                               field=error.details.get("field", "calibration")) from None
