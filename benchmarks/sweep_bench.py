"""Sweep throughput: scenarios per second per worker for plan, size and availability
sweeps, and the speed-up of an availability sweep from 1 to 2 local Dask workers.

``python benchmarks/sweep_bench.py`` prints the tables; ``make bench`` includes them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FLEETS = ROOT / "data" / "fleets"
sys.path.insert(0, str(ROOT))


def grids() -> dict[str, Any]:
    from planner.sweep import grid_from_axes

    fleets = [str(FLEETS / name) for name in ("qwen480b-5x80.toml", "qwen235b-partial-latency.toml",
                                              "deepseek-v3-mixed-datacenter.toml",
                                              "llama70b-home-lab.toml")]
    return {
        "plan": grid_from_axes({"fleet": fleets, "kv_cache_type": ["f16", "q8_0", "q4_0"],
                                "min_context": [65536, 131072]}),
        "size": grid_from_axes({"model": ["qwen3-coder-480b-a35b", "llama-3.1-70b",
                                          "deepseek-v3"],
                                "failures_tolerated": [0, 1], "price_scale": [1.0, 1.5]}),
        "availability": grid_from_axes({"fleet": fleets,
                                        "annual_failure_rate": [0.05, 0.119, 0.5, 2.0],
                                        "repair_hours": [24, 72, 168]}),
    }


def _timed(grid: Any, evaluation: str, **options: Any) -> tuple[float, Any]:
    from planner.sweep import sweep

    started = time.perf_counter()
    results = sweep(grid, evaluation, **options)
    return time.perf_counter() - started, results


def run() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of (evaluation, scenarios, seconds, scenarios per second per worker) in one
    process, and the Dask 1-to-2-worker comparison."""
    from distributed import Client

    from planner.sweep_dask import local_cluster

    rows = []
    all_grids = grids()
    for evaluation, grid in all_grids.items():
        seconds, results = _timed(grid, evaluation, executor="inline")
        rows.append({"evaluation": evaluation, "scenarios": len(grid), "seconds": seconds,
                     "per_worker": len(grid) / seconds,
                     "errors": int(results["error_code"].notna().sum())})
    grid = all_grids["availability"]
    timings = {}
    reference = None
    for workers in (1, 2):
        with local_cluster(workers) as cluster, Client(cluster) as client:
            # Warm every worker (imports, catalog, presets) before timing.
            _timed(grid.to_frame().head(2 * workers), "availability", scheduler=client,
                   batch_size=1)
            seconds, results = _timed(grid, "availability", scheduler=client, batch_size=4)
        timings[workers] = seconds
        if reference is None:
            reference = results
        elif not results.equals(reference):
            raise SystemExit("Dask results differ between 1 and 2 workers")
    dask = {"scenarios": len(grid), "one_worker_s": timings[1], "two_workers_s": timings[2],
            "speed_up": timings[1] / timings[2]}
    return rows, dask


def print_tables() -> None:
    rows, dask = run()
    print("| sweep (one process) | scenarios | scenario errors | seconds "
          "| scenarios/s per worker |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['evaluation']} | {row['scenarios']} | {row['errors']} | "
              f"{row['seconds']:.2f} | {row['per_worker']:.1f} |")
    print()
    print("| availability sweep on a Dask LocalCluster | scenarios | 1 worker s | "
          "2 workers s | speed-up |")
    print("|---|---:|---:|---:|---:|")
    print(f"| processes, 1 thread each | {dask['scenarios']} | {dask['one_worker_s']:.2f} | "
          f"{dask['two_workers_s']:.2f} | {dask['speed_up']:.2f}x |")


if __name__ == "__main__":
    print_tables()
