"""How often a split topology is up: steady-state availability under node failures.

- :mod:`planner.availability.reliability`: each node's failure rate, repair time and the
  share of time it is down;
- :mod:`planner.availability.states`: the failure states and the probability that the
  surviving nodes have a plan meeting the targets (:func:`fleet_availability`);
- :mod:`planner.availability._spares`: the fewest or cheapest spare nodes that reach an
  availability target.

Pure core: no widgets, no plotting.
"""

from planner.availability._spares import (
    SPARE_TARGETS,
    SpareKind,
    SparesResult,
    catalog_spare_kinds,
    fleet_spare_kind,
    spares_for,
    spares_table,
)
from planner.availability.reliability import (
    DEFAULT_ANNUAL_FAILURE_RATE,
    DEFAULT_REPAIR_HOURS,
    HOURS_PER_YEAR,
    AvailabilityError,
    NodeFigures,
    NodeReliability,
    document_overrides,
    down_probabilities,
    fleet_figures,
    fleet_reliability,
    per_node_reliability,
)
from planner.availability.states import (
    DEFAULT_EXACT_STATES,
    DEFAULT_MAX_STATES,
    DEFAULT_TOLERANCE,
    QUICK_MAX_STATES,
    AvailabilityResult,
    NodeKind,
    Outcome,
    fleet_availability,
    group_kinds,
    plan_survivors,
    resolve_targets,
)
from planner.fleet.document import ReliabilityOverride

__all__ = [
    "DEFAULT_ANNUAL_FAILURE_RATE",
    "DEFAULT_EXACT_STATES",
    "DEFAULT_MAX_STATES",
    "DEFAULT_REPAIR_HOURS",
    "DEFAULT_TOLERANCE",
    "HOURS_PER_YEAR",
    "QUICK_MAX_STATES",
    "SPARE_TARGETS",
    "AvailabilityError",
    "AvailabilityResult",
    "NodeFigures",
    "NodeKind",
    "NodeReliability",
    "Outcome",
    "ReliabilityOverride",
    "SpareKind",
    "SparesResult",
    "catalog_spare_kinds",
    "document_overrides",
    "down_probabilities",
    "fleet_availability",
    "fleet_figures",
    "fleet_reliability",
    "fleet_spare_kind",
    "group_kinds",
    "per_node_reliability",
    "plan_survivors",
    "resolve_targets",
    "spares_for",
    "spares_table",
]
