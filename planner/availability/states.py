"""The failure states of a fleet and the share of time it meets its targets.

The fleet is **up** in a failure state when ``plan_topology`` on the surviving nodes
returns a plan that meets the targets (:class:`planner.targets.Targets`).

Nodes whose planning fields, down probability ``u`` and speed are equal are
interchangeable: the plan depends on the multiset of surviving budgets, not on which of
the equal nodes survive (node ids only break ties between sets of equal merit,
docs/rules.md §5 rule 4). So a failure state is a vector of down counts ``d_k`` per group
of equal nodes, with probability ``prod_k C(n_k, d_k) u_k^d_k (1 - u_k)^(n_k - d_k)``, and
the survivors of a group are its first ``n_k - d_k`` nodes.

**One plan settles many states.** The planner picks, among every (shape, node set) that
fits, the first in a fixed order that does not depend on the other nodes present. So if
``P`` is the plan of fleet ``F`` and ``P``'s nodes all survive in a smaller fleet
``G`` (``P ⊆ G ⊆ F``), ``P`` is the plan of ``G`` too; and when ``F`` has no plan, no
part of it has. The search therefore works on *boxes* of states (a range of down counts
per group): it plans the box's largest fleet (the fewest down of each group), credits
every state of the box in which that plan's nodes survive with the plan's outcome, and
splits the rest of the box into disjoint boxes (the first group whose plan node is down,
the groups before it keeping theirs), largest probability first. A failure touches one
group and the search reuses the plan wherever the failure misses it, so a fleet of
10,000 nodes is settled in a handful of plans.

Probabilities are exact. A float ``u`` is a dyadic rational ``a / 2^e``, so a group's
probability of ``lo <= d <= hi`` is an integer over ``2^(e n)``; a box's is a product of
such, and the sums are exact integers over a power of two. The search stops when every
state is settled (the result is exact), or, on fleets of more than ``exact_states``
states, once the unsettled probability is below ``tolerance`` or ``max_states`` plans
(or the work bound :data:`planner.limits.MAX_AVAILABILITY_NODE_PLANS`) were made; then
the result is ``[lower, upper]``: lower counts only settled up-states, upper adds every
unsettled state as up, rounded outwards, so the interval holds the exact value.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import pandas as pd

from planner._validate import Fail, instance, integer, number, shown
from planner.availability.reliability import (
    HOURS_PER_YEAR,
    AvailabilityError,
    NodeReliability,
    _invalid,
    down_probabilities,
)
from planner.errors import PlanError
from planner.limits import MAX_AVAILABILITY_NODE_PLANS
from planner.planning import NodeBudget, Plan, PlanningInput, plan_topology
from planner.planning.inputs import as_planning_input
from planner.targets import SpeedEstimator, Targets, TargetsError, require_estimable

DEFAULT_TOLERANCE = 1e-9
# Fleets with at most this many failure states are solved to the end, whatever the
# tolerance, so small fleets get an exact answer.
DEFAULT_EXACT_STATES = 512
DEFAULT_MAX_STATES = 200_000
# For a command or a sweep row: a few hundred plans at most (each settles a box of
# states), about half a minute on large fleets; the interval holds the
# exact value whatever was left unexplored.
QUICK_MAX_STATES = 500
# Hours down a year are given as one number only when the interval pins them to this.
HOURS_RESOLUTION = 0.01


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the surviving nodes of one failure state get: the plan's context (0 when no
    plan exists) and whether the plan meets the targets."""

    context_length: int
    meets_targets: bool
    plan: Plan | None = field(default=None, compare=False)


def _invalid_targets(name: str) -> Fail:
    def fail(problem: str, got: Any) -> TargetsError:
        return TargetsError("InvalidTargets", f"{name}: {problem} (got {shown(got)})",
                            field=name, value=got)

    return fail


def resolve_targets(request: PlanningInput, targets: Targets | None,
                    min_context: int | None, min_lanes: int,
                    estimator: SpeedEstimator | None = None) -> Targets:
    """The targets to judge by, worked out for the request's model: ``targets``, else
    ``min_context`` and ``min_lanes`` (a shorthand for ``Targets(...)``). ``targets``
    other than a :class:`Targets`, or an ``estimator`` other than a
    :class:`SpeedEstimator`, is ``InvalidTargets``."""
    for name, value, kind in (("targets", targets, Targets),
                              ("estimator", estimator, SpeedEstimator)):
        if value is not None:
            instance(value, kind, _invalid_targets(name), f"a {kind.__name__} or None")
    chosen = targets if targets is not None else Targets(minimum_context=min_context,
                                                         minimum_lanes=min_lanes)
    return chosen.for_request(request)


def plan_survivors(request: PlanningInput, survivors: Sequence[NodeBudget],
                   targets: Targets, estimator: SpeedEstimator | None = None) -> Outcome:
    """Plan the surviving nodes; no survivors or no fitting set is context 0, down. The
    plan is judged by ``targets.meets`` with its speed estimate when the targets have a
    TPOT target."""
    if not survivors:
        return Outcome(0, False)
    planned = replace(request, nodes=tuple(survivors))
    try:
        plan = plan_topology(planned)
    except PlanError as error:
        if error.code == "NoValidTopology":
            return Outcome(0, False)
        raise
    estimate = None
    if targets.target_decode_tpot_ms is not None and estimator is not None:
        estimate = estimator(planned, plan)
    return Outcome(plan.context_length, targets.meets(plan, estimate), plan)


# -- the fleet as groups of interchangeable nodes ---------------------------------------


@dataclass(frozen=True, slots=True)
class NodeKind:
    """Interchangeable nodes (in node id order): equal planning fields, equal down
    probability and equal speed."""

    nodes: tuple[NodeBudget, ...]
    down_probability: float

    @property
    def count(self) -> int:
        return len(self.nodes)


def budget_key(node: NodeBudget) -> tuple[Any, ...]:
    """What the planner reads of a node besides its id."""
    return (node.detected_vram_bytes, node.max_vram_bytes, node.runtime_headroom_bytes,
            node.stage_transfer_latency_ms)


def _node_key(request: PlanningInput, estimator: SpeedEstimator | None
              ) -> Any:
    # Beyond the budget: llama.cpp's fixed overhead per node (by node id) and the speed a
    # TPOT target is judged with, both per node.
    overheads = dict(getattr(request.memory_rule, "overhead_bytes", ()) or ())
    speeds = estimator.speeds if estimator is not None else {}

    def key(node: NodeBudget) -> tuple[Any, ...]:
        speed = speeds.get(node.node_id)
        return (*budget_key(node), overheads.get(node.node_id, 0),
                None if speed is None else speed.memory_bandwidth_bytes_per_s)
    return key


def group_kinds(nodes: Sequence[NodeBudget], down: Mapping[str, float],
                key: Any = budget_key) -> list[NodeKind]:
    """Nodes grouped by (``key``, down probability), in first-seen order; each group's
    nodes in node id order."""
    groups: dict[tuple[Any, ...], list[NodeBudget]] = {}
    for node in nodes:
        groups.setdefault((*key(node), down[node.node_id]), []).append(node)
    return [NodeKind(tuple(sorted(members, key=lambda n: n.node_id)), group_key[-1])
            for group_key, members in groups.items()]


class _GroupPmf:
    """The exact distribution of one group's down count: ``P(lo <= d <= hi)`` as an
    integer over ``2^shift``, worked out from the fewer of the range's terms and its
    complement's (a plan uses few nodes, so one of the two is always short)."""

    def __init__(self, count: int, u: float) -> None:
        a, b = Fraction(u).as_integer_ratio()
        self.count, self.a, self.b = count, a, b
        self.shift = (b.bit_length() - 1) * count
        self._terms: dict[int, int] = {}

    def term(self, d: int) -> int:
        found = self._terms.get(d)
        if found is None:
            found = math.comb(self.count, d) * self.a**d * (self.b - self.a) ** (
                self.count - d)
            self._terms[d] = found
        return found

    def mass(self, lo: int, hi: int) -> int:
        inside = hi - lo + 1
        if inside <= self.count + 1 - inside:
            return sum(self.term(d) for d in range(lo, hi + 1))
        outside = itertools.chain(range(0, lo), range(hi + 1, self.count + 1))
        return (1 << self.shift) - sum(self.term(d) for d in outside)


class _Sum:
    """An exact sum of numbers ``n / 2^e``."""

    __slots__ = ("exponent", "numerator")

    def __init__(self) -> None:
        self.numerator = 0
        self.exponent = 0

    def add(self, numerator: int, exponent: int) -> None:
        if exponent > self.exponent:
            self.numerator <<= exponent - self.exponent
            self.exponent = exponent
        self.numerator += numerator << (self.exponent - exponent)

    def at(self, exponent: int) -> int:
        """The numerator over ``2^exponent`` (``exponent`` at least this sum's)."""
        return self.numerator << (exponent - self.exponent)


# A box: (group, lo, hi) for each group whose down count is limited, in group order;
# every other group ranges over all its counts.
Box = tuple[tuple[int, int, int], ...]


# -- the result -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AvailabilityResult:
    """Steady-state availability of a fleet at its targets.

    ``availability`` is set when every failure state was settled (the exact value,
    rounded to the nearest float; ``availability_lower`` and ``availability_upper`` are
    it rounded down and up); otherwise it is ``None``. Either way the exact value lies in
    ``[availability_lower, availability_upper]``.
    ``context_distribution`` maps the planned context (0: no plan) to the probability of
    the settled states that get it; what it lacks of 1 is ``unexplored_mass``.
    ``states_evaluated`` counts the plans made (each settles a box of states).
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
    def hours_down_per_year(self) -> tuple[float, float]:
        """The hours a year below the targets: ``(fewest, most)``, equal when exact."""
        return ((1 - self.availability_upper) * HOURS_PER_YEAR,
                (1 - self.availability_lower) * HOURS_PER_YEAR)

    @property
    def expected_hours_down_per_year(self) -> float | None:
        """The hours a year below the targets when they are known to within
        :data:`HOURS_RESOLUTION` (the middle of the range), else ``None``: a wide
        interval's middle is no estimate."""
        fewest, most = self.hours_down_per_year
        return (fewest + most) / 2 if most - fewest <= HOURS_RESOLUTION else None

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


def _nearest(numerator: int, exponent: int) -> float:
    return numerator / (1 << exponent)  # Python rounds int / int correctly


def _round_down(numerator: int, exponent: int) -> float:
    value = _nearest(numerator, exponent)
    x, y = value.as_integer_ratio()
    if x << exponent > numerator * y:
        value = math.nextafter(value, -math.inf)
    return max(value, 0.0)


def _round_up(numerator: int, exponent: int) -> float:
    value = _nearest(numerator, exponent)
    x, y = value.as_integer_ratio()
    if x << exponent < numerator * y:
        value = math.nextafter(value, math.inf)
    return min(value, 1.0)


class _BoxSearch:
    """The search of the module docstring, for one fleet and its targets."""

    def __init__(self, request: PlanningInput, kinds: list[NodeKind], targets: Targets,
                 estimator: SpeedEstimator | None) -> None:
        self.request = request
        self.kinds = kinds
        self.targets = targets
        self.estimator = estimator
        self.pmfs = [_GroupPmf(kind.count, float(kind.down_probability)) for kind in kinds]
        self.where = {node.node_id: (group, position) for group, kind in enumerate(kinds)
                      for position, node in enumerate(kind.nodes)}
        self.up = _Sum()
        self.settled = _Sum()
        self.contexts: dict[int, _Sum] = {}
        self.plans = 0
        self.planned_nodes = 0

    def mass(self, box: Box) -> tuple[int, int]:
        """The box's probability as ``(numerator, exponent)``."""
        numerator, exponent = 1, 0
        for group, lo, hi in box:
            pmf = self.pmfs[group]
            numerator *= pmf.mass(lo, hi)
            exponent += pmf.shift
        return numerator, exponent

    def settle(self, box: Box, outcome: Outcome | None = None) -> list[Box]:
        """Plan the box's largest fleet (``outcome``: already planned), credit the states
        that plan settles, and return the boxes of the rest."""
        limits = {group: (lo, hi) for group, lo, hi in box}
        self.plans += 1
        if outcome is None:
            survivors = [node for group, kind in enumerate(self.kinds)
                         for node in kind.nodes[:kind.count - limits.get(group, (0, 0))[0]]]
            self.planned_nodes += len(survivors)
            outcome = plan_survivors(self.request, survivors, self.targets, self.estimator)
        else:
            self.planned_nodes += sum(kind.count for kind in self.kinds)
        # How many of each group the plan needs to keep: one past its last node there.
        keep: dict[int, int] = {}
        for node_id in () if outcome.plan is None else outcome.plan.node_ids:
            group, position = self.where[node_id]
            keep[group] = max(keep.get(group, 0), position + 1)
        settled = dict(limits)
        binding = []
        for group in sorted(keep):
            lo, hi = limits.get(group, (0, self.kinds[group].count))
            most_down = self.kinds[group].count - keep[group]
            if most_down < hi:
                settled[group] = (lo, most_down)
                binding.append((group, lo, hi, most_down))
        numerator, exponent = self.mass(tuple(
            (group, lo, hi) for group, (lo, hi) in sorted(settled.items())))
        self.settled.add(numerator, exponent)
        if outcome.meets_targets:
            self.up.add(numerator, exponent)
        self.contexts.setdefault(outcome.context_length, _Sum()).add(numerator, exponent)
        rest = []
        for index, (group, _, hi, most_down) in enumerate(binding):
            parts = dict(limits)
            for earlier, lo, _, kept in binding[:index]:
                parts[earlier] = (lo, kept)
            parts[group] = (most_down + 1, hi)
            rest.append(tuple((g, lo, hi) for g, (lo, hi) in sorted(parts.items())))
        return rest


def fleet_availability(
    request: PlanningInput | Mapping[str, Any],
    reliability: Mapping[str, NodeReliability] | NodeReliability | None = None,
    *,
    targets: Targets | None = None,
    min_context: int | None = None,
    min_lanes: int = 1,
    estimator: SpeedEstimator | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    exact_states: int = DEFAULT_EXACT_STATES,
    max_states: int = DEFAULT_MAX_STATES,
    down: Mapping[str, float] | None = None,
) -> AvailabilityResult:
    """The probability that the surviving nodes have a plan meeting the targets.

    ``reliability`` gives each node's failure rate and repair time (one value for all, a
    mapping by node id, or ``None`` for the defaults); ``down`` gives every node's down
    probability directly instead. ``targets`` (:class:`planner.targets.Targets`, or its
    shorthand ``min_context`` and ``min_lanes``) are what a plan must meet; a TPOT target
    is judged by ``estimator``'s speed estimate (``TpotNotEstimable`` without one).
    Fleets of at most ``exact_states`` failure states are solved exactly; larger ones
    until the unsettled probability is below ``tolerance``, ``max_states`` plans were
    made or the work bound is reached (module docstring).

    Request errors other than "nothing fits" (docs/rules.md §2, checks 1-8) raise as in
    :func:`~planner.planning.plan_topology`; ``InvalidTargets`` for a minimum context
    above the model's native context.
    """
    req = as_planning_input(request)
    tolerance = number(tolerance, _invalid("InvalidTarget", "tolerance"), below=1)
    exact_states = integer(exact_states, _invalid("InvalidTarget", "exact_states"))
    max_states = integer(max_states, _invalid("InvalidTarget", "max_states"), minimum=1)
    judged = resolve_targets(req, targets, min_context, min_lanes, estimator)
    probabilities = _down(req, reliability, down)
    if not req.nodes:
        plan_topology(req)  # the request's own refusal (MissingNodes)
    # Request errors surface here, on the whole fleet, not as a down state.
    whole = plan_survivors(req, req.nodes, judged, estimator)
    require_estimable(judged, req, whole.plan, estimator)
    kinds = group_kinds(req.nodes, probabilities, _node_key(req, estimator))
    search = _BoxSearch(req, kinds, judged, estimator)
    total_states = math.prod(kind.count + 1 for kind in kinds)
    exhaustive = total_states <= exact_states
    tol_num, tol_den = Fraction(tolerance).as_integer_ratio()
    heap: list[tuple[float, int, Box]] = [(-1.0, 0, ())]
    tie = itertools.count(1)
    while heap:
        if not exhaustive:
            exponent = max(search.settled.exponent, 0)
            if (search.settled.at(exponent) * tol_den
                    >= ((tol_den - tol_num) << exponent)
                    or search.plans >= max_states
                    or search.planned_nodes >= MAX_AVAILABILITY_NODE_PLANS):
                break
        _, _, box = heapq.heappop(heap)
        for part in search.settle(box, whole if not box else None):
            numerator, exponent = search.mass(part)
            if numerator:
                heapq.heappush(heap, (-_nearest(numerator, exponent), next(tie), part))
    return _result(search, not heap, len(req.nodes))


def _down(req: PlanningInput, reliability: Any, down: Mapping[str, float] | None
          ) -> dict[str, float]:
    if down is None:
        return down_probabilities(req.nodes, reliability)
    if not isinstance(down, Mapping):
        raise AvailabilityError("InvalidReliability", "down must map node ids to down "
                                "probabilities", field="down")
    ids = {node.node_id for node in req.nodes}
    missing = sorted(ids - set(down))
    extra = sorted(set(map(str, down)) - ids)
    if missing or extra:
        which = (f"misses node {missing[0]!r}" if missing
                 else f"names node {extra[0]!r}, which is not in the fleet")
        raise AvailabilityError("InvalidReliability", f"down {which}; give every node's "
                                "down probability", field="down",
                                node_id=(missing or extra)[0])
    return {node_id: float(number(u, _invalid(
        "InvalidReliability", "down", f"down probability of node {node_id!r}", node_id),
        maximum=1)) for node_id, u in down.items()}


def _result(search: _BoxSearch, finished: bool, node_count: int) -> AvailabilityResult:
    exponent = max([search.settled.exponent, search.up.exponent,
                    *(total.exponent for total in search.contexts.values())])
    whole = 1 << exponent
    settled, up = search.settled.at(exponent), search.up.at(exponent)
    distribution = {context: _nearest(total.at(exponent), exponent)
                    for context, total in search.contexts.items() if total.numerator}
    if finished:
        return AvailabilityResult(_nearest(up, exponent), _round_down(up, exponent),
                                  _round_up(up, exponent), search.plans, distribution, 0.0,
                                  node_count)
    down_settled = settled - up
    return AvailabilityResult(None, _round_down(up, exponent),
                              _round_up(whole - down_settled, exponent), search.plans,
                              distribution, _round_up(whole - settled, exponent),
                              node_count)
