"""Exact search for the best node set of every shape, without enumerating subsets.

The stage walk (SPEC section 4) depends only on the state ``(stages left, next layer)``
and on the usable bytes of the node taking the next stage. Stage order is usable bytes
descending, so any node set, in stage order, is a subsequence of the whole fleet sorted
that way, and nodes with equal usable bytes are interchangeable for the walk. A dynamic
program over groups of equal usable bytes, with state ``(stages left, next layer)``,
therefore sees every node set of every size at once.

The SPEC's ranking of node sets (section 5) is lexicographic and mixes a bottleneck
(max latency, min remaining) with a sum (total remaining), which one dynamic program
cannot optimise together. It is solved as three programs, each fixing the optimum of the
previous one as a threshold:

1. the smallest possible maximum latency ``T`` (nodes without a latency count as 0);
2. with only nodes of latency ``<= T``, the largest possible smallest-remaining ``R``;
3. with those nodes and only stages that keep ``>= R`` remaining, the largest total
   usable bytes (total remaining is that minus the model's bytes).

The node ids are then read back position by position, always taking the smallest id
that still completes an optimal set, which gives the lexicographically smallest list.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from planner.errors import PlanError
from planner.planning.inputs import NodeBudget, PlanningInput
from planner.planning.rules import at_context, layer_bytes, stage_order, walk_stages
from planner.units import format_bytes, latency_microseconds, ms_from_microseconds

_INF = np.int64(2**62)
_NEG = np.int64(-(2**62))
# Queries of the last two programs run together in batches; the table budget bounds the
# memory kept for reading the node ids back.
_BATCH = 32
_TABLE_BYTES = 96 * 2**20
SEARCH_BYTES = 2**30
"""The most memory one context's search may take; past it, ``SearchTooLarge``."""


@dataclass(frozen=True, slots=True)
class NodeSetChoice:
    """The best node set found for one (context, stage count)."""

    context_length: int
    stage_count: int
    nodes: tuple[NodeBudget, ...]
    """In stage order."""
    spans: tuple[int, ...]
    remaining_bytes: tuple[int, ...]
    estimated_decode_network_ms_per_token: int | float | None

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(node.node_id for node in self.nodes)

    @property
    def min_remaining_bytes(self) -> int:
        return min(self.remaining_bytes)

    @property
    def total_remaining_bytes(self) -> int:
        return sum(self.remaining_bytes)

    @property
    def estimate_us_or_zero(self) -> int:
        """The estimate in whole microseconds (exact), unknown as 0."""
        return latency_microseconds(self.estimated_decode_network_ms_per_token or 0)


def estimate_ms(nodes: Iterable[NodeBudget]) -> int | float | None:
    """``k * max(latency of the nodes that have one)``, or None when none has one.

    Worked in whole microseconds, so fractional latencies give the exact product
    (10 x 0.7 ms is 7 ms, not 7.000000000000001)."""
    nodes = list(nodes)
    known = [n.latency_us for n in nodes if n.latency_us is not None]
    if not known:
        return None
    return ms_from_microseconds(len(nodes) * max(known))


@dataclass(frozen=True, slots=True)
class _Group:
    usable: int
    nodes: tuple[NodeBudget, ...]
    """Sorted by node id (their stage order among themselves)."""
    latencies: np.ndarray
    """Latency of each node, unknown as 0, in node order."""

    def allowed(self, threshold: int) -> list[int]:
        """Indices of the nodes whose latency is within ``threshold``, in id order."""
        return [i for i, lat in enumerate(self.latencies) if lat <= threshold]


@dataclass(frozen=True, slots=True)
class _Steps:
    """One stage taken by a node of each group, over a batch's renumbered states."""

    following: np.ndarray
    remaining: np.ndarray
    local: np.ndarray
    """Batch number of each state, by its number in the whole state space."""


class ContextSearch:
    """Exact best node sets for every stage count at one context length."""

    def __init__(self, request: PlanningInput, context_length: int) -> None:
        request = at_context(request, context_length)
        self.request = request
        self.context_length = context_length
        self.layer_count = layer_count = request.layer_count
        self.max_stages = min(len(request.nodes), layer_count)
        costs = layer_bytes(request, context_length)
        self.costs = costs
        self.prefix = [0, *accumulate(costs)]

        by_usable: dict[int, list[NodeBudget]] = {}
        for node in request.nodes:
            # A node with nothing usable can take no layer, so no fitting set holds it.
            if node.usable_bytes > 0:
                by_usable.setdefault(node.usable_bytes, []).append(node)
        kept = self._prune({usable: sorted(members, key=lambda n: n.node_id)
                            for usable, members in by_usable.items()})
        groups = []
        for usable in sorted(kept, reverse=True):
            members = tuple(kept[usable])
            # Microseconds: whole numbers even for fractional latencies.
            lat = np.array([n.latency_us or 0 for n in members], dtype=np.int64)
            groups.append(_Group(usable, members, lat))
        self.groups: tuple[_Group, ...] = tuple(groups)

        width = layer_count + 1
        self.width = width
        self.state_count = (self.max_stages + 1) * width
        # (no stages left, layer 0) can never finish the model, so it doubles as the
        # absorbing state for walks that failed; states of fewer stages left come first,
        # so every prefix of the state space is closed under taking a stage.
        self.dead = 0
        self.goal = layer_count  # index of (stages left 0, next layer == layer_count)
        self._check_size()
        self._build_steps()
        self._min_max_latency: dict[int, int] | None = None
        rank = {nid: i for i, nid in enumerate(sorted(n.node_id for n in request.nodes))}
        self._rank = rank

    def _check_size(self) -> None:
        """Refuse, before allocating, a search whose tables would pass :data:`SEARCH_BYTES`."""
        # The steps of every group, and the lean read-back's value after each group.
        needed = (3 * len(self.groups) + 8) * self.state_count * 8 + _TABLE_BYTES
        if needed > SEARCH_BYTES:
            raise PlanError(
                "SearchTooLarge",
                f"at context {self.context_length:,}, {len(self.groups):,} different node "
                f"sizes and {self.layer_count:,} layers need {format_bytes(needed)} of search "
                f"tables (at most {format_bytes(SEARCH_BYTES)}); give nodes of nearly equal "
                "VRAM one size (max_vram or headroom), or plan fewer nodes or layers",
                context_length=self.context_length, node_sizes=len(self.groups),
                layer_count=self.layer_count, needed_bytes=needed)

    # -- nodes that can be in no best set -------------------------------------------------
    def _span_classes(self, usables: Sequence[int]) -> list[int]:
        """A class number for each of ``usables`` (descending): equal numbers take the same
        span at every layer, so the walk cannot tell them apart.

        ``most(n, u)`` (the layers from ``n`` that fit in ``u``) is monotone in ``u``, so a
        class is a run of consecutive usable sizes."""
        prefix = self.prefix
        starts = prefix[:-1]
        if not usables:
            return []
        if prefix[-1] + usables[0] < 2**62:
            table = np.asarray(prefix, dtype=np.int64)
            begin = np.asarray(starts, dtype=np.int64)
            rows: list[bytes] = []
            chunk = max(1, 2**22 // max(1, len(starts)))
            for first in range(0, len(usables), chunk):
                part = np.asarray(usables[first:first + chunk], dtype=np.int64)
                ends = np.searchsorted(table, begin[None, :] + part[:, None], side="right")
                rows.extend(row.tobytes() for row in ends)
        else:
            # Sums past 64 bits: exact Python integers.
            rows = [tuple(bisect_right(prefix, start + usable) for start in starts)
                    for usable in usables]  # type: ignore[misc]
        classes, number = [], 0
        for index, row in enumerate(rows):
            if index and row != rows[index - 1]:
                number += 1
            classes.append(number)
        return classes

    def _prune(self, by_usable: dict[int, list[NodeBudget]]) -> dict[int, list[NodeBudget]]:
        """Drop the nodes no best set of at most ``max_stages`` nodes can hold.

        Within a span class, a node with ``max_stages`` nodes before it in stage order whose
        latencies are no higher is never needed: a best set holding it leaves one of those
        out, and swapping that one in keeps every span, keeps or raises each stage's
        remaining bytes and keeps or lowers the max latency (and, at equal usable bytes,
        gives a smaller node id), so the set was not the best (SPEC section 5). Identical
        nodes therefore cost no more than ``max_stages`` of them.
        """
        usables = sorted(by_usable, reverse=True)
        classes = self._span_classes(usables)
        limit = self.max_stages
        kept: dict[int, list[NodeBudget]] = {}
        seen: list[int] = []
        for index, usable in enumerate(usables):
            if index and classes[index] != classes[index - 1]:
                seen = []
            for node in by_usable[usable]:
                latency = node.latency_us or 0
                if bisect_right(seen, latency) < limit:
                    kept.setdefault(usable, []).append(node)
                    insort(seen, latency)
        return kept

    # -- one stage taken by a node of each group, from every state ------------------------
    def _build_steps(self) -> None:
        width, layers = self.width, self.layer_count
        size = self.state_count
        stages_left = np.repeat(np.arange(self.max_stages + 1), width)
        next_layer = np.tile(np.arange(width), self.max_stages + 1)
        assignable = (layers - next_layer) - (stages_left - 1)
        assignable[stages_left == 0] = 0
        self.next_state = np.full((len(self.groups), size), self.dead, dtype=np.int64)
        self.step_remaining = np.full((len(self.groups), size), _NEG, dtype=np.int64)
        prefix = self.prefix
        for g, group in enumerate(self.groups):
            most = np.array(
                [bisect_right(prefix, prefix[n] + group.usable) - 1 - n for n in range(width)],
                dtype=np.int64,
            )
            span = np.minimum(most[next_layer], assignable)
            ok = span > 0
            source = np.nonzero(ok)[0]
            target_layer = next_layer[source] + span[source]
            self.next_state[g, source] = (stages_left[source] - 1) * width + target_layer
            used = self._span_bytes(next_layer[source], target_layer)
            self.step_remaining[g, source] = group.usable - used

    def _span_bytes(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Bytes of layers ``[start, end)`` for each pair; exact even past 64 bits."""
        if self.prefix[-1] < 2**62:
            prefix = np.asarray(self.prefix, dtype=np.int64)
            return prefix[ends] - prefix[starts]
        # Only spans a node can hold are asked for, and those fit in 64 bits.
        return np.array([self.prefix[e] - self.prefix[b]
                         for b, e in zip(starts.tolist(), ends.tolist(), strict=True)],
                        dtype=np.int64)

    def start(self, stage_count: int) -> int:
        return stage_count * self.width

    # -- program 1: smallest possible maximum latency, every stage count ------------------
    def fits(self, budgets: Sequence[int]) -> bool:
        """Whether nodes of these usable bytes, in stage order, hold the model (SPEC
        section 4), in exact integers."""
        prefix, layers, count = self.prefix, self.layer_count, len(budgets)
        position = 0
        for index, budget in enumerate(budgets):
            end = min(bisect_right(prefix, prefix[position] + budget) - 1,
                      layers - (count - 1 - index))
            if end <= position:
                return False
            position = end
        return position == layers

    def fits_each(self, budgets: Sequence[int]) -> list[bool]:
        """``[False, fits(budgets[:1]), ..., fits(budgets)]``: every stage count at once,
        each walk one numpy lane."""
        counts = len(budgets)
        if counts == 0 or self.prefix[-1] + max(budgets) >= 2**62:
            return [False, *(self.fits(budgets[:k]) for k in range(1, counts + 1))]
        prefix = np.asarray(self.prefix, dtype=np.int64)
        stages = np.arange(1, counts + 1)  # lane k - 1 walks the first k budgets
        position = np.zeros(counts, dtype=np.int64)
        alive = np.ones(counts, dtype=bool)
        for index, budget in enumerate(budgets):
            lanes = slice(index, counts)  # the walks that have a stage ``index``
            start = position[lanes]
            end = np.minimum(np.searchsorted(prefix, prefix[start] + budget, side="right") - 1,
                             self.layer_count - (stages[lanes] - 1 - index))
            alive[lanes] &= end > start
            position[lanes] = np.maximum(end, start)
        return [False, *(alive & (position == self.layer_count)).tolist()]

    def min_max_latency(self) -> dict[int, int]:
        if self._min_max_latency is None:
            self._min_max_latency = self._find_min_max_latency()
        return dict(self._min_max_latency)

    def _find_min_max_latency(self) -> dict[int, int]:
        """For each stage count that some node set fits, the smallest max latency, in
        microseconds (unknown as 0).

        Bigger nodes never make a walk fail: if a set fits, a set whose i-th largest node
        is at least as large, for every i, fits too (each stage ends at or past where the
        smaller one ended). So ``k`` stages fit within a latency ``T`` exactly when the
        ``k`` largest nodes of latency ``<= T`` fit, and that is monotone in ``T``: a
        binary search over the latencies finds the smallest ``T``.
        """
        usable = np.array([g.usable for g in self.groups for _ in g.nodes], dtype=object)
        latency = np.concatenate([g.latencies for g in self.groups]) if self.groups \
            else np.zeros(0, dtype=np.int64)
        thresholds = np.unique(latency)
        tops: dict[int, list[int]] = {}

        def top(index: int) -> list[int]:
            if index not in tops:
                tops[index] = list(usable[latency <= thresholds[index]][:self.max_stages])
            return tops[index]

        found: dict[int, int] = {}
        last = len(thresholds) - 1
        widest = top(last) if last >= 0 else []
        fitting = self.fits_each(widest)
        for count in range(1, self.max_stages + 1):
            # Nodes with nothing usable are in no group: fewer budgets than stages.
            if count >= len(fitting) or not fitting[count]:
                continue
            low, high = 0, last
            while low < high:
                middle = (low + high) // 2
                budgets = top(middle)
                if len(budgets) >= count and self.fits(budgets[:count]):
                    high = middle
                else:
                    low = middle + 1
            found[count] = int(thresholds[low])
        return found

    # -- program 2: largest smallest-remaining under latency thresholds --------------------
    def max_min_remaining(self, thresholds: Sequence[int],
                          most_stages: int | None = None) -> np.ndarray:
        """Rows per threshold, columns per stage count (index k, up to ``most_stages``):
        the best smallest remaining bytes, or ``_NEG`` where no set fits."""
        most_stages = self.max_stages if most_stages is None else most_stages
        # A few thresholds at a time: memory stays a few arrays of the state space.
        parts = [self._max_min_remaining(thresholds[i:i + _BATCH], most_stages)
                 for i in range(0, len(thresholds), _BATCH)]
        return np.concatenate(parts) if parts else np.zeros((0, most_stages + 1), np.int64)

    def _max_min_remaining(self, thresholds: Sequence[int], most_stages: int) -> np.ndarray:
        # States of fewer stages left come first and are closed under a step, so the
        # counts asked for need only the states up to the largest of them.
        size = (most_stages + 1) * self.width
        q = len(thresholds)
        thresholds_arr = np.asarray(thresholds, dtype=np.int64)
        value = np.full((q, size), _NEG, dtype=np.int64)
        value[:, self.goal] = _INF
        for g in reversed(range(len(self.groups))):
            group = self.groups[g]
            avail = (group.latencies[None, :] <= thresholds_arr[:, None]).sum(axis=1)
            state = np.arange(size)
            low = np.full(size, _INF, dtype=np.int64)
            best = value.copy()
            for j in range(1, min(int(avail.max(initial=0)), most_stages) + 1):
                low = np.minimum(low, self.step_remaining[g, state])
                state = self.next_state[g, state]
                cand = np.minimum(value[:, state], low[None, :])
                cand[avail < j] = _NEG
                best = np.maximum(best, cand)
                if (state == self.dead).all():
                    break
            value = best
        return value[:, [self.start(k) for k in range(most_stages + 1)]]

    # -- program 3 and read-back: the best set itself ----------------------------------------
    def best_sets(self, queries: Sequence[tuple[int, int, int]]) -> list[NodeSetChoice]:
        """Best node set for each ``(stage_count, latency threshold, remaining threshold)``."""
        # Batches of similar stage counts: a batch needs only the states and the depth
        # within a group that its largest stage count can reach.
        order = sorted(range(len(queries)), key=lambda i: queries[i][0])
        results: list[NodeSetChoice | None] = [None] * len(queries)
        begin = 0
        while begin < len(order):
            end = begin + 1
            while (end < len(order) and end - begin < _BATCH
                   and self._table_bytes(queries[order[end]][0], end + 1 - begin) <= _TABLE_BYTES):
                end += 1
            batch = order[begin:end]
            if len(batch) == 1 and self._table_bytes(queries[batch[0]][0], 1) > _TABLE_BYTES:
                found = [self._best_set_lean(queries[batch[0]])]
            else:
                found = self._best_sets_batch([queries[i] for i in batch])
            for index, choice in zip(batch, found, strict=True):
                results[index] = choice
            begin = end
        return [choice for choice in results if choice is not None]

    def _table_bytes(self, most_stages: int, batch: int) -> int:
        """Memory the read-back tables of one batch take."""
        rows = sum(min(len(group.nodes), most_stages) + 1 for group in self.groups)
        return rows * batch * (most_stages + 1) * self.width * 8

    def _reachable(self, starts: Sequence[int], depths: Sequence[int]) -> np.ndarray:
        """States some walk from ``starts`` can be in, in stage order over the groups."""
        reach = np.zeros(max(starts) + 1, dtype=bool)
        reach[[self.dead, self.goal, *starts]] = True
        for g, depth in enumerate(depths):
            front = np.nonzero(reach)[0]
            for _ in range(depth):
                front = self.next_state[g, front]
                reach[front] = True
        return np.nonzero(reach)[0]

    def _best_sets_batch(self, queries: Sequence[tuple[int, int, int]]) -> list[NodeSetChoice]:
        q = len(queries)
        rem_limit = np.array([r for _, _, r in queries], dtype=np.int64)
        # Only the states a walk of this batch can reach take part.
        avails, depths, steps, size = self._walk_setup(queries)
        value = np.full((q, size), _NEG, dtype=np.int64)
        value[:, steps.local[self.goal]] = 0
        # tables[g][c] = best total usable taking at most c nodes of group g, then onwards.
        tables: list[np.ndarray] = [np.empty(0)] * len(self.groups)
        for g in reversed(range(len(self.groups))):
            group, avail, depth = self.groups[g], avails[g], depths[g]
            table = np.empty((depth + 1, q, size), dtype=np.int64)
            table[0] = value
            state = np.arange(size)
            low = np.full(size, _INF, dtype=np.int64)
            for j in range(1, depth + 1):
                low = np.minimum(low, steps.remaining[g, state])
                state = steps.following[g, state]
                after = value[:, state]
                usable = (after > _NEG) & (low[None, :] >= rem_limit[:, None])
                usable &= (avail >= j)[:, None]
                np.maximum(table[j - 1], np.where(usable, after + j * group.usable, _NEG),
                           out=table[j])
                if not state.any():  # every walk has ended: deeper rows change nothing
                    table[j + 1:] = table[j]
                    break
            tables[g] = table  # (depth + 1, q, size)
            value = table[depth]
        def lookup(query: int) -> Callable[[int, int, int], int]:
            def at_most(g: int, cap: int, state: int) -> int:
                table = tables[g]
                return int(table[min(cap, table.shape[0] - 1), query, state])
            return at_most

        return [
            self._read_back(k, t, r, value[i], lookup(i), avails[:, i], steps)
            for i, (k, t, r) in enumerate(queries)
        ]

    def _walk_setup(self, queries: Sequence[tuple[int, int, int]]
                    ) -> tuple[np.ndarray, list[int], _Steps, int]:
        """Allowed nodes per group and query, depth per group, and the steps over the
        states the queries' walks can reach, renumbered densely (the dead state stays 0)."""
        most_stages = max(k for k, _, _ in queries)
        lat_limit = np.array([t for _, t, _ in queries], dtype=np.int64)
        avails = np.array([
            (group.latencies[None, :] <= lat_limit[:, None]).sum(axis=1)
            for group in self.groups
        ], dtype=np.int64).reshape(len(self.groups), len(queries))
        depths = [min(int(avail.max(initial=0)), most_stages) for avail in avails]
        states = self._reachable([self.start(k) for k, _, _ in queries], depths)
        local = np.zeros(max(states) + 1, dtype=np.int64)
        local[states] = np.arange(len(states))
        steps = _Steps(local[self.next_state[:, states]], self.step_remaining[:, states],
                       local)
        return avails, depths, steps, len(states)

    def _best_set_lean(self, query: tuple[int, int, int]) -> NodeSetChoice:
        """One query whose read-back tables would pass the budget: keep only the best
        value after each group, and work out "at most c more nodes of a group" for the
        few states the read-back asks about."""
        stage_count, _, rem_limit = query
        avails, depths, steps, size = self._walk_setup([query])
        value = np.full(size, _NEG, dtype=np.int64)
        value[steps.local[self.goal]] = 0
        after: list[np.ndarray] = [value] * len(self.groups)
        for g in reversed(range(len(self.groups))):
            after[g] = value
            group, depth = self.groups[g], depths[g]
            best = value.copy()
            state = np.arange(size)
            low = np.full(size, _INF, dtype=np.int64)
            for j in range(1, depth + 1):
                low = np.minimum(low, steps.remaining[g, state])
                state = steps.following[g, state]
                reached = value[state]
                usable = (reached > _NEG) & (low >= rem_limit)
                np.maximum(best, np.where(usable, reached + j * group.usable, _NEG), out=best)
                if not state.any():
                    break
            value = best

        def at_most(g: int, cap: int, state: int) -> int:
            usable = self.groups[g].usable
            best = int(after[g][state])
            low = int(_INF)
            for j in range(1, cap + 1):
                low = min(low, int(steps.remaining[g, state]))
                state = int(steps.following[g, state])
                if state == 0 or low < rem_limit:
                    break  # the walk ended or failed: more nodes cannot help
                reached = int(after[g][state])
                if reached > _NEG:
                    best = max(best, reached + j * usable)
            return best

        return self._read_back(stage_count, query[1], rem_limit, value, at_most,
                               avails[:, 0], steps)

    def _read_back(self, stage_count: int, lat_limit: int, rem_limit: int,
                   first_values: np.ndarray, at_most: Callable[[int, int, int], int],
                   avail: np.ndarray, steps: _Steps) -> NodeSetChoice:
        """The node ids of the best set, position by position: the smallest id that still
        completes a set of the best total. ``at_most(g, c, state)`` is the best total from
        ``state`` taking at most ``c`` more nodes of group ``g``, then later groups."""
        state = int(steps.local[self.start(stage_count)])
        target = int(first_values[state])
        if target <= _NEG:
            raise AssertionError("read back asked for a shape with no fitting set")
        allowed = [group.allowed(lat_limit) for group in self.groups]
        group_index, used = 0, 0
        chosen: list[NodeBudget] = []
        for _ in range(stage_count):
            best_rank, best_pick = None, None
            for g in range(group_index, len(self.groups)):
                taken = used if g == group_index else 0
                if taken >= avail[g]:
                    continue
                following = int(steps.following[g, state])
                if following == self.dead or steps.remaining[g, state] < rem_limit:
                    continue
                group = self.groups[g]
                if at_most(g, int(avail[g]) - taken - 1, following) + group.usable != target:
                    continue
                node = group.nodes[allowed[g][taken]]
                rank = self._rank[node.node_id]
                if best_rank is None or rank < best_rank:
                    best_rank, best_pick = rank, (g, taken, following, node)
            if best_pick is None:
                raise AssertionError("read back lost the optimal path")
            g, taken, state, node = best_pick
            target -= self.groups[g].usable
            group_index, used = g, taken + 1
            chosen.append(node)
        return self.choice(chosen)

    def choice(self, nodes: Sequence[NodeBudget]) -> NodeSetChoice:
        """Describe a fitting node set (any order) at this context."""
        ordered = tuple(stage_order(nodes))
        walk = walk_stages([n.usable_bytes for n in ordered], self.costs)
        if not walk.fits:
            raise AssertionError("chosen node set does not fit")
        return NodeSetChoice(
            context_length=self.context_length,
            stage_count=len(ordered),
            nodes=ordered,
            spans=walk.spans,
            remaining_bytes=walk.remaining_bytes,
            estimated_decode_network_ms_per_token=estimate_ms(ordered),
        )

    def best_for_counts(self, counts: Iterable[int]) -> dict[int, NodeSetChoice]:
        """The SPEC section 5 best set for each stage count that fits (others omitted)."""
        counts = [k for k in counts if 1 <= k <= self.max_stages]
        latency = self.min_max_latency()
        counts = [k for k in counts if k in latency]
        if not counts:
            return {}
        thresholds = sorted({latency[k] for k in counts})
        remaining = self.max_min_remaining(thresholds, max(counts))
        row = {t: i for i, t in enumerate(thresholds)}
        queries = [(k, latency[k], int(remaining[row[latency[k]], k])) for k in counts]
        return dict(zip(counts, self.best_sets(queries), strict=True))
