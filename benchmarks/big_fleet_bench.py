"""The commands a user runs on the largest fleets the input caps allow: each finishes in
< 30 s of CPU and < 2 GB, or is refused at once by name.

The fleets are the bombs of the hardening passes: 10,000 nodes on a 4,096-layer model
whose every context and stage count fits, so that the candidates table holds tens of
thousands of node sets of thousands of nodes each (identical nodes, twelve kinds, and at
the design's two and three context candidates); 10,000-node meshes where nearly every
node has its own size, with latencies, and 10,000 nodes of the catalog's kinds with a
TPOT target (every candidate estimated); and sizing with catalogs of kinds that each
have their own stage-transfer latency. Each case runs the command as a user would, in a
fresh process (``sizing_hostile_bench.run``), so its peak memory (the process's maximum
resident size, imports included) is its own. The machine may be shared: the targets are
judged on the process's CPU seconds, the wall-clock seconds are printed beside them.

``python benchmarks/big_fleet_bench.py [words]`` prints the table (only the cases whose
name holds one of the words); ``make bench`` includes it.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import sizing_hostile_bench
from sizing_hostile_bench import _catalog, _fleet, _kinds, writer

TARGET_CPU_SECONDS = 30.0
TARGET_MB = 2048.0
# Judged on CPU seconds: a case is stopped only when it has run this long on the clock.
KILL_SECONDS = 300.0
# A layer of 10 MiB weights and 1 byte of KV per token: at 4,096 layers every context the
# planner tries fits on any count of 80 GiB nodes up to one a layer.
SMALL_LAYERS = ('[model]\nnative_context_length = {native}\nlayer_count = 4096\n'
                'model_weight_bytes = "40 GiB"\nkv_bytes_per_token = 4096')
TWELVE = [16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 141, 192]
CATALOG_KINDS = [("h100-sxm-80gb", 79), ("h100-pcie-80gb", 79), ("h200-141gb", 140),
                 ("a100-40gb", 40), ("a100-80gb", 80), ("l40s", 44), ("rtx-3090", 24),
                 ("rtx-4090", 24), ("rtx-5090", 32), ("instinct-mi300x", 191),
                 ("m2-ultra-192gb", 144), ("m3-ultra-256gb", 192), ("m3-ultra-512gb", 384)]
QWEN_TPOT = '[model]\npreset = "qwen3-coder-480b-a35b"\n\n[planning]\ntarget_decode_tpot_ms = 200'
MESH = ('[model]\nnative_context_length = 131072\nlayer_count = 62\n'
        'model_weight_bytes = "315.68 GB"\nkv_bytes_per_token = 131072')


def _setup(folder: Path) -> dict[str, list[str]]:
    """name -> the command's arguments (files written to ``folder``)."""
    write = writer(folder)

    rnd = random.Random(11)
    identical2 = write("identical2.toml", _fleet(SMALL_LAYERS.format(native=131072), [
        {"id": "gpu", "count": 10_000, "vram": "80 GiB"}]))
    identical3 = write("identical3.toml", _fleet(SMALL_LAYERS.format(native=262144), [
        {"id": "gpu", "count": 10_000, "vram": "80 GiB"}]))
    twelve = write("twelve.toml", _fleet(SMALL_LAYERS.format(native=262144), [
        {"id": f"k{k:02d}", "count": 833, "vram": f"{size} GiB"}
        for k, size in enumerate(TWELVE)]))
    mesh = write("mesh.toml", _fleet(MESH, [
        {"id": f"n{i:05d}", "vram": f"{rnd.randint(8, 80) * 1024 - rnd.randint(0, 4000)} MiB",
         "latency_ms": rnd.randint(1, 40)} for i in range(10_000)]))
    kinds = write("kinds.toml", _fleet(QWEN_TPOT, [
        {"id": kind, "count": 770 if k < 12 else 10_000 - 770 * 12, "vram": f"{gib} GiB",
         "latency_ms": 1 + k} for k, (kind, gib) in enumerate(CATALOG_KINDS)]))
    latency12 = _kinds(12, 13)
    latency100 = _kinds(100, 12)
    for kind in (*latency12, *latency100):
        kind["stage_transfer_latency_ms"] = rnd.randint(1, 40)
    cases: dict[str, list[str]] = {}
    for label, fleet in (("10,000 identical, 4,096 layers, 3 contexts", identical3),
                         ("10,000 x 12 kinds, 4,096 layers, 3 contexts", twelve)):
        cases |= {
            f"plan, {label}": ["plan", fleet],
            f"candidates --csv, {label}": ["candidates", fleet, "--csv"],
            f"candidates (table), {label}": ["candidates", fleet],
            f"report (HTML), {label}": ["report", fleet, "-o", str(folder / "r.html")],
            f"report (JSON), {label}": ["report", fleet, "-o", str(folder / "r.json")],
            f"availability, {label}": ["availability", fleet],
        }
    cases |= {
        "candidates --csv, 10,000 identical 80 GiB, 4,096 layers":
            ["candidates", identical2, "--csv"],
        "candidates (table), 10,000 identical 80 GiB, 4,096 layers": ["candidates", identical2],
        "availability, 10,000-node mesh with latencies": ["availability", mesh],
        "report (HTML), 10,000-node mesh with latencies":
            ["report", mesh, "-o", str(folder / "mesh.html")],
        "candidates (table, estimated), 10,000 nodes of 13 catalog kinds, TPOT target":
            ["candidates", kinds],
        "report (HTML), 10,000 nodes of 13 catalog kinds, TPOT target":
            ["report", kinds, "-o", str(folder / "kinds.html")],
        "availability, 10,000 nodes of 13 catalog kinds, TPOT target": ["availability", kinds],
        "size llama-3.1-70b --tpot 60, 12 kinds each with its own latency":
            ["size", "llama-3.1-70b", "--tpot", "60", "--catalog",
             write("latency12.toml", _catalog(latency12))],
        "size llama-3.1-70b --tpot 60, 100 kinds each with its own latency":
            ["size", "llama-3.1-70b", "--tpot", "60", "--catalog",
             write("latency100.toml", _catalog(latency100))],
    }
    return cases


def _met(row: dict[str, Any]) -> bool:
    return (row["exit_code"] is not None and row["cpu_seconds"] < TARGET_CPU_SECONDS
            and row["peak_mb"] < TARGET_MB)


def print_table(rows: list[dict[str, Any]] | None = None) -> bool:
    """Print the table; whether every case met the targets."""
    rows = (sizing_hostile_bench.run(setup=_setup, script=__file__,
                                     kill_seconds=KILL_SECONDS) if rows is None else rows)
    print(f"| big fleet case | CPU s (< {TARGET_CPU_SECONDS:g}) | wall s | "
          f"peak MB (< {TARGET_MB:g}) | output KB | exit | result |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for row in rows:
        print(f"| {row['case']} | {row['cpu_seconds']:.1f} | {row['seconds']:.1f} | "
              f"{row['peak_mb']:.0f} | {row['output_bytes'] / 1024:,.0f} | "
              f"{row['exit_code']} | {'ok' if _met(row) else 'MISSED'} |", flush=True)
    return all(_met(row) for row in rows)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(sizing_hostile_bench._one(json.loads(sys.argv[2]))))
        sys.exit(0)
    wanted = sys.argv[1:]
    sys.exit(0 if print_table(sizing_hostile_bench.run(
        lambda name: not wanted or any(w in name for w in wanted), _setup, __file__,
        KILL_SECONDS)) else 1)
