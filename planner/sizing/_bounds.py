"""What every fleet that meets the targets needs, which bounds the search (module
:mod:`planner.sizing.search`): per kind, the most layers one node holds at the lowest
admissible context and its usable bytes (:class:`_Needs`), the fractional-knapsack
lower bound on the cost of covering them (:class:`_Bound`), and the walks of what is
left after losing the f largest nodes through the layers."""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from planner.planning import rules

if TYPE_CHECKING:
    from planner.sizing._state import _Search

_Size = TypeVar("_Size", int, float)


class _Needs:
    """What every plan meeting the targets needs at context ``c0``, per node kind: the
    most layers one node holds and its usable bytes; and the totals to cover."""

    def __init__(self, search: _Search, costs: tuple[int, ...]) -> None:
        self.costs = costs
        self.layers_needed = len(costs)
        self.bytes_needed = sum(costs)
        self.caps = [_longest_run(gpu.usable_bytes, costs) for gpu in search.kinds]
        self.usable = [gpu.usable_bytes if cap else 0
                       for gpu, cap in zip(search.kinds, self.caps, strict=True)]
        f = search.f
        holding = [i for i, cap in enumerate(self.caps) if cap]
        # The f spares hold at least as much as the smallest node that holds a layer.
        self.layers_total = self.layers_needed + f * min((self.caps[i] for i in holding),
                                                         default=0)
        self.bytes_total = self.bytes_needed + f * min((self.usable[i] for i in holding),
                                                       default=0)
        self.min_cap = min((self.caps[i] for i in holding), default=0)
        self.min_usable = min((self.usable[i] for i in holding), default=0)

    def totals(self, f: int, top_caps: tuple[int, ...], top_usable: tuple[int, ...]
               ) -> tuple[int, int]:
        """The layers and bytes a fleet must hold in all: what the plan needs plus its f
        largest nodes. Those hold at least the f largest of a partial fleet (``top_caps``,
        ``top_usable``), topped up with the smallest holding kind: in a fleet that meets
        the targets, the f largest nodes all hold a layer."""
        if not f:
            return self.layers_total, self.bytes_total
        return (self.layers_needed + max(f * self.min_cap, sum(top_caps)
                                         + (f - len(top_caps)) * self.min_cap),
                self.bytes_needed + max(f * self.min_usable, sum(top_usable)
                                        + (f - len(top_usable)) * self.min_usable))

    def necessary(self, search: _Search, counts: Sequence[int]) -> bool:
        """Conditions every fleet meeting the targets satisfies, also after losing its f
        largest nodes: enough layers, bytes and holding nodes (the speed targets' carriers
        are counted in the search)."""
        f = search.f
        caps = sorted(itertools.chain.from_iterable(
            [self.caps[i]] * n for i, n in enumerate(counts)), reverse=True)
        usable = sorted(itertools.chain.from_iterable(
            [self.usable[i]] * n for i, n in enumerate(counts)), reverse=True)
        if sum(caps[f:]) < self.layers_needed or sum(usable[f:]) < self.bytes_needed:
            return False
        holding = sum(1 for cap in caps[f:] if cap)
        if holding < max(search.targets.minimum_nodes, 1):
            return False
        # The fleet without its f largest nodes must fit: then some set of its nodes
        # fits, and each node taking all it can, largest first, gets at least as far.
        left = sorted(itertools.chain.from_iterable(
            [gpu.usable_bytes] * n for gpu, n in zip(search.kinds, counts, strict=True)),
            reverse=True)[f:]
        return rules.greedy_layer_reach(left, self.costs) == len(self.costs)


def _spare_walk(f: int, prefix: Sequence[int], walk: tuple[int, int], usable: int,
                amount: int) -> tuple[int, int]:
    """How many of a partial fleet's nodes are among the f largest of every fleet below
    it, and how far the others reach at ``c0`` (``prefix``: the layers' bytes summed),
    after ``amount`` more nodes of ``usable`` bytes.

    The search decides the largest kinds first, so a partial fleet's first f nodes are
    f largest of every fleet below it, and its other nodes come first, in order, in the
    walk of that fleet less its f largest, each taking all the next layers it holds
    (:meth:`_Needs.necessary`). Each node to come takes at most its longest run: the
    layers left past the walk are a need of the kinds to come."""
    spared, reached = walk
    layers = len(prefix) - 1
    for _ in range(amount):
        if spared < f:
            spared += 1
        elif reached < layers:
            reached = bisect_right(prefix, prefix[reached] + usable) - 1
        else:
            break
    return spared, reached


def _largest_from(values: Sequence[int]) -> list[int]:
    """The largest of ``values`` from each position on (0 past the last)."""
    largest = [0] * (len(values) + 1)
    for index in range(len(values) - 1, -1, -1):
        largest[index] = max(values[index], largest[index + 1])
    return largest


def _largest_sizes(f: int, top: tuple[_Size, ...], size: _Size, amount: int
                   ) -> tuple[_Size, ...]:
    """The f largest sizes of a partial fleet once ``amount`` nodes of ``size`` join."""
    if not f or not amount:
        return top
    sizes = list(top) + [size] * min(amount, f)
    sizes.sort(reverse=True)
    return tuple(sizes[:f])


def _longest_run(budget: int, costs: Sequence[int]) -> int:
    """The most consecutive layers whose bytes add up to at most ``budget``."""
    best = start = total = 0
    for end, cost in enumerate(costs):
        total += cost
        while total > budget and start <= end:
            total -= costs[start]
            start += 1
        best = max(best, end - start + 1)
    return best


class _Bound:
    """Fractional-knapsack lower bounds on the cost of covering ``need`` units with the
    kinds from position ``d`` on (each kind at most its count bound)."""

    def __init__(self, prices: Sequence[int], amounts: Sequence[float], bounds: Sequence[int]
                 ) -> None:
        kinds = len(prices)
        self.tables: list[tuple[list[float], list[float], list[float]]] = []
        for start in range(kinds + 1):
            useful = sorted((i for i in range(start, kinds) if amounts[i] > 0 and bounds[i]),
                            key=lambda i: prices[i] / amounts[i])
            reach: list[float] = [0]
            spend, rate = [0.0], []
            for i in useful:
                reach.append(reach[-1] + amounts[i] * bounds[i])
                spend.append(spend[-1] + prices[i] * bounds[i])
                rate.append(prices[i] / amounts[i])
            self.tables.append((reach, spend, rate))

    def __call__(self, start: int, need: float) -> float | None:
        """``None`` when the kinds left cannot cover ``need`` at all."""
        if need <= 0:
            return 0.0
        reach, spend, rate = self.tables[start]
        if need > reach[-1]:
            return None
        index = bisect_left(reach, need) - 1
        return spend[index] + (need - reach[index]) * rate[index]

