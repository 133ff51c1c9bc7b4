"""``make bench``: planner speed and memory on fleets up to 1,000 nodes, then on fleets
up to the input caps (``limits_bench.py``: 10,000 nodes, 4,096 layers), the seconds
until the fencing page is usable in Voilà (``fencing_page_bench.py``: 10 s), and reading
GGUF files, real and hostile (``gguf_bench.py``), hostile sizing and availability
questions (``sizing_hostile_bench.py``: < 30 s and < 2 GB, or a refusal by name), and the
commands on fleets at the caps (``big_fleet_bench.py``: < 30 s of CPU and < 2 GB).

Each fleet runs in a fresh process so that its peak memory is its own. The plain
exhaustive reference planner (``tests/reference_planner.py``) runs beside it where it
finishes within 30 s; its plan must be identical, and the speed-up is printed.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

REFERENCE_SECONDS = 30.0


def _measure(name: str) -> dict[str, Any]:
    from fleets import fleets

    import planner

    request = fleets()[name]
    started = time.perf_counter()
    plan = planner.plan_topology(request)
    plan_seconds = time.perf_counter() - started
    started = time.perf_counter()
    table = planner.candidates(request)
    candidates_seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"plan": plan.to_dict(), "plan_seconds": plan_seconds,
            "candidates_seconds": candidates_seconds, "candidate_rows": len(table),
            "peak_mb": peak_mb}


def _reference(name: str) -> dict[str, Any]:
    import reference_planner
    from fleets import fleets

    started = time.perf_counter()
    plan = reference_planner.plan(fleets()[name])
    return {"plan": plan, "seconds": time.perf_counter() - started}


def _child(mode: str, name: str, timeout: float | None) -> dict[str, Any] | None:
    try:
        done = subprocess.run(
            [sys.executable, __file__, f"--{mode}", name],
            capture_output=True, text=True, timeout=timeout, check=True,
        )
    except subprocess.TimeoutExpired:
        return None
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--reference", help=argparse.SUPPRESS)
    parser.add_argument("--skip-reference", action="store_true",
                        help="do not run the exhaustive reference")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_measure(args.one)))
        return 0
    if args.reference:
        print(json.dumps(_reference(args.reference)))
        return 0

    from fleets import fleets, kinds

    header = ("| fleet | nodes | kinds | latency | plan s | candidates s | peak MB "
              "| exhaustive s | speed-up |")
    print(header)
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    mismatches = 0
    for name, request in fleets().items():
        result = _child("one", name, None)
        assert result is not None
        latency = any(n.get("stage_transfer_latency_ms") is not None for n in request["nodes"])
        reference = None if args.skip_reference else _child("reference", name, REFERENCE_SECONDS)
        if reference is None:
            exhaustive, speedup = f"> {REFERENCE_SECONDS:.0f}", "-"
        else:
            exhaustive = f"{reference['seconds']:.2f}"
            speedup = f"{reference['seconds'] / max(result['plan_seconds'], 1e-6):,.0f}x"
            if reference["plan"] != result["plan"]:
                mismatches += 1
                speedup += " MISMATCH"
        print(f"| {name} | {len(request['nodes'])} | {kinds(request)} | "
              f"{'on' if latency else 'off'} | {result['plan_seconds']:.3f} | "
              f"{result['candidates_seconds']:.3f} | {result['peak_mb']:.0f} | "
              f"{exhaustive} | {speedup} |", flush=True)
    workbench_fast = True
    workbench = ROOT / "benchmarks" / "workbench_bench.py"
    if workbench.exists():
        import workbench_bench

        print()
        print("| workbench edit | nodes | recompute + redraw CPU ms (wall) | planning CPU ms "
              "| target |")
        print("|---|---:|---:|---:|---|")
        for row in workbench_bench.run():
            verdict = "ok" if row["within_budget"] else "MISSED"
            workbench_fast &= row["within_budget"]
            print(f"| {row['edit']} | {row['nodes']} | {row['milliseconds']:.0f} "
                  f"({row['wall_milliseconds']:.0f}) | {row['planning_milliseconds']:.0f} | "
                  f"{verdict} |", flush=True)
    import sizing_bench
    import sweep_bench

    print()
    sizing_fast = sizing_bench.print_table()
    print()
    sweep_bench.print_tables()
    import limits_bench

    print()
    limits_met = limits_bench.print_table()
    import hostile_bench

    print()
    hostile_met = hostile_bench.print_table()
    import fencing_page_bench

    print()
    fencing_fast = fencing_page_bench.print_table()
    import gguf_bench

    print()
    gguf_met = gguf_bench.print_table()
    import sizing_hostile_bench

    print()
    sizing_hostile_met = sizing_hostile_bench.print_table()
    import big_fleet_bench

    print()
    big_fleets_met = big_fleet_bench.print_table()
    if not sizing_fast:
        print(f"sizing: some runs took {sizing_bench.TARGET_SECONDS:g} s or more",
              file=sys.stderr)
    if mismatches:
        print(f"{mismatches} plan(s) differ from the exhaustive reference", file=sys.stderr)
        return 1
    if not workbench_fast:
        print(f"a workbench edit took more than {workbench_bench.BUDGET_SECONDS * 1000:.0f} ms",
              file=sys.stderr)
        return 1
    if not limits_met:
        print("a fleet up to the caps missed its time or memory target", file=sys.stderr)
        return 1
    if not hostile_met:
        print("a hostile simulation or sweep input missed its time or memory limit",
              file=sys.stderr)
        return 1
    if not sizing_hostile_met:
        print("a hostile sizing or availability question missed "
              f"{sizing_hostile_bench.TARGET_SECONDS:g} s or "
              f"{sizing_hostile_bench.TARGET_MB:g} MB", file=sys.stderr)
        return 1
    if not big_fleets_met:
        print("a command on a fleet at the caps missed "
              f"{big_fleet_bench.TARGET_CPU_SECONDS:g} s of CPU or "
              f"{big_fleet_bench.TARGET_MB:g} MB", file=sys.stderr)
        return 1
    if not gguf_met:
        print("reading a GGUF file missed its CPU, time or memory target", file=sys.stderr)
        return 1
    if not fencing_fast:
        print(f"the fencing page took more than {fencing_page_bench.TARGET_SECONDS:g} s to "
              "be usable", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
