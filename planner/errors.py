"""The package's one error hierarchy.

Every error the package raises is a :class:`CodedError`: a stable ``code`` (the name
docs/rules.md gives it, where it names one), a ``message`` a person can act on, and the
values behind the message in ``details``. Each class lists the codes it may carry in ``codes``; a
code belongs to exactly one class (docs/errors.md lists them all), so
``error.code`` alone tells what went wrong.

The whole tree, each class under its parent, with the module that defines it (the
command-line and workbench errors included; ``tests/test_errors.py`` fails when this
drawing and the classes differ)::

    * CodedError (base)          planner.errors
      * AvailabilityError        planner.availability.reliability
      * BenchError               planner.llamacpp.bench_output
      * FenceError (base)        planner.fence.errors
        * CheckConfigError       planner.fence.check.configuration
        * InvalidFenceInput      planner.fence.errors
        * SimulationError        planner.fence.errors
        * StaleCheckResults      planner.fence.check.report
        * StateBudgetExceeded    planner.fence.check.exploration
        * UnknownScenario        planner.fence.errors
      * FleetFileError           planner.fleet._errors
      * LaunchError              planner.llamacpp.launch
      * LlamaCppRunError         planner.llamacpp.runner
      * LogError                 planner.llamacpp.log
      * MemoryModelError         planner.llamacpp.settings
      * ModelError               planner.models.spec
      * PerformanceError         planner.performance._errors
      * PlanError                planner.errors
        * InvalidInput           planner.errors
      * RpcDiscoveryError        planner.llamacpp.rpc
      * SimulationLimitError     planner.simulation
      * SizingError              planner.sizing._targets
      * SweepError               planner.sweep._columns
      * SweepOutputError         planner.sweep._store
      * TargetsError             planner.targets
      * UnitError                planner.units
        * ContextError           planner.units
        * LatencyError           planner.units
      * UserError                planner.cli._common
      * VerifyError              planner.llamacpp.verify
      * WorkbenchInputError      planner.workbench.problems

A class marked ``(base)`` carries no code of its own and is only there to be caught; every
other class carries the codes docs/errors.md lists against it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from planner._validate import shown


def _rebuild(cls: type[CodedError], args: tuple[Any, ...], state: dict[str, Any]) -> CodedError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class CodedError(ValueError):
    """Base of the package's errors: a stable ``code``, a ``message`` a person can act
    on, and the values behind it in ``details``.

    ``codes`` are the codes this class (not its subclasses) may carry; a class without
    codes is only a base to catch.
    """

    codes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, code: str, message: str, **details: Any) -> None:
        if code not in type(self).codes:
            # A code outside the table would break the promise that a code names one
            # kind of failure; this is a programming error, found by the tests.
            raise TypeError(f"{type(self).__name__} has no code {code!r}; "
                            f"its codes are {', '.join(type(self).codes) or 'none'}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take other constructor arguments; rebuild from the attributes so
        # errors cross process boundaries (the checker's worker pool) intact.
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.details}


class PlanError(CodedError):
    """Planning failed or the request was refused (docs/rules.md §2).

    Malformed requests raise the subclass :class:`InvalidInput`.
    """

    codes: ClassVar[tuple[str, ...]] = (
        "MissingNativeContext",
        "MissingLayers",
        "MissingModelWeights",
        "MissingKvBytesPerToken",
        "MissingNodes",
        "ContextExceedsNative",
        "ContextBelowMinimum",
        "ZeroParallelLanes",
        "NoValidTopology",
        "PlanMismatch",
        "TooManyNodes",
        "SearchTooLarge",
    )


class InvalidInput(PlanError):
    """A request that is malformed: wrong type, negative, duplicated or unknown.

    ``field`` is the dotted path of the offending value (``nodes[2].max_vram_bytes``),
    ``node_id`` the node it belongs to (when it belongs to one) and ``value`` what was given.
    """

    codes = ("InvalidInput",)

    def __init__(
        self,
        field: str,
        problem: str,
        *,
        value: Any = None,
        node_id: str | None = None,
    ) -> None:
        where = f"{field} of node {shown(node_id)}" if node_id is not None else field
        got = f" (got {shown(value)})" if value is not None else ""
        super().__init__(
            "InvalidInput",
            f"{where}: {problem}{got}",
            field=field,
            node_id=node_id,
            value=value,
        )
        self.field = field
        self.node_id = node_id
        self.value = value
