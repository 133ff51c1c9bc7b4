"""The speed estimate calibrated on the user's own llama-bench runs (``planner
calibrate``): one GPU kind's own factors fitted on top of a calibration (the shipped one
by default).

Pure: runs and a model in, a :class:`~planner.performance.SpeedCalibration` out.

A run is one row of llama-bench (:mod:`planner.llamacpp.bench_output` reads them). Each is
estimated as the speed estimate estimates one device of the kind holding the
whole model (:func:`run_estimate`): a decode step at the run's mean depth, a prefill of
its prompt after its depth, at its micro-batch. The fit keeps every figure of the base
calibration and, for the kind alone (:class:`~planner.performance.KindCalibration`),
scales its backend's read efficiencies (weights and KV cache) by one factor fitted on
the decode runs, and its compute efficiencies (matrix and attention) by one factor
fitted on the prefill runs, each the factor whose estimates are closest to the
runs (least squares of the log of estimated over measured time), kept at or below a
share of 1 of the kind's peak. A phase needs two runs or more: its error is measured by
leaving each run out in turn, fitting on the others and estimating the one left out, and
the median of those errors is the error the calibration states for it (as the shipped
calibration states its error on published runs it was not fitted on).

Rows llama-bench prints that the estimate does not model are left out, and said so: a
prompt and decode in one test (``pp+tg``), a micro-batch past llama.cpp's limit, a row
of another model than the one given, or of another KV cache type than the model is
estimated at (a run states its K and V cache types, ``type_k`` and ``type_v``;
:func:`runs_cache_type` gives the one the runs share), and, for a GPU kind, a run that
computed part of the model on the CPU (layers not offloaded, experts or other tensors
kept on the CPU, no GPU device, the KV cache kept on the host: :func:`computed_on_the_cpu`)
or was split over several devices, those it names or, naming none, the machine's like
GPUs (:func:`default_split`).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import tomli_w

from planner._validate import shown
from planner.limits import (
    MAX_UBATCH,
)
from planner.llamacpp.bench_output import BenchError, BenchRun
from planner.models.gpus import CPU_BACKEND, RPC_BACKEND, GpuModel
from planner.models.spec import ModelSpec
from planner.performance import (
    INTRA_HOST_LINK_BYTES_PER_S,
    KindCalibration,
    RunSettings,
    SpeedCalibration,
    estimate_plan,
    model_traffic,
    node_speeds,
)
from planner.performance.device import backend_of
from planner.planning import NodeBudget, PlanningInput
from planner.planning.plan import Plan
from planner.planning.rules import build_stages, layer_weights

FIT_ROUNDS = 8
"""Rounds of fitting the decode and prefill factors in turn (they settle in three or four)."""
FACTORS = {"decode": "read_factor", "prefill": "compute_factor"}
"""The kind's factor each phase's runs fit."""

# -- estimating a run --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunShape:
    """What the estimate needs of a model to estimate one device running it."""

    fields: Mapping[str, Any]
    traffic: Any
    node: NodeBudget
    kind: GpuModel


def run_shape(spec: ModelSpec, kind: GpuModel, file_bytes: int | None = None) -> RunShape:
    """One device of ``kind`` holding all of ``spec``, stored in ``file_bytes`` (a preset
    whose file stores its weights otherwise, :meth:`~planner.models.ModelSpec.stored_in`,
    whose errors name the field ``file_bytes``; ``None``: its own bytes)."""
    if file_bytes is not None:
        spec = spec.stored_in(file_bytes)
    traffic = model_traffic(spec)
    if traffic is None:
        raise BenchError("NothingToCalibrate", f"{spec.name}: the model's decode traffic is "
                         "unknown; give its GGUF file or preset")
    fields: Mapping[str, Any] = spec.planning_fields()
    if kind.memory_bandwidth_bytes_per_s is None:
        raise BenchError("NothingToCalibrate", f"{kind.kind} has no "
                         "memory_bandwidth_bytes_per_s in the catalog: the estimate's "
                         "efficiencies are shares of it; give a catalog that states it")
    return RunShape(fields, traffic, NodeBudget(f"{kind.kind}-00", kind.memory_bytes), kind)


def run_estimate(run: BenchRun, shape: RunShape, calibration: SpeedCalibration) -> float | None:
    """The estimated tokens per second of ``run`` on one device of the shape's kind
    (``None`` where the estimate gives none: a prefill without the kind's FLOPS)."""
    fields = dict(shape.fields)
    layers = int(fields["layer_count"])
    request = PlanningInput.from_dict({
        **{key: (list(value) if isinstance(value, tuple) else value)
           for key, value in fields.items()},
        "nodes": [shape.node.to_dict()]})
    prefill = run.phase == "prefill"
    cells = max(1, run.depth + (run.prompt_tokens if prefill else run.decode_tokens // 2))
    plan = Plan(cells, 1, build_stages((shape.node,), [layers], layer_weights(request)),
                None, None)
    speeds = node_speeds((shape.node,), [shape.kind])
    # llama.cpp caps the micro-batch at the batch.
    batch = run.batch or max(run.ubatch or 0, RunSettings().batch)
    ubatch = min(run.ubatch or RunSettings().ubatch, batch)
    settings = RunSettings(ubatch=ubatch, batch=batch,
                           depth=run.depth if prefill else 0, build=run.build,
                           flash_attn=run.ran_flash_attn, threads=run.threads)
    estimate = estimate_plan(request, plan, shape.traffic, speeds, calibration=calibration,
                             link_bandwidth_bytes_per_s=INTRA_HOST_LINK_BYTES_PER_S,
                             prompt_tokens=run.prompt_tokens if prefill else None,
                             context_fill=False, settings=settings)
    if run.phase == "decode":
        return float(1000 / estimate.estimated_tpot_ms)
    if estimate.ttft_ms is None:
        return None
    return float(run.prompt_tokens * 1000 / estimate.ttft_ms)


# -- the fit ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunFit:
    """One run: measured, estimated by the base calibration, by the fit, and by the fit
    without it (the run left out)."""

    run: BenchRun
    measured_tokens_per_s: float
    base_tokens_per_s: float | None
    fitted_tokens_per_s: float | None
    left_out_error: float | None
    """(estimated - measured) / measured in time, the fit made without this run."""

    def to_dict(self) -> dict[str, Any]:
        return {**self.run.to_dict(), "measured_tokens_per_s": self.measured_tokens_per_s,
                "base_tokens_per_s": self.base_tokens_per_s,
                "fitted_tokens_per_s": self.fitted_tokens_per_s,
                "left_out_error": self.left_out_error}


@dataclass(frozen=True, slots=True)
class BenchFit:
    """A calibration fitted on one kind's runs, and how it was made."""

    calibration: SpeedCalibration
    kind: str
    backend: str
    scales: Mapping[str, float]
    """Per phase fitted: the factor its efficiencies were scaled by."""
    runs: tuple[RunFit, ...]
    skipped: tuple[tuple[str, str], ...]
    """``(source, why)`` of each run left out."""
    notes: tuple[str, ...] = ()

    @property
    def own(self) -> KindCalibration:
        """The kind's fitted factors and errors."""
        return self.calibration.kinds[self.kind]

    def to_dict(self) -> dict[str, Any]:
        own = self.own
        return {"kind": self.kind, "backend": self.backend, "scales": dict(self.scales),
                "errors": [{"phase": phase, "runs": found[1], "median_abs_error": found[0]}
                           for phase in FACTORS if (found := own.error(phase)) is not None],
                "runs": [run.to_dict() for run in self.runs],
                "skipped": [{"source": source, "why": why} for source, why in self.skipped],
                "notes": list(self.notes)}


# llama-bench's names of llama.cpp's backends (its ``backends`` field, its ``backend``
# column) as the estimate's: BLAS computes on the CPU; a name not here is not judged.
_BENCH_BACKENDS = {"cuda": "cuda", "rocm": "rocm", "hip": "rocm", "vulkan": "vulkan",
                   "metal": "metal", "sycl": "sycl", "cpu": CPU_BACKEND, "blas": CPU_BACKEND,
                   "rpc": RPC_BACKEND}


def _named_backends(run: BenchRun) -> set[str]:
    """The estimate's names of the backends llama-bench states for a run (names it does not
    know left out)."""
    named = {_BENCH_BACKENDS.get(part.strip().lower()) for part in run.backend.split(",")}
    return {name for name in named if name is not None}


def ran_on_another_backend(run: BenchRun, backend: str) -> bool:
    """Whether llama-bench names the run's backends and ``backend`` is none of them (a run
    through RPC, whose server may run any, and names the estimate does not know are not
    judged)."""
    named = _named_backends(run)
    return bool(named) and RPC_BACKEND not in named and backend not in named


def computed_on_the_cpu(run: BenchRun, spec: ModelSpec) -> str | None:
    """What part of ``spec`` a run kept on the CPU, as llama-bench states it (``None``:
    none, or the run does not say): layers not offloaded (``-ngl``; llama.cpp offloads
    the output layer only past the model's layer count), the experts of some layers
    (``-ncmoe``), the KV cache (``-nkvo 1``), tensors put in a CPU buffer (``-ot``), or
    the whole model (``-dev none``)."""
    layers = spec.layer_count
    if run.gpu_layers is not None and 0 <= run.gpu_layers <= layers:
        return (f"offloaded {run.gpu_layers} of the model's {layers} layers "
                f"(-ngl {run.gpu_layers}; every layer and the output: -ngl {layers + 1} or "
                "more)")
    if run.cpu_moe_layers:
        return (f"kept the experts of {run.cpu_moe_layers} layers on the CPU (-ncmoe "
                f"{run.cpu_moe_layers})")
    if run.kv_offload is False:
        return "kept the KV cache on the host (-nkvo 1)"
    if run.cpu_tensors is not None:
        return f"kept the tensors of {run.cpu_tensors} on the CPU (-ot)"
    if run.devices == "none":
        return "ran on no GPU (-dev none)"
    return None


def _split_over(run: BenchRun) -> str | None:
    """Why a run is not of one device: the devices it names (``-dev A/B``), or, naming
    none, the like GPUs llama-bench saw (:func:`default_split`)."""
    if run.split_mode == "none" or run.devices == "none":
        return None
    if run.devices is not None:
        if "/" not in run.devices:
            return None
        count = len(run.devices.split("/"))
        return (f"{run.test}: split over {count} devices (-dev {run.devices}), and a kind "
                "is calibrated on runs of one (-dev one device, or -sm none)")
    like = default_split(run)
    if like is None:
        return None
    count, name = like
    return (f"{run.test}: llama-bench saw {count} GPUs named {name} and named no device "
            f"(-dev), so llama.cpp split the model over them (-sm "
            f"{run.split_mode or 'layer'}); a kind is calibrated on runs of one (-dev one "
            "device, or -sm none)")


def _on_default_devices(run: BenchRun) -> bool:
    """Whether a run left llama.cpp its default devices: it named none (``-dev``) and did
    not run on one (``-sm none``)."""
    return run.devices is None and run.split_mode != "none"


def default_split(run: BenchRun) -> tuple[int, str] | None:
    """How many like GPUs a run on llama.cpp's default devices (:func:`_on_default_devices`)
    was split over, and their name: llama.cpp takes every discrete GPU by default, and
    llama-bench's list of those it saw (:attr:`BenchRun.gpus`) names one GPU more than
    once only where there are several (one GPU seen through two backends, CUDA and Vulkan,
    is one device: a run of two GPU backends is not judged). ``None``: not several like
    ones, or the run said which."""
    gpu_backends = _named_backends(run) - {CPU_BACKEND, RPC_BACKEND}
    if not _on_default_devices(run) or len(gpu_backends) != 1:
        return None
    counts = Counter(run.gpus)
    if not counts:
        return None
    name, count = counts.most_common(1)[0]
    return (count, name) if count >= 2 else None


def unlike_gpus(run: BenchRun) -> tuple[str, ...]:
    """The unlike GPUs a run on llama.cpp's default devices may have been split over:
    llama.cpp takes every discrete one, an integrated one only where there is none, and
    llama-bench does not say which is which (empty: one GPU, or the run named its
    device)."""
    names = tuple(dict.fromkeys(run.gpus))
    return names if _on_default_devices(run) and len(names) >= 2 else ()


def runs_cache_type(runs: Sequence[BenchRun]) -> str | None:
    """The KV cache type every run that states one ran with, K and V alike (``None``: no
    run states one, or they differ)."""
    stated = {kind for run in runs for kind in (run.cache_type_k, run.cache_type_v)
              if kind is not None}
    return stated.pop() if len(stated) == 1 else None


def _other_cache(run: BenchRun, spec: ModelSpec) -> str | None:
    """Why a run's KV cache is not the one ``spec`` is estimated at (``None``: it is, or
    the run does not say)."""
    k, v = run.cache_type_k, run.cache_type_v
    if k is not None and v is not None and k != v:
        return (f"{run.test}: its K cache {k} and V cache {v} differ, and the estimate "
                "takes one type for both")
    ran = k or v
    if ran is not None and ran != spec.kv_cache_type:
        return (f"{run.test}: ran with a {ran} KV cache, not the {spec.kv_cache_type} the "
                f"model is estimated at (--kv-cache-type {ran})")
    return None


def usable_runs(runs: Sequence[BenchRun], spec: ModelSpec, backend: str | None = None,
                stated: bool = True, file_bytes: int | None = None
                ) -> tuple[list[BenchRun], list[tuple[str, str]]]:
    """The runs the estimate models, and why each other one is left out (a test given
    twice, as llama-bench's JSON and its markdown of one run print it, counts once; a run
    on another backend than the kind's ``backend``, :func:`ran_on_another_backend`;
    ``stated`` False: the kind states none, and ``backend`` is the one it is taken to run;
    a run of a model file of other bytes than ``file_bytes``, else the spec's)."""
    weight_bytes = spec.model_weight_bytes if file_bytes is None else file_bytes
    kinds = (f"the kind's {backend}" if stated else
             f"{backend}, which a kind stating no backend is taken to run")
    kept: list[BenchRun] = []
    skipped: list[tuple[str, str]] = []
    seen: dict[tuple[str, str, float, float | None], str] = {}
    for run in runs:
        why = None
        same = (run.model, run.test, round(run.tokens_per_s, 2),
                None if run.stddev_tokens_per_s is None else round(run.stddev_tokens_per_s, 2))
        if same in seen:
            why = f"{run.test}: the same test as {seen[same]} (one run in two formats)"
        elif run.phase == "mixed":
            why = f"{run.test}: a prompt and decode in one test"
        elif run.ubatch is not None and run.ubatch > MAX_UBATCH:
            why = f"{run.test}: micro-batch {run.ubatch:,} is past {MAX_UBATCH:,} tokens"
        elif backend is not None and ran_on_another_backend(run, backend):
            why = (f"{run.test}: ran on llama.cpp's {run.backend} backend, not {kinds} "
                   "(give a catalog kind of that backend, --catalog)")
        elif run.model_bytes is not None and not _same_size(run.model_bytes, weight_bytes):
            why = (f"model {shown(run.model)} of {run.model_bytes:,} bytes is not "
                   f"{spec.name} of {weight_bytes:,} (the model benched: its GGUF file, or "
                   "a preset stored in the bytes its runs state, --file-size)")
        elif (other := _other_cache(run, spec)) is not None:
            why = other
        elif (backend is None or backend != CPU_BACKEND) and (
                kept_on_cpu := computed_on_the_cpu(run, spec)) is not None:
            why = (f"{run.test}: {kept_on_cpu}, so part of it ran on the CPU, whose speed "
                   "a GPU kind's factors do not describe")
        elif (split := _split_over(run)) is not None:
            why = split
        if why is None:
            kept.append(run)
            seen[same] = run.source
        else:
            skipped.append((run.source, why))
    return kept, skipped


def _same_size(model_bytes: int, weight_bytes: int) -> bool:
    # llama-bench's model_size is the tensors' bytes; the spec's weights are the same
    # tensors (a preset's figures are rounded, and llama-bench's markdown prints two
    # decimals of GiB: within 1 %).
    return abs(model_bytes - weight_bytes) <= 0.01 * weight_bytes


def fit_calibration(runs: Sequence[BenchRun], spec: ModelSpec, kind: GpuModel,
                    base: SpeedCalibration, source: str = "calibration.toml",
                    file_bytes: int | None = None) -> BenchFit:
    """``base`` with ``kind``'s own factors fitted on ``runs`` (module docstring) of
    ``spec`` stored in ``file_bytes`` (``None``: its own bytes, :func:`run_shape`).
    ``NothingToCalibrate`` when no phase has two usable runs."""
    shape = run_shape(spec, kind, file_bytes)
    notes: list[str] = []
    speed = node_speeds((shape.node,), [kind])[shape.node.node_id]
    backend = backend_of(speed, RunSettings(), notes)
    kept, skipped = usable_runs(runs, spec, backend, stated=kind.backend is not None,
                                file_bytes=file_bytes)
    for unlike in dict.fromkeys(unlike_gpus(run) for run in kept):
        if unlike:
            notes.append(f"llama-bench saw the GPUs {', '.join(unlike)} and the runs named "
                         "no device (-dev): llama.cpp splits the model over every discrete "
                         "GPU, and uses an integrated one only where there is none; if more "
                         "than one GPU ran them, they are not one device's runs (run "
                         "llama-bench with -dev one device, or -sm none)")
    # The shares the kind's backend reaches before the fit: each factor may raise the
    # largest share of its phase up to 1 (the kind's peak), and no further.
    plain = replace(base, kinds={k: v for k, v in base.kinds.items() if k != kind.kind})
    figures = plain.backend(backend, notes)

    def largest(names: tuple[str, ...]) -> float:
        shares = [getattr(figures, name) or plain.median_figure(name) or 0.0
                  for name in names]
        return min(1.0, max(1e-6, *shares))

    ceilings = {"decode": 1.0 / largest(("weight_efficiency", "kv_efficiency")),
                "prefill": 1.0 / largest(("matrix_efficiency", "attention_efficiency"))}

    def calibrated(scales: Mapping[str, float],
                   errors: Mapping[str, tuple[float, int]] | None = None) -> SpeedCalibration:
        errors = errors or {}
        own = KindCalibration(
            read_factor=scales.get("decode", 1.0), compute_factor=scales.get("prefill", 1.0),
            decode_error=errors.get("decode", (None, 0))[0],
            decode_runs=errors.get("decode", (None, 0))[1],
            prefill_error=errors.get("prefill", (None, 0))[0],
            prefill_runs=errors.get("prefill", (None, 0))[1])
        return replace(plain, kinds={**plain.kinds, kind.kind: own}, source=source)

    phases: dict[str, list[BenchRun]] = {}
    for phase in FACTORS:
        mine = [run for run in kept if run.phase == phase]
        if len(mine) < 2:
            skipped.extend((run.source, f"{run.test}: the only {phase} run; two or more "
                            "are needed to measure the fit's error") for run in mine)
        else:
            phases[phase] = mine

    def fitted(runs_of: Mapping[str, Sequence[BenchRun]],
               scales: Mapping[str, float] | None = None) -> dict[str, float]:
        # Decode steps compute and prefills read, so the two factors are fitted in turn
        # until neither moves.
        found = dict(scales or {phase: 1.0 for phase in runs_of})
        for _ in range(FIT_ROUNDS):
            before = dict(found)
            for phase, subset in runs_of.items():
                def misfit(factor: float, phase: str = phase,
                           subset: Sequence[BenchRun] = subset) -> float:
                    return _log_errors(subset, shape, calibrated({**found, phase: factor}))

                found[phase] = _best_scale(misfit, ceilings[phase])
            if all(abs(found[p] / before[p] - 1) < 1e-5 for p in found):
                break
        return found

    if not phases:
        raise BenchError("NothingToCalibrate",
                         "no phase has two usable runs: llama-bench -p 128,512 -n 32,128 "
                         "gives two of each" + "".join(f"; {source}: {why}"
                                                       for source, why in skipped[:5]))
    scales = fitted(phases)
    for phase, scale in scales.items():
        if scale >= ceilings[phase] * 0.999:
            notes.append(f"{phase}: the runs are faster than {kind.kind}'s stated peak allows "
                         f"(its efficiencies are held at 1 of it): the catalog's "
                         f"{'memory bandwidth' if phase == 'decode' else 'fp16_tflops'} is "
                         "below what llama.cpp reached")
    left_out: dict[str, float] = {}
    errors: dict[str, tuple[float, int]] = {}
    for phase, mine in phases.items():
        found = []
        for index, run in enumerate(mine):
            without = {**phases, phase: mine[:index] + mine[index + 1:]}
            estimate = run_estimate(run, shape, calibrated(fitted(without, scales)))
            if estimate is None:
                raise BenchError("NothingToCalibrate", f"{run.source}: the estimate gives "
                                 f"no {phase} for {kind.kind}")
            error = run.tokens_per_s / estimate - 1  # in time: measured speed over estimated
            left_out[run.source] = error
            found.append(abs(error))
        errors[phase] = (round(statistics.median(found), 4), len(mine))
    final = calibrated(scales, errors)
    fits = []
    for run in kept:
        if run.phase not in scales:
            continue
        fits.append(RunFit(run, run.tokens_per_s, run_estimate(run, shape, base),
                           run_estimate(run, shape, final), left_out.get(run.source)))
    return BenchFit(final, kind.kind, backend, scales, tuple(fits), tuple(skipped),
                    tuple(dict.fromkeys(notes)))


def _log_errors(runs: Sequence[BenchRun], shape: RunShape,
                calibration: SpeedCalibration) -> float:
    total = 0.0
    for run in runs:
        estimate = run_estimate(run, shape, calibration)
        assert estimate is not None
        total += math.log(estimate / run.tokens_per_s) ** 2
    return total


def _best_scale(objective: Callable[[float], float], ceiling: float) -> float:
    """The scale in [1/1000, ``ceiling``] that minimises ``objective``: a golden-section
    search on its logarithm (the estimate's time falls as its efficiencies rise, so the
    log errors' squares have one minimum)."""
    low, high = math.log(1e-3), math.log(ceiling)
    ratio = (math.sqrt(5) - 1) / 2
    a, b = high - ratio * (high - low), low + ratio * (high - low)
    fa, fb = objective(math.exp(a)), objective(math.exp(b))
    for _ in range(40):
        if fa <= fb:
            high, b, fb = b, a, fa
            a = high - ratio * (high - low)
            fa = objective(math.exp(a))
        else:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = objective(math.exp(b))
    return round(math.exp((low + high) / 2), 6)


def calibration_text(fit: BenchFit, sources: Sequence[str]) -> str:
    """The calibration file: the base's figures with the kind's own factors, in the
    shipped file's format, and a header saying what was fitted on what."""
    own = fit.own
    errors = "; ".join(f"{phase} {found[0]:.1%} over {found[1]} runs" for phase in FACTORS
                       if (found := own.error(phase)) is not None)
    header = [
        "# A speed calibration fitted by `planner calibrate` on llama-bench runs of",
        f"# {fit.kind} ({fit.backend}): {', '.join(sources)}.",
        "# Every figure is the base calibration's; [kinds." + fit.kind + "] scales the",
        "# backend's read efficiencies by read_factor and its compute efficiencies by",
        "# compute_factor on this kind: " + ", ".join(
            f"{scale:g} ({phase})" for phase, scale in fit.scales.items()) + ".",
        f"# Error, each run left out in turn: {errors}.",
        "# Give it with --calibration FILE (speed, plan, size, verify).",
    ]
    data = fit.calibration.to_dict()
    return "\n".join(header) + "\n\n" + tomli_w.dumps(data)
