"""What a saved result is matched by: each scenario's key, from its row and a fingerprint of
the files it reads, so an edited fleet file or catalog is evaluated again instead of
resumed from a stale result."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from planner.errors import CodedError
from planner.sweep._columns import checked_evaluation, checked_mapping
from planner.sweep._evaluators import Documents
from planner.sweep._grid import Rows
from planner.sweep._store import file_fingerprint


def scenario_key(evaluation: str, row: Mapping[str, Any],
                 inputs: Mapping[str, Any] | None = None) -> str:
    """What a saved result is matched by: the evaluation, the row, and ``inputs``, what
    identifies the files the row names (so an edited fleet file or catalog is evaluated
    again instead of resumed from a stale result)."""
    checked_evaluation(evaluation)
    checked_mapping(row, "row")
    if inputs is not None:
        checked_mapping(inputs, "inputs")
    text = json.dumps([evaluation, sorted(row.items()), sorted((inputs or {}).items())],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class Keys:
    """Each scenario's key, from its row and a fingerprint of the files it reads (one
    per fleet and catalog, made once)."""

    def __init__(self, evaluation: str, rows: Rows, documents: Documents) -> None:
        self.evaluation = evaluation
        self.rows = rows
        self.documents = documents
        self._inputs: dict[tuple[Any, Any], str] = {}

    def inputs(self, row: Mapping[str, Any]) -> str:
        where = (row.get("fleet"), row.get("catalog"))
        if where not in self._inputs:
            found: dict[str, Any] = {}
            if where[0] is not None:
                document = self.documents[where[0]]
                if isinstance(document, CodedError):
                    found["fleet"] = document.to_dict()
                else:
                    found["fleet"] = {**document.to_dict(), "source": None}
                    gguf = document.model.gguf_path(document.base_dir)
                    if gguf is not None:
                        found["gguf"] = file_fingerprint(gguf)
            if where[1] is not None:
                found["catalog"] = file_fingerprint(where[1])
            text = json.dumps(found, sort_keys=True, default=str)
            self._inputs[where] = hashlib.sha256(text.encode()).hexdigest()
        return self._inputs[where]

    def of(self, index: int, row: Mapping[str, Any]) -> str:
        return scenario_key(self.evaluation, row, {"inputs": self.inputs(row)})

    def current(self, index: int) -> str | None:
        """The key scenario ``index`` has now; ``None`` for an index outside the grid."""
        if not 0 <= index < self.rows.count:
            return None
        return self.of(index, self.rows[index])
