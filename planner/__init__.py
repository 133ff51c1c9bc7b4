"""Capacity planning for splitting large language models across GPU nodes.

The core (``planner.planning``, ``planner.fence``, ``planner.models``, ``planner.units``)
is pure Python with no widget or plotting imports; the workbench, figures, reports and
command line sit on top of it.
"""

from planner.errors import CodedError, InvalidInput, PlanError
from planner.planning import (
    CANDIDATE_COLUMNS,
    NodeBudget,
    Plan,
    PlanningInput,
    PlanningResult,
    Stage,
    candidates,
    node_budgets,
    plan_request,
    plan_topology,
    stage_usage,
)
from planner.units import format_bytes, parse_bytes

__version__ = "0.1.0"

__all__ = [
    "CANDIDATE_COLUMNS",
    "CodedError",
    "InvalidInput",
    "NodeBudget",
    "Plan",
    "PlanError",
    "PlanningInput",
    "PlanningResult",
    "Stage",
    "__version__",
    "candidates",
    "format_bytes",
    "node_budgets",
    "parse_bytes",
    "plan_request",
    "plan_topology",
    "stage_usage",
]
