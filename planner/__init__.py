"""Capacity planning for splitting large language models across GPU nodes.

The names below are the package's public entry points: plan a request or a fleet file,
explain the choice, read models and the GPU catalog, and ask the fleet questions
(availability, sizing). Each module's own names are one level down
(``planner.sweep.sweep``, ``planner.fence.ClaimFence``, ``planner.workbench.Workbench``).

The core (``planner.planning``, ``planner.fence``, ``planner.models``, ``planner.units``
and the modules named here) is pure Python with no widget or plotting imports; the
workbench, figures, reports and command line sit on top of it.
"""

from importlib import metadata as _metadata

from planner.availability import NodeReliability, fleet_availability, spares_for
from planner.errors import CodedError, InvalidInput, PlanError
from planner.fleet import FleetDocument, example_fleet, load_fleet, save_fleet
from planner.models import GpuModel, ModelSpec, list_presets, load_gpu_catalog, load_preset
from planner.planning import (
    CANDIDATE_COLUMNS,
    ChoiceExplanation,
    NodeBudget,
    Plan,
    PlanningInput,
    PlanningResult,
    Stage,
    candidates,
    explain_choice,
    node_budgets,
    plan_request,
    plan_topology,
    stage_usage,
)
from planner.sizing import SizingTargets, size_fleet
from planner.units import format_bytes, parse_bytes, parse_context, parse_latency_ms

try:
    # The one place the version is written is pyproject.toml; the installed package's
    # metadata carries it here.
    __version__: str = _metadata.version("planner")
except _metadata.PackageNotFoundError:  # imported from a source tree never installed
    __version__ = "0+unknown"

__all__ = [
    "CANDIDATE_COLUMNS",
    "ChoiceExplanation",
    "CodedError",
    "FleetDocument",
    "GpuModel",
    "InvalidInput",
    "ModelSpec",
    "NodeBudget",
    "NodeReliability",
    "Plan",
    "PlanError",
    "PlanningInput",
    "PlanningResult",
    "SizingTargets",
    "Stage",
    "__version__",
    "candidates",
    "example_fleet",
    "explain_choice",
    "fleet_availability",
    "format_bytes",
    "list_presets",
    "load_fleet",
    "load_gpu_catalog",
    "load_preset",
    "node_budgets",
    "parse_bytes",
    "parse_context",
    "parse_latency_ms",
    "plan_request",
    "plan_topology",
    "save_fleet",
    "size_fleet",
    "spares_for",
    "stage_usage",
]
