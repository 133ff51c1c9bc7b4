"""Why no fleet meets the targets: the ``NoFleetMeetsTargets`` refusals of the sizing
search (:mod:`planner.sizing.search`), each saying how far the largest fleet allowed falls
short."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, TypeVar

from planner.sizing._bounds import _Needs
from planner.sizing._targets import SizingError
from planner.units import format_bytes

if TYPE_CHECKING:
    from planner.sizing._state import _Search

_Size = TypeVar("_Size", int, float)


def _nothing(search: _Search, why: str) -> SizingError:
    f = search.f
    spares = f", also after losing any {f} node{'s' if f > 1 else ''}" if f else ""
    return SizingError("NoFleetMeetsTargets",
                       f"no fleet within the counts available meets the targets (a context "
                       f"of at least {search.minimum_context:,}{spares}): {why}",
                       minimum_context=search.minimum_context, failures_tolerated=f)


def _largest(search: _Search) -> tuple[int, ...]:
    return tuple(search.bounds)


def _short_of(search: _Search, needs: _Needs, c0: int) -> str:
    """How far the largest fleet allowed falls short, in layers and bytes at ``c0``."""
    counts = _largest(search)
    caps = sorted(itertools.chain.from_iterable(
        [needs.caps[i]] * n for i, n in enumerate(counts)), reverse=True)[search.f:]
    held = min(sum(caps), needs.layers_needed)
    lost = f" after losing its {search.f} largest" if search.f else ""
    best = max(range(len(search.kinds)), key=lambda i: needs.caps[i] * search.bounds[i])
    gpu = search.kinds[best]
    kind = (f"; the largest kind, {gpu.kind}, holds {needs.caps[best]} layers a node "
            f"(at most {search.bounds[best]} nodes)")
    return (f"every kind at its most ({sum(counts)} nodes) holds {held} of "
            f"{needs.layers_needed} layers at {c0:,}{lost} "
            f"({format_bytes(needs.bytes_needed)} needed){kind}")


def _why_not(search: _Search, needs: _Needs, c0: int) -> str:
    counts = _largest(search)
    if not needs.necessary(search, counts):
        return _short_of(search, needs, c0)
    outcome = search.outcome(counts)
    if outcome.plan is None:
        return (f"the largest fleet allowed ({sum(counts)} nodes) has no plan that fits "
                f"at {c0:,}")
    parts = [f"the largest fleet allowed ({sum(counts)} nodes) plans context "
             f"{outcome.plan.context_length:,} with {outcome.plan.parallel_lanes} lanes"]
    missed = search.targets.shortfalls(outcome.plan, outcome.estimate)
    if missed:
        parts.append(f"and misses the targets: {'; '.join(missed)}")
    if search.fleet_meets(counts) and search.f:
        parts.append(f"but some removal of {search.f} nodes leaves a fleet that misses "
                     "the targets")
    return ", ".join(parts)


