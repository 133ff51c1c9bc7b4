"""`make validate`, the CPU backend's speed: real ``llama-bench`` runs of llama.cpp's own
small model of every architecture (``test-llama-archs -o DIR``, as archs.py saves them)
and of gemma-3-270m Q4_K_M (run.py assembles it from its PyPI package), on this machine's
CPU: a prompt (``pp``), decoding (``tg``) and both after cached tokens (``@ d``).

The runs are recorded in validation/results/cpu-speed.csv (one row per model and test,
with the build and the settings), the machine in cpu-machine.json (its CPU as
``/proc/cpuinfo`` and ``os.sched_getaffinity`` give it). ``make test`` checks the CPU
estimate against the record without llama.cpp (tests/test_speed_cpu.py).
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "validation")]

from archs import MODELS as ARCH_MODELS  # noqa: E402
from archs import save_models  # noqa: E402
from run import MODEL_FILE, MODEL_PACKAGE, RELEASE  # noqa: E402

from planner.llamacpp import binaries_dir  # noqa: E402

RESULTS = ROOT / "validation" / "results"
RECORD = RESULTS / "cpu-speed.csv"
MACHINE = RESULTS / "cpu-machine.json"
# llama-bench's tests: a prompt of PROMPT tokens and GENERATE decoded ones, at each depth.
PROMPT = 256
GENERATE = 32
DEPTHS = (0, 1024)
REPETITIONS = 2
# Weights stay in the CPU backend's plain buffers (``--repack 0``): its extra buffer
# types multiply with AMX tiles where the CPU reports them, and this machine's hypervisor
# reports them but traps their first instruction (SIGILL in tinygemm_kernel_amx).
REPACK = 0
COLUMNS = ("model", "file_bytes", "architecture", "test", "phase", "tokens", "depth",
           "ubatch", "flash_attn", "threads", "tokens_per_s", "stddev_tokens_per_s",
           "build_number", "build_commit")


def machine() -> dict[str, Any]:
    """The CPU the runs were made on, as the system states it."""
    model = ""
    flags: list[str] = []
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            if key.strip() == "flags" and not flags:
                flags = value.split()
    return {"cpu": model, "threads": len(os.sched_getaffinity(0)),
            "machine": platform.machine(),
            "avx512": any(flag.startswith("avx512") for flag in flags),
            "amx": "amx_tile" in flags, "memory_bytes": os.sysconf("SC_PAGE_SIZE")
            * os.sysconf("SC_PHYS_PAGES"), "date": time.strftime("%Y-%m-%d")}


def bench(bins: Path, model: Path, threads: int) -> list[dict[str, Any]]:
    """llama-bench's rows for one model, as CSV."""
    argv = [str(bins / "llama-bench"), "-m", str(model), "-t", str(threads),
            "-p", str(PROMPT), "-n", str(GENERATE), "-d", ",".join(map(str, DEPTHS)),
            "-fa", "on", "-r", str(REPETITIONS), "--repack", str(REPACK), "-o", "csv"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        print(f"{model.name}: llama-bench failed: {done.stderr.strip()[-300:]}", flush=True)
        return []
    rows = []
    for raw in csv.DictReader(io.StringIO(done.stdout)):
        prompt, generated = int(raw["n_prompt"]), int(raw["n_gen"])
        depth = int(raw.get("n_depth") or 0)
        phase = "prefill" if prompt else "decode"
        tokens = prompt or generated
        test = f"{'pp' if prompt else 'tg'}{tokens}" + (f" @ d{depth}" if depth else "")
        rows.append({"model": model.name, "file_bytes": model.stat().st_size,
                     "architecture": raw.get("model_type", ""), "test": test,
                     "phase": phase, "tokens": tokens, "depth": depth,
                     "ubatch": int(raw["n_ubatch"]), "flash_attn": 1,
                     "threads": int(raw["n_threads"]),
                     "tokens_per_s": float(raw["avg_ts"]),
                     "stddev_tokens_per_s": float(raw["stddev_ts"]),
                     "build_number": int(raw["build_number"]),
                     "build_commit": raw["build_commit"]})
    return rows


def main() -> int:
    bins = binaries_dir()
    if not MODEL_FILE.exists():
        raise SystemExit(f"{MODEL_FILE} is missing: run validation/run.py first (it "
                         f"assembles it from {MODEL_PACKAGE})")
    models = sorted(ARCH_MODELS.glob("*.gguf")) or save_models(bins)
    threads = len(os.sched_getaffinity(0))
    rows: list[dict[str, Any]] = []
    for model in [MODEL_FILE, *models]:
        found = bench(bins, model, threads)
        rows.extend(found)
        print(f"{model.name}: " + ", ".join(f"{r['test']} {r['tokens_per_s']:,.1f} t/s"
                                            for r in found), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    with RECORD.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    MACHINE.write_text(json.dumps({**machine(), "llama_cpp": RELEASE,
                                   "settings": {"prompt": PROMPT, "generate": GENERATE,
                                                "depths": list(DEPTHS),
                                                "repetitions": REPETITIONS,
                                                "repack": REPACK, "flash_attn": True}},
                                   indent=1) + "\n")
    print(f"{len(rows)} runs of {len(models) + 1} models recorded in "
          f"{RECORD.relative_to(ROOT)}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
