"""The speed calibration: published llama.cpp measurements (measurements.csv) run through
planner.performance, the fit of its efficiencies and fixed times, and the error on the
measurements the fit did not see.

``python validation/speed/calibration.py`` refits on the rows marked ``fit``, writes
``planner/data/speed-calibration.toml`` and prints the held-out error table docs/speed.md
publishes; ``python validation/speed/calibration.py --check`` only prints the table of
the shipped calibration. The tests (tests/test_speed_calibration.py) recompute the table
from the shipped calibration and hold it to the bounds.

Each row is one published run on ``gpu_count`` GPUs of one kind (gpus.toml), layers split
evenly as ``-sm layer`` does, of one model (models.toml) at the published file size:

- llama-bench ``tgN`` (``@ dD``): N tokens generated after D cached ones; the estimate
  is the decode step at the mean cache, D + N / 2 tokens;
- llama-batched-bench: ``lanes`` sequences of PP = 512 prompt tokens each generating 32,
  S_TG tokens/s over all lanes; a step has each lane's 512 + 16 tokens cached on average;
- llama-bench ``ppN`` (``@ dD``): a prompt of N tokens after D cached ones, in llama.cpp's
  batches of 2048 tokens and the row's ubatches.

The GPUs of one machine pass activations over PCIe (``INTRA_HOST_LINK_BYTES_PER_S``).
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from planner.models.gpus import GpuModel, parse_gpu_catalog  # noqa: E402
from planner.performance import (  # noqa: E402
    ACTIVATION_BYTES_PER_VALUE,
    EFFICIENCY_TABLES,
    INTRA_HOST_LINK_BYTES_PER_S,
    HeldOutError,
    ModelTraffic,
    SpeedCalibration,
    StageLoad,
    calibrated_device,
    decode_step,
    even_layers,
    prefill_ms,
)

HERE = Path(__file__).resolve().parent
MEASUREMENTS = HERE / "measurements.csv"
GPUS = HERE / "gpus.toml"
MODELS = HERE / "models.toml"
SHIPPED = ROOT / "planner" / "data" / "speed-calibration.toml"
MEMORY_TYPES = ("gddr", "hbm", "lpddr")
PHASES = ("decode", "prefill")
# Published figures gpus.toml gives beside the catalog's own fields, for the kinds whose
# vendor states no dense FP16 matrix throughput (a fallback is derived from them).
PUBLISHED_ONLY_FIELDS = ("shader_count", "boost_clock_mhz", "shader_source", "core_count",
                         "simd_width_bits", "core_source")


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
    tokens_per_s: float
    split: str

    @property
    def pair(self) -> str:
        return SpeedCalibration.key(self.gpu.memory_type, self.gpu.backend)

    @property
    def measured_ms(self) -> float:
        """Decode: ms per step (all lanes); prefill: ms for the whole prompt."""
        if self.phase == "decode":
            return 1000 * self.lanes / self.tokens_per_s
        return 1000 * self.tokens / self.tokens_per_s


def load_gpus(path: Path = GPUS) -> dict[str, GpuModel]:
    """The calibration's kinds by id, read as a catalog without the published-only
    figures. Kinds on DDR memory (CPUs) are left out: the catalog's memory types, and so
    this fit, are HBM, GDDR and LPDDR."""
    with path.open("rb") as handle:
        entries = tomllib.load(handle)["gpu"]
    kept = [{key: value for key, value in entry.items() if key not in PUBLISHED_ONLY_FIELDS}
            for entry in entries if entry["memory_type"] in MEMORY_TYPES]
    return {gpu.kind: gpu for gpu in parse_gpu_catalog({"gpu": kept}, str(path))}


def load_rows(path: Path = MEASUREMENTS) -> list[Row]:
    """Every usable row (those with an ``excluded_because`` reason are left out)."""
    gpus = load_gpus()
    with MODELS.open("rb") as handle:
        models = {m["id"]: m for m in tomllib.load(handle)["model"]}
    rows = []
    with path.open(newline="") as handle:
        for raw in csv.DictReader(handle):
            if raw["excluded_because"] or raw["gpu_kind"] not in gpus:
                continue
            rows.append(Row(int(raw["row_id"]), gpus[raw["gpu_kind"]], int(raw["gpu_count"]),
                            models[raw["model"]], int(raw["file_bytes"]), raw["test"],
                            raw["phase"], int(raw["tokens"]), int(raw["depth"]),
                            int(raw["lanes"]), int(raw["ubatch"]),
                            float(raw["tokens_per_s"]), raw["split"]))
    return rows


def traffic_of(model: dict[str, Any], file_bytes: int) -> ModelTraffic:
    """A model at a published file size: bytes spread over parameters evenly, except
    routed experts stored at their own precision; the token embeddings (untied: an
    output head is read whole) at the shared weights' rate."""
    params = model["parameter_count"]
    experts = model.get("expert_parameters", 0)
    if "expert_bits_per_weight" in model:
        expert_bytes = experts * model["expert_bits_per_weight"] / 8
    else:
        expert_bytes = file_bytes * experts / params
    shared_bytes = file_bytes - expert_bytes
    embedding_params = model["vocab_size"] * model["hidden_size"]
    embedding_bytes = shared_bytes * embedding_params / (params - experts)
    count, used = model.get("expert_count"), model.get("experts_used")
    active_bytes = shared_bytes + expert_bytes * (used / count if count else 1)
    active_params = params - embedding_params - (experts * (1 - used / count) if count else 0)
    return ModelTraffic(file_bytes, round(active_bytes), model["hidden_size"],
                        active_parameter_count=round(active_params), expert_count=count,
                        experts_used=used, token_embedding_bytes=round(embedding_bytes),
                        attention_width=model["attention_width"], parameter_count=params,
                        routed_expert_bytes=round(expert_bytes))


_LOADS: dict[tuple[int, str, int, int], tuple[list[StageLoad], ModelTraffic]] = {}


def loads_of(row: Row) -> tuple[list[StageLoad], ModelTraffic]:
    """The row's stages: the layers split evenly over its GPUs (kept: the fit asks for
    them at every step)."""
    key = (row.row_id, row.model["id"], row.file_bytes, row.gpu_count)
    if key not in _LOADS:
        _LOADS[key] = _split(row)
    return _LOADS[key]


def _split(row: Row) -> tuple[list[StageLoad], ModelTraffic]:
    model = row.model
    traffic = traffic_of(model, row.file_bytes)
    layers = model["layer_count"]
    window = model.get("sliding_window", 0)
    window_layers = model.get("sliding_layer_count", 0)
    body = row.file_bytes - (traffic.token_embedding_bytes or 0)
    loads = []
    for index, span in enumerate(even_layers(layers, row.gpu_count)):
        share = span / layers
        windowed = round(window_layers * share)
        full = span - windowed
        kv = model["kv_bytes_per_layer_token"]
        width = model["attention_width"]
        loads.append(StageLoad(
            layer_count=span, weight_bytes=round(body * share),
            routed_expert_bytes=round(traffic.routed_bytes * share),
            active_parameters=(traffic.active_parameter_count or 0) * share,
            routed_active_parameters=(model.get("expert_parameters", 0) * share
                                      * (used / count if (count := model.get("expert_count"))
                                         and (used := model.get("experts_used")) else 0)),
            kv_bytes_per_token=kv * full, attention_width=width * full,
            window_kv_bytes_per_token=kv * windowed, window_attention_width=width * windowed,
            window=window if windowed else 0,
            embedding_row_bytes=2 * model["hidden_size"] if index == 0 else 0))
    return loads, traffic


def predict_ms(row: Row, calibration: SpeedCalibration) -> float:
    """The estimate of the row's measured time (:attr:`Row.measured_ms`)."""
    loads, traffic = loads_of(row)
    notes: list[str] = []
    device = calibrated_device(calibration, row.gpu.memory_bandwidth_bytes_per_s or 0,
                               row.gpu.memory_type, row.gpu.backend, row.gpu.fp16_tflops,
                               notes)
    hop = calibration.fixed_ms(calibration.hop_ms, row.gpu.backend, notes, "hop")
    devices = [device] * len(loads)
    hops = [hop] * (len(loads) - 1)
    links = [INTRA_HOST_LINK_BYTES_PER_S] * len(hops)
    hop_bytes = row.model["hidden_size"] * ACTIVATION_BYTES_PER_VALUE
    if row.phase == "decode":
        per_lane = row.depth + row.tokens // 2
        terms, hop_times = decode_step(loads, devices, hops, hop_bytes, links, traffic,
                                       lanes=row.lanes, cached=per_lane * row.lanes)
        return sum(t.total_ms for t in terms) + sum(hop_times)
    return prefill_ms(loads, devices, hops, hop_bytes, links, traffic,
                      prompt_tokens=row.tokens, depth=row.depth, ubatch_tokens=row.ubatch)


def error(row: Row, calibration: SpeedCalibration) -> float:
    """(estimate - measured) / measured, in time (the same as in tokens/s, inverted)."""
    return predict_ms(row, calibration) / row.measured_ms - 1


def usable(row: Row) -> bool:
    """Prefill needs a stated FP16 throughput."""
    return row.phase == "decode" or row.gpu.fp16_tflops is not None


def held_out_errors(rows: Sequence[Row], calibration: SpeedCalibration) -> list[HeldOutError]:
    """Median absolute error on the held-out rows, per phase: overall and per memory type."""
    found = []
    for phase in PHASES:
        group = [r for r in rows if r.split == "holdout" and r.phase == phase and usable(r)]
        errors = {r.row_id: abs(error(r, calibration)) for r in group}
        found.append(HeldOutError(phase, "all", len(group),
                                  round(statistics.median(errors.values()), 4)))
        for memory_type in MEMORY_TYPES:
            mine = [errors[r.row_id] for r in group if r.gpu.memory_type == memory_type]
            if mine:
                found.append(HeldOutError(phase, memory_type, len(mine),
                                          round(statistics.median(mine), 4)))
    return found


# ---------------------------------------------------------------------------- the fit

_EFFICIENCIES = EFFICIENCY_TABLES
_COMPUTE = ("compute_efficiency", "attention_efficiency")
_FIXED = ("layer_ms", "hop_ms", "quantized_compute_factor", "half_rate_tokens",
          "expert_batch_ms")
# Per memory type/backend, like the efficiencies, but a size in bytes.
_STAGING = "staging_bytes_per_parameter"
_SCORES = "attention_score_bytes"
_ACTIVATIONS = "activation_bytes"
_PER_PAIR = (_STAGING, _SCORES, _ACTIVATIONS)
_BOUNDS = {"weight_efficiency": (0.05, 1.0), "kv_efficiency": (0.02, 1.0),
           "compute_efficiency": (0.02, 1.0),
           "attention_efficiency": (0.005, 1.0), "quantized_compute_factor": (0.2, 1.0),
           "half_rate_tokens": (0.0, 1024.0),
           "layer_ms": (0.0, 0.5), "hop_ms": (0.0, 5.0), "expert_batch_ms": (0.0, 1.0),
           _STAGING: (0.0, 6.0), _SCORES: (0.0, 0.5), _ACTIVATIONS: (0.0, 128.0)}


def _parameters(rows: Sequence[Row]) -> list[tuple[str, str]]:
    """The (table, key) pairs the fit rows can determine."""
    pairs = sorted({r.pair for r in rows})
    backends = sorted({r.gpu.backend or "cuda" for r in rows})
    found = [(name, pair) for name in _EFFICIENCIES for pair in pairs]
    found = [(n, p) for n, p in found if n not in _COMPUTE or any(
        r.pair == p and r.gpu.fp16_tflops is not None for r in rows)]
    found += [(name, p) for name in _PER_PAIR for p in pairs if any(
        r.pair == p and r.phase == "prefill" and r.gpu.fp16_tflops is not None
        for r in rows)]
    found += [("layer_ms", b) for b in backends]
    found += [("quantized_compute_factor", b) for b in backends]
    found += [("half_rate_tokens", b) for b in backends]
    found += [("expert_batch_ms", b) for b in backends
              if any((r.gpu.backend or "cuda") == b and r.model.get("expert_count")
                     and r.phase == "decode" and r.lanes > 1 for r in rows)]
    found += [("hop_ms", b) for b in backends
              if any(r.gpu.backend == b and r.gpu_count > 1 for r in rows)]
    return found


def _with(calibration: SpeedCalibration, name: str, key: str, value: float
          ) -> SpeedCalibration:
    table = dict(getattr(calibration, name))
    table[key] = value
    return replace(calibration, **{name: table})


def _loss(rows: Sequence[Row], calibration: SpeedCalibration) -> float:
    # Absolute log error: over- and under-estimates by the same factor weigh the same,
    # and a few runs far off the rest (a pipeline that did not fill) do not pull the fit
    # off the many (its minimum is a median, the figure docs/speed.md publishes).
    return math.fsum(abs(math.log(predict_ms(r, calibration) / r.measured_ms)) for r in rows)


def _golden(f: Callable[[float], float], low: float, high: float, steps: int = 24) -> float:
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(steps):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    return (a + b) / 2


def _best(rows: Sequence[Row], calibration: SpeedCalibration, name: str, key: str,
          low: float, high: float) -> float:
    """The value of one parameter that fits ``rows`` best, the others held."""
    if name in _EFFICIENCIES:
        # Search the log of an efficiency: its effect is multiplicative.
        return math.exp(_golden(
            lambda x: _loss(rows, _with(calibration, name, key, math.exp(x))),
            math.log(low), math.log(high)))
    return _golden(lambda x: _loss(rows, _with(calibration, name, key, x)), low, high)


def fit(rows: Sequence[Row], rounds: int = 15) -> SpeedCalibration:
    """Coordinate descent on every parameter the fit rows determine, each in its bounds,
    minimising the absolute log error over the rows that touch it."""
    rows = [r for r in rows if r.split == "fit" and usable(r)]
    parameters = _parameters(rows)
    start = {name: {} for name in (*_EFFICIENCIES, *_FIXED, *_PER_PAIR)}
    for name, key in parameters:
        start[name][key] = (0.5 if name in _EFFICIENCIES else
                            1.0 if name == "quantized_compute_factor" else
                            8.0 if name == "half_rate_tokens" else
                            1.0 if name == _STAGING else
                            0.0 if name in (_SCORES, _ACTIVATIONS) else 0.05)
    calibration = SpeedCalibration(**start)
    for _ in range(rounds):
        for name, key in parameters:
            if name in _EFFICIENCIES or name in _PER_PAIR:
                touched = [r for r in rows if r.pair == key]
            else:
                touched = [r for r in rows if (r.gpu.backend or "cuda") == key]
            if name == "expert_batch_ms":
                # Two lanes isolate the batched expert kernel's time: their routings reach
                # almost twice one token's experts however the router spreads them, while
                # more lanes' reach depends on that spread, which the estimate takes as
                # even (docs/speed.md, known gaps).
                touched = [r for r in touched if r.model.get("expert_count") and r.lanes == 2]
            if name in _COMPUTE or name in _FIXED[2:] or name in _PER_PAIR:
                touched = [r for r in touched if r.gpu.fp16_tflops is not None]
            low, high = _BOUNDS[name]
            calibration = _with(calibration, name, key,
                                _best(touched, calibration, name, key, low, high))
    rounded = {name: {k: round(v, 4) for k, v in getattr(calibration, name).items()}
               for name in (*_EFFICIENCIES, *_FIXED, *_PER_PAIR)}
    return SpeedCalibration(**rounded)


def to_toml(calibration: SpeedCalibration) -> str:
    lines = ["# The speed estimate's fitted figures (planner.performance), written by",
             "# validation/speed/calibration.py from the published measurements of",
             "# validation/speed/measurements.csv (rows marked fit); held_out is the error on",
             "# the rows marked holdout. Efficiencies are shares of the vendor's peak",
             "# (memory bandwidth for weights and for the KV cache, dense FP16 throughput for",
             "# compute) per memory type/backend; layer_ms and hop_ms are fixed times in ms",
             "# per layer (each decode step or prefill ubatch) and per hop between devices.",
             ""]
    for name in (*_EFFICIENCIES, *_FIXED, *_PER_PAIR):
        lines.append(f"[{name}]")
        for key, value in sorted(getattr(calibration, name).items()):
            lines.append(f'"{key}" = {value}')
        lines.append("")
    for entry in calibration.held_out:
        lines += ["[[held_out]]", f'phase = "{entry.phase}"',
                  f'memory_type = "{entry.memory_type}"', f"rows = {entry.rows}",
                  f"median_abs_error = {entry.median_abs_error}", ""]
    return "\n".join(lines)


def summary_lines(rows: Sequence[Row], calibration: SpeedCalibration) -> list[str]:
    """docs/speed.md's table: held-out median absolute error by phase and memory type, and
    the rows each group has for the fit."""
    fitted = [r for r in rows if r.split == "fit" and usable(r)]
    lines = ["| phase | memory type | held-out rows | median absolute error | fit rows |",
             "|---|---|---:|---:|---:|"]
    for entry in held_out_errors(rows, calibration):
        count = sum(1 for r in fitted if r.phase == entry.phase and (
            entry.memory_type == "all" or r.gpu.memory_type == entry.memory_type))
        lines.append(f"| {entry.phase} | {entry.memory_type} | {entry.rows} | "
                     f"{entry.median_abs_error:.1%} | {count} |")
    return lines


def main(argv: Sequence[str]) -> None:
    from planner.performance import load_calibration

    rows = load_rows()
    if "--check" in argv:
        calibration = load_calibration()
    else:
        calibration = fit(rows)
        calibration = replace(calibration, held_out=tuple(held_out_errors(rows, calibration)))
        SHIPPED.write_text(to_toml(calibration))
    print("\n".join(summary_lines(rows, calibration)))
    if "--rows" in argv:
        for row in rows:
            print(f"{row.row_id:4} {row.split:8} {row.gpu.kind:15} x{row.gpu_count} "
                  f"{row.model['id']:14} {row.test:28} lanes {row.lanes:2} "
                  f"{error(row, calibration):+.1%}")


if __name__ == "__main__":
    main(sys.argv[1:])
