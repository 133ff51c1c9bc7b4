"""How the workbench names what is wrong: :class:`WorkbenchInputError` for text in an
editor that cannot be read, and :class:`Problem`, how any error is shown instead of a
plan (a stable code, a message, the field and node it is about)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner._validate import shown
from planner.errors import CodedError


class WorkbenchInputError(CodedError):
    """A value in the editor that cannot be read.

    ``field`` names the request field (``nodes[2].vram``, ``model_weight_bytes``),
    ``node_id`` the node the value belongs to and ``value`` what was typed.
    """

    codes = ("InvalidEditorValue",)

    def __init__(self, field_name: str, problem: str, *, value: str | None = None,
                 node_id: str | None = None, label: str | None = None) -> None:
        where = label or field_name
        got = f" (got {shown(value)})" if value is not None else ""
        super().__init__("InvalidEditorValue", f"{where}: {problem}{got}", field=field_name,
                         node_id=node_id, value=value)
        self.field = field_name
        self.node_id = node_id
        self.value = value


@dataclass(frozen=True, slots=True)
class Problem:
    """An error shown in the workbench instead of a plan: a stable code and a message."""

    code: str
    message: str
    field: str | None = None
    node_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "field": self.field,
                "node_id": self.node_id}

    @classmethod
    def from_exception(cls, error: Exception) -> Problem:
        """The problem behind any error the planner, the fleet files or the models raise."""
        code = str(getattr(error, "code", type(error).__name__))
        message = str(getattr(error, "message", None) or error)
        field_name = getattr(error, "field", None)
        node_id = getattr(error, "node_id", None)
        if hasattr(error, "path") and getattr(error, "path", None):
            message = str(error)
        return cls(code, message, field_name if isinstance(field_name, str) else None,
                   node_id if isinstance(node_id, str) else None)

