"""The interactive workbench: edit a model and a fleet in JupyterLab or Voila and watch
the plan change.

``state`` and ``evaluation`` are pure (no widgets): the editable state (what its editors
hold in ``editor_fields``, how typed text reads in ``typed_values``, errors in
``problems``), and what it plans to. ``editor``, ``view`` and ``app`` are the ipywidgets
on top.
"""

import importlib

from planner.workbench.editor_fields import ModelFields, NodeRow, PlanOptions
from planner.workbench.evaluation import (
    Evaluation,
    LimitingNode,
    UnusedNode,
    evaluate,
    fleet_warnings,
)
from planner.workbench.problems import Problem, WorkbenchInputError
from planner.workbench.state import WorkbenchState

# The widgets load only when asked for, so the pure state imports no ipywidgets.
_WIDGETS = {
    "Workbench": "planner.workbench.app",
    "AvailabilityPanel": "planner.workbench.availability_panel",
    "SizingPanel": "planner.workbench.sizing_panel",
    "ProgressBar": "planner.workbench.progress",
}


def __getattr__(name: str) -> object:
    if name in _WIDGETS:
        return getattr(importlib.import_module(_WIDGETS[name]), name)
    raise AttributeError(f"module 'planner.workbench' has no attribute {name!r}")


__all__ = [
    "AvailabilityPanel",
    "Evaluation",
    "LimitingNode",
    "ModelFields",
    "NodeRow",
    "PlanOptions",
    "Problem",
    "ProgressBar",
    "SizingPanel",
    "UnusedNode",
    "Workbench",
    "WorkbenchInputError",
    "WorkbenchState",
    "evaluate",
    "fleet_warnings",
]
