"""The speed calibration: published llama.cpp measurements (measurements.csv) run through
planner.performance, the fit of its figures, and its error cross-validated on sources
and GPUs the fit did not see.

``python validation/speed/calibration.py`` fits on every usable row, writes
``planner/data/speed-calibration.toml``, cross-validates (every source left out in turn,
then every GPU kind), writes each fold's figures to ``folds.toml`` beside this file and
prints the tables docs/speed.md and the README publish; ``--check`` prints the tables of
the shipped calibration and folds without fitting; ``--levels`` prints, from the shipped
folds, the held-out error left once each group's own level is known
(:func:`level_free_errors`); ``--never-seen`` estimates the rows collected after an
earlier calibration with it (:func:`never_seen_lines`); ``--unseen`` estimates, with the
shipped calibration, the rows of ``unseen.csv``, of sources no fit has seen
(:func:`unseen_lines`). The tests
(tests/test_speed_calibration.py) recompute the tables from the folds and hold them to
their bounds.

Each row is one published run on ``gpu_count`` GPUs of one kind (gpus.toml), layers split
evenly as ``-sm layer`` does, of one model (models.toml) at the published file size, run
as its row says (backend, flash attention, micro-batch, depth, build):

- llama-bench ``tgN`` (``@ dD``): N tokens generated after D cached ones; the estimate
  is the decode step at the mean cache, D + N / 2 tokens;
- llama-batched-bench: ``lanes`` sequences of PP prompt tokens each generating 32, S_TG
  tokens/s over all lanes; a step has each lane's PP + 16 tokens cached on average;
- llama-bench ``ppN`` (``@ dD``): a prompt of N tokens after D cached ones, in llama.cpp's
  batches of 2048 tokens and the row's micro-batches.

The fit evaluates every row at once through the estimate's own formula
(:func:`planner.performance.step_ms` on each stage's :class:`~planner.performance.Work`,
:func:`~planner.performance.pipeline_ms` for a prompt's micro-batches); ``predict_ms``
runs one row through the estimate's scalar path, and a test holds the two equal.
"""

from __future__ import annotations

import csv
import hashlib
import math
import os
import re
import statistics
import sys
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from planner.models.gpus import GpuModel, is_cpu_kind, parse_gpu_catalog  # noqa: E402
from planner.performance import (  # noqa: E402
    ACTIVATION_BYTES_PER_VALUE,
    INTRA_HOST_LINK_BYTES_PER_S,
    BackendFigures,
    CrossValidatedError,
    Device,
    ModelTraffic,
    NodeSpeed,
    Prompt,
    Rates,
    RunSettings,
    SpeedCalibration,
    StageLoad,
    Work,
    decode_step,
    even_layers,
    fp16_figure,
    groups_queries,
    layer_node_counts,
    model_device,
    pipeline_ms,
    prefill_ms,
    step_ms,
    step_work,
)
from planner.performance.calibration import (  # noqa: E402
    FIGURE_BOUNDS,
    MIXTURES_OF_EXPERTS,
)
from planner.performance.settings import (  # noqa: E402
    MMQ_DEFAULT_BUILD,
    OUTPUT_ROWS_BUILD,
    attends_on_shaders,
    computes_every_output,
    fuses_moe_kernels,
    staging_from_tokens,
)

HERE = Path(__file__).resolve().parent
MEASUREMENTS = HERE / "measurements.csv"
GPUS = HERE / "gpus.toml"
MODELS = HERE / "models.toml"
FOLDS = HERE / "folds.toml"
SHIPPED = ROOT / "planner" / "data" / "speed-calibration.toml"
PHASES = ("decode", "prefill")
HELD_OUT = ("source", "gpu")
BATCH_TOKENS = 2048  # llama-bench's -b
# The day pull request 8075 made MMQ the default (planner.performance.settings): a row
# that gives a build date but no number is taken as before it when the month is earlier;
# and the same for pull request 6122, from which a prompt's output head multiplies its
# output tokens only (2024-03-26).
MMQ_DEFAULT_MONTH = "2024-07"
OUTPUT_ROWS_MONTH = "2024-04"


# ------------------------------------------------------------------------------ the rows


@dataclass(frozen=True)
class Row:
    row_id: int
    gpu: GpuModel
    gpu_count: int
    model: dict[str, Any]
    file_bytes: int
    test: str
    phase: str
    tokens: int
    depth: int
    lanes: int
    ubatch: int
    flash_attn: bool
    tokens_per_s: float
    source_id: str
    backend: str
    build: int | None
    threads: int | None = None

    @property
    def settings(self) -> RunSettings:
        return RunSettings(backend=self.backend, flash_attn=self.flash_attn,
                           ubatch=min(self.ubatch, BATCH_TOKENS), batch=BATCH_TOKENS,
                           depth=self.depth if self.phase == "prefill" else 0,
                           build=self.build, threads=self.threads)

    @property
    def measured_ms(self) -> float:
        """Decode: ms per step (all lanes); prefill: ms for the whole prompt."""
        if self.phase == "decode":
            return 1000 * self.lanes / self.tokens_per_s
        return 1000 * self.tokens / self.tokens_per_s

    @property
    def figure(self) -> str:
        """Which FP16 figure the estimate computes this row's GPU with."""
        return fp16_figure(NodeSpeed.of_kind(self.gpu.kind or "", self.gpu),
                           set_gflops_per_lane())


def load_gpus(path: Path = GPUS) -> dict[str, GpuModel]:
    """The calibration's GPU kinds by id, read as a catalog."""
    with path.open("rb") as handle:
        return {gpu.kind: gpu for gpu in parse_gpu_catalog(tomllib.load(handle), str(path))}


@cache
def set_gflops_per_lane() -> dict[str, float]:
    """The FP16 rates per lane of the calibration set's GPU kinds
    (:func:`fallback_gflops_per_lane`), by which a row's figure is named."""
    return fallback_gflops_per_lane(load_gpus().values())


_HEADS = re.compile(r"^attention_width\s*=\s*[\d_]+\s*#\s*(\d+) heads x", re.M)


def load_models(path: Path = MODELS) -> dict[str, dict[str, Any]]:
    """The models by id, each with its query heads (``attention_heads``) read from the
    ``heads x head size`` the comment of its attention width states."""
    text = path.read_text()
    models = {m["id"]: dict(m) for m in tomllib.loads(text)["model"]}
    blocks = text.split("[[model]]")[1:]
    for block, model in zip(blocks, models.values(), strict=True):
        found = _HEADS.search(block)
        if found is None:
            raise ValueError(f"{path}: model {model['id']} states no 'heads x head size'")
        model["attention_heads"] = int(found[1])
    return models


def row_build(raw: dict[str, str]) -> int | None:
    """The row's build number; a row with only a date is taken as a build before
    :data:`OUTPUT_ROWS_BUILD` when it is earlier than that change, else before
    :data:`MMQ_DEFAULT_BUILD` when earlier than that one, else as a current one (the
    builds between decide nothing else for these rows)."""
    if raw["build_number"]:
        return int(raw["build_number"])
    if raw["build_date"] < OUTPUT_ROWS_MONTH:
        return OUTPUT_ROWS_BUILD - 1
    return MMQ_DEFAULT_BUILD - 1 if raw["build_date"] < MMQ_DEFAULT_MONTH else None


def load_rows(path: Path = MEASUREMENTS) -> list[Row]:
    """Every usable row (those with an ``excluded_because`` reason are left out)."""
    gpus, models = load_gpus(), load_models()
    rows = []
    with path.open(newline="") as handle:
        raws = [raw for raw in csv.DictReader(handle) if not raw["excluded_because"]]
    for raw in raws:
        rows.append(Row(int(raw["row_id"]), gpus[raw["gpu_kind"]], int(raw["gpu_count"]),
                        models[raw["model"]], int(raw["file_bytes"]), raw["test"],
                        raw["phase"], int(raw["tokens"]), int(raw["depth"]),
                        int(raw["lanes"]), int(raw["ubatch"]), raw["flash_attn"] == "1",
                        float(raw["tokens_per_s"]), raw["source_id"],
                        raw["backend"].lower(), row_build(raw),
                        int(raw["threads"]) if raw["threads"] else None))
    return rows


def traffic_of(model: dict[str, Any], file_bytes: int) -> ModelTraffic:
    """A model at a published file size: bytes spread over parameters evenly, except
    routed experts stored at their own precision. Untied token embeddings are looked up
    a row a token (their bytes at the shared weights' rate); tied ones are the output
    head, read whole. The output head (tied or not) is vocabulary x hidden size."""
    params = model["parameter_count"]
    experts = model.get("expert_parameters", 0)
    if "expert_bits_per_weight" in model:
        expert_bytes = experts * model["expert_bits_per_weight"] / 8
    else:
        expert_bytes = file_bytes * experts / params
    shared_bytes = file_bytes - expert_bytes
    tied = model.get("tie_word_embeddings", False)
    embedding_params = 0 if tied else model["vocab_size"] * model["hidden_size"]
    embedding_bytes = shared_bytes * embedding_params / (params - experts)
    count, used = model.get("expert_count"), model.get("experts_used")
    active_bytes = shared_bytes + expert_bytes * (used / count if count else 1)
    active_params = params - embedding_params - (experts * (1 - used / count) if count else 0)
    window = model.get("sliding_window")
    return ModelTraffic(file_bytes, round(active_bytes), model["hidden_size"],
                        output_head_parameters=model["vocab_size"] * model["hidden_size"],
                        active_parameter_count=round(active_params), expert_count=count,
                        experts_used=used,
                        token_embedding_bytes=round(embedding_bytes) or None,
                        attention_width=model["attention_width"], parameter_count=params,
                        routed_expert_bytes=round(expert_bytes),
                        attention_heads=model["attention_heads"], sliding_window=window,
                        kv_heads=model["kv_heads"], head_size=model["head_size"],
                        window_layer_count=model.get("sliding_layer_count", 0),
                        **layer_node_counts(model["architecture"], used))


def loads_of(row: Row) -> tuple[list[StageLoad], ModelTraffic]:
    """The row's stages: the layers split evenly over its GPUs. Every layer's cache is in
    the model's KV row (kv_bytes_per_layer_token), a windowed one's at most its window."""
    model = row.model
    traffic = traffic_of(model, row.file_bytes)
    layers = model["layer_count"]
    window = model.get("sliding_window", 0)
    window_layers = model.get("sliding_layer_count", 0)
    body = row.file_bytes - (traffic.token_embedding_bytes or 0)
    count, used = model.get("expert_count"), model.get("experts_used")
    loads = []
    for index, span in enumerate(even_layers(layers, row.gpu_count)):
        share = span / layers
        windowed = window_layers * share  # spread as stage_loads spreads them
        full = span - windowed
        kv = model["kv_bytes_per_layer_token"]
        width, heads = model["attention_width"], model["attention_heads"]
        loads.append(StageLoad(
            layer_count=span, weight_bytes=round(body * share),
            routed_expert_bytes=round(traffic.routed_bytes * share),
            active_parameters=(traffic.active_parameter_count or 0) * share,
            routed_active_parameters=(model.get("expert_parameters", 0) * share
                                      * (used / count if count and used else 0)),
            kv_bytes_per_token=kv * full, attention_width=width * full,
            attention_heads=heads * full,
            window_kv_bytes_per_token=kv * windowed, window_attention_width=width * windowed,
            window_attention_heads=heads * windowed, window=window if windowed else 0,
            head_parameters=(traffic.output_head_parameters or 0) * share,
            holds_last_layer=index == row.gpu_count - 1,
            embedding_row_bytes=(2 * model["hidden_size"]
                                 if index == 0 and traffic.token_embedding_bytes else 0)))
    return loads, traffic


def _device(row: Row, calibration: SpeedCalibration, traffic: ModelTraffic,
            gpu: GpuModel | None = None) -> Device:
    return model_device(calibration, NodeSpeed.of_kind("row", gpu or row.gpu),
                        row.settings, traffic, [])


def _decode_cache(row: Row) -> tuple[float, float]:
    """A decode row's cached tokens per lane on average, and the cells all lanes hold."""
    per_lane = row.depth + row.tokens / 2
    return per_lane, per_lane * row.lanes


def _hop_per_token(row: Row) -> float:
    return (row.model["hidden_size"] * ACTIVATION_BYTES_PER_VALUE
            / INTRA_HOST_LINK_BYTES_PER_S * 1000)


def predict_ms(row: Row, calibration: SpeedCalibration, gpu: GpuModel | None = None
               ) -> float:
    """The estimate of the row's measured time (:attr:`Row.measured_ms`), through the
    estimate's own scalar path; ``gpu`` stands in for the row's GPU kind."""
    loads, traffic = loads_of(row)
    device = _device(row, calibration, traffic, gpu)
    rates = [device.rates] * len(loads)
    hops = len(loads) - 1
    per_token = _hop_per_token(row)
    if row.phase == "decode":
        _, cells = _decode_cache(row)
        terms, hop_times = decode_step(loads, rates, [device.hop_ms + row.lanes * per_token]
                                       * hops, traffic, lanes=row.lanes, cached=cells)
        return float(sum(float(t.total_ms) for t in terms) + sum(hop_times))
    settings = row.settings
    return prefill_ms(loads, rates, [device.hop_ms] * hops, [per_token] * hops, traffic,
                      Prompt(row.tokens, settings.depth, settings.batch, settings.ubatch),
                      stage_weights=[device.stages_weights] * len(loads))


# -------------------------------------------------------------- every row at once


def _stack(works: Sequence[Work]) -> Work:
    """Works of one step each as one Work of arrays."""
    def field(name: str) -> np.ndarray:
        return np.array([float(np.asarray(getattr(w, name))) for w in works])
    return Work(**{name: field(name) for name in Work.__dataclass_fields__})


def _gather(rates: Sequence[Rates], index: np.ndarray) -> Rates:
    def field(name: str) -> np.ndarray:
        return np.array([float(getattr(r, name)) for r in rates])[index]
    return Rates(**{name: field(name) for name in Rates.__dataclass_fields__})


class Prepared:
    """The rows' steps as arrays, so that the estimate of every row under a calibration is
    a few array operations of the estimate's own formula."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = list(rows)
        works: list[Work] = []
        item_group: list[int] = []
        self.groups: list[tuple[Row, ModelTraffic, GpuModel]] = []
        group_of: dict[tuple[Any, ...], int] = {}
        self.row_group = np.zeros(len(rows), dtype=int)
        self.decode_items: list[tuple[int, list[int]]] = []
        self.decode_hops = np.zeros(len(rows))
        self.hop_counts = np.array([r.gpu_count - 1 for r in rows], dtype=float)
        # Prompt rows by the shape of their (batches, stages, micro-batches) tensor.
        self.shapes: dict[tuple[int, int, int], list[tuple[int, np.ndarray, np.ndarray]]] = (
            defaultdict(list))
        for index, row in enumerate(rows):
            loads, traffic = loads_of(row)
            settings = row.settings
            key = (row.gpu.kind, row.backend, row.flash_attn,
                   staging_from_tokens(row.backend, row.build, row.gpu.architecture),
                   traffic.quantized,
                   fuses_moe_kernels(row.backend, row.build),
                   attends_on_shaders(row.backend, row.build, groups_queries(traffic)),
                   computes_every_output(row.build))
            if key not in group_of:
                group_of[key] = len(self.groups)
                self.groups.append((row, traffic, row.gpu))
            group = group_of[key]
            self.row_group[index] = group
            if row.phase == "decode":
                per_lane, _ = _decode_cache(row)
                items = []
                for load in loads:
                    items.append(len(works))
                    works.append(step_work(load, traffic, tokens=row.lanes,
                                           sequences=row.lanes, cached=per_lane,
                                           attended=per_lane, overlapped=False))
                    item_group.append(group)
                self.decode_items.append((index, items))
                self.decode_hops[index] = row.lanes * _hop_per_token(row)
                continue
            prompt = Prompt(row.tokens, settings.depth, settings.batch, settings.ubatch)
            shapes = [prompt.batch_shape(b) for b in range(prompt.batch_count)]
            width = max(len(t) for t, _ in shapes)
            position = np.full((prompt.batch_count, len(loads), width), -1)
            tokens = np.zeros((prompt.batch_count, width))
            for b, (sizes, before) in enumerate(shapes):
                tokens[b, :len(sizes)] = sizes
                for s, load in enumerate(loads):
                    for j, (t, cached) in enumerate(zip(sizes, before, strict=True)):
                        position[b, s, j] = len(works)
                        works.append(step_work(
                            load, traffic, tokens=float(t), sequences=1,
                            cached=float(cached + t), attended=float(cached + t / 2),
                            overlapped=True, stage_weights=True))
                        item_group.append(group)
            self.shapes[(prompt.batch_count, len(loads), width)].append(
                (index, position, tokens * _hop_per_token(row)))
        self.work = _stack(works)
        self.item_group = np.array(item_group)
        self.measured = np.array([r.measured_ms for r in rows])

    def predict(self, calibration: SpeedCalibration) -> np.ndarray:
        """Every row's estimate under ``calibration``."""
        devices = [_device(row, calibration, traffic, gpu) for row, traffic, gpu in self.groups]
        rates = _gather([d.rates for d in devices], self.item_group)
        staging = np.array([d.stages_weights for d in devices])[self.item_group]
        work = replace(self.work, staged_parameters=np.where(staging,
                                                             self.work.staged_parameters, 0.0))
        times = step_ms(work, rates)
        hop_ms = np.array([d.hop_ms for d in devices])[self.row_group]
        result = np.zeros(len(self.rows))
        for index, items in self.decode_items:
            result[index] = (times[items].sum()
                             + self.hop_counts[index] * (hop_ms[index] + self.decode_hops[index]))
        padded = np.append(times, 0.0)
        for (_batches, stages, _width), members in self.shapes.items():
            index = np.array([m[0] for m in members])
            position = np.stack([m[1] for m in members])
            stage_ms = padded[position]
            per_token = np.stack([m[2] for m in members])
            present = position[:, :, 0, :] >= 0
            hop = np.where(present, hop_ms[index][:, None, None] + per_token, 0.0)
            hops = np.repeat(hop[:, :, None, :], max(stages - 1, 1), axis=2)
            result[index] = pipeline_ms(stage_ms, hops).sum(axis=1)
        return result


# ---------------------------------------------------------------------------- the fit

# Each fitted figure: where it lives in the calibration, how it maps from the free
# parameter (a share of a peak through a logistic, anything else through exp), and which
# rows inform it. Figures whose rows come from fewer than two GPU kinds are not fitted.
SHARES = ("weight_efficiency", "kv_efficiency", "kv_efficiency_without_flash_attention",
          "matrix_efficiency", "attention_efficiency")
START = {"weight_efficiency": 0.7, "kv_efficiency": 0.5,
         "kv_efficiency_without_flash_attention": 0.5, "matrix_efficiency": 0.4,
         "attention_efficiency": 0.2, "quantized_matrix_factor": 1.0, "layer_ms": 0.03,
         "hop_ms": 0.2, "memory_factor": 0.8,
         "shader_units_factor": 0.5}
SHARED = ("shader_units_factor",)


# The largest value each figure may take (planner.performance.calibration's bounds).
HIGHEST = {name: high for name, (_low, high) in FIGURE_BOUNDS.items()}


@dataclass(frozen=True)
class Parameter:
    figure: str   # a BackendFigures field, "memory_factor" or a shared figure
    key: str      # the backend, the memory type, or "" for a shared figure

    @property
    def name(self) -> str:
        return f"{self.figure}.{self.key}" if self.key else self.figure

    def value(self, free: float) -> float:
        """The figure of a free parameter: between 0 and its :data:`HIGHEST`, through a
        logistic (a figure near either end shows a fit that leans on it)."""
        return HIGHEST[self.figure] / (1 + math.exp(-free))

    def free(self, value: float) -> float:
        share = value / HIGHEST[self.figure]
        return math.log(share / (1 - share))


def _informing(rows: Sequence[Row], parameter: Parameter) -> list[Row]:
    figure, key = parameter.figure, parameter.key
    prefill = [r for r in rows if r.phase == "prefill"]
    if figure == "memory_factor":
        return [r for r in rows if r.gpu.memory_type == key]
    if figure == "shader_units_factor":
        return [r for r in prefill if r.figure == "shaders" and not is_cpu_kind(r.gpu.backend)]
    mine = [r for r in rows if r.backend == key]
    if figure == "matrix_efficiency":
        return [r for r in mine if r.phase == "prefill"]
    if figure == "attention_efficiency":
        return [r for r in mine if r.phase == "prefill" and r.flash_attn]
    if figure == "kv_efficiency":
        return [r for r in mine if r.flash_attn]
    if figure == "kv_efficiency_without_flash_attention":
        return [r for r in mine if not r.flash_attn]
    if figure == "quantized_matrix_factor":
        quantized = [r for r in mine if r.phase == "prefill"
                     and traffic_of(r.model, r.file_bytes).quantized]
        dense = [r for r in mine if r.phase == "prefill"
                 and not traffic_of(r.model, r.file_bytes).quantized]
        return quantized if dense else []
    if figure == "hop_ms":
        return [r for r in mine if r.gpu_count > 1]
    return mine


def parameters_of(rows: Sequence[Row]) -> list[Parameter]:
    """The figures the rows determine, each informed by two GPU kinds or more (a backend
    whose rows come from one kind is left unmeasured)."""
    def informed(parameter: Parameter) -> bool:
        return len({r.gpu.kind for r in _informing(rows, parameter)}) >= 2

    found = []
    for backend in sorted({r.backend for r in rows}):
        required = [Parameter(f, backend) for f in ("weight_efficiency", "layer_ms")]
        if not all(informed(p) for p in required):
            continue
        found += required
        found += [p for p in (Parameter(f, backend) for f in (
            "kv_efficiency", "kv_efficiency_without_flash_attention", "matrix_efficiency",
            "attention_efficiency", "quantized_matrix_factor", "hop_ms")) if informed(p)]
    found += [p for p in (Parameter("memory_factor", m) for m in sorted(
        {r.gpu.memory_type or "" for r in rows} - {"gddr", ""})) if informed(p)]
    found += [p for p in (Parameter(f, "") for f in SHARED) if informed(p)]
    return found


def fallback_flops_per_byte(rows: Sequence[Row]) -> dict[str, float]:
    """Per vendor (and over all): the median FP16 FLOPs per byte of bandwidth of the rows'
    GPU kinds that state an FP16 figure, the stand-in of a kind that states neither it
    nor its shaders; for CPUs (``"cpu"``), the median FP32 vector FLOPs per byte of the
    CPU kinds that give their cores and clock."""
    kinds = {r.gpu.kind: r.gpu for r in rows}
    ratios: dict[str, list[float]] = defaultdict(list)
    for gpu in kinds.values():
        bandwidth = gpu.memory_bandwidth_bytes_per_s or 1
        if is_cpu_kind(gpu.backend) and gpu.vector_tflops is not None:
            ratios["cpu"].append(gpu.vector_tflops * 1e12 / bandwidth)
        elif not is_cpu_kind(gpu.backend) and gpu.fp16_tflops is not None:
            ratio = gpu.fp16_tflops * 1e12 / bandwidth
            ratios[gpu.vendor or "all"].append(ratio)
            if gpu.vendor:
                ratios["all"].append(ratio)
    return {vendor: round(statistics.median(values), 2) for vendor, values in
            sorted(ratios.items())}


def fallback_gflops_per_lane(gpus: Iterable[GpuModel]) -> dict[str, float]:
    """Per vendor with two such kinds or more: the median FP16 GFLOPS per FP32 lane of
    the GPU kinds that state an FP16 figure and their shaders, the stand-in of a kind of
    that vendor that states its shaders but no clock. A lane's rate is its
    architecture's, so there is none over every vendor, and none from one kind alone."""
    kinds = {gpu.kind: gpu for gpu in gpus}
    rates: dict[str, list[float]] = defaultdict(list)
    for gpu in kinds.values():
        if gpu.fp16_tflops is not None and gpu.shader_lanes is not None and gpu.vendor:
            rates[gpu.vendor].append(gpu.fp16_tflops * 1e3 / gpu.shader_lanes)
    return {vendor: round(statistics.median(values), 4) for vendor, values in
            sorted(rates.items()) if len(values) >= 2}


def calibration_of(parameters: Sequence[Parameter], values: Sequence[float],
                   flops_per_byte: dict[str, float],
                   gflops_per_lane: dict[str, float] | None = None) -> SpeedCalibration:
    """The calibration whose fitted figures are ``values``."""
    backends: dict[str, dict[str, float]] = defaultdict(dict)
    memory: dict[str, float] = {}
    shared = {name: START[name] for name in SHARED}
    for parameter, value in zip(parameters, values, strict=True):
        if parameter.figure == "memory_factor":
            memory[parameter.key] = value
        elif parameter.figure in SHARED:
            shared[parameter.figure] = value
        else:
            backends[parameter.key][parameter.figure] = value
    return SpeedCalibration({name: BackendFigures(**figures)
                             for name, figures in backends.items()}, memory,
                            **shared, fallback_flops_per_byte=flops_per_byte,
                            fallback_gflops_per_lane=gflops_per_lane or {})


def row_weights(rows: Sequence[Row]) -> np.ndarray:
    """Each row's weight in the fit: the rows of one source, GPU kind, backend and phase
    weigh one together (a source that measured one GPU many times does not outweigh the
    GPUs measured once)."""
    counts = Counter((r.source_id, r.gpu.kind, r.backend, r.phase) for r in rows)
    return np.array([1 / counts[(r.source_id, r.gpu.kind, r.backend, r.phase)]
                     for r in rows])


# Errors below this weigh quadratically in the fit, larger ones linearly: the fit seeks
# the median of the larger ones (the figure the docs publish) and a few far runs do not
# pull it off the many.
HUBER_LOG_ERROR = 0.05
# How strongly a backend's figure is drawn towards the same figure of every backend (a
# fifth of what one GPU's runs weigh): a backend measured on few GPUs keeps near what the
# others say unless its runs say otherwise. Chosen by cross-validation: with none, Vulkan's
# decode error held out by GPU was 48 %, and with a whole GPU's weight the CUDA rows fit
# worse; a fifth keeps every backend's decode error at 19 % or less.
PRIOR_WEIGHT = 0.2


def _shared_figures(parameters: Sequence[Parameter]) -> list[str]:
    """The backend figures fitted on two backends or more: each has a value common to
    every backend that its backends' own are drawn towards."""
    backends = {p.key for p in parameters if p.figure in BACKEND_FIGURES}
    return [figure for figure in BACKEND_FIGURES
            if sum(Parameter(figure, b) in parameters for b in backends) >= 2]


BACKEND_FIGURES = ("weight_efficiency", "layer_ms", "kv_efficiency",
                   "kv_efficiency_without_flash_attention", "matrix_efficiency",
                   "attention_efficiency", "quantized_matrix_factor", "hop_ms")


def fit(rows: Sequence[Row], rounds: int = 60) -> SpeedCalibration:
    """The figures that fit ``rows`` best: Levenberg-Marquardt on the weighted
    pseudo-Huber loss of each row's log error, each backend's figure drawn towards a value
    common to every backend (:data:`PRIOR_WEIGHT`), from :data:`START`. A function of the
    rows alone (their order aside)."""
    rows = sorted(rows, key=lambda r: r.row_id)
    prepared = Prepared(rows)
    parameters = parameters_of(rows)
    shared = _shared_figures(parameters)
    # The common values follow the fitted figures in the free vector.
    pulls = [(parameters.index(p), len(parameters) + shared.index(p.figure))
             for p in parameters if p.figure in shared]
    flops_per_byte = fallback_flops_per_byte(rows)
    gflops_per_lane = fallback_gflops_per_lane(r.gpu for r in rows)
    weights = row_weights(rows)
    start = [p.free(START["memory_factor" if p.figure == "memory_factor" else p.figure])
             for p in parameters]
    free = np.array([*start, *(Parameter(f, "").free(START[f]) for f in shared)])
    size = len(parameters)

    def residuals(x: np.ndarray) -> np.ndarray:
        calibration = calibration_of(parameters, [p.value(v) for p, v in
                                                  zip(parameters, x[:size], strict=True)],
                                     flops_per_byte, gflops_per_lane)
        rows_part = np.log(prepared.predict(calibration) / prepared.measured)
        return np.concatenate([rows_part, [x[a] - x[b] for a, b in pulls]])

    def irls_weights(r: np.ndarray) -> np.ndarray:
        rows_part = weights / np.sqrt(1 + (r[:len(rows)] / HUBER_LOG_ERROR) ** 2)
        return np.concatenate([rows_part, np.full(len(pulls), PRIOR_WEIGHT)])

    def loss(r: np.ndarray) -> float:
        d = HUBER_LOG_ERROR
        rows_part = r[:len(rows)]
        return float(np.sum(weights * d * d * (np.sqrt(1 + (rows_part / d) ** 2) - 1))
                     + 0.5 * PRIOR_WEIGHT * np.sum(r[len(rows):] ** 2))

    res = residuals(free)
    current = loss(res)
    damping = 1e-2
    for _ in range(rounds):
        irls = irls_weights(res)
        jacobian = np.empty((len(res), len(free)))
        for k in range(len(free)):
            step = free.copy()
            step[k] += 1e-5
            jacobian[:, k] = (residuals(step) - res) / 1e-5
        normal = jacobian.T @ (irls[:, None] * jacobian)
        gradient = jacobian.T @ (irls * res)
        for _ in range(12):
            move = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12),
                                   -gradient)
            trial = np.clip(free + move, -30, 30)
            trial_res = residuals(trial)
            trial_loss = loss(trial_res)
            if trial_loss < current:
                break
            damping *= 4
        else:
            break
        gain = current - trial_loss
        free, res, current = trial, trial_res, trial_loss
        damping = max(damping / 3, 1e-9)
        if gain < 1e-10 * max(current, 1e-12):
            break
    values = [round(p.value(v), 6) for p, v in zip(parameters, free[:size], strict=True)]
    return calibration_of(parameters, values, flops_per_byte, gflops_per_lane)


def fingerprint(rows: Iterable[Row]) -> str:
    """What a fit saw: its rows' ids and measured values, hashed."""
    text = ";".join(f"{r.row_id}:{r.tokens_per_s!r}" for r in sorted(rows,
                                                                       key=lambda r: r.row_id))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------- cross-validation


@dataclass(frozen=True)
class Fold:
    """One fold of a cross-validation: the rows whose ``held_out`` (``source`` or
    ``gpu``) is ``value`` left out, the calibration fitted on the others, and the
    fingerprint of those (:func:`fingerprint`)."""

    held_out: str
    value: str
    trained_on: str
    calibration: SpeedCalibration


def held_out_value(row: Row, held_out: str) -> str:
    return row.source_id if held_out == "source" else row.gpu.kind


def folds_of(rows: Sequence[Row], held_out: str,
             fitter: Callable[[Sequence[Row]], SpeedCalibration] = fit,
             workers: int = 1) -> list[Fold]:
    """One fold per source (or GPU kind): a fit on every other row; ``workers`` processes
    fit them side by side (each fit is a function of its rows alone)."""
    values = sorted({held_out_value(r, held_out) for r in rows})
    trains = [[r for r in rows if held_out_value(r, held_out) != value] for value in values]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            fitted = list(pool.map(fitter, trains))
    else:
        fitted = [fitter(train) for train in trains]
    return [Fold(held_out, value, fingerprint(train), calibration)
            for value, train, calibration in zip(values, trains, fitted, strict=True)]


def held_out_errors(rows: Sequence[Row], folds: Sequence[Fold]) -> dict[tuple[str, int], float]:
    """(held_out, row id) -> the row's error, (estimated - measured) / measured, under
    the fold that left it out. A fold whose fit saw a row it is asked about is refused."""
    errors = {}
    for fold in folds:
        test = [r for r in rows if held_out_value(r, fold.held_out) == fold.value]
        train = [r for r in rows if held_out_value(r, fold.held_out) != fold.value]
        if fold.trained_on != fingerprint(train):
            raise ValueError(f"fold {fold.held_out}={fold.value} was fitted on other rows "
                             "than all but its own")
        prepared = Prepared(test)
        predicted = prepared.predict(fold.calibration)
        for row, estimate in zip(test, predicted, strict=True):
            errors[(fold.held_out, row.row_id)] = float(estimate / row.measured_ms - 1)
    return errors


def fallback_errors(rows: Sequence[Row], folds: Sequence[Fold]
                    ) -> dict[tuple[str, int], float]:
    """The held-out error of every prefill row whose GPU states an FP16 figure, estimated
    as if it stated none (its figure from its memory bandwidth): the error of that
    stand-in."""
    errors = {}
    for fold in folds:
        for row in rows:
            if (held_out_value(row, fold.held_out) != fold.value or row.phase != "prefill"
                    or row.gpu.fp16_tflops is None):
                continue
            bare = replace(row.gpu, fp16_tflops=None, fp16_tflops_source=None,
                           shader_count=None, boost_clock_mhz=None, shader_source=None,
                           architecture=None)
            errors[(fold.held_out, row.row_id)] = (
                predict_ms(row, fold.calibration, bare) / row.measured_ms - 1)
    return errors


def cross_validated(rows: Sequence[Row], errors: dict[tuple[str, int], float],
                    figure_errors: dict[tuple[str, int], float] | None = None
                    ) -> list[CrossValidatedError]:
    """The median absolute held-out error per phase, held-out kind, backend and memory
    type (each also over all), per FP16 figure of the GPUs, and of the prompts of
    mixtures of experts per backend (and over all), every figure."""
    by_id = {r.row_id: r for r in rows}
    experts = {r.row_id for r in rows if r.phase == "prefill"
               and traffic_of(r.model, r.file_bytes).mixture_of_experts}
    groups: dict[tuple[str, str, str, str, str, str], list[float]] = defaultdict(list)
    for (held_out, row_id), error in errors.items():
        row = by_id[row_id]
        for backend in (row.backend, "all"):
            for memory in (row.gpu.memory_type or "", "all"):
                if backend == "all" and memory != "all":
                    continue
                groups[(row.phase, backend, memory, held_out, "stated", "all")].append(
                    abs(error))
            if row_id in experts:
                groups[(row.phase, backend, "all", held_out, "all",
                        MIXTURES_OF_EXPERTS)].append(abs(error))
        if row.figure != "stated":
            groups[(row.phase, "all", "all", held_out, row.figure, "all")].append(abs(error))
    for (held_out, _row_id), error in (figure_errors or {}).items():
        groups[("prefill", "all", "all", held_out, "bandwidth", "all")].append(abs(error))
    return [CrossValidatedError(phase, backend, memory, held_out, len(values),
                                round(statistics.median(values), 4), figure, model)
            for (phase, backend, memory, held_out, figure, model), values
            in sorted(groups.items())]


# What a row's own GPU, source and backend leave unexplained: each held-out row's error
# less the median error of its (source, GPU kind, backend) group, in log terms. An
# estimate that knew the level of every group left out would still err this much with
# the shapes it has (docs/speed.md, "Known gaps").


def level_free_errors(rows: Sequence[Row], errors: dict[tuple[str, int], float]
                      ) -> dict[tuple[str, str], float]:
    """(held_out, phase) -> the median absolute held-out error once each (source, GPU
    kind, backend) group's own median error is taken out of its rows' errors."""
    by_id = {r.row_id: r for r in rows}
    groups: dict[tuple[str, str, str, str, str], list[float]] = defaultdict(list)
    for (held_out, row_id), error in errors.items():
        row = by_id[row_id]
        groups[(held_out, row.phase, row.source_id, row.gpu.kind, row.backend)].append(
            math.log1p(error))
    left: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (held_out, phase, *_group), logs in groups.items():
        level = statistics.median(logs)
        left[(held_out, phase)] += [abs(math.expm1(value - level)) for value in logs]
    return {key: round(statistics.median(values), 4) for key, values in sorted(left.items())}


def level_free_lines(rows: Sequence[Row], errors: dict[tuple[str, int], float]
                     ) -> list[str]:
    """The table docs/speed.md publishes of :func:`level_free_errors`."""
    floors = level_free_errors(rows, errors)
    lines = ["| phase | GPU held out | source held out |", "|---|---:|---:|"]
    for phase in PHASES:
        lines.append(f"| {phase} | {floors[('gpu', phase)]:.1%} | "
                     f"{floors[('source', phase)]:.1%} |")
    return lines


# ------------------------------------------------------------ sources it had never seen

# The rows from this row_id on were collected after the calibration of
# BEFORE_NEW_SOURCES was fitted (from sources it had never used, and more of jeffbolznv's),
# and are estimated with it as they were before they joined any fit.
FIRST_NEVER_SEEN_ROW = 1090
BEFORE_NEW_SOURCES = HERE / "calibration-before-new-sources.toml"


def errors_under(rows: Sequence[Row], calibration: SpeedCalibration) -> list[float]:
    """Each row's error in time under ``calibration``, estimated / measured - 1: rows no
    fit of it saw (:func:`never_seen_lines`, :func:`unseen_lines`)."""
    prepared = Prepared(rows)
    return [float(e) for e in prepared.predict(calibration) / prepared.measured - 1]


def never_seen_lines(rows: Sequence[Row], path: Path = BEFORE_NEW_SOURCES) -> list[str]:
    """The table docs/speed.md publishes: the rows from :data:`FIRST_NEVER_SEEN_ROW` on,
    estimated by the calibration fitted before they were collected, by phase (and AMD's
    discrete GPUs' prompts apart), as median absolute and median error in time."""
    with path.open("rb") as handle:
        before = SpeedCalibration.from_dict(tomllib.load(handle), str(path))
    new = [r for r in rows if r.row_id >= FIRST_NEVER_SEEN_ROW]
    errors = errors_under(new, before)
    groups = {phase: [e for e, r in zip(errors, new, strict=True) if r.phase == phase]
              for phase in PHASES}
    # AMD's discrete GPUs (memory of their own, not an APU's LPDDR), whose prompts the
    # calibration before them had most wrong.
    groups["prefill, AMD's discrete GPUs"] = [
        e for e, r in zip(errors, new, strict=True)
        if r.phase == "prefill" and r.gpu.vendor == "AMD" and r.gpu.memory_type != "lpddr"
        and not is_cpu_kind(r.gpu.backend)]
    lines = ["| phase | rows | median absolute error | median error |", "|---|---:|---:|---:|"]
    for name, values in groups.items():
        lines.append(f"| {name} | {len(values)} | "
                     f"{statistics.median(abs(v) for v in values):.1%} | "
                     f"{statistics.median(values):+.1%} |")
    return lines



# ------------------------------------------------------- sources the shipped fit never saw

# Published runs of sources no row of measurements.csv names, collected after the shipped
# calibration was fitted and kept out of every fit: estimated by it, as a user's own run
# would be. They join measurements.csv, keeping their row ids, when it is next refitted.
UNSEEN = HERE / "unseen.csv"


def unseen_lines(rows: Sequence[Row], calibration: SpeedCalibration) -> list[str]:
    """The table docs/speed.md publishes: the rows of :data:`UNSEEN` estimated by the
    shipped calibration, by phase and backend, with their sources and GPU kinds, as median
    absolute and median error in time."""
    groups: dict[tuple[str, str], list[tuple[Row, float]]] = defaultdict(list)
    for row, error in zip(rows, errors_under(rows, calibration), strict=True):
        for backend in ("all", row.backend):
            groups[(row.phase, backend)].append((row, error))
    lines = ["| phase | backend | rows | sources | GPU kinds | median absolute error "
             "| median error |", "|---|---|---:|---:|---:|---:|---:|"]
    for (phase, backend), found in sorted(
            groups.items(), key=lambda item: (item[0][0], item[0][1] != "all", item[0][1])):
        values = [error for _, error in found]
        lines.append(f"| {phase} | {backend} | {len(found)} | "
                     f"{len({row.source_id for row, _ in found})} | "
                     f"{len({row.gpu.kind for row, _ in found})} | "
                     f"{statistics.median(abs(v) for v in values):.1%} | "
                     f"{statistics.median(values):+.1%} |")
    return lines


# ------------------------------------------------------------------------ the files


def _value(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def to_toml(calibration: SpeedCalibration) -> str:
    lines = ["# The speed estimate's fitted figures (planner.performance.calibration), written",
             "# by validation/speed/calibration.py from the published measurements of",
             "# validation/speed/measurements.csv. cross_validated is the estimate's error on",
             "# rows of sources and GPU kinds the fit did not see (folds.toml beside them).",
             ""]
    data = calibration.to_dict()
    for name, figures in data["backends"].items():
        lines.append(f"[backends.{name}]")
        lines += [f"{key} = {_value(value)}" for key, value in figures.items()]
        lines.append("")
    lines.append("[memory_factors]")
    lines += [f"{key} = {_value(value)}" for key, value in data["memory_factors"].items()]
    lines += ["", "[shared]"]
    lines += [f"{key} = {_value(value)}" for key, value in data["shared"].items()]
    for table in ("fallback_flops_per_byte", "fallback_gflops_per_lane"):
        lines += ["", f"[{table}]"]
        lines += [f"{key} = {_value(value)}" for key, value in data.get(table, {}).items()]
    lines.append("")
    for entry in data["cross_validated"]:
        lines.append("[[cross_validated]]")
        lines += [f"{key} = {_value(value)}" for key, value in entry.items()]
        lines.append("")
    return "\n".join(lines)


def folds_toml(folds: Sequence[Fold]) -> str:
    lines = ["# Each fold of the speed calibration's cross-validation: the source or GPU kind",
             "# left out, the fingerprint of the rows the fit saw (every other row), and the",
             "# figures it fitted. Written by validation/speed/calibration.py.", ""]
    for fold in folds:
        lines += ["[[fold]]", f'held_out = "{fold.held_out}"', f'value = "{fold.value}"',
                  f'trained_on = "{fold.trained_on}"']
        data = fold.calibration.to_dict()
        for name, figures in data["backends"].items():
            lines.append(f"[fold.backends.{name}]")
            lines += [f"{key} = {_value(value)}" for key, value in figures.items()]
        lines.append("[fold.memory_factors]")
        lines += [f"{key} = {_value(value)}" for key, value in data["memory_factors"].items()]
        lines.append("[fold.shared]")
        lines += [f"{key} = {_value(value)}" for key, value in data["shared"].items()]
        for table in ("fallback_flops_per_byte", "fallback_gflops_per_lane"):
            lines.append(f"[fold.{table}]")
            lines += [f"{key} = {_value(value)}" for key, value in data.get(table, {}).items()]
        lines.append("")
    return "\n".join(lines)


def load_folds(path: Path = FOLDS) -> list[Fold]:
    with path.open("rb") as handle:
        data = tomllib.load(handle)
    return [Fold(entry["held_out"], entry["value"], entry["trained_on"],
                 SpeedCalibration.from_dict({key: entry[key] for key in
                                             ("backends", "memory_factors", "shared",
                                              "fallback_flops_per_byte",
                                              "fallback_gflops_per_lane") if key in entry},
                                            f"{path.name} {entry['held_out']}={entry['value']}"))
            for entry in data["fold"]]


def summary_lines(calibration: SpeedCalibration) -> list[str]:
    """The table docs/speed.md and the README publish: the median absolute error per
    phase and backend, GPU kinds and sources held out; and of prefill with each stand-in
    FP16 figure (the GPUs that state none, and those that do estimated as if not)."""
    found = {(e.phase, e.backend, e.memory_type, e.held_out, e.figure): e
             for e in calibration.cross_validated if e.model == "all"}
    experts = {(e.backend, e.held_out): e for e in calibration.cross_validated
               if e.model == MIXTURES_OF_EXPERTS}
    lines = ["| phase | backend | rows | GPU held out | source held out |",
             "|---|---|---:|---:|---:|"]
    for phase in PHASES:
        backends = sorted({e.backend for e in calibration.cross_validated
                           if e.phase == phase and e.backend != "all"})
        for backend in ("all", *backends):
            by_gpu = found.get((phase, backend, "all", "gpu", "stated"))
            by_source = found.get((phase, backend, "all", "source", "stated"))
            if by_gpu is None or by_source is None:
                continue
            lines.append(f"| {phase} | {backend} | {by_gpu.rows} | "
                         f"{by_gpu.median_abs_error:.1%} | {by_source.median_abs_error:.1%} |")
    for figure, said in (("shaders", "FP16 from shaders and clock"),
                         ("lanes", "FP16 from shaders without a clock"),
                         ("bandwidth", "FP16 from bandwidth")):
        by_gpu = found.get(("prefill", "all", "all", "gpu", figure))
        by_source = found.get(("prefill", "all", "all", "source", figure))
        if by_gpu is not None and by_source is not None:
            lines.append(f"| prefill | all, {said} | {by_gpu.rows} | "
                         f"{by_gpu.median_abs_error:.1%} | {by_source.median_abs_error:.1%} |")
    for backend in ("all", *sorted({b for b, _ in experts} - {"all"})):
        by_gpu, by_source = experts.get((backend, "gpu")), experts.get((backend, "source"))
        if by_gpu is not None and by_source is not None:
            lines.append(f"| prefill | {backend}, mixtures of experts | {by_gpu.rows} | "
                         f"{by_gpu.median_abs_error:.1%} | {by_source.median_abs_error:.1%} |")
    return lines


# The (held-out kind, phase, backend) groups whose cross-validated error is above the
# bound the tests hold (docs/speed.md, "Known gaps", says why); a test checks that each is
# still above it, so that meeting a bound shows.
ABOVE_BOUND: frozenset[tuple[str, str, str]] = frozenset({
    *((held_out, "prefill", backend) for held_out in HELD_OUT
      for backend in ("all", "rocm", "vulkan", "metal", "cpu")),
})

# The pages that publish the table, between these markers.
PAGES = (ROOT / "README.md", ROOT / "docs" / "speed.md")
TABLE_START = "<!-- speed-error-table:start -->"
TABLE_END = "<!-- speed-error-table:end -->"


def publish(calibration: SpeedCalibration) -> None:
    """Write :func:`summary_lines` into each of :data:`PAGES`, between the markers."""
    table = "\n".join(summary_lines(calibration))
    for page in PAGES:
        text = page.read_text()
        start, end = text.index(TABLE_START), text.index(TABLE_END)
        page.write_text(text[:start + len(TABLE_START)] + "\n" + table + "\n" + text[end:])


def main(argv: Sequence[str]) -> None:
    from planner.performance import load_calibration

    rows = load_rows()
    if "--levels" in argv:
        print("\n".join(level_free_lines(rows, held_out_errors(rows, load_folds()))))
        return
    if "--never-seen" in argv:
        print("\n".join(never_seen_lines(rows)))
        return
    if "--unseen" in argv:
        print("\n".join(unseen_lines(load_rows(UNSEEN), load_calibration())))
        return
    if "--check" in argv:
        calibration = load_calibration()
    else:
        calibration = fit(rows)
        workers = len(os.sched_getaffinity(0))
        folds = [fold for held_out in HELD_OUT
                 for fold in folds_of(rows, held_out, workers=workers)]
        FOLDS.write_text(folds_toml(folds))
        errors = held_out_errors(rows, folds)
        calibration = replace(calibration, cross_validated=tuple(
            cross_validated(rows, errors, fallback_errors(rows, folds))))
        SHIPPED.write_text(to_toml(calibration))
        publish(calibration)
    print("\n".join(summary_lines(calibration)))


if __name__ == "__main__":
    main(sys.argv[1:])
