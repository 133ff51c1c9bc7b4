"""The cheapest fleets that meet a model's targets (pure: no widgets, no plotting).

- :mod:`planner.sizing._targets`: the question: targets, the kinds to size with and their
  prices, the nodes of a fleet;
- :mod:`planner.sizing.search`: the exact search (:func:`size_fleet`);
- :mod:`planner.sizing._result`: the fleets found, their tables and the Pareto front.
"""

from planner.sizing._result import (
    SIZING_COLUMNS,
    SizedFleet,
    SizingResult,
    fleets_frame,
    pareto_front,
)
from planner.sizing._targets import (
    PRICE_KIND_TEXT,
    SizingError,
    SizingTargets,
    fleet_node_kinds,
    fleet_nodes,
    select_kinds,
)
from planner.sizing.search import size_fleet

__all__ = [
    "PRICE_KIND_TEXT",
    "SIZING_COLUMNS",
    "SizedFleet",
    "SizingError",
    "SizingResult",
    "SizingTargets",
    "fleet_node_kinds",
    "fleet_nodes",
    "fleets_frame",
    "pareto_front",
    "select_kinds",
    "size_fleet",
]
