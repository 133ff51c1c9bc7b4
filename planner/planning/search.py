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

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from planner.planning.inputs import NodeBudget, PlanningInput
from planner.planning.rules import layer_bytes, stage_order, walk_stages
from planner.units import latency_microseconds, ms_from_microseconds

_INF = np.int64(2**62)
_NEG = np.int64(-(2**62))
# Queries of the last two programs run together in batches; the table budget bounds the
# memory kept for reading the node ids back.
_BATCH = 32
_TABLE_BYTES = 96 * 2**20


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
    sorted_latencies: np.ndarray
    """Ascending: taking j nodes costs at least ``sorted_latencies[j - 1]``."""

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
        groups = []
        for usable in sorted(by_usable, reverse=True):
            members = tuple(sorted(by_usable[usable], key=lambda n: n.node_id))
            # Microseconds: whole numbers even for fractional latencies.
            lat = np.array([n.latency_us or 0 for n in members], dtype=np.int64)
            groups.append(_Group(usable, members, lat, np.sort(lat)))
        self.groups: tuple[_Group, ...] = tuple(groups)

        width = layer_count + 1
        self.width = width
        self.state_count = (self.max_stages + 1) * width
        # (no stages left, layer 0) can never finish the model, so it doubles as the
        # absorbing state for walks that failed; states of fewer stages left come first,
        # so every prefix of the state space is closed under taking a stage.
        self.dead = 0
        self.goal = layer_count  # index of (stages left 0, next layer == layer_count)
        self._build_steps()
        rank = {nid: i for i, nid in enumerate(sorted(n.node_id for n in request.nodes))}
        self._rank = rank

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
    def min_max_latency(self) -> dict[int, int]:
        """For each stage count that some node set fits, the smallest max latency, in
        microseconds."""
        size = self.state_count
        value = np.full(size, _INF, dtype=np.int64)
        value[self.goal] = 0
        for g in reversed(range(len(self.groups))):
            group = self.groups[g]
            state = np.arange(size)
            best = value.copy()
            for j in range(1, min(len(group.nodes), self.max_stages) + 1):
                state = self.next_state[g, state]
                reached = value[state]
                cand = np.where(reached >= _INF, _INF,
                                np.maximum(reached, group.sorted_latencies[j - 1]))
                best = np.minimum(best, cand)
                if (state == self.dead).all():
                    break
            value = best
        return {k: int(value[self.start(k)]) for k in range(1, self.max_stages + 1)
                if value[self.start(k)] < _INF}

    # -- program 2: largest smallest-remaining under latency thresholds --------------------
    def max_min_remaining(self, thresholds: Sequence[int]) -> np.ndarray:
        """Rows per threshold, columns per stage count (index k): the best smallest
        remaining bytes, or ``_NEG`` where no set fits."""
        size = self.state_count
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
            for j in range(1, min(int(avail.max(initial=0)), self.max_stages) + 1):
                low = np.minimum(low, self.step_remaining[g, state])
                state = self.next_state[g, state]
                cand = np.minimum(value[:, state], low[None, :])
                cand[avail < j] = _NEG
                best = np.maximum(best, cand)
                if (state == self.dead).all():
                    break
            value = best
        return value[:, [self.start(k) for k in range(self.max_stages + 1)]]

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
        most_stages = max(k for k, _, _ in queries)
        lat_limit = np.array([t for _, t, _ in queries], dtype=np.int64)
        rem_limit = np.array([r for _, _, r in queries], dtype=np.int64)
        avails = np.array([
            (group.latencies[None, :] <= lat_limit[:, None]).sum(axis=1)
            for group in self.groups
        ], dtype=np.int64).reshape(len(self.groups), q)
        depths = [min(int(avail.max(initial=0)), most_stages) for avail in avails]
        # Only the states a walk of this batch can reach take part, renumbered densely
        # (the dead state stays 0).
        states = self._reachable([self.start(k) for k, _, _ in queries], depths)
        local = np.zeros(max(states) + 1, dtype=np.int64)
        local[states] = np.arange(len(states))
        steps = _Steps(local[self.next_state[:, states]], self.step_remaining[:, states],
                       local)
        size = len(states)
        value = np.full((q, size), _NEG, dtype=np.int64)
        value[:, local[self.goal]] = 0
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
        return [
            self._read_back(i, k, t, r, value[i], tables, avails[:, i], steps)
            for i, (k, t, r) in enumerate(queries)
        ]

    def _read_back(self, query: int, stage_count: int, lat_limit: int, rem_limit: int,
                   first_values: np.ndarray, tables: list[np.ndarray],
                   avail: np.ndarray, steps: _Steps) -> NodeSetChoice:
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
                table = tables[g]
                cap = min(int(avail[g]) - taken - 1, table.shape[0] - 1)
                if int(table[cap, query, following]) + group.usable != target:
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
        remaining = self.max_min_remaining(thresholds)
        row = {t: i for i, t in enumerate(thresholds)}
        queries = [(k, latency[k], int(remaining[row[latency[k]], k])) for k in counts]
        return dict(zip(counts, self.best_sets(queries), strict=True))
