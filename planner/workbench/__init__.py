"""The interactive workbench: edit a model and a fleet in JupyterLab or Voila and watch
the plan change.

``state`` and ``evaluation`` are pure (no widgets): the editable state, and what it plans
to. ``editor``, ``view`` and ``app`` are the ipywidgets on top.
"""

from planner.workbench.evaluation import (
    Evaluation,
    LimitingNode,
    UnusedNode,
    evaluate,
    fleet_warnings,
)
from planner.workbench.state import (
    ModelFields,
    NodeRow,
    PlanOptions,
    Problem,
    WorkbenchInputError,
    WorkbenchState,
)


def __getattr__(name: str) -> object:
    # The widgets load only when asked for, so the pure state imports no ipywidgets.
    if name == "Workbench":
        from planner.workbench.app import Workbench

        return Workbench
    raise AttributeError(f"module 'planner.workbench' has no attribute {name!r}")


__all__ = [
    "Evaluation",
    "LimitingNode",
    "ModelFields",
    "NodeRow",
    "PlanOptions",
    "Problem",
    "UnusedNode",
    "Workbench",
    "WorkbenchInputError",
    "WorkbenchState",
    "evaluate",
    "fleet_warnings",
]
