"""Fleets up to the planner's caps: the time and memory targets ``make bench`` holds.

Targets: any fleet of up to 10,000 nodes with at most 256 layers plans in < 1 s and its
candidates table takes < 5 s, with or without latencies, in < 500 MB; at the input caps
(10,000 nodes, 4,096 layers) planning takes < 30 s and < 2 GB, or is refused at once by
name (``SearchTooLarge``). Each fleet runs in a fresh process, so its peak memory (the
process's maximum resident size, imports included) is its own.

The mesh rows are the volunteer meshes the planner is built for: every node a card of 8
to 80 GiB less up to 4,000 MiB its driver and desktop keep, so nearly every node reports
its own size (the table counts the distinct sizes). Refusals past the caps are timed
too: they must come at once, before any search or expansion.

The machine may be shared: each time is given as wall-clock and as the process's CPU
seconds, and the targets are judged on CPU seconds. The search runs in one thread and
waits on nothing, so on an idle machine its wall-clock time is its CPU time; under load
the wall-clock time grows with the other work while the CPU time stays (the load average
is printed beside the table).
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
LAYER_BYTES = 5 * GIB  # about a Qwen3-Coder-480B layer


MIB = 2**20
MESH = "mesh"


def _nodes(count: int, kinds: int | str | None, latency: bool,
           seed: int) -> list[dict[str, Any]]:
    """``kinds`` node sizes (None: every node its own size from 8-160 GiB; ``MESH``: a card
    of 8-80 GiB less up to 4,000 MiB), latencies 1-40 ms or none."""
    rnd = random.Random(seed)
    sizes = ([rnd.randint(8 * GIB, 160 * GIB) for _ in range(kinds)]
             if isinstance(kinds, int) else None)
    nodes = []
    for i in range(count):
        if kinds == MESH:
            size = rnd.randint(8, 80) * GIB - rnd.randint(0, 4000) * MIB
        else:
            size = sizes[i % len(sizes)] if sizes else rnd.randint(8 * GIB, 160 * GIB)
        nodes.append({"node_id": f"n{i:05d}", "detected_vram_bytes": size,
                      "stage_transfer_latency_ms": rnd.randint(1, 40) if latency else None})
    return nodes


def _request(layers: int, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"native_context_length": 262_144, "layer_count": layers,
            "model_weight_bytes": layers * LAYER_BYTES, "kv_bytes_per_token": 2 * layers,
            "nodes": nodes}


# name -> (layers, nodes, kinds, latency, at the caps)
CASES: dict[str, tuple[int, int, int | str | None, bool, bool]] = {
    **{f"mesh: {count:,} nodes, {layers} layers{', latency' if latency else ''}":
       (layers, count, MESH, latency, False)
       for count in (10_000, 2_000) for layers in (62, 256) for latency in (False, True)},
    "10,000 identical, 62 layers": (62, 10_000, 1, False, False),
    "10,000 identical, 62 layers, latency": (62, 10_000, 1, True, False),
    "10,000 identical, 256 layers, latency": (256, 10_000, 1, True, False),
    "10,000 x 12 kinds, 256 layers": (256, 10_000, 12, False, False),
    "10,000 x 12 kinds, 256 layers, latency": (256, 10_000, 12, True, False),
    "10,000 distinct, 62 layers": (62, 10_000, None, False, False),
    "10,000 distinct, 62 layers, latency": (62, 10_000, None, True, False),
    "1,000 distinct, 256 layers, latency": (256, 1_000, None, True, False),
    "10,000 distinct, 256 layers, latency": (256, 10_000, None, True, False),
    "caps: 10,000 identical, 4,096 layers": (4096, 10_000, 1, False, True),
    "caps: 400 distinct, 4,096 layers": (4096, 400, None, False, True),
    "caps: 10,000 distinct, 4,096 layers, latency": (4096, 10_000, None, True, True),
}


def _measure(name: str) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    import planner

    layers, count, kinds, latency, _ = CASES[name]
    request = planner.PlanningInput.from_dict(
        _request(layers, _nodes(count, kinds, latency, seed=layers + count)))
    result: dict[str, Any] = {
        "sizes": len({node.usable_bytes for node in request.nodes})}
    for what, run in (("plan", planner.plan_topology), ("candidates", planner.candidates)):
        started, cpu = time.perf_counter(), time.process_time()
        try:
            run(request)
            result[what] = round(time.process_time() - cpu, 3)
        except planner.PlanError as error:
            result[what] = error.code
            result[f"{what}_refused_in"] = round(time.process_time() - cpu, 3)
        result[f"{what}_wall"] = round(time.perf_counter() - started, 3)
    result["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def _verdict(name: str, result: dict[str, Any]) -> str:
    *_, at_caps = CASES[name]
    limits = (30.0, 30.0, 2048.0) if at_caps else (1.0, 5.0, 500.0)
    ok = result["peak_mb"] < limits[2]
    for what, most in zip(("plan", "candidates"), limits, strict=False):
        value = result[what]
        if isinstance(value, str):
            ok &= at_caps and result[f"{what}_refused_in"] < most
        else:
            ok &= value < most
    return "ok" if ok else "MISSED"


def rows(timeout: float = 600.0) -> list[dict[str, Any]]:
    """One row per case, each measured in its own process."""
    found = []
    for name in CASES:
        try:
            done = subprocess.run([sys.executable, __file__, name], capture_output=True,
                                  text=True, timeout=timeout, check=True)
            result = json.loads(done.stdout)
            result["verdict"] = _verdict(name, result)
        except subprocess.TimeoutExpired:
            result = {"plan": f"> {timeout:.0f}", "candidates": "-", "peak_mb": float("nan"),
                      "sizes": "-", "verdict": "MISSED"}
        found.append({"fleet": name, **result})
    return found


def print_table() -> bool:
    """Print the table; True when every target is met."""
    print(f"load average before: {_load()}; times are CPU seconds (wall-clock seconds)")
    print()
    print("| fleet | distinct sizes | plan s | candidates s | peak MB | target |")
    print("|---|---:|---:|---:|---:|---|")
    met = True
    for row in rows():
        print(f"| {row['fleet']} | {row['sizes']} | {_seconds(row, 'plan')} | "
              f"{_seconds(row, 'candidates')} | {row['peak_mb']:.0f} | {row['verdict']} |",
              flush=True)
        met &= row["verdict"] == "ok"
    print()
    print("| refused past the caps | seconds | target |")
    print("|---|---:|---|")
    for name, seconds in refusals().items():
        verdict = "ok" if seconds < REFUSAL_SECONDS else "MISSED"
        print(f"| {name} | {seconds:.2f} | {verdict} |", flush=True)
        met &= verdict == "ok"
    return met


def _seconds(row: dict[str, Any], what: str) -> str:
    wall = row.get(f"{what}_wall")
    return f"{row[what]} ({wall})" if wall is not None else f"{row[what]}"


def _load() -> str:
    try:
        return " ".join(f"{value:.1f}" for value in os.getloadavg()) + f" on {os.cpu_count()} CPUs"
    except OSError:
        return "unknown"


REFUSAL_SECONDS = 5.0


def refusals() -> dict[str, float]:
    """Seconds until each input past the caps is refused by name (``planner plan`` in a
    fresh process for the fleet file, imports included)."""
    sys.path.insert(0, str(ROOT))
    import planner

    # A refusal that does not come counts as never.
    found: dict[str, float] = {}
    nodes = [{"node_id": f"n{i:04d}", "detected_vram_bytes": 2**53} for i in range(1030)]
    name = "1,030 nodes of 8 PiB (InvalidInput)"
    found[name] = float("inf")
    started = time.perf_counter()
    try:
        planner.plan_topology(_request(1030, nodes))
    except planner.InvalidInput:
        found[name] = time.perf_counter() - started
    entries = "".join(f'[[nodes]]\nid = "g{i}"\ncount = 10000\nvram = "80 GiB"\n'
                      for i in range(1000))
    with tempfile.TemporaryDirectory() as folder:
        fleet = Path(folder) / "big.toml"
        fleet.write_text('name = "big"\n[model]\npreset = "qwen3-coder-480b-a35b"\n' + entries)
        name = "a fleet file of 1,000 entries of 10,000 nodes (TooManyNodes)"
        found[name] = float("inf")
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "planner.cli", "plan", str(fleet)],
                              capture_output=True, text=True, cwd=ROOT, timeout=600)
        if "TooManyNodes" in done.stderr:
            found[name] = time.perf_counter() - started
    return found


if __name__ == "__main__":
    if len(sys.argv) == 2:
        print(json.dumps(_measure(sys.argv[1])))
    else:
        sys.exit(0 if print_table() else 1)
