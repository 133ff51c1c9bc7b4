"""A fleet file's availability, as ``planner availability`` and the workbench's panel
both work it out: each node's figures (its own, fleet-wide, its catalog kind's, the
defaults), the targets the file states with any given on top, and the speed estimate
that judges a TPOT target."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from planner.availability.reliability import NodeFigures, NodeReliability, fleet_figures
from planner.availability.states import (
    DEFAULT_TOLERANCE,
    QUICK_MAX_STATES,
    AvailabilityResult,
    fleet_availability,
)
from planner.fleet.document import FleetDocument
from planner.planning import PlanningInput
from planner.targets import SpeedEstimator, Targets, plan_or_none


@dataclass(frozen=True, slots=True)
class FleetAvailability:
    """The answer for one fleet: the ``result``, the ``targets`` it was judged by (the
    minimum context worked out), each node's ``figures`` and where they came from, and
    the speed ``estimator`` that judged a TPOT target."""

    result: AvailabilityResult
    targets: Targets
    figures: dict[str, NodeFigures]
    estimator: SpeedEstimator
    missed_with_every_node_up: tuple[str, ...] = ()
    """The targets the plan of the whole fleet misses (:meth:`Targets.missed`): when
    any, no failure is to blame for the time below the targets."""

    @property
    def reliability(self) -> dict[str, NodeReliability]:
        """Each node's failure figures, by node id."""
        return {node_id: figures.reliability for node_id, figures in self.figures.items()}


def fleet_file_availability(
    document: FleetDocument,
    request: PlanningInput | None = None,
    *,
    catalog: Sequence[Any],
    annual_failure_rate: float | None = None,
    repair_hours: float | None = None,
    minimum_context: int | None = None,
    minimum_lanes: int = 1,
    tolerance: float = DEFAULT_TOLERANCE,
    max_states: int = QUICK_MAX_STATES,
) -> FleetAvailability:
    """The availability of ``document``'s fleet (planned as ``request``, default the
    document's own request under the design rule). ``annual_failure_rate`` and
    ``repair_hours`` apply to nodes without their own (``--afr``, ``--repair-hours``);
    ``minimum_context`` and ``minimum_lanes`` go on top of the targets the file states.
    Raises as :func:`~planner.availability.fleet_availability` does."""
    request = document.to_request() if request is None else request
    figures = fleet_figures(request.nodes, catalog=catalog, overrides=document.reliability,
                            annual_failure_rate=annual_failure_rate,
                            repair_hours=repair_hours)
    targets = Targets.from_request(request, minimum_context=minimum_context,
                                   minimum_lanes=minimum_lanes).for_request(request)
    estimator = SpeedEstimator.for_document(document, catalog)
    reliability = {node_id: node.reliability for node_id, node in figures.items()}
    result = fleet_availability(request, reliability, targets=targets, estimator=estimator,
                                tolerance=tolerance, max_states=max_states)
    whole = plan_or_none(request)
    missed = () if whole is None else tuple(targets.missed(whole, estimator(request, whole)))
    return FleetAvailability(result, targets, figures, estimator, missed)
