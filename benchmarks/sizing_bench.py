"""Sizing speed: the cheapest fleet (``planner.sizing.size_fleet``, top 1, no Pareto
front) from a 20-kind catalog for each model preset at f = 0, 1 and 2; the target is
under 1 s each.

Two 20-kind catalogs of rented GPUs (sizing compares rented prices). ``rented+spot``: the
shipped catalog's 10 rented kinds and a spot-priced variant (55 % of the price, at most 4
to be had) of each. ``rented+spot+reserved``: the 10 rented kinds, a spot variant of the
8 priciest and a reserved variant (70 %, at most 8) of the H100 SXM and A100 80GB, where
many mixes cost nearly the same. The model's targets are the defaults (the context
floor, 1 lane). ``python benchmarks/sizing_bench.py`` prints the table; ``make bench``
includes it.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_SECONDS = 1.0
FAILURES = (0, 1, 2)


def _variant(gpu: Any, suffix: str, share: float, count: int) -> Any:
    return replace(gpu, id=f"{gpu.kind}-{suffix}", name=f"{gpu.name} ({suffix})",
                   price_per_hour=round(gpu.price_per_hour * share, 4), max_count=count)


def catalogs() -> dict[str, list[Any]]:
    from planner.models import load_gpu_catalog

    rented = [gpu for gpu in load_gpu_catalog()
              if gpu.price_per_hour is not None and gpu.price_kind == "rented"]
    priciest = sorted(rented, key=lambda gpu: -(gpu.price_per_hour or 0))[:8]
    reserved = [gpu for gpu in rented if gpu.kind in ("h100-sxm-80gb", "a100-80gb")]
    result = {
        "rented+spot": rented + [_variant(gpu, "spot", 0.55, 4) for gpu in rented],
        "rented+spot+reserved": (rented + [_variant(gpu, "spot", 0.55, 4) for gpu in priciest]
                                 + [_variant(gpu, "reserved", 0.7, 8) for gpu in reserved]),
    }
    for name, kinds in result.items():
        assert len(kinds) == 20, (name, len(kinds))
    return result


def run() -> list[dict[str, Any]]:
    from planner.models import list_presets, load_preset
    from planner.sizing import SizingError, SizingTargets, size_fleet

    rows = []
    for catalog_name, kinds in catalogs().items():
        for preset in list_presets():
            model = load_preset(preset)
            for failures in FAILURES:
                started = time.perf_counter()
                try:
                    result = size_fleet(model, kinds,
                                        SizingTargets(failures_tolerated=failures),
                                        top=1, pareto=False)
                    best, plans = result.cheapest, result.plans_evaluated
                    answer = f"{best.label} (USD {best.cost_per_hour_usd:,.2f}/h)"
                except SizingError as error:
                    plans, answer = 0, f"none: {error.code}"
                rows.append({"catalog": catalog_name, "model": preset,
                             "failures_tolerated": failures,
                             "seconds": time.perf_counter() - started,
                             "plans_evaluated": plans, "cheapest": answer})
    return rows


def print_table(rows: list[dict[str, Any]] | None = None) -> bool:
    """Print the table; whether every run met the target."""
    rows = run() if rows is None else rows
    print(f"| 20-kind catalog | model | f | seconds (target < {TARGET_SECONDS:g}) "
          "| plans evaluated | cheapest fleet |")
    print("|---|---|---:|---:|---:|---|")
    for row in rows:
        flag = "" if row["seconds"] < TARGET_SECONDS else " SLOW"
        print(f"| {row['catalog']} | {row['model']} | {row['failures_tolerated']} | "
              f"{row['seconds']:.3f}{flag} | {row['plans_evaluated']:,} | {row['cheapest']} |",
              flush=True)
    return all(row["seconds"] < TARGET_SECONDS for row in rows)


if __name__ == "__main__":
    sys.exit(0 if print_table() else 1)
