"""Node sets as the candidates table holds them: the ids of a set in stage order, kept as
positions among the ids of the search that found it.

A candidates table has a row for every (context, stage count, lanes) shape, and at the
caps (10,000 nodes, 4,096 layers) tens of thousands of its sets hold thousands of nodes
each: hundreds of millions of ids as tuples. A :class:`NodeIds` keeps one small integer
per node instead, and reads, compares and hashes as the tuple of its ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from itertools import groupby
from typing import overload

import numpy as np

from planner.limits import MAX_LISTED_NODE_IDS

_NUMBERED = re.compile(r"(.*?)(\d+)")


class IdPool:
    """The ids of a search's nodes, in stage order, shared by every set it finds; which
    of them continue a numbered run (``gpu-07`` after ``gpu-06``) is found once, when a
    set is first written compactly."""

    __slots__ = ("_follows", "ids")

    def __init__(self, ids: tuple[str, ...]) -> None:
        self.ids = ids
        self._follows: np.ndarray | None = None

    def follows(self) -> np.ndarray:
        """``follows[i]``: the id at ``i + 1`` is the one after the id at ``i`` in a run
        numbered as a fleet file's ``count`` numbers its nodes (same prefix and width)."""
        if self._follows is None:
            follows = np.zeros(len(self.ids), dtype=bool)
            parsed = [_NUMBERED.fullmatch(node_id) for node_id in self.ids]
            for i in range(len(parsed) - 1):
                here, after = parsed[i], parsed[i + 1]
                follows[i] = (here is not None and after is not None
                              and here[1] == after[1] and len(here[2]) == len(after[2])
                              and int(after[2]) == int(here[2]) + 1)
            self._follows = follows
        return self._follows


class NodeIds(Sequence[str]):
    """The ids of a node set in stage order: a tuple-like sequence (equal to, hashed and
    ordered as the tuple of its ids) that keeps only the positions of its nodes in an
    :class:`IdPool`."""

    __slots__ = ("_listed", "_picked", "_pool")

    def __init__(self, pool: IdPool, picked: np.ndarray) -> None:
        self._pool = pool
        self._picked = picked
        # The set's runs, by limit: a candidates table writes each set once per lane count.
        self._listed: dict[int, tuple[list[tuple[str, str, int]], int]] = {}

    @property
    def positions(self) -> np.ndarray:
        """Where each node of the set is in the pool, in stage order."""
        return self._picked

    def __len__(self) -> int:
        return len(self._picked)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            return tuple(map(self._pool.ids.__getitem__, self._picked[index].tolist()))
        return self._pool.ids[int(self._picked[index])]

    def __iter__(self) -> Iterator[str]:
        return map(self._pool.ids.__getitem__, self._picked.tolist())

    def as_tuple(self) -> tuple[str, ...]:
        return tuple(self)

    def runs(self, limit: int) -> tuple[list[tuple[str, str, int]], int]:
        """The set as at most ``limit`` runs ``(first id, last id, ids in it)`` of ids
        numbered one after another, from the start, and how many ids they cover."""
        if limit not in self._listed:
            self._listed[limit] = self._runs(limit)
        return self._listed[limit]

    def _runs(self, limit: int) -> tuple[list[tuple[str, str, int]], int]:
        picked = self._picked
        if not len(picked):
            return [], 0
        joined = (np.diff(picked) == 1) & self._pool.follows()[picked[:-1]]
        starts = np.concatenate([[0], np.nonzero(~joined)[0][:limit] + 1])
        ends = np.append(starts[1:], len(picked))[:limit]
        ids = self._pool.ids
        runs = [(ids[picked[start]], ids[picked[end - 1]], int(end - start))
                for start, end in zip(starts[:limit].tolist(), ends.tolist(), strict=True)]
        return runs, int(ends[-1])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NodeIds):
            if len(self) != len(other):
                return False
            if self._pool is other._pool:
                return bool(np.array_equal(self._picked, other._picked))
            return self.as_tuple() == other.as_tuple()
        if isinstance(other, tuple):
            return len(self) == len(other) and self.as_tuple() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __lt__(self, other: object) -> bool:
        if isinstance(other, NodeIds | tuple):
            return self.as_tuple() < tuple(other)
        return NotImplemented

    def __repr__(self) -> str:
        return repr(self.as_tuple())

    def __reduce__(self) -> tuple[type, tuple[tuple[str, ...]]]:
        return tuple, (self.as_tuple(),)


def node_set_entries(ids: Sequence[str], limit: int = MAX_LISTED_NODE_IDS) -> list[str]:
    """A node set as tables, CSV cells, charts and reports list it: every id, when there
    are at most ``limit``; else runs of ids numbered one after another written
    ``first..last``, at most ``limit`` of them, then ``(+N more)`` for the ids left out.
    A set has one node per stage, so its stage count tells a listing that is cut short."""
    if len(ids) <= limit:
        return list(ids)
    runs, covered = ids.runs(limit) if isinstance(ids, NodeIds) else _runs(ids, limit)
    entries = [first if count == 1 else f"{first}..{last}" for first, last, count in runs]
    if covered < len(ids):
        entries.append(f"(+{len(ids) - covered:,} more)")
    return entries


def node_set_text(ids: Sequence[str], separator: str = ", ",
                  limit: int = MAX_LISTED_NODE_IDS) -> str:
    """:func:`node_set_entries` joined by ``separator``."""
    return separator.join(node_set_entries(ids, limit))


def layer_count_entries(counts: Sequence[int]) -> list[str]:
    """A candidate's ``stage_layer_counts`` as CSV cells and reports list them: a run of
    ``r`` stages of ``n`` layers each as ``rxn`` (``4096x1``), a lone stage as ``n``; a set
    of thousands of stages mostly takes a few runs."""
    return [str(count) if len(run) == 1 else f"{len(run)}x{count}"
            for count, run in ((count, list(run)) for count, run in groupby(counts))]


def _runs(ids: Sequence[str], limit: int) -> tuple[list[tuple[str, str, int]], int]:
    """:meth:`NodeIds.runs` of a plain sequence of ids."""
    runs: list[tuple[str, str, int]] = []
    covered = 0
    while covered < len(ids) and len(runs) < limit:
        start = covered
        here = _NUMBERED.fullmatch(ids[start])
        covered += 1
        while here is not None and covered < len(ids):
            after = _NUMBERED.fullmatch(ids[covered])
            if (after is None or after[1] != here[1] or len(after[2]) != len(here[2])
                    or int(after[2]) != int(here[2]) + 1):
                break
            here = after
            covered += 1
        runs.append((ids[start], ids[covered - 1], covered - start))
    return runs, covered
