"""One planning run for every view of it: the plan, the candidates table, the
explanation and the stage table from one search.

:func:`plan_request` checks the request and searches once; the candidates, the
explanation and the stage table are worked out from the same searches the first time they
are read (a context the plan did not need is searched then, and only once). The workbench
and the reports use it so that an edit or a report searches once, not once per view.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import pandas as pd

from planner.errors import PlanError
from planner.planning.api import (
    Request,
    Shapes,
    candidates_with,
    no_valid_topology,
    plan_with,
)
from planner.planning.explain import ChoiceExplanation, explain_with
from planner.planning.inputs import PlanningInput, as_planning_input
from planner.planning.plan import Plan
from planner.planning.rules import check_request
from planner.planning.tables import stage_usage


@dataclass(frozen=True, eq=False)
class PlanningResult:
    """A request and everything the planner says about it.

    ``plan`` is ``None`` when nothing fits; ``error`` is then the ``NoValidTopology``
    :class:`~planner.errors.PlanError` that :func:`~planner.planning.plan_topology` raises.
    """

    request: PlanningInput
    plan: Plan | None
    error: PlanError | None
    _shapes: Shapes = field(repr=False)

    def plan_or_raise(self) -> Plan:
        """The plan, or the ``NoValidTopology`` error raised."""
        if self.plan is None:
            assert self.error is not None
            raise self.error
        return self.plan

    @cached_property
    def candidates(self) -> pd.DataFrame:
        """:func:`~planner.planning.candidates` of the request."""
        return candidates_with(self.request, self._shapes)

    @cached_property
    def explanation(self) -> ChoiceExplanation | None:
        """:func:`~planner.planning.explain_choice` of the request; None without a plan."""
        return explain_with(self.request, self._shapes) if self.plan is not None else None

    @cached_property
    def stages(self) -> pd.DataFrame | None:
        """:func:`~planner.planning.stage_usage` of the plan; None without a plan."""
        return stage_usage(self.request, self.plan) if self.plan is not None else None


def plan_request(request: Request) -> PlanningResult:
    """Check and plan ``request`` once (a :class:`PlanningInput` or a plain dict with the
    field names of docs/rules.md §1).

    A request refused before the search (docs/rules.md §2, checks 1-8, and malformed
    input) raises :class:`~planner.errors.PlanError`; a request nothing fits gives a
    result without a plan, whose candidates are all infeasible.

    The entry point for every view of one planning run; for the plan alone,
    :func:`~planner.planning.plan_topology` returns the same :class:`Plan` (this result's
    :meth:`~PlanningResult.plan_or_raise`) and raises ``NoValidTopology`` where this
    returns a result holding it.
    """
    req = as_planning_input(request)
    check_request(req)
    shapes = Shapes(req)
    plan = plan_with(req, shapes)
    return PlanningResult(request=req, plan=plan,
                          error=no_valid_topology(req) if plan is None else None,
                          _shapes=shapes)
