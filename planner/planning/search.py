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

Every stage count sharing both thresholds is one run of program 3 (its walk starts at its
own state). While it runs, each group records at each state how many of its nodes the
lexicographically smallest best set takes, so the node ids are read back by following
those records (see ``ContextSearch._run`` for why the record is exact).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from planner.errors import PlanError
from planner.planning.inputs import NodeBudget, PlanningInput
from planner.planning.rules import at_context, layer_bytes, stage_order, walk_stages
from planner.units import format_bytes, latency_microseconds, ms_from_microseconds

_INF = np.int64(2**62)
_NEG = np.int64(-(2**62))
# The read-back tables of program 3 are built for a few threshold pairs at a time, within
# this budget.
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

    # -- programs 2 and 3 share one layout -----------------------------------------------
    def _avail(self, lat_limits: np.ndarray) -> np.ndarray:
        """Allowed nodes of each group (rows) under each latency threshold (columns)."""
        if not self.groups:
            return np.zeros((0, len(lat_limits)), dtype=np.int64)
        return np.array([(group.latencies[None, :] <= lat_limits[:, None]).sum(axis=1)
                         for group in self.groups], dtype=np.int64)

    def _run(self, lat_limits: np.ndarray, rem_limits: np.ndarray | None, most: int,
             ranks: list[list[np.ndarray]] | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
        """Program 2 (``rem_limits`` None: the best smallest remaining) or program 3 (the
        best total usable with every stage keeping ``>= rem_limits``), one row per
        threshold row, over the states of up to ``most`` stages left.

        Groups are taken last to first. Within group ``g`` with ``a`` allowed nodes:

        * a state with ``s <= a`` stages left cannot run out of the group's nodes (each
          node takes one stage), so its best is the better of stopping (the value after
          the group) and taking one more node then continuing in the group, from the state
          of ``s - 1`` stages left: one vector step per number of stages left;
        * a state with ``s > a`` takes ``j <= a`` nodes then moves on: the ``j`` loop.

        Program 3 also records, per group and state, how to read the lexicographically
        smallest best set back (``_read_back``): for ``s > a`` the number of nodes taken;
        for ``s <= a`` 0 (stop), 1 (take another) or 2 (both are best: the smaller of the
        group's next node and the first node of the best completion after the group
        decides). ``first`` rows hold the rank of that first node, which the ``j`` loop
        compares as follows: of two best options ``j < j'`` the lists agree on the group's
        first ``j`` nodes and differ at the next position, the first node of ``j``'s
        completion after the group against the group's node ``j + 1`` of ``j'``.
        """
        width, rows = self.width, len(lat_limits)
        size = (most + 1) * width
        third = rem_limits is not None
        avail = self._avail(lat_limits)
        later = np.cumsum(avail[::-1], axis=0)[::-1] - avail  # allowed nodes after g
        value = np.full((rows, size), _NEG, dtype=np.int64)
        value[:, self.goal] = 0 if third else _INF
        first = np.full((rows, size), _INF, dtype=np.int64)
        decisions: list[np.ndarray] = [np.empty(0, dtype=np.int16)] * len(self.groups)
        limit = rem_limits[:, None] if third else None
        for g in reversed(range(len(self.groups))):
            a = avail[g]
            if not a.any():
                decisions[g] = np.zeros((rows, 0), dtype=np.int16)
                continue
            usable = self.groups[g].usable
            following, remaining = self.next_state[g], self.step_remaining[g]
            # Past ``a + later`` stages left no walk can finish.
            high = np.minimum(most, a + later[g])
            after, after_first = value, first
            value = after.copy()
            if third:
                first = after_first.copy()
                choice = np.zeros((rows, size), dtype=np.int16)
                assert ranks is not None
                head = np.array([r[0] if len(r) else _INF for r in ranks[g]], dtype=np.int64)
            for row in np.nonzero((a > 0) & (a < high))[0]:
                self._capped(row, int(a[row]), int(high[row]), usable, following, remaining,
                             after, after_first, value, first,
                             choice if third else None,
                             ranks[g][row] if third and ranks is not None else None,
                             int(rem_limits[row]) if third and rem_limits is not None else 0)
            top = int(np.minimum(a, high).max(initial=0))
            for s in range(1, top + 1):
                rowsel = (s <= np.minimum(a, high))[:, None]
                idx = slice(s * width, (s + 1) * width)
                nxt = following[idx]
                rem = remaining[idx]
                reached = value[:, nxt]
                ok = (nxt != self.dead)[None, :] & (reached > _NEG)
                if third:
                    ok &= rem[None, :] >= limit
                    take = np.where(ok, reached + usable, _NEG)
                else:
                    take = np.where(ok, np.minimum(reached, rem[None, :]), _NEG)
                stop = after[:, idx]
                value[:, idx] = np.where(rowsel, np.maximum(stop, take), value[:, idx])
                if third:
                    more = ok & (take > stop)
                    tie = ok & (take == stop)
                    lead = more | (tie & (head[:, None] < after_first[:, idx]))
                    led = np.where(lead, head[:, None], after_first[:, idx])
                    first[:, idx] = np.where(rowsel, led, first[:, idx])
                    choice[:, idx] = np.where(rowsel, more * 1 + tie * 2, choice[:, idx])
            if third:
                decisions[g] = choice
        return value, decisions

    def _capped(self, row: int, a: int, high: int, usable: int, following: np.ndarray,
                remaining: np.ndarray, after: np.ndarray, after_first: np.ndarray,
                value: np.ndarray, first: np.ndarray, choice: np.ndarray | None,
                ranks: np.ndarray | None, rem_limit: int) -> None:
        """The states of more than ``a`` stages left, for one row: take ``j <= a`` nodes of
        the group, then move on."""
        width = self.width
        source = np.arange((a + 1) * width, (high + 1) * width)
        state = source
        low = np.full(len(source), _INF, dtype=np.int64)
        best = after[row, source].copy()
        pick = np.zeros(len(source), dtype=np.int64)
        compare = after_first[row, source].copy()
        for j in range(1, a + 1):
            step = remaining[state]
            state = following[state]
            reached = after[row, state]
            ok = reached > _NEG
            low = np.minimum(low, step)
            if choice is None:
                cand = np.where(ok, np.minimum(reached, low), _NEG)
                np.maximum(best, cand, out=best)
            else:
                assert ranks is not None
                ok &= low >= rem_limit
                cand = np.where(ok, reached + j * usable, _NEG)
                better = (cand > best) | (ok & (cand == best) & (ranks[pick] < compare))
                best = np.where(better, cand, best)
                pick = np.where(better, j, pick)
                compare = np.where(better, after_first[row, state], compare)
            if not state.any():  # every walk has ended
                break
        value[row, source] = best
        if choice is not None:
            assert ranks is not None
            choice[row, source] = pick
            first[row, source] = np.where(pick > 0, ranks[0], after_first[row, source])

    # -- program 2: largest smallest-remaining under latency thresholds --------------------
    def max_min_remaining(self, thresholds: Sequence[int],
                          most_stages: int | None = None) -> np.ndarray:
        """Rows per threshold, columns per stage count (index k, up to ``most_stages``):
        the best smallest remaining bytes, or ``_NEG`` where no set fits."""
        most_stages = self.max_stages if most_stages is None else most_stages
        starts = [self.start(k) for k in range(most_stages + 1)]
        # A few rows at a time: each takes a few arrays of the state space.
        chunk = max(1, _TABLE_BYTES // (4 * 8 * len(starts) * self.width))
        parts = [self._run(np.asarray(thresholds[i:i + chunk], dtype=np.int64), None,
                           most_stages)[0][:, starts]
                 for i in range(0, len(thresholds), chunk)]
        return np.concatenate(parts) if parts else np.zeros((0, most_stages + 1), np.int64)

    # -- program 3 and read-back: the best set itself ----------------------------------------
    def best_sets(self, queries: Sequence[tuple[int, int, int]]) -> list[NodeSetChoice]:
        """Best node set for each ``(stage_count, latency threshold, remaining threshold)``.

        Every stage count sharing thresholds is one row of program 3: its walk just starts
        from its own state."""
        pairs = sorted({(t, r) for _, t, r in queries})
        row_of = {pair: i for i, pair in enumerate(pairs)}
        most = max(k for k, _, _ in queries)
        # Rows in chunks: the read-back tables take two bytes per group and state.
        per_row = (len(self.groups) * 2 + 4 * 8) * (most + 1) * self.width
        chunk = max(1, _TABLE_BYTES // per_row)
        found: dict[int, NodeSetChoice] = {}
        for begin in range(0, len(pairs), chunk):
            part = pairs[begin:begin + chunk]
            lat = np.array([t for t, _ in part], dtype=np.int64)
            rem = np.array([r for _, r in part], dtype=np.int64)
            allowed = [[group.allowed(int(t)) for t in lat] for group in self.groups]
            ranks = [[np.array([self._rank[group.nodes[i].node_id] for i in picks],
                               dtype=np.int64) for picks in per_group]
                     for group, per_group in zip(self.groups, allowed, strict=True)]
            value, decisions = self._run(lat, rem, most, ranks)
            for index, (k, t, r) in enumerate(queries):
                row = row_of[(t, r)] - begin
                if 0 <= row < len(part):
                    if value[row, self.start(k)] <= _NEG:
                        raise AssertionError("read back asked for a shape with no fitting set")
                    found[index] = self._read_back(k, row, decisions, allowed, ranks)
        return [found[i] for i in range(len(queries))]

    def _read_back(self, stage_count: int, row: int, decisions: list[np.ndarray],
                   allowed: list[list[list[int]]], ranks: list[list[np.ndarray]]
                   ) -> NodeSetChoice:
        """Follow the recorded decisions from ``stage_count`` stages at layer 0."""
        state = self.start(stage_count)
        chosen: list[NodeBudget] = []

        def lead(g: int, state: int) -> int:
            """Rank of the first node of the smallest best completion from group ``g``."""
            best = int(_INF)
            for h in range(g, len(self.groups)):
                a = len(allowed[h][row])
                if a == 0:
                    continue
                mark = int(decisions[h][row, state])
                if state // self.width > a:
                    if mark > 0:
                        return min(best, int(ranks[h][row][0]))
                elif mark == 1:
                    return min(best, int(ranks[h][row][0]))
                elif mark == 2:
                    best = min(best, int(ranks[h][row][0]))
            return best

        for g, group in enumerate(self.groups):
            picks = allowed[g][row]
            if not picks:
                continue
            table = decisions[g][row]
            if state // self.width > len(picks):
                taken = int(table[state])
            else:
                taken = 0
                while True:
                    mark = int(table[state])
                    if mark == 0 or (mark == 2 and ranks[g][row][taken] > lead(g + 1, state)):
                        break
                    state = int(self.next_state[g, state])
                    taken += 1
                chosen.extend(group.nodes[i] for i in picks[:taken])
                continue
            for _ in range(taken):
                state = int(self.next_state[g, state])
            chosen.extend(group.nodes[i] for i in picks[:taken])
        if state != self.goal or len(chosen) != stage_count:
            raise AssertionError("read back lost the optimal path")
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
