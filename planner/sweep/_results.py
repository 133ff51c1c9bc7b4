"""A sweep's results: the typed result columns, the check of a saved record, the results
table in grid order, and the results written as Parquet or spreadsheet-safe CSV."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd

from planner._validate import shown, spreadsheet_safe
from planner.sweep._columns import (
    ERROR_COLUMNS,
    RESULT_COLUMNS,
    SHARE_COLUMNS,
    SweepError,
    checked_evaluation,
    checked_mapping,
    setting_error,
)
from planner.sweep._grid import SweepGrid
from planner.sweep._store import check_output, write_output


def record_problem(evaluation: str) -> Callable[[Mapping[str, Any]], str | None]:
    """What is wrong with a saved record of ``evaluation`` (``None`` when it could be a
    result): its columns, their types, and their ranges (shares within [0, 1], other
    numbers at least 0, whole numbers within 64 bits)."""
    checked_evaluation(evaluation)
    schema = {**RESULT_COLUMNS[evaluation], **ERROR_COLUMNS}
    allowed = {"scenario", "scenario_key", *schema}

    def problem(record: Mapping[str, Any]) -> str | None:
        unknown = [name for name in record if name not in allowed]
        if unknown:
            return f"unknown column {shown(unknown[0])}"
        for name, dtype in schema.items():
            value = record.get(name)
            if value is None:
                continue
            if dtype == "Int64":
                ok = (isinstance(value, int) and not isinstance(value, bool)
                      and 0 <= value < 2**63)
            elif dtype == "Float64":
                ok = (isinstance(value, int | float) and not isinstance(value, bool)
                      and math.isfinite(value) and value >= 0
                      and (name not in SHARE_COLUMNS or value <= 1))
            elif dtype == "boolean":
                ok = isinstance(value, bool)
            else:
                ok = isinstance(value, str)
            if not ok:
                return f"{name} is {shown(value)}"
        return None

    return problem


class Results:
    """The result columns, one slot per scenario, filled as records come in."""

    def __init__(self, evaluation: str, count: int) -> None:
        self.schema = {**RESULT_COLUMNS[evaluation], **ERROR_COLUMNS}
        self.columns: dict[str, list[Any]] = {name: [None] * count for name in self.schema}
        self.finished = bytearray(count)
        self.done = 0
        self.total = count

    def add(self, record: Mapping[str, Any]) -> None:
        index = record["scenario"]
        for name, column in self.columns.items():
            column[index] = record.get(name)
        if not self.finished[index]:
            self.finished[index] = 1
            self.done += 1


def results_frame(grid: pd.DataFrame | SweepGrid, evaluation: str,
                  columns: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """The grid's columns, ``scenario``, then the evaluation's typed result columns."""
    if not isinstance(grid, pd.DataFrame | SweepGrid):
        raise setting_error("grid")("must be a pandas DataFrame or a SweepGrid", grid)
    schema = {**RESULT_COLUMNS[checked_evaluation(evaluation)], **ERROR_COLUMNS}
    checked_mapping(columns, "columns")
    for name in schema:
        values = columns.get(name)
        if (isinstance(values, str | bytes) or not isinstance(values, Sequence)
                or len(values) != len(grid)):
            raise setting_error("columns")(f"must hold {name} as a list of {len(grid)} values",
                                      values)
    results = pd.DataFrame({name: pd.array(list(columns[name]), dtype=dtype)
                            for name, dtype in schema.items()})
    frame = (grid.to_frame() if isinstance(grid, SweepGrid)
             else grid.reset_index(drop=True).copy())
    frame.insert(0, "scenario", range(len(grid)))
    frame = frame.drop(columns=[name for name in schema if name in frame.columns])
    return pd.concat([frame, results], axis=1)


def write_csv(frame: pd.DataFrame, stream: Any) -> None:
    """``frame`` as CSV to ``stream`` (text or binary), each text cell spreadsheet-safe
    (:func:`planner._validate.spreadsheet_safe`): never a formula, never a character a
    terminal acts on. A grid names files and models as the user wrote them, and a
    scenario's error message quotes them."""
    text_columns = {name: frame[name].map(lambda value: spreadsheet_safe(value)
                                          if isinstance(value, str) else value)
                    for name in frame.columns
                    if frame[name].dtype == object or pd.api.types.is_string_dtype(
                        frame[name].dtype)}
    frame.assign(**text_columns).to_csv(stream, index=False)


def write_results(frame: pd.DataFrame, output: str | Path) -> Path:
    """Parquet for ``.parquet`` (values as they are), CSV for ``.csv``
    (:func:`write_csv`), written atomically through a fresh
    temporary file beside it (``OutputUnavailable`` when it cannot be)."""
    if not isinstance(frame, pd.DataFrame):
        raise setting_error("frame")("must be a pandas DataFrame", frame)
    if not isinstance(output, str | os.PathLike) or not str(output).strip():
        raise setting_error("output")("must be a file path", output)
    path = Path(output)
    if path.suffix not in (".parquet", ".csv"):
        raise SweepError("InvalidGrid", f"output {str(path)!r} must end in .parquet or .csv",
                         path=str(path))
    check_output(path)

    def write(stream: BinaryIO) -> None:
        if path.suffix == ".parquet":
            frame.to_parquet(stream, index=False)
        else:
            write_csv(frame, stream)

    write_output(path, write)
    return path
