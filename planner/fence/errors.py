"""Exceptions raised by the fence package.

Rejections are not errors: a refused claim or load is an ordinary
:class:`~planner.fence.claims.ClaimDecision` with a reason code. These exceptions are
for input that cannot be judged at all (a term that is not an integer, an unknown
field, an event scheduled for a node the simulation does not have).
"""

from __future__ import annotations

from typing import Any

from planner._validate import Fail, shown
from planner.errors import CodedError


class FenceError(CodedError):
    """Base class: each subclass has one stable code; ``message`` names what to fix."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(type(self).codes[0] if type(self).codes else "", message, **details)


class InvalidFenceInput(FenceError):
    """A claim, load, stop or count that is malformed (wrong type, negative, unknown field).

    ``field`` is the offending field (``coordinator_term``), ``value`` what was given.
    """

    codes = ("InvalidFenceInput",)

    def __init__(self, field: str, problem: str, *, value: Any = None, where: str = "") -> None:
        place = f"{where}.{field}" if where else field
        got = f" (got {shown(value)})" if value is not None else ""
        super().__init__(f"{place}: {problem}{got}", field=place, value=value)
        self.field = place
        self.value = value


def bad_input(field: str, where: str = "") -> Fail:
    """The :data:`planner._validate.Fail` that raises :class:`InvalidFenceInput`."""
    return lambda problem, value: InvalidFenceInput(field, problem, value=value, where=where)


class SimulationError(FenceError):
    """The simulation was configured inconsistently (unknown node, event in the past, ...)."""

    codes = ("InvalidSimulation",)


class UnknownScenario(FenceError):
    """A scenario name or number that is not one of the design's scenarios 1-10."""

    codes = ("UnknownScenario",)
