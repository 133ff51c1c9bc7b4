"""The speed estimate calibrated on the user's own llama-bench runs (``planner
calibrate``): llama-bench's output read (its JSON, JSON lines, CSV or markdown, ``-o``),
and one GPU kind's own factors fitted on top of a calibration (the shipped one by
default).

Pure: text and a model in, a :class:`~planner.performance.SpeedCalibration` out.

A run is one row of llama-bench: ``ppN`` (a prompt of N tokens, prefill), ``tgN`` (N
decode steps, one token each) at a context depth ``@ dD``, and its tokens per second.
Each is estimated as the speed estimate estimates one device of the kind holding the
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
or was split over several devices it names.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import tomli_w

from planner._validate import shown
from planner.errors import CodedError
from planner.limits import (
    DEFAULT_CACHE_TYPE,
    MAX_BENCH_BYTES,
    MAX_BENCH_RUNS,
    MAX_BYTES,
    MAX_CONTEXT,
    MAX_LLAMA_CPP_BUILD,
    MAX_THREADS,
    MAX_TOKENS_PER_S,
    MAX_UBATCH,
)
from planner.models.gpus import CPU_BACKEND, RPC_BACKEND, GpuModel
from planner.models.kv_cache import CACHE_TYPES
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
_TEST = re.compile(r"^(?:pp(?P<pp>\d{1,9}))?\+?(?:tg(?P<tg>\d{1,9}))?"
                   r"(?: @ d(?P<depth>\d{1,9}))?$", re.ASCII)
_RATE = re.compile(r"^(?P<avg>\d{1,12}(?:\.\d{1,6})?)(?: ± (?P<sd>\d{1,12}(?:\.\d{1,6})?))?$",
                   re.ASCII)
_UNIT = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
# llama-bench's markdown names its build under the table: ``build: 1a2b3c4d (6550)``.
_BUILD_LINE = re.compile(r"^\s*build: \S{1,64} \((?P<number>\d{1,9})\)", re.ASCII | re.M)
# llama-bench's flash attention setting as its outputs state it (JSON and CSV: -1, 0, 1 or
# true/false; markdown: 0/1 or on/off/auto); auto (-1) is llama.cpp's own choice.
_FLASH = {"1": True, "true": True, "on": True, "yes": True, "0": False, "false": False,
          "off": False, "no": False, "-1": None, "auto": None}
# llama-bench ran without flash attention unless told otherwise until pull request 23714
# ("Support `-fa auto` in llama-bench") made auto its default, from this build; its
# markdown prints an ``fa`` column only where the setting differs from the default.
FLASH_ATTN_AUTO_BUILD = 9437
# llama-bench's no_kv_offload as its outputs state it (JSON: true/false; CSV and markdown:
# 0/1).
_NO_KV_OFFLOAD = {"1": True, "true": True, "0": False, "false": False}


class BenchError(CodedError):
    """llama-bench output that cannot be used, or a fit that cannot be made. ``code`` is
    stable: ``InvalidBench``, ``NothingToCalibrate``."""

    codes = ("InvalidBench", "NothingToCalibrate")


@dataclass(frozen=True, slots=True)
class BenchRun:
    """One llama-bench test: its prompt and decode tokens, depth, and tokens per second."""

    source: str
    """``file:row`` (row 1 is the first test of the file)."""
    model: str
    """llama-bench's ``model_type`` (``gemma3 270M Q4_K - Medium``)."""
    model_bytes: int | None
    prompt_tokens: int
    decode_tokens: int
    depth: int
    tokens_per_s: float
    stddev_tokens_per_s: float | None = None
    ubatch: int | None = None
    backend: str = ""
    build: int | None = None
    """llama-bench's ``build_number`` (``None``: not stated, taken as a current build)."""
    flash_attn: bool | None = None
    """Flash attention on or off (``None``: llama.cpp's own choice, or not stated)."""
    threads: int | None = None
    """llama-bench's ``n_threads`` (``None``: not stated, taken as one a core)."""
    cache_type_k: str | None = None
    """llama-bench's ``type_k``, the K cache's type (``None``: not stated)."""
    cache_type_v: str | None = None
    """llama-bench's ``type_v``, the V cache's type (``None``: not stated)."""
    gpu_layers: int | None = None
    """llama-bench's ``n_gpu_layers`` (``-ngl``): layers offloaded, a negative count every
    one (``None``: not stated)."""
    cpu_moe_layers: int | None = None
    """llama-bench's ``n_cpu_moe`` (``-ncmoe``): layers whose experts stayed on the CPU."""
    kv_offload: bool | None = None
    """Whether the KV cache was offloaded (llama-bench's ``no_kv_offload``, ``-nkvo``,
    negated)."""
    cpu_tensors: str | None = None
    """The tensor patterns llama-bench's ``tensor_buft_overrides`` (``-ot``) put in a CPU
    buffer, ``;``-separated (``None``: none, or not stated)."""
    devices: str | None = None
    """llama-bench's ``devices`` (``-dev``) where it names them: ``none``, or device names
    ``/``-separated (``None``: ``auto``, or not stated)."""
    batch: int | None = None
    """llama-bench's ``n_batch`` (``-b``; ``None``: not stated, its default 2048)."""
    split_mode: str | None = None
    """llama-bench's ``split_mode`` (``-sm``: ``none`` runs on one device of ``-dev``)."""

    @property
    def ran_flash_attn(self) -> bool:
        """Whether the run had flash attention: as it states, else llama-bench's default
        of its build, off before :data:`FLASH_ATTN_AUTO_BUILD` and auto (on, as
        llama.cpp chooses where the backend supports it) from it and on a build not
        stated (a current one)."""
        if self.flash_attn is not None:
            return self.flash_attn
        return self.build is None or self.build >= FLASH_ATTN_AUTO_BUILD

    @property
    def phase(self) -> str:
        """``prefill``, ``decode`` or ``mixed`` (a prompt and decode in one test)."""
        if self.prompt_tokens and not self.decode_tokens:
            return "prefill"
        if self.decode_tokens and not self.prompt_tokens:
            return "decode"
        return "mixed"

    @property
    def test(self) -> str:
        """The test as llama-bench names it: ``pp128``, ``tg32 @ d1024``."""
        name = "+".join(part for part in (f"pp{self.prompt_tokens}" * bool(self.prompt_tokens),
                                          f"tg{self.decode_tokens}" * bool(self.decode_tokens))
                        if part)
        return name + (f" @ d{self.depth}" if self.depth else "")

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "model": self.model, "model_bytes": self.model_bytes,
                "test": self.test, "phase": self.phase, "tokens_per_s": self.tokens_per_s,
                "stddev_tokens_per_s": self.stddev_tokens_per_s, "ubatch": self.ubatch,
                "backend": self.backend, "build": self.build, "flash_attn": self.flash_attn,
                "threads": self.threads, "cache_type_k": self.cache_type_k,
                "cache_type_v": self.cache_type_v, "gpu_layers": self.gpu_layers,
                "cpu_moe_layers": self.cpu_moe_layers, "kv_offload": self.kv_offload,
                "cpu_tensors": self.cpu_tensors, "devices": self.devices, "batch": self.batch,
                "split_mode": self.split_mode}


# -- reading llama-bench's output ------------------------------------------------------------


def parse_bench(text: str, source: str = "<bench>") -> tuple[BenchRun, ...]:
    """The runs of one llama-bench output: its JSON (``-o json``), JSON lines
    (``jsonl``), CSV (``csv``) or markdown (``md``, the default; other lines, such as the
    model's load log, are skipped). ``InvalidBench`` names the row and field."""
    if len(text) > MAX_BENCH_BYTES:
        raise BenchError("InvalidBench", f"{source}: more than {MAX_BENCH_BYTES:,} "
                         "characters; give one llama-bench output a file", source=source)
    stripped = text.strip()
    if stripped.startswith("["):
        rows = _json(stripped, source)
    elif stripped.startswith("{"):
        rows = [_json(line, source, f" line {number}")
                for number, line in enumerate(stripped.splitlines(), 1) if line.strip()]
    elif any(line.lstrip().startswith("|") for line in stripped.splitlines()):
        return _markdown(stripped, source)
    else:
        rows = _csv(stripped, source)
    if not isinstance(rows, list) or not all(isinstance(row, Mapping) for row in rows):
        raise BenchError("InvalidBench", f"{source}: llama-bench's JSON is a list of "
                         "objects, one per test", source=source)
    _check_count(len(rows), source)
    return tuple(_from_fields(row, f"{source}:{index}") for index, row in enumerate(rows, 1))


def _check_count(rows: int, source: str) -> None:
    if rows > MAX_BENCH_RUNS:
        raise BenchError("InvalidBench", f"{source}: {rows:,} tests, more than the "
                         f"{MAX_BENCH_RUNS:,} one calibration reads", source=source)


def _json(text: str, source: str, where: str = "") -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise BenchError("InvalidBench", f"{source}{where}: not llama-bench's JSON: "
                         f"{str(error)[:120]}", source=source) from None


def _csv(text: str, source: str) -> list[dict[str, str]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        fields = reader.fieldnames
        if fields is None or "avg_ts" not in fields:
            raise BenchError("InvalidBench", f"{source}: not llama-bench output (JSON, JSON "
                             "lines, CSV with an avg_ts column, or its markdown table)",
                             source=source)
        return list(reader)
    except csv.Error as error:
        raise BenchError("InvalidBench", f"{source}: not readable CSV: {error}",
                         source=source) from None


def _count(value: Any, where: str, name: str, maximum: int = MAX_CONTEXT,
           minimum: int = 0) -> int:
    number = value
    if isinstance(value, str):
        text = value.strip()
        number = int(text) if text.isascii() and text.isdigit() and len(text) <= 12 else None
    if (isinstance(number, bool) or not isinstance(number, int)
            or not minimum <= number <= maximum):
        raise BenchError("InvalidBench", f"{where}: {name} must be a whole number from "
                         f"{minimum} to {maximum:,} (got {shown(value)})", field=name,
                         source=where)
    return number


def _optional_count(value: Any, where: str, name: str, minimum: int = 0) -> int | None:
    """A count llama-bench states in some outputs only (``None``: not stated)."""
    return (None if value is None or value == "" else
            _count(value, where, name, minimum=minimum))


def _rate(value: Any, where: str, name: str) -> float:
    number = value
    if isinstance(value, str):
        try:
            number = float(value) if re.fullmatch(r"\d{1,12}(\.\d{1,9})?", value.strip(),
                                                  re.ASCII) else None
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, int | float) or not (
            math.isfinite(number) and 0 <= number <= MAX_TOKENS_PER_S):
        raise BenchError("InvalidBench", f"{where}: {name} must be a number of tokens per "
                         f"second from 0 to {MAX_TOKENS_PER_S:,} (got {shown(value)})",
                         field=name, source=where)
    return float(number)


def _build(value: Any, where: str) -> int | None:
    """A build number (0 or nothing: llama-bench knew none)."""
    if value in (None, ""):
        return None
    return _count(value, where, "build_number", MAX_LLAMA_CPP_BUILD) or None


def _threads(value: Any, where: str) -> int | None:
    """CPU threads (nothing: not stated)."""
    if value in (None, ""):
        return None
    return _count(value, where, "n_threads", MAX_THREADS, minimum=1)


def _cache_type(value: Any, where: str, name: str) -> str | None:
    """A run's K or V cache type as llama-bench states it (``None``: not stated)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or value not in CACHE_TYPES:
        raise BenchError("InvalidBench", f"{where}: {name} {shown(value)} is not a KV cache "
                         f"type llama.cpp has ({', '.join(CACHE_TYPES)})", field=name,
                         source=where)
    return value


def _gpu_layers(value: Any, where: str) -> int | None:
    """llama-bench's ``n_gpu_layers``: a count, negative for every layer."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"-?\d{1,9}", text, re.ASCII):
        raise BenchError("InvalidBench", f"{where}: n_gpu_layers {shown(value)} is not a "
                         "whole number of layers (negative: every layer)",
                         field="n_gpu_layers", source=where)
    return int(text)


def _kv_offload(value: Any, where: str) -> bool | None:
    """Whether the KV cache was offloaded, from llama-bench's ``no_kv_offload``."""
    if value is None or value == "":
        return None
    said = _NO_KV_OFFLOAD.get(str(value).strip().lower())
    if said is None:
        raise BenchError("InvalidBench", f"{where}: no_kv_offload must be 0 or 1 (got "
                         f"{shown(value)})", field="no_kv_offload", source=where)
    return not said


def _cpu_tensors(value: Any) -> str | None:
    """The patterns of llama-bench's ``tensor_buft_overrides`` (``pattern=BUFFER;...``)
    whose buffer is the CPU's."""
    if value is None:
        return None
    patterns = [pattern for pattern, _, buffer in
                (part.rpartition("=") for part in str(value)[:1000].split(";"))
                if pattern and buffer.strip().upper().startswith("CPU")]
    return ";".join(patterns) or None


def _split_mode(value: Any) -> str | None:
    """llama-bench's ``split_mode`` (``layer``, ``row``, ``none``)."""
    text = "" if value is None else str(value).strip().lower()[:20]
    return text or None


def _devices(value: Any) -> str | None:
    """llama-bench's ``devices`` where it names them (``auto``: ``None``)."""
    text = "" if value is None else str(value).strip()[:200]
    return None if text in ("", "auto") else text


def _flash_attn(value: Any, where: str) -> bool | None:
    if value in (None, ""):
        return None
    text = str(value).strip().lower() if isinstance(value, str | bool | int) else None
    if text not in _FLASH:
        raise BenchError("InvalidBench", f"{where}: flash_attn must be on, off or auto "
                         f"(1, 0 or -1; got {shown(value)})", field="flash_attn",
                         source=where)
    return _FLASH[text]


def _from_fields(row: Mapping[str, Any], where: str) -> BenchRun:
    """A run from llama-bench's JSON or CSV fields."""
    for name in ("n_prompt", "n_gen", "avg_ts"):
        if name not in row:
            raise BenchError("InvalidBench", f"{where}: no {name}: not a llama-bench test",
                             field=name, source=where)
    model = row.get("model_type", row.get("model_filename", ""))
    size = row.get("model_size")
    spread = row.get("stddev_ts")
    run = BenchRun(
        where, str(model)[:200],
        None if size in (None, "") else _count(size, where, "model_size", MAX_BYTES),
        _count(row["n_prompt"], where, "n_prompt"), _count(row["n_gen"], where, "n_gen"),
        _count(row.get("n_depth", 0) or 0, where, "n_depth"),
        _rate(row["avg_ts"], where, "avg_ts"),
        None if spread in (None, "") else _rate(spread, where, "stddev_ts"),
        None if row.get("n_ubatch") in (None, "") else _count(row["n_ubatch"], where,
                                                              "n_ubatch"),
        str(row.get("backends", ""))[:100], _build(row.get("build_number"), where),
        _flash_attn(row.get("flash_attn"), where), _threads(row.get("n_threads"), where),
        _cache_type(row.get("type_k"), where, "type_k"),
        _cache_type(row.get("type_v"), where, "type_v"),
        _gpu_layers(row.get("n_gpu_layers"), where),
        _optional_count(row.get("n_cpu_moe"), where, "n_cpu_moe"),
        _kv_offload(row.get("no_kv_offload"), where),
        _cpu_tensors(row.get("tensor_buft_overrides")), _devices(row.get("devices")),
        _optional_count(row.get("n_batch"), where, "n_batch", minimum=1),
        _split_mode(row.get("split_mode")))
    return _checked(run)


def _checked(run: BenchRun) -> BenchRun:
    if run.tokens_per_s <= 0:
        raise BenchError("InvalidBench", f"{run.source}: {run.tokens_per_s} tokens per "
                         "second: a test that ran", field="avg_ts", source=run.source)
    if not (run.prompt_tokens or run.decode_tokens):
        raise BenchError("InvalidBench", f"{run.source}: a test of no tokens",
                         field="test", source=run.source)
    return run


def _markdown(text: str, source: str) -> tuple[BenchRun, ...]:
    """The rows of llama-bench's markdown table: ``model``, ``size``, ``test`` and
    ``t/s`` are read, and ``backend``, ``threads``, ``n_ubatch``, ``fa``, ``type_k``,
    ``type_v``, ``ngl``, ``n_cpu_moe``, ``nkvo``, ``ot``, ``dev``, ``sm``, ``n_batch`` and
    the build line under the table where printed (llama-bench prints a cache type's column
    only where it is not its default, f16)."""
    lines = [line.strip() for line in text.splitlines() if line.lstrip().startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    for name in ("model", "test", "t/s"):
        if name not in header:
            raise BenchError("InvalidBench", f"{source}: a markdown table without a {name} "
                             "column is not llama-bench's", field=name, source=source)
    _check_count(len(lines) - 2, source)
    found = _BUILD_LINE.search(text)
    build = None if found is None else _build(found["number"], source)
    runs: list[BenchRun] = []
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if set("".join(cells)) <= set("-: "):
            continue  # the rule under the header
        where = f"{source}:{len(runs) + 1}"
        if len(cells) != len(header):
            raise BenchError("InvalidBench", f"{where}: {len(cells)} cells where the header "
                             f"has {len(header)}", source=where)
        row = dict(zip(header, cells, strict=True))
        test = _TEST.match(row["test"])
        rate = _RATE.match(row["t/s"])
        if test is None or not (test["pp"] or test["tg"]):
            raise BenchError("InvalidBench", f"{where}: test {shown(row['test'])} is not "
                             "ppN, tgN or ppN+tgN (with @ dD)", field="test", source=where)
        if rate is None:
            raise BenchError("InvalidBench", f"{where}: t/s {shown(row['t/s'])} is not "
                             "\"avg ± stddev\"", field="t/s", source=where)
        runs.append(_checked(BenchRun(
            where, row["model"][:200], _size(row.get("size"), where),
            int(test["pp"] or 0), int(test["tg"] or 0), int(test["depth"] or 0),
            _rate(rate["avg"], where, "t/s"),
            None if rate["sd"] is None else _rate(rate["sd"], where, "t/s"),
            None if "n_ubatch" not in row else _count(row["n_ubatch"], where, "n_ubatch"),
            row.get("backend", "")[:100], build, _flash_attn(row.get("fa"), where),
            _threads(row.get("threads"), where),
            _cache_type(row.get("type_k", DEFAULT_CACHE_TYPE), where, "type_k"),
            _cache_type(row.get("type_v", DEFAULT_CACHE_TYPE), where, "type_v"),
            _gpu_layers(row.get("ngl"), where),
            _optional_count(row.get("n_cpu_moe"), where, "n_cpu_moe"),
            _kv_offload(row.get("nkvo"), where), _cpu_tensors(row.get("ot")),
            _devices(row.get("dev")),
            _optional_count(row.get("n_batch"), where, "n_batch", minimum=1),
            _split_mode(row.get("sm")))))
    return tuple(runs)


def _size(text: str | None, where: str) -> int | None:
    if text is None:
        return None
    match = re.fullmatch(r"(\d{1,9}(?:\.\d{1,3})?) (B|KiB|MiB|GiB|TiB)", text.strip(), re.ASCII)
    if match is None:
        raise BenchError("InvalidBench", f"{where}: size {shown(text)} is not \"N MiB\" or "
                         "\"N GiB\"", field="size", source=where)
    return round(float(match[1]) * _UNIT[match[2]])


# -- estimating a run --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunShape:
    """What the estimate needs of a model to estimate one device running it."""

    fields: Mapping[str, Any]
    traffic: Any
    node: NodeBudget
    kind: GpuModel


def run_shape(spec: ModelSpec, kind: GpuModel) -> RunShape:
    """One device of ``kind`` holding all of ``spec``."""
    traffic = model_traffic(spec)
    if traffic is None:
        raise BenchError("NothingToCalibrate", f"{spec.name}: the model's decode traffic is "
                         "unknown; give its GGUF file or preset")
    if kind.memory_bandwidth_bytes_per_s is None:
        raise BenchError("NothingToCalibrate", f"{kind.kind} has no "
                         "memory_bandwidth_bytes_per_s in the catalog: the estimate's "
                         "efficiencies are shares of it; give a catalog that states it")
    return RunShape(spec.planning_fields(), traffic,
                    NodeBudget(f"{kind.kind}-00", kind.memory_bytes), kind)


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


def ran_on_another_backend(run: BenchRun, backend: str) -> bool:
    """Whether llama-bench names the run's backends and ``backend`` is none of them (a run
    through RPC, whose server may run any, and names the estimate does not know are not
    judged)."""
    named = {_BENCH_BACKENDS.get(part.strip().lower()) for part in run.backend.split(",")}
    named.discard(None)
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
    """Why a run is not of one device: the devices it names (``-dev A/B``)."""
    if (run.devices is None or run.devices == "none" or "/" not in run.devices
            or run.split_mode == "none"):
        return None
    count = len(run.devices.split("/"))
    return (f"{run.test}: split over {count} devices (-dev {run.devices}), and a kind is "
            "calibrated on runs of one (-dev one device, or -sm none)")


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
                stated: bool = True) -> tuple[list[BenchRun], list[tuple[str, str]]]:
    """The runs the estimate models, and why each other one is left out (a test given
    twice, as llama-bench's JSON and its markdown of one run print it, counts once; a run
    on another backend than the kind's ``backend``, :func:`ran_on_another_backend`;
    ``stated`` False: the kind states none, and ``backend`` is the one it is taken to run)."""
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
        elif run.model_bytes is not None and not _same_size(run.model_bytes, spec):
            why = (f"model {shown(run.model)} of {run.model_bytes:,} bytes is not "
                   f"{spec.name}")
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


def _same_size(model_bytes: int, spec: ModelSpec) -> bool:
    # llama-bench's model_size is the tensors' bytes; the spec's weights are the same
    # tensors (a preset's figures are rounded: within 1 %).
    return abs(model_bytes - spec.model_weight_bytes) <= 0.01 * spec.model_weight_bytes


def fit_calibration(runs: Sequence[BenchRun], spec: ModelSpec, kind: GpuModel,
                    base: SpeedCalibration, source: str = "calibration.toml") -> BenchFit:
    """``base`` with ``kind``'s own factors fitted on ``runs`` (module docstring).
    ``NothingToCalibrate`` when no phase has two usable runs."""
    shape = run_shape(spec, kind)
    notes: list[str] = []
    speed = node_speeds((shape.node,), [kind])[shape.node.node_id]
    backend = backend_of(speed, RunSettings(), notes)
    kept, skipped = usable_runs(runs, spec, backend, stated=kind.backend is not None)
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
