"""Spare nodes: the fewest (or cheapest) extra nodes that bring a fleet's availability to
a target."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from planner._validate import integer, number
from planner.availability.reliability import (
    DEFAULT_ANNUAL_FAILURE_RATE,
    DEFAULT_REPAIR_HOURS,
    AvailabilityError,
    NodeReliability,
    _invalid,
    down_probabilities,
)
from planner.availability.states import (
    DEFAULT_MAX_STATES,
    DEFAULT_TOLERANCE,
    AvailabilityResult,
    budget_key,
    fleet_availability,
    resolve_targets,
)
from planner.limits import DEFAULT_PRICE_KIND, MAX_PRICE_PER_HOUR
from planner.models import load_gpu_catalog
from planner.performance import NodeSpeed, node_speeds
from planner.planning import NodeBudget, PlanningInput
from planner.planning.inputs import as_planning_input
from planner.sizing import fleet_nodes, select_kinds
from planner.targets import SpeedEstimator, Targets


@dataclass(frozen=True, slots=True)
class SpareKind:
    """A kind of node that can be added as a spare: its budget (the ``node_id`` is a
    template; added nodes are numbered), failure figures and price per hour."""

    name: str
    budget: NodeBudget
    reliability: NodeReliability = field(default_factory=NodeReliability)
    price_per_hour: float | None = None
    speed: NodeSpeed | None = None
    """What the speed estimate knows of each spare (its bandwidth, from the node it
    copies or its catalog kind); ``None``: unknown, so a plan on it misses a TPOT
    target."""

    def __post_init__(self) -> None:
        fail = _invalid("InvalidSpareKind", "price_per_hour",
                        f"price_per_hour of spare kind {self.name!r}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise _invalid("InvalidSpareKind", "name")("must be a non-empty string", self.name)
        if not isinstance(self.budget, NodeBudget):
            raise _invalid("InvalidSpareKind", "budget")("must be a NodeBudget", self.budget)
        if not isinstance(self.reliability, NodeReliability):
            raise _invalid("InvalidSpareKind", "reliability")(
                "must be a NodeReliability", self.reliability)
        if self.speed is not None and not isinstance(self.speed, NodeSpeed):
            raise _invalid("InvalidSpareKind", "speed")("must be a NodeSpeed", self.speed)
        if self.price_per_hour is not None:
            object.__setattr__(self, "price_per_hour", float(number(
                self.price_per_hour, fail, maximum=MAX_PRICE_PER_HOUR)))

    def nodes(self, count: int, taken: set[str]) -> list[NodeBudget]:
        slug = "".join(c if c.isalnum() else "-" for c in self.name.lower()).strip("-")
        made: list[NodeBudget] = []
        index = 0
        while len(made) < count:
            node_id = f"spare-{slug}-{index:02d}"
            index += 1
            if node_id not in taken:
                made.append(replace(self.budget, node_id=node_id))
        return made


def catalog_spare_kinds(catalog: Sequence[Any], kinds: Sequence[str] | None = None,
                        price_kind: str = DEFAULT_PRICE_KIND) -> list[SpareKind]:
    """Catalog kinds as spares, with their budget as sizing builds it
    (:func:`planner.sizing.fleet_nodes`), failure figures and price; by default every
    kind priced as ``price_kind`` (``kinds``: ids or names), so their prices compare."""
    chosen, _ = select_kinds(catalog, kinds, price_kind)
    spares = []
    for gpu in chosen:
        (budget,) = fleet_nodes([gpu], [1])
        figures = NodeReliability(
            annual_failure_rate=(DEFAULT_ANNUAL_FAILURE_RATE if gpu.annual_failure_rate is None
                                 else gpu.annual_failure_rate),
            repair_hours=DEFAULT_REPAIR_HOURS if gpu.repair_hours is None else gpu.repair_hours)
        spares.append(SpareKind(gpu.kind, budget, figures, gpu.price_per_hour,
                                NodeSpeed.of_kind(budget.node_id, gpu)))
    return spares


@dataclass(frozen=True, slots=True)
class SparesResult:
    """The fewest (or cheapest) spares that reach ``target``: ``counts`` per spare kind,
    the added nodes, the availability with them and their price per hour (``None`` when
    a kind has no price)."""

    target: float
    counts: dict[str, int]
    nodes: tuple[NodeBudget, ...]
    availability: AvailabilityResult
    cost_per_hour: float | None
    candidates_evaluated: int

    @property
    def spare_count(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "counts": dict(self.counts),
                "spare_count": self.spare_count,
                "availability": self.availability.to_dict(),
                "cost_per_hour": self.cost_per_hour,
                "candidates_evaluated": self.candidates_evaluated}


def _check_target(target: Any) -> float:
    fail = _invalid("InvalidTarget", "target", "availability target (between 0 and 1, "
                    "e.g. 0.999)")
    return float(number(target, fail, above=0, below=1))


def spares_for(
    request: PlanningInput | Mapping[str, Any],
    target: float,
    kinds: Sequence[SpareKind],
    *,
    reliability: Mapping[str, NodeReliability] | NodeReliability | None = None,
    targets: Targets | None = None,
    min_context: int | None = None,
    min_lanes: int = 1,
    estimator: SpeedEstimator | None = None,
    max_spares: int = 16,
    max_candidates: int = 400,
    tolerance: float = DEFAULT_TOLERANCE,
    max_states: int = DEFAULT_MAX_STATES,
) -> SparesResult:
    """The fewest extra nodes that bring the fleet's availability to ``target``.

    With one kind: the smallest count of it. With several (a catalog): the cheapest mix
    by price per hour, fewer nodes on equal price (kinds without a price count as free,
    so give prices to compare them). A mix counts as reaching the target when the lower
    end of its availability interval does, so the answer holds whatever the
    unexplored states hold (``tolerance`` and ``max_states`` bound each fleet's
    exploration; the targets and ``estimator`` as in :func:`fleet_availability`; a
    spare has its kind's ``speed``, and where that is unknown a plan on it misses a
    TPOT target). Raises ``SparesUnreachable`` when no mix of at most ``max_spares`` nodes
    (or within ``max_candidates`` evaluations) reaches it.
    """
    goal = _check_target(target)
    max_spares = integer(max_spares, _invalid("InvalidTarget", "max_spares"), minimum=1)
    max_candidates = integer(max_candidates, _invalid("InvalidTarget", "max_candidates"),
                             minimum=1)
    req = as_planning_input(request)
    judged = resolve_targets(req, targets, min_context, min_lanes, estimator)
    if not kinds:
        raise AvailabilityError("SparesUnreachable", "no spare kinds to choose from",
                                field="kinds")
    base = down_probabilities(req.nodes, reliability)
    taken = {node.node_id for node in req.nodes}

    def evaluate(counts: tuple[int, ...]) -> tuple[AvailabilityResult, list[NodeBudget]]:
        extra: list[NodeBudget] = []
        speeds: dict[str, NodeSpeed | None] = {}
        down = dict(base)
        for kind, count in zip(kinds, counts, strict=True):
            made = kind.nodes(count, taken | {n.node_id for n in extra})
            extra += made
            down.update({n.node_id: kind.reliability.down_probability for n in made})
            speeds.update({n.node_id: kind.speed for n in made})
        fleet = replace(req, nodes=(*req.nodes, *extra))
        knowing = (estimator.with_copies(speeds) if estimator is not None and extra
                   else estimator)
        return fleet_availability(fleet, down=down, targets=judged, estimator=knowing,
                                  tolerance=tolerance, max_states=max_states), extra

    def price(counts: tuple[int, ...]) -> float:
        return sum((kind.price_per_hour or 0.0) * count
                   for kind, count in zip(kinds, counts, strict=True))

    start = (0,) * len(kinds)
    heap: list[tuple[float, int, tuple[int, ...]]] = [(0.0, 0, start)]
    seen = {start}
    evaluated = 0
    best_lower = 0.0
    while heap and evaluated < max_candidates:
        cost, total, counts = heapq.heappop(heap)
        result, extra = evaluate(counts)
        evaluated += 1
        best_lower = max(best_lower, result.availability_lower)
        if result.availability_lower >= goal:
            priced = all(kind.price_per_hour is not None
                         for kind, count in zip(kinds, counts, strict=True) if count)
            return SparesResult(goal, {kind.name: count for kind, count
                                       in zip(kinds, counts, strict=True) if count},
                                tuple(extra), result, cost if priced else None, evaluated)
        if total == max_spares:
            continue
        for index in range(len(kinds)):
            child = list(counts)
            child[index] += 1
            key = tuple(child)
            if key not in seen:
                seen.add(key)
                heapq.heappush(heap, (price(key), total + 1, key))
    names = ", ".join(kind.name for kind in kinds)
    limit = (f"within {max_candidates} fleets evaluated (max_candidates)" if heap else
             f"of at most {max_spares} spares (max_spares)")
    raise AvailabilityError(
        "SparesUnreachable",
        f"no mix {limit} of {names} reaches availability {goal:g}; the best found is "
        f"{best_lower:.6g} after {evaluated} fleets evaluated. Raise max_spares or "
        "max_candidates, lower the target, or use more reliable nodes",
        target=goal, best_availability=best_lower, candidates_evaluated=evaluated)


SPARE_TARGETS = (0.99, 0.999, 0.9999)


def fleet_spare_kind(request: PlanningInput,
                     reliability: Mapping[str, NodeReliability] | NodeReliability | None = None,
                     estimator: SpeedEstimator | None = None) -> SpareKind:
    """The fleet's most common kind of node (ties: more usable memory) as a spare, with
    the speed ``estimator`` knows that node by and its catalog kind's price; without an
    estimator, the kind the shipped catalog recognises the node as
    (:func:`planner.performance.node_speeds`), as the workbench and ``planner
    availability`` recognise it."""
    if not request.nodes:
        raise AvailabilityError("SparesUnreachable", "the fleet has no nodes to copy as spares",
                                field="nodes")
    groups: dict[tuple[Any, ...], list[NodeBudget]] = {}
    for node in request.nodes:
        groups.setdefault(budget_key(node), []).append(node)
    members = max(groups.values(), key=lambda nodes: (len(nodes), nodes[0].usable_bytes))
    first = members[0]
    if isinstance(reliability, Mapping):
        own = reliability.get(first.node_id, NodeReliability())
    else:
        own = reliability or NodeReliability()
    name = first.node_id.rsplit("-", 1)[0] if "-" in first.node_id else first.node_id
    if estimator is not None:
        speed = estimator.speeds.get(first.node_id)
    else:
        speed = node_speeds([first], load_gpu_catalog()).get(first.node_id)
    return SpareKind(name, first, own, speed.price_per_hour if speed is not None else None,
                     speed=speed)


def spares_table(request: PlanningInput | Mapping[str, Any],
                 reliability: Mapping[str, NodeReliability] | NodeReliability | None = None,
                 *, availability_targets: Sequence[float] = SPARE_TARGETS,
                 kinds: Sequence[SpareKind] | None = None, **options: Any) -> pd.DataFrame:
    """Spares needed for each availability target (``availability_targets``, default
    99 %, 99.9 %, 99.99 %), of the fleet's most common kind unless ``kinds`` are given;
    ``options`` (the plan's ``targets``, ``min_context``, ...) go to :func:`spares_for`.
    Columns: ``target``,
    ``spare_count`` (NA when unreachable within the limit), ``spares`` (``kind x count``),
    ``availability_lower`` with them, ``cost_per_hour``."""
    req = as_planning_input(request)
    choices = list(kinds) if kinds else [fleet_spare_kind(req, reliability,
                                                          options.get("estimator"))]
    rows = []
    for target in availability_targets:
        try:
            found = spares_for(req, target, choices, reliability=reliability, **options)
        except AvailabilityError as error:
            if error.code != "SparesUnreachable":
                raise
            rows.append({"target": target, "spare_count": None, "spares": "unreachable",
                         "availability_lower": error.details.get("best_availability"),
                         "cost_per_hour": None})
            continue
        rows.append({"target": target, "spare_count": found.spare_count,
                     "spares": ", ".join(f"{name} x {count}" for name, count
                                         in found.counts.items()) or "none",
                     "availability_lower": found.availability.availability_lower,
                     "cost_per_hour": found.cost_per_hour})
    return pd.DataFrame(rows, columns=["target", "spare_count", "spares", "availability_lower",
                                       "cost_per_hour"]).astype(
        {"target": "float64", "spare_count": "Int64", "spares": "string",
         "availability_lower": "Float64", "cost_per_hour": "Float64"})
