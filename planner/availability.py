"""How often a split topology is up: steady-state availability under node failures.

Each node fails and is repaired independently. With an annual failure rate ``afr``
(failures per node-year) and a mean repair time ``repair_hours``, a node's mean time to
failure is ``8760 / afr`` hours and it is down a share of the time

    u = repair_hours / (8760 / afr + repair_hours)

(the steady state of a two-state failure/repair process; only the means matter). The
fleet is **up** in a failure state when ``plan_topology`` on the surviving nodes returns a
plan that meets the targets (minimum context, minimum lanes, and the TPOT target when one
is set).

Nodes whose planning fields and ``u`` are equal are interchangeable: the planned context,
lanes and estimate depend on the multiset of surviving budgets, not on which of the equal
nodes survive (node ids only break ties between sets of equal merit, docs/rules.md §5 rule
4). So a failure state is a vector of down counts per kind, with probability
``prod_k C(n_k, d_k) u_k^d_k (1 - u_k)^(n_k - d_k)``. Small state spaces are enumerated in
full (the result is exact); large ones in decreasing probability until the unexplored mass
is below a tolerance, giving ``[lower, upper]``: lower counts only explored up-states,
upper adds every unexplored state as up.

Probabilities are computed in exact rational arithmetic. A float ``u`` is a dyadic
rational ``a / 2^e``, so every state's probability is an integer over the common
denominator ``prod_k (2^e_k)^n_k``: sums are exact integer additions, and the reported
bounds are rounded outwards, so the interval contains the true value for the given ``u``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import pandas as pd

from planner._validate import Fail, number, shown
from planner.errors import CodedError, PlanError
from planner.fleet.document import FleetDocument, ReliabilityOverride
from planner.limits import DEFAULT_PRICE_KIND
from planner.models.gpus import node_gpu_kinds
from planner.planning import NodeBudget, Plan, PlanningInput, plan_topology
from planner.planning.inputs import as_planning_input
from planner.sizing import SizingTargets, fleet_nodes, select_kinds

HOURS_PER_YEAR = 8760

# Meta, "The Llama 3 Herd of Models" (2024), section 3.3.4 and table 5: 419 unexpected
# interruptions in a 54-day snapshot on 16,384 H100 GPUs. Counting the ones a failing GPU
# or its host causes (faulty GPU 148, HBM3 72, SRAM 19, GPU system processor 17, silent
# data corruption 6, thermal interface and sensor 6; NIC 7, SSD 3, power supply 3,
# chassis 2, IO expansion board 2, CPU 2, system memory 2: 289 in all) over
# 16,384 x 54 / 365 = 2,423.9 GPU-years gives 0.119 failures per GPU-year. Software bugs,
# network switches and host maintenance are left out: they do not take one node down.
DEFAULT_ANNUAL_FAILURE_RATE = 0.119
# No published figure for repair time: 72 hours is an assumption (a part replaced under
# next-business-day on-site support, over a weekend). Set it per kind in the catalog, per
# node in the fleet file, or fleet-wide with ``--repair-hours``.
DEFAULT_REPAIR_HOURS = 72.0

DEFAULT_TOLERANCE = 1e-9
# Up to this many failure states the whole space is enumerated and the result is exact;
# beyond, the unlikely states are left out (each costs a plan, tens of ms on big fleets).
DEFAULT_EXACT_STATES = 512
DEFAULT_MAX_STATES = 200_000
# For a command or a sweep row: a few thousand plans keep one answer to about a minute,
# and the interval holds the exact value whatever was left unexplored.
QUICK_MAX_STATES = 2_000


class AvailabilityError(CodedError):
    """Availability input that cannot be evaluated.

    ``code`` is ``InvalidReliability`` (a failure rate or repair time that is negative,
    not a number or infinite), ``InvalidTarget`` (an availability target outside (0, 1)
    or a bad tolerance) or ``SparesUnreachable`` (no number of spares up to the limit
    reaches the target).
    """

    codes = ("InvalidReliability", "InvalidTarget", "SparesUnreachable")


def _positive_number(value: Any, name: str, node_id: str | None, *, allow_zero: bool) -> float:
    where = f"{name} of node {node_id!r}" if node_id is not None else name
    fail = _invalid("InvalidReliability", name, where, node_id)
    if allow_zero:
        return float(number(value, fail))
    return float(number(value, fail, above=0))


def _invalid(code: str, name: str, where: str | None = None,
             node_id: str | None = None) -> Fail:
    return lambda problem, value: AvailabilityError(
        code, f"{where or name}: {problem} (got {shown(value)})", field=name,
        node_id=node_id, value=value)


@dataclass(frozen=True, slots=True)
class NodeReliability:
    """How often a node fails (per year) and how long a repair takes (hours)."""

    annual_failure_rate: float = DEFAULT_ANNUAL_FAILURE_RATE
    repair_hours: float = DEFAULT_REPAIR_HOURS

    def __post_init__(self) -> None:
        object.__setattr__(self, "annual_failure_rate", _positive_number(
            self.annual_failure_rate, "annual_failure_rate", None, allow_zero=True))
        object.__setattr__(self, "repair_hours", _positive_number(
            self.repair_hours, "repair_hours", None, allow_zero=True))

    @property
    def down_probability(self) -> float:
        """``u = repair_hours / (8760 / afr + repair_hours)``; 0 for a node that never
        fails or is repaired instantly."""
        if self.annual_failure_rate == 0 or self.repair_hours == 0:
            return 0.0
        return self.repair_hours / (HOURS_PER_YEAR / self.annual_failure_rate
                                    + self.repair_hours)

    @property
    def failures_per_hour(self) -> float:
        return self.annual_failure_rate / HOURS_PER_YEAR

    def to_dict(self) -> dict[str, float]:
        return {"annual_failure_rate": self.annual_failure_rate,
                "repair_hours": self.repair_hours}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeReliability:
        return cls(annual_failure_rate=data.get("annual_failure_rate",
                                                DEFAULT_ANNUAL_FAILURE_RATE),
                   repair_hours=data.get("repair_hours", DEFAULT_REPAIR_HOURS))


def _catalog_figures(gpu: Any) -> NodeReliability | None:
    if gpu is None or gpu.annual_failure_rate is None or gpu.repair_hours is None:
        return None
    return NodeReliability(annual_failure_rate=gpu.annual_failure_rate,
                           repair_hours=gpu.repair_hours)


def document_overrides(document: FleetDocument) -> dict[str, ReliabilityOverride]:
    """The per-node failure figures a fleet document gives, by node id."""
    return dict(document.reliability)


def _shipped_catalog() -> list[Any]:
    from planner.models import load_gpu_catalog

    return load_gpu_catalog()


def fleet_reliability(
    nodes: Sequence[NodeBudget],
    *,
    catalog: Sequence[Any] | None = None,
    overrides: Mapping[str, ReliabilityOverride] | None = None,
    annual_failure_rate: float | None = None,
    repair_hours: float | None = None,
) -> dict[str, NodeReliability]:
    """Each node's failure rate and repair time, field by field, from the first that
    gives it: the node's own override, the fleet-wide value (``annual_failure_rate``,
    ``repair_hours``), its catalog kind (:func:`planner.models.gpus.node_gpu_kind`, in
    ``catalog``, default the shipped one), the defaults."""
    overrides = overrides or {}
    named = {node_id: own.gpu for node_id, own in overrides.items() if own.gpu is not None}
    kinds = node_gpu_kinds(nodes, _shipped_catalog() if catalog is None else catalog, named)
    result: dict[str, NodeReliability] = {}
    for node in nodes:
        own = overrides.get(node.node_id, ReliabilityOverride())
        base = _catalog_figures(kinds[node.node_id]) or NodeReliability()
        try:
            afr = next(v for v in (own.annual_failure_rate, annual_failure_rate,
                                   base.annual_failure_rate) if v is not None)
            repair = next(v for v in (own.repair_hours, repair_hours, base.repair_hours)
                          if v is not None)
            result[node.node_id] = NodeReliability(annual_failure_rate=afr,
                                                   repair_hours=repair)
        except AvailabilityError as error:
            raise AvailabilityError(error.code, f"node {node.node_id!r}: {error.message}",
                                    **{**error.details, "node_id": node.node_id}) from None
    return result


# -- what counts as up ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the surviving nodes of one failure state get: the plan's context (0 when no
    plan exists) and whether the plan meets the targets."""

    context_length: int
    meets_targets: bool
    plan: Plan | None = field(default=None, compare=False)


MeetsTargets = Callable[[Plan], bool]


def plan_survivors(request: PlanningInput, survivors: Sequence[NodeBudget],
                   meets: MeetsTargets) -> Outcome:
    """Plan the surviving nodes; no survivors or no fitting set is context 0, down."""
    if not survivors:
        return Outcome(0, False)
    try:
        plan = plan_topology(replace(request, nodes=tuple(survivors)))
    except PlanError as error:
        if error.code == "NoValidTopology":
            return Outcome(0, False)
        raise
    return Outcome(plan.context_length, meets(plan), plan)


def targets_check(*, min_context: int | None = None, min_lanes: int = 1,
                  targets: SizingTargets | None = None) -> MeetsTargets:
    """A plan meets the targets when its context and lanes reach the minimums and the
    TPOT target, when the request has one, is not known to be missed.

    ``targets`` (the sizing targets) gives the minimums instead; its TPOT target is
    applied to the request by :func:`with_targets`. A fleet file's nodes carry no memory
    bandwidth, so the TPOT judged here is the network estimate of docs/rules.md §6
    (``decode_tpot_target_met``), not the :mod:`planner.performance` estimate sizing uses.
    """
    if targets is not None:
        min_context = targets.minimum_context if min_context is None else min_context
        min_lanes = max(min_lanes, targets.minimum_lanes)

    def meets(plan: Plan) -> bool:
        if min_context is not None and plan.context_length < min_context:
            return False
        if plan.parallel_lanes < min_lanes:
            return False
        return plan.decode_tpot_target_met is not False

    return meets


def with_targets(request: PlanningInput, targets: SizingTargets | None) -> PlanningInput:
    """The request with the targets' ``minimum_nodes`` and TPOT target, when given."""
    if targets is None:
        return request
    changes: dict[str, Any] = {}
    if targets.minimum_nodes > request.minimum_nodes:
        changes["minimum_nodes"] = targets.minimum_nodes
    if targets.target_decode_tpot_ms is not None:
        changes["target_decode_tpot_ms"] = targets.target_decode_tpot_ms
    return replace(request, **changes) if changes else request


# -- the fleet as kinds of interchangeable nodes ----------------------------------------


@dataclass(frozen=True, slots=True)
class NodeKind:
    """Interchangeable nodes: equal planning fields and equal down probability."""

    nodes: tuple[NodeBudget, ...]
    down_probability: float

    @property
    def count(self) -> int:
        return len(self.nodes)


def _budget_key(node: NodeBudget) -> tuple[Any, ...]:
    return (node.detected_vram_bytes, node.max_vram_bytes, node.runtime_headroom_bytes,
            node.stage_transfer_latency_ms)


def group_kinds(nodes: Sequence[NodeBudget], down: Mapping[str, float]) -> list[NodeKind]:
    """Nodes grouped by (planning fields, down probability), in first-seen order."""
    groups: dict[tuple[Any, ...], list[NodeBudget]] = {}
    for node in nodes:
        groups.setdefault((*_budget_key(node), down[node.node_id]), []).append(node)
    return [NodeKind(tuple(members), key[-1]) for key, members in groups.items()]


def down_probabilities(nodes: Sequence[NodeBudget],
                       reliability: Mapping[str, NodeReliability] | NodeReliability | None
                       ) -> dict[str, float]:
    """``u`` per node id; nodes missing from ``reliability`` get the defaults."""
    if reliability is None or isinstance(reliability, NodeReliability):
        shared = reliability or NodeReliability()
        return {node.node_id: shared.down_probability for node in nodes}
    unknown = sorted(set(reliability) - {node.node_id for node in nodes})
    if unknown:
        raise AvailabilityError("InvalidReliability",
                                f"reliability is given for nodes not in the fleet: "
                                f"{', '.join(unknown)}", field="reliability",
                                node_id=unknown[0])
    default = NodeReliability()
    return {node.node_id: reliability.get(node.node_id, default).down_probability
            for node in nodes}


class _KindPmf:
    """The exact binomial distribution of down counts of one kind, as integers over
    ``denominator``, and the down counts in decreasing probability."""

    def __init__(self, count: int, u: float) -> None:
        a, b = Fraction(u).as_integer_ratio()
        self.count = count
        self.denominator = b**count
        self.numerators = [math.comb(count, d) * a**d * (b - a) ** (count - d)
                           for d in range(count + 1)]
        # Decreasing probability; ties (and exact zeros) keep fewer failures first.
        self.order = sorted(range(count + 1), key=lambda d: (-self.log(d), d))

    def log(self, d: int) -> float:
        numerator = self.numerators[d]
        if numerator == 0:
            return -math.inf
        return math.log(numerator) - math.log(self.denominator)


# -- the result -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AvailabilityResult:
    """Steady-state availability of a fleet at its targets.

    ``availability`` is set when every failure state was evaluated (then
    ``availability_lower == availability_upper == availability``); otherwise it is
    ``None`` and the truth lies in ``[availability_lower, availability_upper]``.
    ``context_distribution`` maps the planned context (0: no plan) to the probability of
    the states evaluated that get it; what it lacks of 1 is ``unexplored_mass``.
    """

    availability: float | None
    availability_lower: float
    availability_upper: float
    states_evaluated: int
    context_distribution: dict[int, float]
    unexplored_mass: float = 0.0
    node_count: int = 0

    @property
    def exact(self) -> bool:
        return self.availability is not None

    @property
    def estimate(self) -> float:
        """The exact value, else the middle of the interval."""
        if self.availability is not None:
            return self.availability
        return (self.availability_lower + self.availability_upper) / 2

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``context_distribution`` keys are context lengths as strings."""
        return {
            "availability": self.availability,
            "availability_lower": self.availability_lower,
            "availability_upper": self.availability_upper,
            "states_evaluated": self.states_evaluated,
            "context_distribution": {str(context): probability for context, probability
                                     in sorted(self.context_distribution.items())},
        }

    def context_frame(self) -> pd.DataFrame:
        """``context_length`` (0: no plan) and ``probability``, highest context first."""
        rows = sorted(self.context_distribution.items(), reverse=True)
        return pd.DataFrame(rows, columns=["context_length", "probability"]).astype(
            {"context_length": "int64", "probability": "float64"})


def _nearest(numerator: int, denominator: int) -> float:
    return numerator / denominator  # Python rounds int / int correctly


def _round_down(numerator: int, denominator: int) -> float:
    value = numerator / denominator
    x, y = value.as_integer_ratio()
    if x * denominator > numerator * y:
        value = math.nextafter(value, -math.inf)
    return max(value, 0.0)


def _round_up(numerator: int, denominator: int) -> float:
    value = numerator / denominator
    x, y = value.as_integer_ratio()
    if x * denominator < numerator * y:
        value = math.nextafter(value, math.inf)
    return min(value, 1.0)


def _failure_states(pmfs: list[_KindPmf]) -> Any:
    """Down-count vectors in decreasing probability (best-first over the product).

    Each kind's counts are ranked by probability, so a rank vector's probability falls
    when any rank grows. A vector's parent lowers its last non-zero rank by one; children
    raise one rank at or after that position, so every vector is reached exactly once and
    a heap pops them in decreasing probability. A vector of probability 0 (a kind that
    never or always fails) is not pushed: its descendants are 0 too, and its ``-inf``
    log would make NaN keys that break the heap's order.
    """
    logs = [[pmf.log(d) for d in pmf.order] for pmf in pmfs]
    start = (0,) * len(pmfs)
    heap: list[tuple[float, tuple[int, ...], int]] = [
        (-sum(log[0] for log in logs), start, 0)]
    while heap:
        negative, ranks, first = heapq.heappop(heap)
        yield tuple(pmf.order[r] for pmf, r in zip(pmfs, ranks, strict=True))
        for position in range(first, len(pmfs)):
            if (ranks[position] + 1 < len(logs[position])
                    and logs[position][ranks[position] + 1] > -math.inf):
                child = list(ranks)
                child[position] += 1
                step = logs[position][child[position]] - logs[position][ranks[position]]
                heapq.heappush(heap, (negative - step, tuple(child), position))


def _all_states(pmfs: list[_KindPmf]) -> Any:
    def rec(index: int, prefix: tuple[int, ...]) -> Any:
        if index == len(pmfs):
            yield prefix
            return
        for d in range(pmfs[index].count + 1):
            yield from rec(index + 1, (*prefix, d))
    yield from rec(0, ())


def fleet_availability(
    request: PlanningInput | Mapping[str, Any],
    reliability: Mapping[str, NodeReliability] | NodeReliability | None = None,
    *,
    meets: MeetsTargets | None = None,
    targets: SizingTargets | None = None,
    min_context: int | None = None,
    min_lanes: int = 1,
    tolerance: float = DEFAULT_TOLERANCE,
    exact_states: int = DEFAULT_EXACT_STATES,
    max_states: int = DEFAULT_MAX_STATES,
    down: Mapping[str, float] | None = None,
) -> AvailabilityResult:
    """The probability that the surviving nodes have a plan meeting the targets.

    ``reliability`` gives each node's failure rate and repair time (one value for all, a
    mapping by node id, or ``None`` for the defaults); ``down`` gives the down
    probabilities directly instead. ``meets`` decides whether a plan meets the targets
    (default: :func:`targets_check` with ``targets`` (:class:`planner.sizing.SizingTargets`)
    or ``min_context`` and ``min_lanes``). When the
    fleet has at most ``exact_states`` failure states all are evaluated; otherwise
    states are evaluated in decreasing probability until the unexplored mass is below
    ``tolerance`` or ``max_states`` were evaluated.

    Request errors other than "nothing fits" (docs/rules.md §2, checks 1-8) raise as in
    :func:`~planner.planning.plan_topology`.
    """
    req = with_targets(as_planning_input(request), targets)
    tolerance = number(tolerance, _invalid("InvalidTarget", "tolerance"), below=1)
    check = meets or targets_check(min_context=min_context, min_lanes=min_lanes,
                                   targets=targets)
    probabilities = dict(down) if down is not None else down_probabilities(req.nodes,
                                                                           reliability)
    for node_id, u in probabilities.items():
        number(u, _invalid("InvalidReliability", "down",
                           f"down probability of node {node_id!r}", node_id), maximum=1)
    # Request errors surface here, on the whole fleet, not as a down state.
    if req.nodes:
        plan_survivors(req, req.nodes, check)
    else:
        plan_topology(req)

    kinds = group_kinds(req.nodes, probabilities)
    pmfs = [_KindPmf(kind.count, float(kind.down_probability)) for kind in kinds]
    denominator = math.prod(pmf.denominator for pmf in pmfs)
    total_states = math.prod(kind.count + 1 for kind in kinds)
    exhaustive = total_states <= exact_states
    states = _all_states(pmfs) if exhaustive else _failure_states(pmfs)
    # Stop once unexplored < tolerance, compared exactly: explored > D * (1 - tolerance).
    tol_num, tol_den = Fraction(tolerance).as_integer_ratio()
    explored_goal = denominator * (tol_den - tol_num)

    up = explored = 0
    by_context: dict[int, int] = {}
    evaluated = 0
    for state in states:
        if not exhaustive and (explored * tol_den > explored_goal or evaluated >= max_states):
            break
        # Each kind's numerator is over its own denominator; their product is over the
        # common denominator.
        weight = math.prod(pmf.numerators[d] for pmf, d in zip(pmfs, state, strict=True))
        if weight == 0:
            continue
        evaluated += 1
        survivors = [node for kind, d in zip(kinds, state, strict=True)
                     for node in kind.nodes[: kind.count - d]]
        outcome = plan_survivors(req, survivors, check)
        explored += weight
        by_context[outcome.context_length] = by_context.get(outcome.context_length, 0) + weight
        if outcome.meets_targets:
            up += weight

    distribution = {context: _nearest(weight, denominator)
                    for context, weight in by_context.items() if weight}
    if exhaustive:
        value = _nearest(up, denominator)
        return AvailabilityResult(value, value, value, evaluated, distribution, 0.0,
                                  len(req.nodes))
    down_explored = explored - up
    return AvailabilityResult(
        None,
        _round_down(up, denominator),
        _round_up(denominator - down_explored, denominator),
        evaluated,
        distribution,
        _round_up(denominator - explored, denominator),
        len(req.nodes),
    )


# -- spares -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpareKind:
    """A kind of node that can be added as a spare: its budget (the ``node_id`` is a
    template; added nodes are numbered), failure figures and price per hour."""

    name: str
    budget: NodeBudget
    reliability: NodeReliability = field(default_factory=NodeReliability)
    price_per_hour: float | None = None

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
        spares.append(SpareKind(gpu.kind, budget, figures, gpu.price_per_hour))
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
    meets: MeetsTargets | None = None,
    targets: SizingTargets | None = None,
    min_context: int | None = None,
    min_lanes: int = 1,
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
    exploration, as in :func:`fleet_availability`). Raises ``SparesUnreachable`` when no
    mix of at most
    ``max_spares`` nodes (or within ``max_candidates`` evaluations) reaches it.
    """
    goal = _check_target(target)
    req = with_targets(as_planning_input(request), targets)
    if not kinds:
        raise AvailabilityError("SparesUnreachable", "no spare kinds to choose from",
                                field="kinds")
    base = down_probabilities(req.nodes, reliability)
    taken = {node.node_id for node in req.nodes}
    check = meets or targets_check(min_context=min_context, min_lanes=min_lanes,
                                   targets=targets)

    def evaluate(counts: tuple[int, ...]) -> tuple[AvailabilityResult, list[NodeBudget]]:
        extra: list[NodeBudget] = []
        down = dict(base)
        for kind, count in zip(kinds, counts, strict=True):
            made = kind.nodes(count, taken | {n.node_id for n in extra})
            extra += made
            down.update({n.node_id: kind.reliability.down_probability for n in made})
        fleet = replace(req, nodes=(*req.nodes, *extra))
        return fleet_availability(fleet, down=down, meets=check, tolerance=tolerance,
                                  max_states=max_states), extra

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
                     reliability: Mapping[str, NodeReliability] | NodeReliability | None = None
                     ) -> SpareKind:
    """The fleet's most common kind of node (ties: more usable memory) as a spare."""
    if not request.nodes:
        raise AvailabilityError("SparesUnreachable", "the fleet has no nodes to copy as spares",
                                field="nodes")
    groups: dict[tuple[Any, ...], list[NodeBudget]] = {}
    for node in request.nodes:
        groups.setdefault(_budget_key(node), []).append(node)
    members = max(groups.values(), key=lambda nodes: (len(nodes), nodes[0].usable_bytes))
    first = members[0]
    if isinstance(reliability, Mapping):
        own = reliability.get(first.node_id, NodeReliability())
    else:
        own = reliability or NodeReliability()
    name = first.node_id.rsplit("-", 1)[0] if "-" in first.node_id else first.node_id
    return SpareKind(name, first, own)


def spares_table(request: PlanningInput | Mapping[str, Any],
                 reliability: Mapping[str, NodeReliability] | NodeReliability | None = None,
                 *, targets: Sequence[float] = SPARE_TARGETS, kinds: Sequence[SpareKind] | None
                 = None, **options: Any) -> pd.DataFrame:
    """Spares needed for each availability target (default 99 %, 99.9 %, 99.99 %), of the
    fleet's most common kind unless ``kinds`` are given. Columns: ``target``,
    ``spare_count`` (NA when unreachable within the limit), ``spares`` (``kind x count``),
    ``availability_lower`` with them, ``cost_per_hour``. ``options`` go to
    :func:`spares_for`."""
    req = as_planning_input(request)
    choices = list(kinds) if kinds else [fleet_spare_kind(req, reliability)]
    rows = []
    for target in targets:
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
