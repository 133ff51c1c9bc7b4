"""The error every fleet-file problem raises: a code, the file and line, the field."""

from __future__ import annotations

from planner._validate import shown
from planner.errors import CodedError


class FleetFileError(CodedError):
    """A fleet file (or fleet document) that cannot be read, written or resolved.

    ``path`` is the file, ``line`` the 1-based line when known, ``field`` the dotted
    field (``nodes[2].vram``; the index is the entry in the file) and ``node_id`` the
    node it belongs to.
    """

    codes = (
        "FileNotFound",
        "UnreadableFile",
        "UnsupportedFormat",
        "InvalidToml",
        "InvalidJson",
        "UnknownField",
        "MissingField",
        "InvalidField",
        "DuplicateNodeId",
        "ModelUnavailable",
        "WriteFailed",
        "CommentsWouldBeLost",
        "WouldOverwrite",
    )

    def __init__(
        self,
        code: str,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(code, message, path=path, line=line, field=field, node_id=node_id)
        self.path = path
        self.line = line
        self.field = field
        self.node_id = node_id

    def _render(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path + (f":{self.line}" if self.line is not None else "") + ": "
        elif self.line is not None:
            where = f"line {self.line}: "
        subject = ""
        if self.field is not None:
            subject = self.field
            if self.node_id is not None:
                subject += f" (node {shown(self.node_id)})"
            subject += ": "
        elif self.node_id is not None:
            subject = f"node {shown(self.node_id)}: "
        return f"{where}{subject}{self.message}"

    def __str__(self) -> str:
        return self._render()

    def located(self, path: str | None = None, line: int | None = None) -> FleetFileError:
        """The same error with the file and line filled in where they were unknown."""
        return FleetFileError(
            self.code,
            self.message,
            path=self.path if self.path is not None else path,
            line=self.line if self.line is not None else line,
            field=self.field,
            node_id=self.node_id,
        )
