"""llama-bench's output read (its JSON, JSON lines, CSV or markdown, ``-o``): each test
one :class:`BenchRun`, with the settings it states (build, flash attention, micro-batch
and batch, threads, KV cache types, what it offloaded and to which devices). Pure: text
in, runs out; ``InvalidBench`` names the row and field that cannot be read.

A run is one row of llama-bench: ``ppN`` (a prompt of N tokens, prefill), ``tgN`` (N
decode steps, one token each) at a context depth ``@ dD``, and its tokens per second.
:mod:`planner.llamacpp.bench` estimates and fits them (``planner calibrate``).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner._validate import shown
from planner.errors import CodedError
from planner.limits import (
    DEFAULT_CACHE_TYPE,
    MAX_BENCH_BYTES,
    MAX_BENCH_GPUS,
    MAX_BENCH_RUNS,
    MAX_BYTES,
    MAX_CONTEXT,
    MAX_LLAMA_CPP_BUILD,
    MAX_THREADS,
    MAX_TOKENS_PER_S,
)
from planner.models.kv_cache import CACHE_TYPES

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
# The device lines of llama.cpp's log before llama-bench's markdown: CUDA's and ROCm's
# (``  Device 0: NVIDIA GeForce RTX 3090, compute capability 8.6, VMM: yes``) and
# Vulkan's (``ggml_vulkan: 0 = AMD Radeon RX 7900 XTX (RADV NAVI31) (radv) | uma: 0 | ...``,
# uma 1 an integrated GPU).
_CUDA_DEVICE = re.compile(r"^\s*Device \d{1,3}: (?P<name>[^,\n]{1,120}), ", re.ASCII | re.M)
_VULKAN_DEVICE = re.compile(r"^ggml_vulkan: \d{1,3} = (?P<name>[^|\n]{1,200}?)"
                            r"(?: \([^|\n]{0,120}\))* \| uma: (?P<uma>[01])", re.M)


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
    gpus: tuple[str, ...] = ()
    """The GPUs llama-bench saw, by name (its ``gpu_info``, integrated ones too; markdown:
    the device lines of the log before the table, Vulkan's integrated ones left out where
    it saw a discrete one, as llama.cpp leaves them out). Empty: not stated."""

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
                "split_mode": self.split_mode, "gpus": list(self.gpus)}


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


def _gpu_info(value: Any) -> tuple[str, ...]:
    """The GPUs of llama-bench's ``gpu_info`` (their descriptions, ``, ``-separated)."""
    if not isinstance(value, str):
        return ()
    return tuple(name.strip()[:120] for name in value[:4000].split(", ")
                 if name.strip())[:MAX_BENCH_GPUS]


def _logged_gpus(text: str) -> tuple[str, ...]:
    """The GPUs llama.cpp's log names before a markdown table (:data:`_CUDA_DEVICE`,
    :data:`_VULKAN_DEVICE`); Vulkan's integrated ones only where it names no discrete one,
    as llama.cpp uses them."""
    cuda = [found["name"].strip() for found in _CUDA_DEVICE.finditer(text)]
    vulkan = [(found["name"].strip(), found["uma"] == "1")
              for found in _VULKAN_DEVICE.finditer(text)]
    discrete = [name for name, integrated in vulkan if not integrated]
    vulkan_used = discrete or [name for name, _ in vulkan]
    return tuple(cuda + vulkan_used)[:MAX_BENCH_GPUS]


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
        _split_mode(row.get("split_mode")), _gpu_info(row.get("gpu_info")))
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
    gpus = _logged_gpus(text)
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
            _split_mode(row.get("sm")), gpus)))
    return tuple(runs)


def _size(text: str | None, where: str) -> int | None:
    if text is None:
        return None
    match = re.fullmatch(r"(\d{1,9}(?:\.\d{1,3})?) (B|KiB|MiB|GiB|TiB)", text.strip(), re.ASCII)
    if match is None:
        raise BenchError("InvalidBench", f"{where}: size {shown(text)} is not \"N MiB\" or "
                         "\"N GiB\"", field="size", source=where)
    return round(float(match[1]) * _UNIT[match[2]])
