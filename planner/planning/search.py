"""Exact search for the best node set of every shape, without enumerating subsets.

The stage walk (docs/rules.md §4) from ``(stages left s, next layer n)`` takes
``min(most(n), (L - n) - (s - 1))`` layers, where ``most(n)`` is how many layers from
``n`` fit in the node's usable bytes. Nodes that take the same ``most(n)`` at every layer
form a *span class*: the walk cannot tell them apart, only their remaining bytes,
latencies and ids differ. Stage order is usable bytes descending, so the classes are runs
of consecutive usable sizes and a node set, in stage order, takes a few nodes from each
class in turn. Two facts make the search small:

* Within a class, a best set takes a *prefix* of the allowed nodes (those within the
  latency threshold) in stage order: the spans do not depend on which of the class's
  nodes takes them, and the prefix puts a node at least as large, with the smaller id
  among equals, at every position.
* Once ``n + s == L`` (the *tight line*) every later stage takes exactly one layer. The
  best completion from there takes the next ``s`` allowed nodes in stage order, for the
  same reason; a table of minima along diagonals gives its smallest remaining bytes in
  one look-up.

The ranking of node sets (docs/rules.md §5) is lexicographic and mixes a bottleneck
(max latency, min remaining) with a sum (total remaining), which one dynamic program
cannot optimise together. It is solved as three programs, each fixing the optimum of the
previous one as a threshold:

1. the smallest possible maximum latency ``T`` (nodes without a latency count as 0): a
   binary search, since ``k`` stages fit within ``T`` exactly when the ``k`` largest
   nodes of latency ``<= T`` fit;
2. with only nodes of latency ``<= T``, the largest possible smallest-remaining ``R``;
3. with those nodes and only stages that keep ``>= R`` remaining, the largest total
   usable bytes (total remaining is that minus the model's bytes), ties broken by the
   node ids (rule 4).

Programs 2 and 3 go over the classes twice: forward, from the start states of the stage
counts asked for, to find the states a walk can be in when it enters each class; then
backward over those states only, choosing how many of the class's nodes to take. The
choices of program 3 are kept, and the node ids are read back by following them.

Stage counts with different smallest maximum latencies are solved with different allowed
nodes. Programs 2 and 3 take several thresholds in one pass: each row of a pass belongs to
one threshold, and its states walk only that threshold's allowed nodes, laid end to end
with the others' in one set of tables.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner.errors import PlanError
from planner.planning.inputs import NodeBudget, PlanningInput
from planner.planning.nodesets import IdPool, NodeIds
from planner.planning.rules import at_context, layer_bytes, stage_order
from planner.units import format_bytes, latency_microseconds, ms_from_microseconds

# Every usable size is at most 2**50 bytes and a walk has at most 4,096 stages, so no
# value below reaches these (inputs.MAX_NODE_BYTES).
_INF = 2**62
_NEG = -(2**62)
SEARCH_BYTES = 2**30
"""The most memory one context's search may take; past it, ``SearchTooLarge``."""
SEARCH_STEPS = 60_000_000
"""The most walk steps (one state advanced by one stage) one context's search may take;
past it, ``SearchTooLarge``."""
# Rows solved in one pass (latency thresholds in program 2, remaining thresholds in
# program 3); each adds its own states.
_BATCH_ROWS = 64
# Slots of the tight line's tables (allowed nodes times layers) of the latency thresholds
# solved together. A small fleet has a threshold for nearly every stage count, and solving
# them in one pass pays the walk's per-step cost once instead of once per threshold; a
# large one is solved a threshold at a time, as if alone.
_BATCH_SLOTS = 2**18
# Bytes kept per state entering a class: key, value, first rank, choice, and the
# working arrays of its walk.
_STATE_BYTES = 64


@dataclass(frozen=True, slots=True, eq=False)
class NodeSetChoice:
    """The best node set found for one (context, stage count): its nodes' ids, kept as
    positions in ``pool`` (the search's allowed nodes, shared by all its sets), in stage
    order, and the layers each takes."""

    context_length: int
    stage_count: int
    pool: tuple[NodeBudget, ...]
    node_ids: NodeIds
    spans: tuple[int, ...]
    min_remaining_bytes: int
    total_remaining_bytes: int
    estimated_decode_network_ms_per_token: int | float | None

    @property
    def nodes(self) -> tuple[NodeBudget, ...]:
        """In stage order."""
        return tuple(map(self.pool.__getitem__, self.node_ids.positions.tolist()))

    @property
    def estimate_us_or_zero(self) -> int:
        """The estimate in whole microseconds (exact), unknown as 0."""
        return latency_microseconds(self.estimated_decode_network_ms_per_token or 0)


@dataclass(slots=True)
class SearchBudget:
    """Walk steps spent so far by the searches of one request (every context shares it)."""

    steps: int = 0


@dataclass(frozen=True, slots=True)
class _SpanClass:
    """Nodes that take the same span at every layer, in stage order."""

    nodes: tuple[NodeBudget, ...]
    usables: np.ndarray
    latencies: np.ndarray
    """Microseconds, unknown as 0: whole numbers even for fractional latencies."""
    ranks: np.ndarray
    """Position of each node id among all the request's ids (rule 4 compares these)."""
    most: np.ndarray
    """Layers from each start layer (index ``0..L``) that fit in any node of the class."""
    widest: int = 0
    """The most layers the class's nodes take from any start layer."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "widest", int(self.most.max()))


@dataclass(frozen=True, slots=True)
class _Allowed:
    """The nodes within one latency threshold, per class and all together."""

    threshold: int
    picks: tuple[np.ndarray, ...]
    """Per class, indices of its allowed nodes (a prefix-ordered subsequence)."""
    counts: np.ndarray
    """Per class, how many of its nodes are allowed."""
    usables: np.ndarray
    ranks: np.ndarray
    latencies: np.ndarray
    known: np.ndarray
    """Whether each allowed node has a latency (an unknown one is 0 in ``latencies``)."""
    nodes: tuple[NodeBudget, ...]
    ids: IdPool
    """Of ``nodes``."""


@dataclass(frozen=True, slots=True)
class _Tables:
    """The allowed nodes of one or more thresholds (*groups*), laid end to end in one
    index space, each group followed by one slot past its end, and what programs 2 and 3
    look up in them; a row of a program belongs to one group."""

    groups: tuple[_Allowed, ...]
    starts: np.ndarray
    ends: np.ndarray
    """Per group, where its allowed nodes start, and its slot past the end."""
    base: np.ndarray
    """``base[g, c]``: where class ``c``'s allowed nodes of group ``g`` start."""
    counts: np.ndarray
    """``counts[g, c]``: how many of class ``c``'s nodes group ``g`` allows."""
    left: np.ndarray
    """``left[g, c]``: the allowed nodes of group ``g`` in class ``c`` and after it (one
    column past the last class, of 0)."""
    usables: np.ndarray
    ranks: np.ndarray
    """Of every slot: ``_INF`` past a group's end."""
    total: np.ndarray
    """``total[starts[g] + j]``: the usable bytes of group ``g``'s first ``j`` nodes."""
    line: np.ndarray
    """``line[x, L - s]``: the smallest remaining bytes of the tight line's ``s`` stages
    taken by the slots ``x .. x + s - 1`` of one group (``_NEG`` when it has fewer)."""


@dataclass(frozen=True, slots=True)
class _Rows:
    """Per row of one pass of program 2 or 3, its group's columns of :class:`_Tables`, and
    its account of held states (:data:`SEARCH_BYTES` counts each threshold's program 2,
    and each batch of one threshold's program 3 rows, as if it were solved alone)."""

    group: np.ndarray
    base: np.ndarray
    counts: np.ndarray
    left: np.ndarray
    ends: np.ndarray
    starts: np.ndarray
    accounts: np.ndarray
    account_count: int

    @classmethod
    def of(cls, tables: _Tables, groups: Sequence[int], accounts: Sequence[int]) -> _Rows:
        group = np.asarray(groups, dtype=np.int64)
        account = np.asarray(accounts, dtype=np.int64)
        return cls(group, tables.base[group], tables.counts[group], tables.left[group],
                   tables.ends[group], tables.starts[group], account, int(account.max()) + 1)


@dataclass(slots=True)
class _Lanes:
    """The states entering one class, as sorted keys ``row * rows + state``."""

    keys: np.ndarray
    value: np.ndarray
    first: np.ndarray
    """Rank of the first node of the best completion (program 3), ``_INF`` for none."""


class ContextSearch:
    """Exact best node sets for every stage count at one context length (and lane count,
    where the memory rule charges by lanes)."""

    def __init__(self, request: PlanningInput, context_length: int,
                 budget: SearchBudget | None = None, lanes: int | None = None) -> None:
        request = at_context(request, context_length, lanes)
        self.request = request
        self.context_length = context_length
        self.layer_count = layer_count = request.layer_count
        self.max_stages = min(len(request.nodes), layer_count)
        costs = layer_bytes(request, context_length, lanes)
        self.costs = costs
        self.width = layer_count + 1
        self.budget = SearchBudget() if budget is None else budget
        self._min_max_latency: dict[int, int] | None = None
        rank = {nid: i for i, nid in enumerate(sorted(n.node_id for n in request.nodes))}
        self._rank = rank
        # A node smaller than every layer can take none, so no fitting set holds it (a
        # node with nothing usable can still take a layer of 0 bytes); a layer bigger than
        # every node fits nowhere. Past that check, every prefix sum of layer bytes is at
        # most 4,096 x 2**50, so the search is exact in 64-bit integers.
        smallest = min(costs)
        sizes = [n.usable_bytes for n in request.nodes]  # a property: read once per node
        usable = [n for n, size in zip(request.nodes, sizes, strict=True) if size >= smallest]
        if not usable or max(costs) > max(sizes):
            usable = []
        self.prefix = np.concatenate([[0], np.cumsum(np.asarray(costs, dtype=object))]) \
            .astype(np.int64) if usable else np.zeros(layer_count + 1, dtype=np.int64)
        self.need = np.asarray(costs, dtype=np.int64) if usable else None
        self.classes: tuple[_SpanClass, ...] = self._make_classes(usable)
        self._check_size()

    # -- span classes ----------------------------------------------------------------------
    def _most_rows(self, usables: np.ndarray) -> np.ndarray:
        """``most(n)`` for each usable size (rows) and start layer ``n`` (columns)."""
        starts = np.arange(self.width)
        ends = np.searchsorted(self.prefix, self.prefix[None, :] + usables[:, None],
                               side="right") - 1
        most: np.ndarray = np.minimum(ends, self.layer_count) - starts[None, :]
        return most

    def _make_classes(self, nodes: Sequence[NodeBudget]) -> tuple[_SpanClass, ...]:
        """Group ``nodes`` into span classes (stage order) and drop the nodes no best set of
        at most ``max_stages`` nodes can hold.

        Within a class, a node with ``max_stages`` nodes before it in stage order whose
        latencies are no higher is never needed: a best set holding it leaves one of those
        out, and swapping that one in keeps every span, keeps or raises each stage's
        remaining bytes and keeps or lowers the max latency (and, at equal usable bytes,
        gives a smaller node id), so the set was not the best (docs/rules.md §5). Identical
        nodes therefore cost no more than ``max_stages`` of them.
        """
        ordered = stage_order(nodes)
        usable = [n.usable_bytes for n in ordered]  # a property: read once per node
        sizes = sorted(set(usable), reverse=True)
        # ``most`` is monotone in the usable bytes, so a class is a run of sizes: a size
        # starts a new class where its row differs from the size before it.
        class_of: dict[int, int] = {}
        rows: list[np.ndarray] = []
        chunk = max(1, 2**22 // self.width)
        for begin in range(0, len(sizes), chunk):
            part = sizes[begin:begin + chunk]
            table = self._most_rows(np.asarray(part, dtype=np.int64))
            starts = np.ones(len(part), dtype=bool)
            starts[1:] = (table[1:] != table[:-1]).any(axis=1)
            if rows:
                starts[0] = not np.array_equal(table[0], rows[-1])
            first = len(rows) - 1
            rows.extend(table[i].copy() for i in np.nonzero(starts)[0].tolist())
            class_of.update(zip(part, (first + np.cumsum(starts)).tolist(), strict=True))
        members: list[list[NodeBudget]] = [[] for _ in rows]
        member_usables: list[list[int]] = [[] for _ in rows]
        seen: list[list[int]] = [[] for _ in rows]
        limit = self.max_stages
        for node, size in zip(ordered, usable, strict=True):
            c = class_of[size]
            latency = node.latency_us or 0
            if bisect_right(seen[c], latency) < limit:
                members[c].append(node)
                member_usables[c].append(size)
                insort(seen[c], latency)
        return tuple(
            _SpanClass(nodes=tuple(group),
                       usables=np.array(sizes_of_group, dtype=np.int64),
                       latencies=np.array([n.latency_us or 0 for n in group], dtype=np.int64),
                       ranks=np.array([self._rank[n.node_id] for n in group], dtype=np.int64),
                       most=row)
            for group, sizes_of_group, row in zip(members, member_usables, rows, strict=True))

    @property
    def node_count(self) -> int:
        return sum(len(c.nodes) for c in self.classes)

    def _refuse(self, what: str, **details: int) -> PlanError:
        return PlanError(
            "SearchTooLarge",
            f"at context {self.context_length:,}, {self.node_count:,} nodes in "
            f"{len(self.classes):,} span classes over {self.layer_count:,} layers {what}; "
            "give nodes of nearly equal VRAM one size (max_vram or headroom), or plan "
            "fewer nodes or layers",
            context_length=self.context_length, node_count=self.node_count,
            span_classes=len(self.classes), layer_count=self.layer_count, **details)

    def _check_size(self) -> None:
        """Refuse, before allocating, a search whose fixed tables pass :data:`SEARCH_BYTES`."""
        # The tight line's table, and the budgets of program 1's binary search.
        needed = 8 * ((self.node_count + 1) * self.width + 2 * self.max_stages ** 2)
        if needed > SEARCH_BYTES:
            raise self._refuse(f"need {format_bytes(needed)} of search tables (at most "
                               f"{format_bytes(SEARCH_BYTES)})", needed_bytes=needed)

    def _spend(self, steps: int, held_states: int = 0) -> None:
        """Count walk steps and states held against :data:`SEARCH_STEPS` and
        :data:`SEARCH_BYTES`."""
        self.budget.steps += steps
        if self.budget.steps > SEARCH_STEPS:
            raise self._refuse(f"need more than {SEARCH_STEPS:,} walk steps over the "
                               "context lengths searched", steps=self.budget.steps)
        held = held_states * _STATE_BYTES
        if held > SEARCH_BYTES:
            raise self._refuse(f"need more than {format_bytes(SEARCH_BYTES)} for the "
                               "states a walk can be in", needed_bytes=held)

    def start(self, stage_count: int) -> int:
        return stage_count * self.width

    # -- program 1: smallest possible maximum latency, every stage count ------------------
    def _fits_lanes(self, budgets: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Whether lane ``i``'s first ``counts[i]`` budgets (row ``i``, stage order) hold
        the model (docs/rules.md §4); a budget of -1 (a missing node) takes no layer."""
        layers = self.layer_count
        position = np.zeros(len(counts), dtype=np.int64)
        alive = np.ones(len(counts), dtype=bool)
        for index in range(int(counts.max(initial=0))):
            active = index < counts
            end = np.searchsorted(self.prefix, self.prefix[position] + budgets[:, index],
                                  side="right") - 1
            end = np.minimum(end, layers - (counts - 1 - index))
            alive &= ~active | (end > position)
            position = np.where(active & alive, end, position)
        finished: np.ndarray = alive & (position == layers)
        return finished

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
        binary search over the latencies, all stage counts at once, finds the smallest.
        """
        if not self.classes:
            return {}
        most = self.max_stages
        usable = np.concatenate([c.usables for c in self.classes])
        latency = np.concatenate([c.latencies for c in self.classes])
        thresholds = np.unique(latency)

        def tops(indices: np.ndarray) -> np.ndarray:
            """Per lane, the usable bytes of the ``most`` largest nodes within its
            threshold, padded with -1: a missing node, which takes no layer (a node with
            nothing usable still takes a layer of 0 bytes)."""
            wanted, lane_row = np.unique(indices, return_inverse=True)
            rows = np.full((len(wanted), most), -1, dtype=np.int64)
            for r, index in enumerate(wanted):
                top = usable[latency <= thresholds[index]][:most]
                rows[r, :len(top)] = top
            return rows[lane_row]

        counts = np.arange(1, most + 1)
        high = np.full(most, len(thresholds) - 1)
        fitting = self._fits_lanes(tops(high), counts)
        counts, high = counts[fitting], high[fitting]
        low = np.zeros(len(counts), dtype=np.int64)
        while (open_ := low < high).any():
            middle = (low + high) // 2
            lanes = np.nonzero(open_)[0]
            ok = self._fits_lanes(tops(middle[lanes]), counts[lanes])
            high[lanes] = np.where(ok, middle[lanes], high[lanes])
            low[lanes] = np.where(ok, low[lanes], middle[lanes] + 1)
        return {int(k): int(thresholds[t]) for k, t in zip(counts, low, strict=True)}

    # -- programs 2 and 3 ----------------------------------------------------------------
    def _allowed(self, threshold: int) -> _Allowed:
        """The nodes within ``threshold``."""
        picks = tuple(np.nonzero(c.latencies <= threshold)[0] for c in self.classes)
        pairs = tuple(zip(self.classes, picks, strict=True))
        nodes = tuple(c.nodes[i] for c, p in pairs for i in p.tolist())
        return _Allowed(
            threshold=threshold, picks=picks,
            counts=np.array([len(p) for p in picks], dtype=np.int64),
            usables=np.concatenate([c.usables[p] for c, p in pairs]),
            ranks=np.concatenate([c.ranks[p] for c, p in pairs]),
            latencies=np.concatenate([c.latencies[p] for c, p in pairs]),
            known=np.array([n.latency_us is not None for n in nodes], dtype=bool),
            nodes=nodes, ids=IdPool(tuple(n.node_id for n in nodes)))

    def _threshold_batches(self, thresholds: Iterable[int]) -> Iterator[list[_Allowed]]:
        """The allowed nodes of each of ``thresholds``, as many thresholds at a time as
        one pass of programs 2 and 3 takes (:data:`_BATCH_ROWS`, :data:`_BATCH_SLOTS`)."""
        batch: list[_Allowed] = []
        slots = 0
        for threshold in thresholds:
            allowed = self._allowed(threshold)
            size = (len(allowed.usables) + 1) * self.width
            if batch and (len(batch) == _BATCH_ROWS or slots + size > _BATCH_SLOTS):
                yield batch
                batch, slots = [], 0
            batch.append(allowed)
            slots += size
        if batch:
            yield batch

    def _tables(self, groups: Sequence[_Allowed]) -> _Tables:
        """``groups`` laid end to end, and the tight line's table over each."""
        sizes = np.array([len(a.usables) for a in groups], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes + 1)[:-1]]).astype(np.int64)
        ends = starts + sizes
        counts = np.array([a.counts for a in groups], dtype=np.int64).reshape(
            len(groups), len(self.classes))
        before = np.cumsum(counts, axis=1) - counts
        left = np.concatenate([np.cumsum(counts[:, ::-1], axis=1)[:, ::-1],
                               np.zeros((len(groups), 1), dtype=np.int64)], axis=1)
        usables = np.concatenate([p for a in groups for p in (a.usables, [0])], dtype=np.int64)
        ranks = np.concatenate([p for a in groups for p in (a.ranks, [_INF])], dtype=np.int64)
        total = np.concatenate([p for a in groups for p in ([0], np.cumsum(a.usables))],
                               dtype=np.int64)
        layers = self.layer_count
        assert self.need is not None
        # line[y, q] = min(usables[y] - need[q], line[y + 1, q + 1]), ending at q == L and
        # at each group's slot past its end.
        line = np.empty((len(usables), layers + 1), dtype=np.int64)
        line[:, layers] = _INF
        line[ends, :layers] = _NEG
        inner = ends[:-1]
        for q in range(layers - 1, -1, -1):
            np.minimum(usables[:-1] - self.need[q], line[1:, q + 1], out=line[:-1, q])
            if len(inner):
                line[inner, q] = _NEG
        return _Tables(groups=tuple(groups), starts=starts, ends=ends,
                       base=starts[:, None] + before, counts=counts, left=left,
                       usables=usables, ranks=ranks, total=total, line=line)

    def _line(self, tables: _Tables, rows: _Rows, x: np.ndarray, row: np.ndarray,
              s: np.ndarray, limit: np.ndarray | None) -> np.ndarray:
        """Best completion along the tight line from slot ``x`` (of ``row``'s group) with
        ``s`` stages left: its smallest remaining bytes (program 2) or, when every stage
        keeps ``>= limit``, its total usable bytes (program 3); ``_NEG`` when it does not
        fit."""
        low = tables.line[x, self.layer_count - s]
        if limit is None:
            return np.where(low >= 0, low, _NEG)
        end = np.minimum(x + s, rows.ends[row])
        return np.where(low >= limit, tables.total[end] - tables.total[x], _NEG)

    def _decode(self, keys: np.ndarray, stride: int) -> tuple[np.ndarray, np.ndarray,
                                                               np.ndarray]:
        """Row, stages left and next layer of each key."""
        row, state = np.divmod(keys, stride)
        s, n = np.divmod(state, self.width)
        return row, s, n

    def _viable(self, c: int, left: np.ndarray, s: np.ndarray, n: np.ndarray) -> np.ndarray:
        """States off the tight line, with stages left, that could still finish from class
        ``c`` with ``left`` allowed nodes not yet used in it and after it: enough of them
        for the stages left, and enough of the widest span left for the layers left."""
        layers = self.layer_count
        open_states: np.ndarray = ((s >= 1) & (n + s < layers) & (s <= left)
                                   & (layers - n <= s * self.classes[c].widest))
        return open_states

    def _step(self, c: int, s: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Span and bytes of the stage a node of class ``c`` takes from each state."""
        span = np.minimum(self.classes[c].most[n], (self.layer_count - n) - (s - 1))
        return span, self.prefix[n + span] - self.prefix[n]

    def _reach(self, tables: _Tables, rows: _Rows, order: Sequence[int], keys: np.ndarray,
               stride: int, limits: np.ndarray | None) -> list[np.ndarray]:
        """For each class of ``order``, the sorted keys of the states off the tight line a
        walk from ``keys`` can enter it in (program 3: keeping ``>= limits`` of its row).
        A class a row's group allows none of is passed through: its states are the next
        class's and more, and are not held against the row's account."""
        entries: list[np.ndarray] = []
        held = np.zeros(rows.account_count, dtype=np.int64)
        row, s, n = self._decode(keys, stride)
        keys = np.unique(keys[self._viable(order[0], rows.left[row, order[0]], s, n)])
        for index, c in enumerate(order):
            entries.append(keys)
            count, base, left = rows.counts[:, c], rows.base[:, c], rows.left[:, c]
            row, s, n = self._decode(keys, stride)
            present = count[row]
            held += np.bincount(rows.accounts[row[present > 0]], minlength=len(held))
            self._spend(0, int(held.max()))
            if index + 1 == len(order):
                break
            reached = [keys]
            fewest, most = (int(present.min()), int(present.max())) if len(keys) else (0, 0)
            for i in range(most):
                if i >= fewest:  # rows whose group allows only ``i`` of the class's nodes
                    have = count[row] > i
                    row, s, n = row[have], s[have], n[have]
                    if not len(s):
                        break
                usable = tables.usables[base[row] + i]
                span, used = self._step(c, s, n)
                ok = span > 0
                if limits is not None:
                    ok &= usable - used >= limits[row]
                s, n = s - 1, n + span
                ok &= (s >= 1) & (n + s < self.layer_count)
                # Most steps keep every lane: filter only when one drops out.
                if not ok.all():
                    row, s, n = row[ok], s[ok], n[ok]
                reached.append(row * stride + s * self.width + n)
                go = self._viable(c, left[row] - (i + 1), s, n)
                if not go.all():
                    row, s, n = row[go], s[go], n[go]
                self._spend(len(s))
                if not len(s):
                    break
            keys = np.unique(np.concatenate(reached))
            row, s, n = self._decode(keys, stride)
            following = order[index + 1]
            keys = keys[self._viable(following, rows.left[row, following], s, n)]
        return entries

    @staticmethod
    def _look_up(lanes: _Lanes | None, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Value and first rank of each key among ``lanes`` (``_NEG``, ``_INF`` if absent)."""
        if lanes is None or not len(lanes.keys):
            return (np.full(len(keys), _NEG, dtype=np.int64),
                    np.full(len(keys), _INF, dtype=np.int64))
        at = np.minimum(np.searchsorted(lanes.keys, keys), len(lanes.keys) - 1)
        found = lanes.keys[at] == keys
        return (np.where(found, lanes.value[at], _NEG),
                np.where(found, lanes.first[at], _INF))

    def _solve(self, tables: _Tables, rows: _Rows, starts: Sequence[Sequence[int]],
               limits: Sequence[int] | None) -> _Solved:
        """Program 2 (``limits`` None) or program 3 (each row keeping ``>= limits[row]``
        at every stage), from ``(k stages, layer 0)`` for each ``k`` of each row's
        ``starts``, each row with the allowed nodes of its group.

        Classes are taken last to first. From a state entering class ``c``, the options
        are to take ``j = 0, 1, ...`` of its allowed nodes (a prefix), each walked one stage
        at a time, then go on to the next class; a walk that reaches the tight line goes
        on along it (``_line``), which is best among the options that take more. Program 3
        breaks equal totals by the node ids (rule 4): of two options ``j < j'`` the lists
        agree on the class's first ``j`` nodes and differ at the next position, where
        ``j'`` has the class's node ``j`` and ``j`` the first node of its completion, which
        is kept as ``first`` with each state's best.
        """
        third = limits is not None
        layers, width = self.layer_count, self.width
        stride = (max(max(ks) for ks in starts) + 1) * width
        order = [c for c in range(len(self.classes)) if rows.counts[:, c].any()]
        start_keys = np.array([r * stride + k * width for r, ks in enumerate(starts)
                               for k in ks], dtype=np.int64)
        row_limits = np.asarray(limits, dtype=np.int64) if third else None
        entries = (self._reach(tables, rows, order, start_keys, stride, row_limits)
                   if order else [])
        decisions: list[np.ndarray] = [np.empty(0, np.int32)] * len(order)
        after: _Lanes | None = None
        for index in reversed(range(len(order))):
            c = order[index]
            keys = entries[index]
            row, s, n = self._decode(keys, stride)
            best, first = self._look_up(after, keys)
            compare = first.copy()
            pick = np.zeros(len(keys), dtype=np.int32)
            lane = np.arange(len(keys))
            acc = np.full(len(keys), 0 if third else _INF, dtype=np.int64)
            limit = row_limits[row] if row_limits is not None else None
            # Per entering state: the slot of its group's first node in the class, and how
            # many of the class's nodes its group allows.
            home, count = rows.base[row, c], rows.counts[row, c]
            left = rows.left[:, c]
            fewest, most = (int(count.min()), int(count.max())) if len(keys) else (0, 0)
            for i in range(most):
                if i >= fewest:  # rows whose group allows only ``i`` of the class's nodes
                    have = count[lane] > i
                    lane, row, s, n, acc = lane[have], row[have], s[have], n[have], acc[have]
                    if limit is not None:
                        limit = limit[have]
                    if not len(lane):
                        break
                slot = home[lane] + i
                usable = tables.usables[slot]
                span, used = self._step(c, s, n)
                ok = span > 0
                if limit is not None:
                    ok &= usable - used >= limit
                    acc = acc + usable
                else:
                    acc = np.minimum(acc, usable - used)
                if not ok.all():
                    lane, row, s, n, acc, span, slot = (lane[ok], row[ok], s[ok], n[ok],
                                                        acc[ok], span[ok], slot[ok])
                    if limit is not None:
                        limit = limit[ok]
                s, n = s - 1, n + span
                tight = n + s == layers
                x = slot + 1
                # Each lane's best completion: along the tight line once on it, else the
                # next class's best (looked up only for the lanes that need it).
                if not tight.any():
                    loose = np.ones(len(lane), dtype=bool)
                    value, lead = self._look_up(after, row * stride + s * width + n)
                else:
                    value = np.empty(len(lane), dtype=np.int64)
                    lead = np.empty(len(lane), dtype=np.int64)
                    value[tight] = self._line(tables, rows, x[tight], row[tight], s[tight],
                                              limit[tight] if limit is not None else None)
                    lead[tight] = np.where(s[tight] > 0, tables.ranks[x[tight]], _INF)
                    loose = ~tight
                    if loose.any():
                        value[loose], lead[loose] = self._look_up(
                            after, row[loose] * stride + s[loose] * width + n[loose])
                done = value > _NEG
                if third:
                    value = np.where(done, acc + value, _NEG)
                    held = best[lane]
                    better = (value > held) | (
                        done & (value == held)
                        & (tables.ranks[home[lane] + np.abs(pick[lane])] < compare[lane]))
                else:
                    value = np.where(done, np.minimum(acc, value), _NEG)
                    better = value > best[lane]
                chosen = lane[better]
                best[chosen] = value[better]
                if third:
                    pick[chosen] = np.where(tight[better], -(i + 1), i + 1)
                    compare[chosen] = lead[better]
                go = loose & self._viable(c, left[row] - (i + 1), s, n)
                if not go.all():
                    lane, row, s, n, acc = lane[go], row[go], s[go], n[go], acc[go]
                    if limit is not None:
                        limit = limit[go]
                self._spend(len(lane))
                if not len(lane):
                    break
            if third:
                first = np.where(pick != 0, tables.ranks[home], first)
                decisions[index] = pick
            after = _Lanes(keys, best, first)
        pairs = [(r, k) for r, ks in enumerate(starts) for k in ks]
        found = np.full(len(pairs), _NEG, dtype=np.int64)
        if order:
            start_rows = np.array([r for r, _ in pairs], dtype=np.int64)
            counts = np.array([k for _, k in pairs], dtype=np.int64)
            tight = counts == layers  # on the tight line from the start
            if tight.any():
                on = start_rows[tight]
                found[tight] = self._line(tables, rows, rows.starts[on], on, counts[tight],
                                          None if row_limits is None else row_limits[on])
            if not tight.all():
                found[~tight] = self._look_up(
                    after, start_rows[~tight] * stride + counts[~tight] * width)[0]
        return _Solved(tables, rows, order, entries, decisions, stride,
                       dict(zip(pairs, found.tolist(), strict=True)))

    # -- the best set itself --------------------------------------------------------------
    def _read_back(self, solved: _Solved, row: int, stage_count: int) -> NodeSetChoice:
        """Follow program 3's choices from ``stage_count`` stages at layer 0."""
        tables, layers = solved.tables, self.layer_count
        bases = solved.rows.base[row]
        start = int(solved.rows.starts[row])
        allowed = tables.groups[int(solved.rows.group[row])]
        s, n = stage_count, 0
        taken: list[range] = []  # slots, in stage order
        spans: list[int] = []
        for index, c in enumerate(solved.order):
            if s == 0:
                break
            base = int(bases[c])
            if n + s != layers:
                keys = solved.entries[index]
                key = row * solved.stride + s * self.width + n
                at = int(np.searchsorted(keys, key))
                if at == len(keys) or keys[at] != key:
                    raise AssertionError("read back left the states the search kept")
                pick = int(solved.decisions[index][at])
                most = self.classes[c].most
                for _ in range(abs(pick)):
                    span = min(int(most[n]), (layers - n) - (s - 1))
                    spans.append(span)
                    n, s = n + span, s - 1
                taken.append(range(base, base + abs(pick)))
                if pick >= 0:
                    continue
                base -= pick
            # On the tight line: the next ``s`` allowed nodes, one layer each.
            taken.append(range(base, base + s))
            spans.extend([1] * s)
            s, n = 0, layers
        slots = (np.concatenate([np.arange(r.start, r.stop, dtype=np.int64) for r in taken])
                 if taken else np.zeros(0, dtype=np.int64))
        if s != 0 or n != layers or len(slots) != stage_count:
            raise AssertionError("read back lost the optimal path")
        ends = np.cumsum(spans)
        remaining = tables.usables[slots] - (self.prefix[ends] - self.prefix[ends - spans])
        if (remaining < 0).any():
            raise AssertionError("read back chose a stage that does not fit")
        picked = (slots - start).astype(np.int32)
        latency = allowed.latencies[picked]
        estimate = (ms_from_microseconds(stage_count * int(latency.max()))
                    if allowed.known[picked].any() else None)
        return NodeSetChoice(
            context_length=self.context_length, stage_count=stage_count,
            pool=allowed.nodes, node_ids=NodeIds(allowed.ids, picked), spans=tuple(spans),
            min_remaining_bytes=int(remaining.min()),
            # At most 4,096 stages of at most 2**50 bytes: exact in 64 bits.
            total_remaining_bytes=int(remaining.sum()),
            estimated_decode_network_ms_per_token=estimate)

    def best_for_counts(self, counts: Iterable[int]) -> dict[int, NodeSetChoice]:
        """The docs/rules.md §5 best set for each stage count that fits (others omitted)."""
        latency = self.min_max_latency()
        counts = sorted({k for k in counts if k in latency})
        by_threshold: dict[int, list[int]] = {}
        for k in counts:
            by_threshold.setdefault(latency[k], []).append(k)
        found: dict[int, NodeSetChoice] = {}
        for groups in self._threshold_batches(sorted(by_threshold)):
            found.update(self._best_of_groups(groups, by_threshold))
        return {k: found[k] for k in counts}

    def _best_of_groups(self, groups: Sequence[_Allowed],
                        by_threshold: Mapping[int, Sequence[int]]) -> dict[int, NodeSetChoice]:
        """Programs 2 and 3 for the stage counts of each group's threshold, the groups'
        rows solved together."""
        tables = self._tables(groups)
        every = range(len(groups))
        lowest = self._solve(tables, _Rows.of(tables, every, every),
                             [by_threshold[a.threshold] for a in groups], None).values
        # Program 3's rows: per group, one per remaining threshold, in batches of at most
        # _BATCH_ROWS rows (each batch one account of held states).
        batches: list[list[tuple[int, int, list[int]]]] = []
        for g, allowed in enumerate(groups):
            by_limit: dict[int, list[int]] = {}
            for k in by_threshold[allowed.threshold]:
                if lowest[(g, k)] <= _NEG:
                    raise AssertionError("no set fits a stage count program 1 found")
                by_limit.setdefault(lowest[(g, k)], []).append(k)
            limits = sorted(by_limit.items())
            batches.extend([(g, limit, ks) for limit, ks in limits[begin:begin + _BATCH_ROWS]]
                           for begin in range(0, len(limits), _BATCH_ROWS))
        found: dict[int, NodeSetChoice] = {}
        passes: list[list[list[tuple[int, int, list[int]]]]] = []
        for batch in batches:
            if passes and sum(map(len, passes[-1])) + len(batch) <= _BATCH_ROWS:
                passes[-1].append(batch)
            else:
                passes.append([batch])
        for together in passes:
            rows = [(row, account) for account, batch in enumerate(together) for row in batch]
            solved = self._solve(
                tables, _Rows.of(tables, [g for (g, _, _), _ in rows],
                                 [account for _, account in rows]),
                [ks for (_, _, ks), _ in rows], [limit for (_, limit, _), _ in rows])
            for r, ((_, _, ks), _) in enumerate(rows):
                for k in ks:
                    found[k] = self._read_back(solved, r, k)
        return found


@dataclass(frozen=True, slots=True)
class _Solved:
    """One run of program 2 or 3: what the read-back follows."""

    tables: _Tables
    rows: _Rows
    order: list[int]
    """The classes any row's group allows nodes of."""
    entries: list[np.ndarray]
    """Per class of ``order``, the keys of the states entering it."""
    decisions: list[np.ndarray]
    """Per class of ``order`` and entering state: nodes of the class taken, negative when
    the walk then goes on along the tight line."""
    stride: int
    values: dict[tuple[int, int], int]
    """(row, stage count) -> best value (``_NEG`` where no set fits)."""
