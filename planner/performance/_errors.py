"""The speed estimate's one error type and the checks of its plain inputs."""

from __future__ import annotations

from typing import Any

from planner._validate import Fail, integer, number, shown
from planner.errors import CodedError


class PerformanceError(CodedError):
    """A speed estimate that cannot be made.

    ``code`` is stable: ``InvalidPerformanceInput`` (a bad efficiency, bandwidth, setting or
    model figure, or one past its physical bound, naming the field), ``MissingNodeSpeed``
    (a stage's node has no memory bandwidth; ``node_id`` names it),
    ``PromptExceedsContext`` (a prompt, after the cached tokens before it, longer than
    the context it is estimated in) or ``InvalidCalibration`` (a calibration file that
    cannot be used, naming the field).
    """

    codes = ("InvalidPerformanceInput", "MissingNodeSpeed", "PromptExceedsContext",
             "InvalidCalibration")


def bad(name: str) -> Fail:
    return lambda problem, value: PerformanceError(
        "InvalidPerformanceInput", f"{name}: {problem} (got {shown(value)})",
        field=name, value=value)


def positive(value: Any, name: str) -> int:
    return integer(value, bad(name), minimum=1)


def check_efficiency(efficiency: Any, name: str = "bandwidth_efficiency") -> float:
    return float(number(efficiency, bad(name), above=0, maximum=1))

