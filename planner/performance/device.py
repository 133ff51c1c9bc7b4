"""A GPU kind as the estimate reads it (:class:`NodeSpeed`), and its :class:`Rates` at a
run's settings with the calibration's figures (:func:`calibrated_device`).

A kind's matrix throughput is its published dense FP16 figure (``fp16_tflops``). A kind
that states none computes at a stand-in, and its estimate says so and quotes the wider
error measured for it: its lanes times its clock times the FP16 FLOPs a lane and clock
of the units llama.cpp reaches on its architecture and backend
(:func:`~planner.performance.settings.shader_flops_per_lane_clock`; 8 for a kind that
names no architecture), times the fitted ``shader_units_factor`` (``"shaders"``; a
CPU's vector rate from its cores, SIMD width and clock, without the factor, which
describes a GPU's units);
else, stating its shaders but no clock (Apple states none), their FP32 lanes times the
median FP16 FLOPs a lane of the measured kinds of its vendor that state an FP16 figure and
their shaders, where two or more do (``"lanes"``: Apple's; a lane's rate is its
architecture's, so no other vendor's stands in);
else its memory bandwidth times the median FP16 FLOPs per byte of the measured kinds of
its vendor (of the measured CPUs, for a CPU; of all, for a vendor never measured:
``"bandwidth"``).

The factor is fitted on prompts' matrix products. Flash attention runs other kernels,
which on the kinds computing at the stand-in from shaders (AMD's and Intel's GPUs) ran on
those shaders until 2026 (:func:`~planner.performance.settings.attends_on_shaders`), and
on any build on a GPU whose matrix units the backend does not reach
(:func:`~planner.performance.settings.reaches_matrix_units`: RDNA 2 and older, Pascal,
Xe-HPG on Vulkan), so there their attention computes at the shaders' FP32 rate
(docs/sources.md §3).
Without flash attention, scores are matrix products like the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from planner.models.architectures import (
    FMA_FLOPS,
    GPU_ARCHITECTURES,
    UNSTATED_FLOPS_PER_LANE_CLOCK,
)
from planner.models.gpus import (
    CPU_BACKEND,
    RPC_BACKEND,
    GpuModel,
    is_cpu_kind,
    other_vendors_backend,
)
from planner.performance._errors import PerformanceError
from planner.performance.calibration import (
    FP16_FIGURE_SOURCES,
    BackendFigures,
    SpeedCalibration,
)
from planner.performance.roofline import (
    SCORE_BYTES_WITHOUT_FLASH_ATTENTION,
    STAGING_BYTES_PER_PARAMETER,
    Device,
    Rates,
)
from planner.performance.settings import (
    DEFAULT_SETTINGS,
    RunSettings,
    attends_on_shaders,
    computes_every_output,
    computing_cores,
    expert_token_tile,
    fuses_moe_kernels,
    groups_queries,
    reaches_matrix_units,
    shader_flops_per_lane_clock,
    staging_from_tokens,
)
from planner.performance.traffic import ModelTraffic

# Where neither the settings nor a kind name a backend, this one stands in (and the
# estimate says so).
FALLBACK_BACKEND = "cuda"


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
    vector_tflops: float | None = None
    vendor: str | None = None
    architecture: str | None = None
    shader_lanes: int | None = None
    core_count: int | None = None

    @classmethod
    def of_kind(cls, node_id: str, gpu: GpuModel) -> NodeSpeed:
        return cls(node_id, gpu.memory_bandwidth_bytes_per_s, gpu.price_per_hour, gpu.kind,
                   gpu.memory_type, gpu.backend, gpu.fp16_tflops, gpu.vector_tflops,
                   gpu.vendor, gpu.architecture, gpu.shader_lanes, gpu.core_count)


def fp16_figure(speed: NodeSpeed, gflops_per_lane: Mapping[str, float]) -> str:
    """Which FP16 figure a kind is estimated with, its vendors' FP16 rates per lane being
    ``gflops_per_lane`` (a calibration's ``fallback_gflops_per_lane``): ``"stated"``,
    ``"shaders"``, ``"lanes"`` or ``"bandwidth"`` (the module docstring)."""
    if speed.fp16_tflops is not None:
        return "stated"
    if speed.vector_tflops is not None:
        return "shaders"
    return ("lanes" if _gflops_per_lane(speed, gflops_per_lane) is not None
            else "bandwidth")


def _gflops_per_lane(speed: NodeSpeed, gflops_per_lane: Mapping[str, float]
                     ) -> float | None:
    """The FP16 GFLOPS a lane of a kind that states its shaders but no clock computes at:
    its vendor's (``None``: no shaders, or its vendor's lanes not measured)."""
    if speed.shader_lanes is None:
        return None
    return gflops_per_lane.get(speed.vendor or "")


def matrix_tflops(speed: NodeSpeed, calibration: SpeedCalibration, backend: str,
                  quantized: bool, threads: int | None = None) -> tuple[float, str]:
    """The FP16 matrix throughput the estimate computes with on ``backend`` for weights
    ``quantized`` or not, in TFLOPS, and which figure it is (:func:`fp16_figure`). A CPU
    kind's rate from its cores and clock is every core's: run on ``threads`` threads, that
    of the cores they compute on (:func:`~planner.performance.settings.computing_cores`).
    A CPU stating no clock is estimated from its bandwidth, a figure of no cores (the
    measured CPUs' FLOPs per byte), and a stated figure is the chip's: the threads do not
    change them."""
    tflops, figure = _chip_tflops(speed, calibration, backend, quantized)
    cores = _shared_cores(speed, figure)
    if cores is not None:
        tflops *= computing_cores(cores, threads) / cores
    return tflops, figure


def _shared_cores(speed: NodeSpeed, figure: str) -> int | None:
    """The CPU cores a kind's FP16 figure is the rate of (their count, SIMD width and
    clock), which a run's threads share out; ``None``: a figure of no cores."""
    on_cores = is_cpu_kind(speed.backend) and figure == "shaders"
    return speed.core_count if on_cores else None


def _chip_tflops(speed: NodeSpeed, calibration: SpeedCalibration, backend: str,
                 quantized: bool) -> tuple[float, str]:
    figure = fp16_figure(speed, calibration.fallback_gflops_per_lane)
    if speed.fp16_tflops is not None:
        return speed.fp16_tflops, figure
    on_cpu = is_cpu_kind(speed.backend)  # its rates are its cores'
    if speed.vector_tflops is not None:
        if on_cpu:
            # A CPU's cores have no matrix or packed units; the CPU backend's own matrix
            # efficiency is all that stands between their vector rate and its products.
            return speed.vector_tflops, figure
        per_lane = (UNSTATED_FLOPS_PER_LANE_CLOCK if speed.architecture is None else
                    shader_flops_per_lane_clock(GPU_ARCHITECTURES[speed.architecture],
                                                backend, quantized))
        lane_clocks = speed.vector_tflops / FMA_FLOPS
        return lane_clocks * per_lane * calibration.shader_units_factor, figure
    lane_gflops = _gflops_per_lane(speed, calibration.fallback_gflops_per_lane)
    if lane_gflops is not None and speed.shader_lanes is not None:
        units = _units_over_vector(speed, backend, quantized)
        return speed.shader_lanes * lane_gflops * units / 1e3, figure
    bandwidth = speed.memory_bandwidth_bytes_per_s or 0
    ratios = calibration.fallback_flops_per_byte
    key = CPU_BACKEND if on_cpu else speed.vendor or ""
    return bandwidth * ratios.get(key, ratios["all"]) / 1e12, figure


def _units_over_vector(speed: NodeSpeed, backend: str, quantized: bool) -> float:
    """How many times its vector rate a kind without a clock computes at on ``backend``:
    its vendor's rate a lane is its vector units' (the kinds that state both), and an
    architecture whose matrix units the backend reaches computes that multiple of it."""
    if speed.architecture is None:
        return 1.0
    architecture = GPU_ARCHITECTURES[speed.architecture]
    return (shader_flops_per_lane_clock(architecture, backend, quantized)
            / architecture.packed_fp16)


def backend_of(speed: NodeSpeed, settings: RunSettings, notes: list[str]) -> str:
    """The backend a node runs: the settings', else its kind's, else
    :data:`FALLBACK_BACKEND` (said in ``notes``). A setting that runs a CPU kind on a GPU
    backend, or a GPU kind on the CPU backend, is refused (:func:`check_backend_runs_on`)."""
    if settings.backend is not None:
        check_backend_runs_on(speed, settings.backend)
        return settings.backend
    if speed.backend is not None:
        return speed.backend
    notes.append(f"{speed.kind or speed.node_id} states no llama.cpp backend: "
                 f"{FALLBACK_BACKEND} taken")
    return FALLBACK_BACKEND


def check_backend_runs_on(speed: NodeSpeed, backend: str) -> None:
    """Refuse ``backend`` for a kind of the other kind of device: llama.cpp's CPU backend
    computes on a CPU's cores, which only a CPU kind describes (a GPU kind's figures are
    its memory's and its shaders'), and a GPU backend needs a GPU. The RPC backend runs
    what its server's device is, either. A vendor's backend runs on that vendor's GPUs
    only (:data:`~planner.models.gpus.BACKEND_VENDORS`: CUDA on NVIDIA's, ROCm on AMD's,
    Metal on Apple's, SYCL on Intel's; Vulkan on any)."""
    name = speed.kind or speed.node_id
    other = other_vendors_backend(speed.vendor, backend)
    if other is not None and not is_cpu_kind(speed.backend):
        # Each vendor of BACKEND_VENDORS is read with "an" (an NVIDIA, AMD, Apple, Intel).
        raise PerformanceError(
            "InvalidPerformanceInput",
            f"backend: {name} is an {speed.vendor} GPU: {other.said(f'; got {backend!r}')}",
            field="backend", value=backend)
    if backend == RPC_BACKEND or is_cpu_kind(backend) == is_cpu_kind(speed.backend):
        return
    if is_cpu_kind(speed.backend):
        problem = (f"{name} is a CPU kind: llama.cpp's {CPU_BACKEND} backend is the one it "
                   "runs")
    else:
        own = speed.backend or "none stated"
        problem = (f"{name} is a GPU kind (its backend: {own}): llama.cpp's {CPU_BACKEND} "
                   f"backend runs on a CPU, which a catalog kind with backend = "
                   f'"{CPU_BACKEND}" describes')
    raise PerformanceError("InvalidPerformanceInput", f"backend: {problem} (got {backend!r})",
                           field="backend", value=backend)


def model_device(calibration: SpeedCalibration, speed: NodeSpeed, settings: RunSettings,
                 traffic: ModelTraffic, notes: list[str]) -> Device:
    """A node's :class:`Device` for the model whose steps ``traffic`` describes: what the
    estimate, the sizing floors and the calibration's rows each call, so that the model's
    facts the device depends on (quantized weights, grouped queries) are read in one
    place."""
    return calibrated_device(calibration, speed, settings, traffic.quantized, notes,
                             groups_queries(traffic))


def calibrated_device(calibration: SpeedCalibration, speed: NodeSpeed,
                      settings: RunSettings, quantized: bool, notes: list[str],
                      grouped_queries: bool = True) -> Device:
    """A node's :class:`Device`: its kind's bandwidth and throughput at the calibration's
    figures for its backend and memory type, at the run's settings (flash attention, the
    build), for a model whose weights are ``quantized`` or not and which groups its
    queries or not (:func:`~planner.performance.settings.groups_queries`, where its
    flash attention runs)."""
    backend = backend_of(speed, settings, notes)
    figures = calibration.backend(backend, notes)
    bandwidth = (speed.memory_bandwidth_bytes_per_s or 0) * calibration.memory_factor(
        speed.memory_type, notes)
    tflops, figure = matrix_tflops(speed, calibration, backend, quantized, settings.threads)
    name = speed.kind or speed.node_id
    if settings.threads is not None and backend != CPU_BACKEND:
        notes.append(f"threads: {settings.threads} CPU threads do not enter the estimate on "
                     f"the {backend} backend, whose products run on the GPU")
    elif settings.threads is not None and _shared_cores(speed, figure) is None:
        notes.append(f"threads: {name}'s FP16 throughput is not taken from its cores and "
                     f"clock, so {settings.threads} threads do not change it")
    if figure != "stated":
        notes.append(f"{name} states no fp16_tflops: its FP16 throughput is taken from its "
                     f"{FP16_FIGURE_SOURCES[figure]}, and its prefill estimate is less sure")
    units = _units_over_vector(speed, backend, quantized) if figure == "lanes" else 1.0
    if units != 1.0:
        notes.append(f"{name}'s {speed.architecture} matrix units, which the {backend} "
                     f"backend reaches, compute {units:g} times its lanes' vector rate")
    if figure == "shaders" and speed.architecture is None and not is_cpu_kind(speed.backend):
        notes.append(f"{name} states no architecture: its shaders are taken at "
                     f"{UNSTATED_FLOPS_PER_LANE_CLOCK} FP16 FLOPs a lane and clock")
    from_tokens = (staging_from_tokens(backend, settings.build, speed.architecture)
                   if quantized else None)
    staging = from_tokens is not None
    matrix = _figure(calibration, figures, "matrix_efficiency", backend, notes)
    if settings.flash_attn:
        kv = _figure(calibration, figures, "kv_efficiency", backend, notes)
        attention = _figure(calibration, figures, "attention_efficiency", backend, notes)
    else:
        kv = _figure(calibration, figures, "kv_efficiency_without_flash_attention", backend,
                     notes)
        attention = matrix
    # A build that stages every micro-batch multiplies FP16 copies; one that stages the
    # large ones only (Volta) runs MMQ below them.
    factor = figures.quantized_matrix_factor if quantized and from_tokens != 0 else 1.0
    weight = figures.weight_efficiency
    own = calibration.kinds.get(speed.kind) if speed.kind is not None else None
    if own is not None:
        # The user's runs of this kind scale its backend's shares, each at most its peak.
        weight, kv = (min(1.0, share * own.read_factor) for share in (weight, kv))
        matrix, attention = (min(1.0, share * own.compute_factor)
                             for share in (matrix, attention))
    flops = tflops * 1e12
    # A GPU whose matrix units the backend does not reach attends on its shaders on any
    # build.
    no_matrix = (speed.architecture is not None and not reaches_matrix_units(
        GPU_ARCHITECTURES[speed.architecture], backend))
    on_shaders = (figure == "shaders" and settings.flash_attn
                  and (attends_on_shaders(backend, settings.build, grouped_queries)
                       or no_matrix))
    # On the shaders (module docstring): their vector rate, which "shaders" says is stated.
    attention_flops = (speed.vector_tflops or tflops) * 1e12 if on_shaders else flops
    read_ms_per_byte = 1000 / (weight * bandwidth)
    rates = Rates(
        read_ms_per_byte=read_ms_per_byte,
        kv_ms_per_byte=1000 / (kv * bandwidth),
        matrix_ms_per_flop=1000 / (matrix * factor * flops),
        attention_ms_per_flop=1000 / (attention * attention_flops),
        layer_ms=figures.layer_ms,
        activation_ms_per_byte=read_ms_per_byte,  # activations move at the weights' rate
        staging_bytes_per_parameter=STAGING_BYTES_PER_PARAMETER if staging else 0.0,
        staging_from_tokens=from_tokens or 0.0,
        score_bytes=0.0 if settings.flash_attn else SCORE_BYTES_WITHOUT_FLASH_ATTENTION,
        expert_tile_tokens=float(expert_token_tile(backend)),
        fuses_moe=1.0 if fuses_moe_kernels(backend, settings.build) else 0.0,
        every_output=1.0 if computes_every_output(settings.build) else 0.0,
        streams_attention=1.0 if settings.flash_attn else 0.0)
    hop = _figure(calibration, figures, "hop_ms", backend, notes)
    return Device(rates, staging, hop, figure, backend)


def plain_device(bandwidth_bytes_per_s: float, efficiency: float) -> Device:
    """The plain bandwidth-bound estimate's device: weights and cache read at one
    ``efficiency`` of peak, no compute, no fixed times."""
    read = 1000 / (efficiency * bandwidth_bytes_per_s)
    return Device(Rates(read_ms_per_byte=read, kv_ms_per_byte=read, matrix_ms_per_flop=0.0,
                        attention_ms_per_flop=0.0, layer_ms=0.0))


# What a figure measures, for the note that says it was not measured on a backend.
_MEASURED_BY = {"matrix_efficiency": "prompt processing",
                "attention_efficiency": "prompt processing with flash attention",
                "kv_efficiency": "decoding with flash attention",
                "kv_efficiency_without_flash_attention": "decoding without flash attention",
                "hop_ms": "split over several GPUs"}


# A figure measured nowhere stands in for by this one (the same reads or products in the
# other attention mode, or as plain matrix products).
_STAND_IN = {"kv_efficiency": "kv_efficiency_without_flash_attention",
             "kv_efficiency_without_flash_attention": "kv_efficiency",
             "attention_efficiency": "matrix_efficiency"}


def _figure(calibration: SpeedCalibration, figures: BackendFigures, name: str,
            backend: str, notes: list[str]) -> float:
    """A backend's figure; else, never measured on it, the median of the backends that
    measured it; else the backend's (or the median) figure of :data:`_STAND_IN`; each
    stand-in said in ``notes``."""
    value = getattr(figures, name)
    if value is not None:
        return float(value)
    notes.append(f"no {_MEASURED_BY[name]} on the {backend} backend was measured: the "
                 "median of the measured backends' figure is used")
    median = calibration.median_figure(name)
    if median is not None:
        return median
    if name in _STAND_IN:
        return _figure(calibration, figures, _STAND_IN[name], backend, notes)
    return 0.0


def kinds_error_note(calibration: SpeedCalibration, speeds: Iterable[NodeSpeed],
                     settings: RunSettings = DEFAULT_SETTINGS,
                     traffic: ModelTraffic | None = None) -> str:
    """The error of estimates on these nodes' kinds: the user's own runs of the kinds
    they measured (:meth:`SpeedCalibration.own_error_note`), and the cross-validated
    error of the others (:meth:`SpeedCalibration.error_note`), each kind's backend at the
    settings, memory type and FP16 figure, for the model of ``traffic`` (``None``: not
    known)."""
    speeds = list(speeds)
    return calibration_error_note(calibration, speeds, [
        (settings.backend or speed.backend or FALLBACK_BACKEND, speed.memory_type,
         fp16_figure(speed, calibration.fallback_gflops_per_lane)) for speed in speeds],
        traffic)


def calibration_error_note(calibration: SpeedCalibration, speeds: Sequence[NodeSpeed],
                           groups: Sequence[tuple[str | None, str | None, str]],
                           traffic: ModelTraffic | None = None) -> str:
    """The error note of an estimate on ``speeds`` whose devices ran as ``groups``
    (backend, memory type, FP16 figure), one per speed, of the model of ``traffic``: a
    mixture of experts' prompts quote their own error (:meth:`SpeedCalibration.error`)."""
    experts = traffic is not None and traffic.mixture_of_experts
    own = calibration.own_error_note(speed.kind for speed in speeds)
    others = [group for speed, group in zip(speeds, groups, strict=True)
              if speed.kind not in calibration.kinds]
    if not own:
        return calibration.error_note(others, experts)
    return (own if not others
            else f"{own} Other kinds: {calibration.error_note(others, experts)}")
