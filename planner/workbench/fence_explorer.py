"""Widgets for exploring the claim fence: decisions, quorum, and step-through runs.

- :class:`ClaimExplorer`: edit a stored claim and an incoming claim, see the stage's
  decision and the branch of the claim flowchart that decides it;
- :class:`LoadExplorer`: the same for ``LoadStage`` against a stored claim;
- :class:`QuorumExplorer`: sliders for planned stages and accepts;
- :class:`EventStepper`: step through any event log on a sequence chart;
  :class:`ScenarioStepper` runs the design's scenarios 1-10 in it and
  :class:`CounterexampleStepper` the model checker's counterexamples;
- :class:`ScenarioTable`: every scenario's expected and actual outcome, in full;
- :class:`CheckResults`: the model checker's saved results, or a check in the background
  when they are stale;
- :class:`Folded`: a titled section made the first time it is opened, and
  :class:`ScenarioSection`, one scenario's stepper in it: a page with many steppers draws
  only the charts a person opens.

The rules come from :mod:`planner.fence` and the figures from
:mod:`planner.figures.fence`; nothing here decides anything itself. Every widget can be
driven from code (set a value, read ``decision`` or ``html``), which is how it runs
headless.

Each lives in a module of its own (:mod:`~planner.workbench._fence_claims`,
:mod:`~planner.workbench._fence_quorum`, :mod:`~planner.workbench._fence_steppers`,
:mod:`~planner.workbench._fence_results`, what they share in
:mod:`~planner.workbench._fence_widgets`); this module gathers them for one import.
"""

from planner.workbench._fence_claims import (
    CLAIM_FIELDS,
    CLAIM_PRESETS,
    LOAD_FIELDS,
    LOAD_PRESETS,
    STORED_FIELDS,
    ClaimExplorer,
    ClaimPreset,
    LoadExplorer,
    LoadPreset,
)
from planner.workbench._fence_quorum import QuorumExplorer
from planner.workbench._fence_results import CheckResults, ScenarioTable
from planner.workbench._fence_steppers import (
    CounterexampleStepper,
    EventStepper,
    Folded,
    ScenarioSection,
    ScenarioStepper,
)
from planner.workbench._fence_widgets import STYLE

__all__ = [
    "CLAIM_FIELDS",
    "CLAIM_PRESETS",
    "LOAD_FIELDS",
    "LOAD_PRESETS",
    "STORED_FIELDS",
    "STYLE",
    "CheckResults",
    "ClaimExplorer",
    "ClaimPreset",
    "CounterexampleStepper",
    "EventStepper",
    "Folded",
    "LoadExplorer",
    "LoadPreset",
    "QuorumExplorer",
    "ScenarioSection",
    "ScenarioStepper",
    "ScenarioTable",
]
