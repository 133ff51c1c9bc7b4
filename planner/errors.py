"""Exceptions raised by the planner core.

Every error carries a stable ``code`` (the SPEC's name for it) and a message a
person can act on. ``details`` holds the numbers behind the message as plain data.
"""

from __future__ import annotations

from typing import Any


class CodedError(ValueError):
    """Base of the package's errors: a stable ``code``, a ``message`` a person can act
    on, and the values behind it in ``details``."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.details}


class PlanError(CodedError):
    """Planning failed or the request was refused.

    ``code`` is one of the SPEC section 2 names (``MissingNativeContext``,
    ``MissingLayers``, ``MissingModelWeights``, ``MissingKvBytesPerToken``,
    ``MissingNodes``, ``ContextExceedsNative``, ``ContextBelowMinimum``,
    ``ZeroParallelLanes``, ``NoValidTopology``) or ``InvalidInput`` for
    malformed requests.
    """


class InvalidInput(PlanError):
    """A request that is malformed: wrong type, negative, duplicated or unknown.

    ``field`` is the dotted path of the offending value (``nodes[2].max_vram_bytes``),
    ``node_id`` the node it belongs to (when it belongs to one) and ``value`` what was given.
    """

    def __init__(
        self,
        field: str,
        problem: str,
        *,
        value: Any = None,
        node_id: str | None = None,
    ) -> None:
        where = f"{field} of node {node_id!r}" if node_id is not None else field
        shown = f" (got {value!r})" if value is not None else ""
        super().__init__(
            "InvalidInput",
            f"{where}: {problem}{shown}",
            field=field,
            node_id=node_id,
            value=value,
        )
        self.field = field
        self.node_id = node_id
        self.value = value
