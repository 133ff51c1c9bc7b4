"""What sizing answers: the fleets found, as objects, tables and JSON, and the Pareto
front over cost, context and estimated TPOT."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from planner.limits import DEFAULT_PRICE_KIND
from planner.performance import ESTIMATE_NOTE, PlanEstimate, cost_per_million_tokens
from planner.planning.plan import Plan
from planner.sizing._targets import SizingTargets


@dataclass(frozen=True, slots=True)
class SizedFleet:
    """One fleet that meets the targets, with its plan and the estimate of that plan."""

    counts: tuple[tuple[str, int], ...]
    node_ids: tuple[str, ...]
    cost_per_hour_usd: float
    plan: Plan
    estimate: PlanEstimate | None
    failures_tolerated: int

    @property
    def node_count(self) -> int:
        return len(self.node_ids)

    @property
    def counts_by_kind(self) -> dict[str, int]:
        return dict(self.counts)

    @property
    def estimated_tpot_ms(self) -> float | None:
        return None if self.estimate is None else self.estimate.estimated_tpot_ms

    @property
    def estimated_ttft_ms(self) -> float | None:
        """The estimated time to first token of the targets' prompt (``None`` without a
        prompt size or an estimate)."""
        return None if self.estimate is None else self.estimate.ttft_ms

    @property
    def tokens_per_s(self) -> float | None:
        return None if self.estimate is None else self.estimate.tokens_per_s

    @property
    def estimated_context_fill_ms(self) -> float | None:
        """The estimated prefill of the plan's whole context (``None`` unknown)."""
        return None if self.estimate is None else self.estimate.estimated_context_fill_ms

    @property
    def cost_per_million_tokens_usd(self) -> float | None:
        if self.estimate is None:
            return None
        return cost_per_million_tokens(self.cost_per_hour_usd, self.estimate.tokens_per_s)

    @property
    def label(self) -> str:
        """``"2 x h100-sxm-80gb + 1 x l40s"``."""
        return " + ".join(f"{count} x {kind}" for kind, count in self.counts)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form ``planner size --json`` prints (estimates marked as such by the
        document around it)."""
        return {
            "counts": self.counts_by_kind,
            "nodes": list(self.node_ids),
            "cost_per_hour": self.cost_per_hour_usd,
            "context_length": self.plan.context_length,
            "stage_count": self.plan.stage_count,
            "parallel_lanes": self.plan.parallel_lanes,
            "estimated_tpot_ms": self.estimated_tpot_ms,
            "estimated_ttft_ms": self.estimated_ttft_ms,
            "tokens_per_s": self.tokens_per_s,
            "estimated_context_fill_ms": self.estimated_context_fill_ms,
            "cost_per_million_tokens": self.cost_per_million_tokens_usd,
            "failures_tolerated": self.failures_tolerated,
        }


SIZING_COLUMNS = ("fleet", "node_count", "node_ids", "cost_per_hour_usd", "context_length",
                  "stage_count", "parallel_lanes", "estimated_tpot_ms", "estimated_ttft_ms",
                  "tokens_per_s", "estimated_context_fill_ms", "cost_per_million_tokens_usd",
                  "failures_tolerated")


def fleets_frame(fleets: Sequence[SizedFleet], kinds: Sequence[str] = ()) -> pd.DataFrame:
    """Fleets as a table: :data:`SIZING_COLUMNS`, then a ``count_<kind>`` column for each
    of ``kinds`` and each kind the fleets use. Speeds and token costs are estimates."""
    used = list(dict.fromkeys([*kinds, *(k for f in fleets for k, _ in f.counts)]))
    rows = []
    for fleet in fleets:
        counts = fleet.counts_by_kind
        rows.append({
            "fleet": fleet.label, "node_count": fleet.node_count, "node_ids": fleet.node_ids,
            "cost_per_hour_usd": fleet.cost_per_hour_usd,
            "context_length": fleet.plan.context_length,
            "stage_count": fleet.plan.stage_count,
            "parallel_lanes": fleet.plan.parallel_lanes,
            "estimated_tpot_ms": fleet.estimated_tpot_ms,
            "estimated_ttft_ms": fleet.estimated_ttft_ms,
            "tokens_per_s": fleet.tokens_per_s,
            "estimated_context_fill_ms": fleet.estimated_context_fill_ms,
            "cost_per_million_tokens_usd": fleet.cost_per_million_tokens_usd,
            "failures_tolerated": fleet.failures_tolerated,
            **{f"count_{kind}": counts.get(kind, 0) for kind in used},
        })
    columns = [*SIZING_COLUMNS, *(f"count_{kind}" for kind in used)]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype({
        "fleet": "string", "node_count": "int64", "cost_per_hour_usd": "float64",
        "context_length": "int64", "stage_count": "int64", "parallel_lanes": "int64",
        "estimated_tpot_ms": "Float64", "estimated_ttft_ms": "Float64",
        "tokens_per_s": "Float64",
        "estimated_context_fill_ms": "Float64", "cost_per_million_tokens_usd": "Float64",
        "failures_tolerated": "int64",
        **{f"count_{kind}": "int64" for kind in used},
    })


@dataclass(frozen=True, slots=True)
class SizingResult:
    """The cheapest fleets (cheapest first) and the Pareto front."""

    fleets: tuple[SizedFleet, ...]
    pareto: tuple[SizedFleet, ...]
    targets: SizingTargets
    minimum_context: int
    kinds: tuple[str, ...]
    skipped_kinds: tuple[str, ...]
    plans_evaluated: int
    notes: tuple[str, ...] = field(default=())
    price_kind: str = DEFAULT_PRICE_KIND
    # The estimate's measured error for the memory types of the kinds estimated.
    error_note: str = ""

    @property
    def estimate_notes(self) -> tuple[str, ...]:
        """What the estimates are and their measured error, for every rendering."""
        return (ESTIMATE_NOTE, *((self.error_note,) if self.error_note else ()))

    @property
    def cheapest(self) -> SizedFleet:
        return self.fleets[0]

    def frame(self) -> pd.DataFrame:
        return fleets_frame(self.fleets)

    def pareto_frame(self) -> pd.DataFrame:
        return fleets_frame(self.pareto)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fleets": [fleet.to_dict() for fleet in self.fleets],
            "pareto": [fleet.to_dict() for fleet in self.pareto],
            "targets": {**self.targets.to_dict(), "minimum_context": self.minimum_context},
            "kinds": list(self.kinds),
            "skipped_kinds": list(self.skipped_kinds),
            "price_kind": self.price_kind,
            "notes": [*self.estimate_notes, *self.notes],
        }


def pareto_front(fleets: Iterable[SizedFleet]) -> tuple[SizedFleet, ...]:
    """The fleets no other fleet beats on all of cost per hour (lower), context (higher)
    and estimated TPOT (lower; unknown counts as worst), cheapest first; duplicates once."""
    unique: dict[tuple[tuple[str, int], ...], SizedFleet] = {}
    for fleet in fleets:
        unique.setdefault(fleet.counts, fleet)
    items = list(unique.values())

    def point(fleet: SizedFleet) -> tuple[float, int, float]:
        tpot = fleet.estimated_tpot_ms
        return (fleet.cost_per_hour_usd, -fleet.plan.context_length,
                float("inf") if tpot is None else tpot)

    front = []
    for fleet in items:
        mine = point(fleet)
        dominated = any(
            all(a <= b for a, b in zip(point(other), mine, strict=True))
            and point(other) != mine for other in items)
        if not dominated:
            front.append(fleet)
    return tuple(sorted(front, key=lambda f: (f.cost_per_hour_usd, f.node_count,
                                              -f.plan.context_length, f.counts)))
