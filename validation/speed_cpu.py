"""`make validate`, the CPU backend's speed: real ``llama-bench`` runs of llama.cpp's own
small model of every architecture (``test-llama-archs -o DIR``, as archs.py saves them)
and of gemma-3-270m Q4_K_M (run.py assembles it from its PyPI package), on this machine's
CPU: a prompt (``pp``), decoding (``tg``) and both after cached tokens (``@ d``).

Every model runs on one thread (``-t 1``), gemma-3-270m on two as well. llama.cpp's CPU
threads meet at a spinning barrier after every operation, so on cores shared with other
work a thread that loses its core holds the other up: on this 2-core machine llama's
small model ran pp256 at 25,664 +- 23,144 tokens/s on two threads and 30,415 +- 474 on
one (three repetitions each). One thread is what these cores measure reliably; the
two-thread runs of gemma-3-270m (whose operations are long enough to ride out a lost
time slice), made last and after waiting for both cores to be free, show how the speed
scales with the cores given.

Other work on the machine only slows a run, so each test's ``tokens_per_s`` is its
fastest of five repetitions (the mean and each repetition are recorded beside it), each
model waits a few seconds for its cores to be free, and the cores in use when it
started and the load average before and after are recorded with its rows.
``speed_cpu.py --again`` runs again the models that started beside other work and keeps
each test's faster row; ``make validate`` runs it once after the first pass. On another
CPU than the record's, neither runs (the record is checked against cpu-kind.toml, which
describes the recorded CPU) unless given ``--replace``.

The runs are recorded in validation/results/cpu-speed.csv (one row per model, thread
count and test, with the build, the settings and the load), the machine in
cpu-machine.json (its CPU as ``/proc/cpuinfo``, ``os.sched_getaffinity`` and sysfs give
it). ``make test`` checks the CPU estimate against the record without llama.cpp
(tests/test_speed_cpu.py), with the CPU described as the catalog kind in
validation/results/cpu-kind.toml. About 20 minutes on this machine, more when other work
holds its cores.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import resource
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

from planner.llamacpp.runner import binaries_dir  # noqa: E402

RESULTS = ROOT / "validation" / "results"
RECORD = RESULTS / "cpu-speed.csv"
MACHINE = RESULTS / "cpu-machine.json"
KIND = RESULTS / "cpu-kind.toml"
# llama-bench's tests: a prompt of PROMPT tokens and GENERATE decoded ones, at each depth.
PROMPT = 256
GENERATE = 32
DEPTHS = (0, 1024)
REPETITIONS = 5
# Threads of every model's runs, and of gemma-3-270m's (the module docstring).
THREADS = (1,)
GEMMA_THREADS = (1, 2)
# Weights stay in the CPU backend's plain buffers (``--repack 0``): its extra buffer
# types multiply with AMX tiles where the CPU reports them, and this machine's hypervisor
# reports them but traps their first instruction (SIGILL in tinygemm_kernel_amx).
REPACK = 0
# Before each model, up to QUIET_WAIT_S (by its threads) for the other work on the
# machine to leave its threads free (give or take QUIET_SLACK_CORES); the cores in use
# then are recorded. One thread waits little (the fastest of its repetitions stands for
# the free core); two need both cores and wait longer.
QUIET_WAIT_S = {1: 4.0, 2: 240.0}
QUIET_SLACK_CORES = 0.3
# A run whose threads got less CPU time than this share of its wall time ran beside
# other work (``--again`` runs it again; tests/test_speed_cpu.py checks the others).
FREE_CPU_SHARE = 0.9
# tokens_per_s is the fastest repetition: the speed of the cores when no other work
# took them (the mean and every repetition are recorded beside it).
COLUMNS = ("model", "file_bytes", "architecture", "test", "phase", "tokens", "depth",
           "ubatch", "flash_attn", "threads", "tokens_per_s", "mean_tokens_per_s",
           "stddev_tokens_per_s", "repetitions_tokens_per_s", "build_number",
           "build_commit", "busy_cores_before", "cpu_share", "load_before", "load_after")


def machine() -> dict[str, Any]:
    """The CPU the runs were made on, as the system states it."""
    info: dict[str, str] = {}
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    flags = info.get("flags", "").split()
    caches = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        level, kind = ((index / name).read_text().strip() for name in ("level", "type"))
        caches[f"L{level} {kind.lower()}"] = (index / "size").read_text().strip()
    return {"cpu": info.get("model name", ""), "vendor": info.get("vendor_id", ""),
            "family": int(info.get("cpu family", 0)), "model": int(info.get("model", 0)),
            "stepping": int(info.get("stepping", 0)),
            "hypervisor": "hypervisor" in flags, "kernel": platform.release(),
            "threads": len(os.sched_getaffinity(0)), "machine": platform.machine(),
            "caches_per_core_or_shared": caches,
            "avx512": any(flag.startswith("avx512") for flag in flags),
            "amx": "amx_tile" in flags, "memory_bytes": os.sysconf("SC_PAGE_SIZE")
            * os.sysconf("SC_PHYS_PAGES"), "date": time.strftime("%Y-%m-%d")}


def busy_cores(seconds: float = 1.0) -> float:
    """The cores in use over the next ``seconds`` (from ``/proc/stat``)."""
    def times() -> tuple[int, int]:
        with open("/proc/stat") as handle:
            fields = [int(v) for v in handle.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all, idle + iowait
    total, idle = times()
    time.sleep(seconds)
    total_after, idle_after = times()
    spent = max(1, total_after - total)
    return round(len(os.sched_getaffinity(0)) * (1 - (idle_after - idle) / spent), 2)


def wait_for_quiet(threads: int) -> float:
    """Wait (at most QUIET_WAIT_S) until the other work leaves ``threads`` cores free; the
    cores in use when the run starts."""
    deadline = time.monotonic() + QUIET_WAIT_S[threads]
    busy = busy_cores()
    while busy > len(os.sched_getaffinity(0)) - threads + QUIET_SLACK_CORES \
            and time.monotonic() < deadline:
        busy = busy_cores(2.0)
    return busy


# The children's CPU time counted so far (resource.RUSAGE_CHILDREN adds every run's).
_SPENT = [0.0]


def bench(bins: Path, model: Path, threads: int, failed: dict[str, str]
          ) -> list[dict[str, Any]]:
    """llama-bench's rows for one model on ``threads`` threads; where llama-bench fails,
    none, and its last assertion in ``failed``."""
    busy_before = wait_for_quiet(threads)
    load_before = os.getloadavg()[0]
    argv = ["nice", str(bins / "llama-bench"), "-m", str(model), "-t", str(threads),
            "-p", str(PROMPT), "-n", str(GENERATE), "-d", ",".join(map(str, DEPTHS)),
            "-fa", "on", "-r", str(REPETITIONS), "--repack", str(REPACK), "-o", "json"]
    started = time.monotonic()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as process:
        stdout, stderr = process.communicate(timeout=1800)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.monotonic() - started
    load_after = os.getloadavg()[0]
    # The CPU time llama-bench's threads got over the time they could have used: below 1
    # when other work held its cores (all of its children's so far, less the earlier
    # runs').
    spent = usage.ru_utime + usage.ru_stime - _SPENT[0]
    _SPENT[0] = usage.ru_utime + usage.ru_stime
    cpu_share = round(min(1.0, spent / (wall * threads)), 3)
    done = subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if "GGML_ASSERT" in line
                or "error" in line.lower()]
        failed[model.name] = (said[-1] if said else done.stderr.strip()[-200:]).split(
            "/src-")[-1].strip()
        print(f"{model.name}: llama-bench failed: {failed[model.name]}", flush=True)
        return []
    rows = []
    for raw in json.loads(done.stdout):
        prompt, generated = int(raw["n_prompt"]), int(raw["n_gen"])
        depth = int(raw.get("n_depth") or 0)
        phase = "prefill" if prompt else "decode"
        tokens = prompt or generated
        test = f"{'pp' if prompt else 'tg'}{tokens}" + (f" @ d{depth}" if depth else "")
        samples = [float(v) for v in raw["samples_ts"]]
        rows.append({"model": model.name, "file_bytes": model.stat().st_size,
                     "architecture": raw.get("model_type", ""), "test": test,
                     "phase": phase, "tokens": tokens, "depth": depth,
                     "ubatch": int(raw["n_ubatch"]), "flash_attn": 1,
                     "threads": int(raw["n_threads"]),
                     "tokens_per_s": max(samples),
                     "mean_tokens_per_s": float(raw["avg_ts"]),
                     "stddev_tokens_per_s": float(raw["stddev_ts"]),
                     "repetitions_tokens_per_s": " ".join(f"{v:.2f}" for v in samples),
                     "build_number": int(raw["build_number"]),
                     "build_commit": raw["build_commit"],
                     "busy_cores_before": busy_before, "cpu_share": cpu_share,
                     "load_before": round(load_before, 2),
                     "load_after": round(load_after, 2)})
    return rows


def was_busy(row: dict[str, Any]) -> bool:
    """Whether other work held the run's cores for more than a tenth of its time."""
    return float(row["cpu_share"]) < FREE_CPU_SHARE


def _rank(row: dict[str, Any]) -> tuple[bool, float]:
    """A run on free cores before one beside other work, then the faster."""
    return not was_busy(row), float(row["tokens_per_s"])


def write(rows: list[dict[str, Any]], settings: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with RECORD.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    MACHINE.write_text(json.dumps({**machine(), "llama_cpp": RELEASE, **settings,
                                   "settings": {"prompt": PROMPT, "generate": GENERATE,
                                                "depths": list(DEPTHS),
                                                "threads": list(THREADS),
                                                "gemma_threads": list(GEMMA_THREADS),
                                                "repetitions": REPETITIONS,
                                                "repack": REPACK, "flash_attn": True}},
                                   indent=1) + "\n")


def again(bins: Path) -> int:
    """Run again the models whose runs ran beside other work, keeping each test's run on
    free cores, else its faster one (other work only slows a run), and those with no
    rows (to record why llama-bench fails on them)."""
    with RECORD.open(newline="") as handle:
        rows: list[dict[str, Any]] = list(csv.DictReader(handle))
    paths = {path.name: path for path in [MODEL_FILE, *ARCH_MODELS.glob("*.gguf")]}
    busy = sorted({(row["model"], int(row["threads"])) for row in rows if was_busy(row)})
    failed: dict[str, str] = {}
    recorded = {row["model"] for row in rows}
    for name in sorted(set(paths) - recorded):
        bench(bins, paths[name], THREADS[0], failed)
    where = {(row["model"], int(row["threads"]), row["test"]): index
             for index, row in enumerate(rows)}
    load_start = os.getloadavg()
    for name, threads in busy:
        found = bench(bins, paths[name], threads, failed)
        for new in found:
            index = where[(name, threads, new["test"])]
            if _rank(new) > _rank(rows[index]):
                rows[index] = new
        print(f"{name} on {threads} again: " + ", ".join(
            f"{r['test']} {r['tokens_per_s']:,.1f} t/s" for r in found), flush=True)
    previous = json.loads(MACHINE.read_text())
    write(rows, {"load_average_1_5_15_min": {
        **previous["load_average_1_5_15_min"],
        "again_start": [round(v, 2) for v in load_start],
        "again_end": [round(v, 2) for v in os.getloadavg()]},
        "run_again": len(busy), "failed": {**previous.get("failed", {}), **failed}})
    print(f"{len(busy)} models run again; {sum(map(was_busy, rows))} of {len(rows)} rows "
          "still ran beside other work")
    return 0


# What names a CPU in cpu-machine.json: the runs of another are not the record's, whose
# CPU cpu-kind.toml describes.
CPU_IDENTITY = ("vendor", "cpu", "family", "model", "stepping")


def another_cpu(recorded: dict[str, Any], here: dict[str, Any]) -> str | None:
    """Why this machine's runs may not replace the record (``None``: the same CPU): the
    record's runs are checked against cpu-kind.toml, which describes the recorded CPU, so
    another CPU's runs would be estimated as that one's."""
    if all(recorded.get(key) == here.get(key) for key in CPU_IDENTITY):
        return None
    def said(machine: dict[str, Any]) -> str:
        return (f"{machine.get('cpu')} ({machine.get('vendor')}, family "
                f"{machine.get('family')}, model {machine.get('model')})")
    return (f"the record ({RECORD.relative_to(ROOT)}) is of {said(recorded)}, which "
            f"{KIND.relative_to(ROOT)} describes; this machine is {said(here)}. Its runs would be "
            f"estimated as that CPU's: pass --replace to record this CPU, and describe it "
            f"in {KIND.relative_to(ROOT)}")


def main(argv: list[str]) -> int:
    if MACHINE.exists() and "--replace" not in argv:
        reason = another_cpu(json.loads(MACHINE.read_text()), machine())
        if reason is not None:
            print(f"speed_cpu.py: not run: {reason}")
            return 0
    bins = binaries_dir()
    if "--again" in argv:
        return again(bins)
    if not MODEL_FILE.exists():
        raise SystemExit(f"{MODEL_FILE} is missing: run validation/run.py first (it "
                         f"assembles it from {MODEL_PACKAGE})")
    models = sorted(ARCH_MODELS.glob("*.gguf")) or save_models(bins)
    load_start = os.getloadavg()
    rows: list[dict[str, Any]] = []
    # gemma-3-270m last: its two-thread runs need both cores free for longest.
    runs = [(model, threads) for model in models for threads in THREADS]
    runs += [(MODEL_FILE, threads) for threads in GEMMA_THREADS]
    failed: dict[str, str] = {}
    for model, threads in runs:
        found = bench(bins, model, threads, failed)
        rows.extend(found)
        print(f"{model.name} on {threads}: " + ", ".join(
            f"{r['test']} {r['tokens_per_s']:,.1f} t/s" for r in found), flush=True)
    write(rows, {"load_average_1_5_15_min": {
        "start": [round(v, 2) for v in load_start],
        "end": [round(v, 2) for v in os.getloadavg()]}, "failed": failed})
    print(f"{len(rows)} runs of {len(models) + 1} models recorded in "
          f"{RECORD.relative_to(ROOT)}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
