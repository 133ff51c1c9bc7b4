"""The grid of a sweep: a DataFrame of scenarios or a :class:`SweepGrid` of axes whose rows
are built as they are taken, every value checked against the package's limits first, and
grid files."""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from planner._validate import Fail, integer, number, shown, text
from planner.availability import DEFAULT_MAX_STATES
from planner.fleet import FleetFileError
from planner.fleet.files import read_regular_file
from planner.limits import (
    MAX_BYTES,
    MAX_CONTEXT,
    MAX_GRID_TEXT,
    MAX_LANES,
    MAX_LATENCY_MS,
    MAX_NODES,
    MAX_SWEEP_SCENARIOS,
)
from planner.sweep._columns import EVALUATIONS, GRID_COLUMNS, SweepError, setting_error

# (minimum, maximum) of the whole-number columns: the limits of what each feeds.
INT_COLUMNS: dict[str, tuple[int, int]] = {
    "min_context": (0, MAX_CONTEXT), "min_lanes": (0, MAX_LANES),
    "target_tpot_ms": (0, MAX_LATENCY_MS), "seed": (0, 2**63 - 1),
    "failures_tolerated": (0, MAX_NODES), "max_states": (1, DEFAULT_MAX_STATES),
    "file_bytes": (1, MAX_BYTES)}
# Finite numbers of at least 0; a horizon above 0.
NUMBER_COLUMNS = ("annual_failure_rate", "repair_hours", "horizon_hours", "price_scale")
TEXT_COLUMNS = ("fleet", "model", "kv_cache_type", "catalog", "kinds")


@dataclass(frozen=True, slots=True)
class SweepGrid:
    """Every combination of the ``axes`` values (the first axis varies slowest), with the
    ``fixed`` values in every row: a grid given by its axes, whose rows a sweep builds
    one at a time as it takes them. A grid of a million scenarios is never a million rows
    before its first is evaluated; :meth:`to_frame` builds them all as a DataFrame.

    Checked when made: known columns only, each axis a non-empty list of numbers or text,
    a column either an axis or fixed, at most
    :data:`~planner.limits.MAX_SWEEP_SCENARIOS` combinations (counted before any row is
    built), and every distinct value within the package's limits (``InvalidGrid`` naming
    the first row that holds it)."""

    axes: dict[str, tuple[Any, ...]]
    fixed: dict[str, Any]

    def __init__(self, axes: Mapping[str, Sequence[Any]],
                 fixed: Mapping[str, Any] | None = None) -> None:
        if not isinstance(axes, Mapping) or (fixed is not None
                                             and not isinstance(fixed, Mapping)):
            raise SweepError("InvalidGrid", "the axes and the fixed values must be mappings "
                             "of column to values", value=shown(axes))
        for name, values in axes.items():
            if (isinstance(values, str | bytes) or not isinstance(values, Sequence)
                    or not values):
                raise SweepError("InvalidGrid", f"axis {shown(name)} must be a non-empty "
                                 "list of values", column=name)
        fixed = dict(fixed or {})
        for name in [*axes, *fixed]:
            if name not in GRID_COLUMNS:
                raise SweepError("InvalidGrid", f"unknown grid column {shown(name)}; "
                                 f"columns are {', '.join(GRID_COLUMNS)}", column=name)
            if name in axes and name in fixed:
                raise SweepError("InvalidGrid", f"column {shown(name)} is both an axis and "
                                 "a fixed value; give it once", column=name)
        count = math.prod(len(values) for values in axes.values())
        if count > MAX_SWEEP_SCENARIOS:
            sizes = " x ".join(f"{len(values):,}" for values in axes.values())
            raise SweepError("InvalidGrid", f"the axes make {sizes} = {count:,} scenarios; "
                             f"a sweep takes at most {MAX_SWEEP_SCENARIOS:,}",
                             scenarios=count)
        object.__setattr__(self, "axes", {name: tuple(values) for name, values in axes.items()})
        object.__setattr__(self, "fixed", fixed)
        self._check()

    def _check(self) -> None:
        stride = len(self)
        for name, values in self.axes.items():
            stride //= len(values)
            if not all(_hashable(value) for value in values):
                raise SweepError("InvalidGrid", f"axis {shown(name)}: values must be numbers "
                                 "or text", column=name)
            seen: set[tuple[type, Any]] = set()
            for position, value in enumerate(values):
                if (type(value), value) not in seen and not is_missing(value):
                    seen.add((type(value), value))
                    _check_value(name, value, _bad_cell(position * stride, name))
        for name, value in self.fixed.items():
            if not is_missing(value):
                _check_value(name, value, _bad_cell(0, name))

    def __len__(self) -> int:
        return math.prod(len(values) for values in self.axes.values())

    @property
    def columns(self) -> list[str]:
        return [*self.axes, *self.fixed]

    def row(self, index: int) -> dict[str, Any]:
        """Scenario ``index``'s values (missing ones left out), as a DataFrame row of
        :meth:`to_frame` gives them to a sweep."""
        found = {}
        for name, values in reversed(self.axes.items()):
            index, position = divmod(index, len(values))
            found[name] = values[position]
        found.update(self.fixed)
        return {name: _clean(name, found[name]) for name in GRID_COLUMNS
                if name in found and not is_missing(found[name])}

    def distinct(self, name: str) -> list[Any]:
        """The distinct values of a column, missing ones left out."""
        values = self.axes.get(name, (self.fixed[name],) if name in self.fixed else ())
        return list(dict.fromkeys(v for v in values if not is_missing(v)))

    def to_frame(self) -> pd.DataFrame:
        """The whole grid, one row a scenario."""
        names = list(self.axes)
        grid = (pd.MultiIndex.from_product([list(self.axes[n]) for n in names], names=names)
                .to_frame(index=False) if names else pd.DataFrame(index=range(1)))
        for name, value in self.fixed.items():
            grid[name] = pd.Series([value] * len(grid))
        return grid

    def to_dict(self) -> dict[str, Any]:
        return {"axes": {name: list(values) for name, values in self.axes.items()},
                "fixed": dict(self.fixed)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepGrid:
        if not isinstance(data, Mapping) or set(data) - {"axes", "fixed"}:
            raise SweepError("InvalidGrid", "a grid is a mapping of axes and fixed values",
                             value=shown(data))
        return cls(data.get("axes", {}), data.get("fixed"))


def grid_from_axes(axes: Mapping[str, Sequence[Any]],
                   fixed: Mapping[str, Any] | None = None) -> SweepGrid:
    """Every combination of the ``axes`` values (the first axis varies slowest), with the
    ``fixed`` values in every row, as a :class:`SweepGrid`: checked at once, and more
    than :data:`~planner.limits.MAX_SWEEP_SCENARIOS` combinations refused before any is
    built; its rows are built as a sweep takes them."""
    return SweepGrid(axes, fixed)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def _clean(name: str, value: Any) -> Any:
    """Plain Python values: numpy scalars become int / float, and a whole-number column's
    floats (a column with blanks holds 2 as 2.0) become ints."""
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()
    if name in INT_COLUMNS and isinstance(value, float):
        value = int(value)
    return value


# Columns that name a file: no file system takes a NUL byte in a path.
PATH_COLUMNS = ("fleet", "catalog")


def _check_value(name: str, value: Any, fail: Fail) -> None:
    if name in INT_COLUMNS:
        low, high = INT_COLUMNS[name]
        if isinstance(value, float) or type(value).__name__.startswith("float"):
            # A column with blanks holds its whole numbers as floats (2.0).
            if not float(number(value, fail)).is_integer():
                raise fail("must be a whole number", value)
            value = int(value)
        integer(value, fail, minimum=low, maximum=high)
    elif name in NUMBER_COLUMNS:
        number(value, fail, **({"above": 0} if name == "horizon_hours" else {}))
    elif name in TEXT_COLUMNS:
        text(value, fail)
        if len(value) > MAX_GRID_TEXT:
            raise fail(f"must be at most {MAX_GRID_TEXT:,} characters", value)
        if name in PATH_COLUMNS and "\0" in value:
            raise fail("is a file path and cannot hold a NUL byte", value)


def check_grid(grid: pd.DataFrame | SweepGrid) -> pd.DataFrame | SweepGrid:
    """The grid with a fresh 0..n-1 index; refuses unknown columns, more than
    :data:`~planner.limits.MAX_SWEEP_SCENARIOS` rows and values of the wrong type or
    beyond the package's limits. Each distinct value of a column is checked once. A
    :class:`SweepGrid` is checked again as it is (its rows are never built here)."""
    if isinstance(grid, SweepGrid):
        return SweepGrid(grid.axes, grid.fixed)
    if not isinstance(grid, pd.DataFrame):
        raise SweepError("InvalidGrid", "the grid must be a pandas DataFrame or a SweepGrid",
                         value=type(grid).__name__)
    unknown = [c for c in grid.columns if c not in GRID_COLUMNS]
    if unknown:
        raise SweepError("InvalidGrid", f"unknown grid column {shown(unknown[0])}; columns "
                         f"are {', '.join(GRID_COLUMNS)}", column=unknown[0])
    if len(grid) > MAX_SWEEP_SCENARIOS:
        raise SweepError("InvalidGrid", f"the grid has {len(grid):,} scenarios; a sweep "
                         f"takes at most {MAX_SWEEP_SCENARIOS:,}", scenarios=len(grid))
    grid = grid.reset_index(drop=True)
    for name in grid.columns:
        seen: set[tuple[type, Any]] = set()
        for index, value in enumerate(grid[name].tolist()):
            try:
                marker = (type(value), value)
                if marker in seen:
                    continue
                seen.add(marker)
            except TypeError:  # unhashable: checked (and refused) below
                pass
            if not is_missing(value):
                _check_value(name, value, _bad_cell(index, name))
    return grid


def _bad_cell(index: int, name: str) -> Fail:
    return lambda problem, value: SweepError(
        "InvalidGrid", f"row {index}, column {name!r}: {problem} (got {shown(value)})",
        column=name, row=index, value=value)


class Rows:
    """The grid's rows as plain dicts, built one at a time (a grid of a million rows is
    never a million dicts at once, and a :class:`SweepGrid`'s never a DataFrame)."""

    def __init__(self, grid: pd.DataFrame | SweepGrid) -> None:
        self.names = [c for c in GRID_COLUMNS if c in grid.columns]
        self.count = len(grid)
        self.grid: SweepGrid | None = None
        self.columns: list[list[Any]] = []
        if isinstance(grid, SweepGrid):
            self.grid = grid
        else:
            self.columns = [grid[c].tolist() for c in self.names]

    def __getitem__(self, index: int) -> dict[str, Any]:
        if self.grid is not None:
            return self.grid.row(index)
        return {name: _clean(name, column[index])
                for name, column in zip(self.names, self.columns, strict=True)
                if not is_missing(column[index])}

    def distinct(self, name: str) -> list[Any]:
        if self.grid is not None:
            return self.grid.distinct(name)
        if name not in self.names:
            return []
        values = self.columns[self.names.index(name)]
        return list(dict.fromkeys(v for v in values if not is_missing(v)))


def load_grid(path: str | Path) -> tuple[SweepGrid, str]:
    """A grid file: ``evaluate = "availability"``, ``[axes]`` (lists) and ``[fixed]``
    (single values). Relative ``fleet`` and ``catalog`` paths start at the file's folder.
    Returns the grid (its rows built as a sweep takes them) and the evaluation."""
    if not isinstance(path, str | os.PathLike) or not str(path).strip():
        raise setting_error("path")("must be a file path", path)
    path = Path(path)
    try:
        data = tomllib.loads(read_regular_file(path, "grid file").decode("utf-8"))
    except FleetFileError as error:
        raise SweepError("InvalidGrid", f"{path}: cannot read the grid file: "
                         f"{error.message}", path=str(path)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise SweepError("InvalidGrid", f"{path}: not valid TOML: {shown(str(error))}",
                         path=str(path)) from None
    for key in data:
        if key not in ("evaluate", "axes", "fixed"):
            raise SweepError("InvalidGrid", f"{path}: unknown key {shown(key)}; expected "
                             "evaluate, axes and fixed", path=str(path), column=key)
    evaluation = data.get("evaluate", "plan")
    if evaluation not in EVALUATIONS:
        raise SweepError("InvalidGrid", f"{path}: evaluate must be one of "
                         f"{', '.join(EVALUATIONS)} (got {shown(evaluation)})", path=str(path))
    axes, fixed = data.get("axes", {}), data.get("fixed", {})
    if not isinstance(axes, dict) or not isinstance(fixed, dict):
        raise SweepError("InvalidGrid", f"{path}: [axes] and [fixed] must be tables",
                         path=str(path))
    base = path.parent

    def rebase(name: str, value: Any) -> Any:
        if name in ("fleet", "catalog") and isinstance(value, str) and value.strip():
            candidate = Path(value).expanduser()
            return str(candidate if candidate.is_absolute() else (base / candidate))
        return value

    axes = {n: [rebase(n, v) for v in values] if isinstance(values, list) else values
            for n, values in axes.items()}
    fixed = {n: rebase(n, v) for n, v in fixed.items()}
    try:
        grid = grid_from_axes(axes or {"min_lanes": [fixed.pop("min_lanes", 1)]}, fixed)
    except SweepError as error:
        raise SweepError("InvalidGrid", f"{path}: {error.message}",
                         **{**error.details, "path": str(path)}) from None
    return grid, evaluation
