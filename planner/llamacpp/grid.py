"""The grid of llama.cpp settings the memory estimate is checked at: a covering design in
which every pair of values of two settings appears in at least one row (a pairwise, or
all-pairs, design), with the pairs llama.cpp refuses left out.

:func:`covering_rows` builds it greedily and deterministically (the same rows every
time): it starts each row from the first pair still uncovered, then gives each other
factor, in order, the value that covers most pairs still uncovered with the values
chosen so far (the first such value on a tie), skipping values the row's constraint
refuses. :data:`GRID` is the design ``make validate`` records
(validation/results/grid/): where the layers go (one device, or split unevenly over two or
three rpc-servers), the context, the micro-batch, the lanes, a unified cache or not, the
K and V cache types and flash attention; :func:`uneven_ranges` is how a split of each
size places a model's layers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Factor:
    name: str
    levels: tuple[Any, ...]


def _pairs(factors: Sequence[Factor],
           allowed: Callable[[Mapping[str, Any]], bool]) -> set[tuple[int, int, int, int]]:
    """Every pair of (factor, level) indexes a row could hold: (i, a, j, b), i < j."""
    return {(i, a, j, b)
            for (i, f), (j, g) in combinations(enumerate(factors), 2)
            for a in range(len(f.levels)) for b in range(len(g.levels))
            if allowed({f.name: f.levels[a], g.name: g.levels[b]})}


def covering_rows(factors: Sequence[Factor],
                  allowed: Callable[[Mapping[str, Any]], bool] = lambda row: True
                  ) -> list[Row]:
    """Rows (factor name -> level) in which every pair of levels of two factors that
    ``allowed`` accepts appears at least once, and every level it accepts; ``allowed``
    takes a partial row and says whether llama.cpp would run it."""
    names = [factor.name for factor in factors]
    uncovered = _pairs(factors, allowed)
    rows: list[Row] = []

    def complete(chosen: dict[int, int]) -> None:
        for k, factor in enumerate(factors):
            if k in chosen:
                continue
            best, best_gain = None, -1
            for level in range(len(factor.levels)):
                trial = {**chosen, k: level}
                if not allowed({names[m]: factors[m].levels[v] for m, v in trial.items()}):
                    continue
                gain = sum(1 for m, v in chosen.items()
                           if (min(m, k), v if m < k else level, max(m, k),
                               level if m < k else v) in uncovered)
                if gain > best_gain:
                    best, best_gain = level, gain
            if best is None:
                raise ValueError(f"no level of {factor.name} completes the row {chosen}")
            chosen[k] = best
        row = {names[k]: factors[k].levels[v] for k, v in sorted(chosen.items())}
        uncovered.difference_update((m, chosen[m], n, chosen[n])
                                    for m, n in combinations(sorted(chosen), 2))
        rows.append(row)

    while uncovered:
        i, a, j, b = min(uncovered)
        complete({i: a, j: b})
    # A level no pair holds (a factor alone, or one whose pairs are all refused).
    for i, factor in enumerate(factors):
        for a, level in enumerate(factor.levels):
            if allowed({factor.name: level}) and not any(
                    row[factor.name] == level for row in rows):
                complete({i: a})
    return rows


def covered_pairs(rows: Sequence[Mapping[str, Any]]) -> set[tuple[str, Any, str, Any]]:
    """Every pair of (factor, level) the rows hold, as (name, level, name, level) with the
    factors in the rows' order."""
    pairs = set()
    for row in rows:
        items = list(row.items())
        for (f, a), (g, b) in combinations(items, 2):
            pairs.add((f, a, g, b))
    return pairs


QUANTIZED = ("q8_0", "q4_0")

FACTORS = (
    Factor("devices", (1, 2, 3)),
    Factor("context_length", (512, 2048, 8192, 32768)),
    Factor("ubatch", (32, 128, 512, 2048)),
    Factor("parallel", (1, 4)),
    Factor("kv_unified", (False, True)),
    Factor("cache_type_k", ("f16", "q8_0", "q4_0")),
    Factor("cache_type_v", ("f16", "q8_0", "q4_0")),
    Factor("flash_attn", (True, False)),
)
"""The settings the grid varies: 1 device (llama.cpp's CPU backend) or 2 or 3
rpc-servers with uneven layer ranges; context 512 to 32k; micro-batch 32 to 2048; 1 or 4
lanes, with and without a unified cache; K and V caches f16, q8_0 and q4_0, mixed; flash
attention on and off."""


def runs_in_llama_cpp(row: Mapping[str, Any]) -> bool:
    """Whether llama.cpp runs the (partial) row: it refuses a quantized V cache without
    flash attention."""
    return not (row.get("cache_type_v") in QUANTIZED and row.get("flash_attn") is False)


GRID: tuple[Row, ...] = tuple(covering_rows(FACTORS, runs_in_llama_cpp))
"""The rows ``make validate`` records for every architecture model and gemma-3-270m."""


def uneven_ranges(layer_count: int, devices: int) -> list[tuple[int, int]]:
    """Where a split over ``devices`` puts a model's layers: its blocks and its output
    layer, ``layer_count + 1`` units, shared in the proportions ``devices : ... : 2 : 1``
    (the first device the most), each device at least one unit (largest remainders
    first, then the earlier device; a device raised to one unit has a negative
    remainder, so no later device ends up above an earlier one). The last device's units
    are its blocks and the output layer, so it may hold the output layer alone (two
    blocks over three devices: one block, one block, the output)."""
    if devices < 1 or layer_count + 1 < devices:
        raise ValueError(f"{layer_count} layers cannot be split over {devices} devices")
    units = layer_count + 1
    weights = list(range(devices, 0, -1))
    total = sum(weights)
    shares = [units * weight / total for weight in weights]
    counts = [max(1, int(share)) for share in shares]
    order = sorted(range(devices), key=lambda d: (-(shares[d] - counts[d]), d))
    position = 0
    while sum(counts) < units:
        counts[order[position % devices]] += 1
        position += 1
    while sum(counts) > units:
        largest = max(range(devices), key=lambda d: (counts[d], -d))
        counts[largest] -= 1
    counts[-1] -= 1  # the output layer
    ranges, start = [], 0
    for count in counts:
        ranges.append((start, start + count))
        start += count
    return ranges
