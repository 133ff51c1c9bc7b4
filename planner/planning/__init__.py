"""Split-topology planning (docs/rules.md §1-§7). Pure: no widgets, no plotting."""

from planner.planning._result import PlanningResult, plan_request
from planner.planning.api import CANDIDATE_COLUMNS, candidates, plan_topology
from planner.planning.explain import ChoiceExplanation, HigherContext, ShapeOption, explain_choice
from planner.planning.inputs import NodeBudget, PlanningInput, as_planning_input
from planner.planning.memory_rule import DESIGN_RULE, DesignRule, LayerCosts, MemoryRule
from planner.planning.plan import Plan, Stage
from planner.planning.tables import STAGE_PART_NAMES, node_budgets, plan_reserves, stage_usage
from planner.planning.warnings import FleetWarning, fleet_warnings

__all__ = [
    "CANDIDATE_COLUMNS",
    "DESIGN_RULE",
    "STAGE_PART_NAMES",
    "ChoiceExplanation",
    "DesignRule",
    "FleetWarning",
    "HigherContext",
    "LayerCosts",
    "MemoryRule",
    "NodeBudget",
    "Plan",
    "PlanningInput",
    "PlanningResult",
    "ShapeOption",
    "Stage",
    "as_planning_input",
    "candidates",
    "explain_choice",
    "fleet_warnings",
    "node_budgets",
    "plan_request",
    "plan_reserves",
    "plan_topology",
    "stage_usage",
]
