"""Sweeps: a grid of what-ifs in (a DataFrame, or a SweepGrid of axes), one result row per
scenario out.

A grid row is one scenario. Its columns (all optional unless the evaluation needs them):

``fleet``                a fleet file (its model, planning options and nodes)
``model``                a model preset id that replaces the fleet file's model
``kv_cache_type``        the KV cache type of that preset
``min_context``          context the plan must reach (default the context floor)
``min_lanes``            parallel lanes the plan must reach (default 1)
``target_tpot_ms``       replaces the fleet's ``target_decode_tpot_ms``
``annual_failure_rate``  failures per node-year for every node (availability, simulation)
``repair_hours``         mean hours to repair for every node (availability, simulation)
``catalog``              a GPU catalog file (failure figures; default ``data/gpus.toml``)
``max_states``           failure-state plans at most (availability; default 500,
                         then the interval so far, which holds the exact value)
``seed``, ``horizon_hours``  the simulated timeline (simulation)
``failures_tolerated``  nodes the sized fleet must survive losing (size)
``price_scale``          multiplies every catalog price (size)
``kinds``                catalog kinds to size with, comma-separated (size)

Evaluations (:data:`EVALUATIONS`): ``plan`` (the plan of the fleet), ``size`` (the
cheapest fleet of catalog kinds for ``model``, or the fleet file's model,
:func:`planner.sizing.size_fleet`), ``availability``
(:func:`planner.availability.fleet_availability`) and ``simulation``
(:func:`planner.simulation.simulate`). Each adds its columns (:data:`RESULT_COLUMNS`) and
``error_code`` / ``error_message`` for a scenario that could not be evaluated: a bad
value in one row, or a fleet file that is missing or invalid, never stops the sweep.

A grid holds at most :data:`~planner.limits.MAX_SWEEP_SCENARIOS` scenarios (counted from
the axes before any row is built) and every value is checked against the package's
limits first. Its rows are evaluated as they stream: a grid of a million scenarios
starts evaluating at once, and only its results are kept in memory.

Where it runs: in this process for small grids, on local processes for large ones, or on
a Dask cluster (``scheduler="tcp://host:8786"``, a ``dask.distributed.Client``, or
``"dask"`` for a new ``LocalCluster``; see :mod:`planner.sweep_dask`). Results are the same
whatever runs them: every scenario is evaluated by the same pure function and rows come
back in grid order.

With ``output``, the output is checked and locked before anything is computed, and each
finished batch is saved at once under ``<output>.parts/`` (:mod:`planner.sweep_store`); a
sweep that stops (a worker dies, the machine reboots) picks up from there when run again
with the same grid and output, evaluating only what is missing. A saved result is used
only for the same scenario on the same inputs: editing a fleet file (or a catalog or GGUF
file a scenario reads; each is fingerprinted by its size, time and a bounded digest)
evaluates its scenarios again.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd

from planner import sweep_store
from planner._validate import Fail, integer, number, shown, spreadsheet_safe, text
from planner.availability import (
    DEFAULT_MAX_STATES,
    QUICK_MAX_STATES,
    document_overrides,
    fleet_availability,
    fleet_reliability,
)
from planner.errors import CodedError
from planner.fleet import FleetDocument, FleetFileError, ModelChoice, load_fleet
from planner.fleet._fields import host_problem
from planner.fleet.files import read_regular_file
from planner.limits import (
    MAX_CONTEXT,
    MAX_GRID_TEXT,
    MAX_LANES,
    MAX_LATENCY_MS,
    MAX_NODES,
    MAX_SWEEP_BATCH,
    MAX_SWEEP_SCENARIOS,
    MAX_SWEEP_WORKERS,
)
from planner.planning import plan_topology
from planner.sizing import size_fleet
from planner.sweep_store import (
    PartsFolder,
    SweepOutputError,
    SweepWarning,
    check_output,
    file_fingerprint,
    write_output,
)
from planner.targets import SpeedEstimator, Targets


class SweepError(CodedError):
    """A sweep that cannot start or did not finish.

    ``InvalidGrid``: the grid, grid file or a sweep setting is malformed (names the
    column or key); ``InvalidScheduler``: the scheduler is not a Dask address
    (``tcp://host:port``), ``"dask"`` or a Client; ``SweepInterrupted``: workers died,
    or the Dask cluster failed, could not be reached or did not answer as one, before
    every scenario finished; what finished is saved and running the same sweep again
    resumes from it.
    """

    codes = ("InvalidGrid", "InvalidScheduler", "SweepInterrupted")


GRID_COLUMNS = ("fleet", "model", "kv_cache_type", "min_context", "min_lanes",
                "target_tpot_ms", "annual_failure_rate", "repair_hours", "catalog",
                "max_states", "seed", "horizon_hours", "failures_tolerated", "price_scale",
                "kinds")
# (minimum, maximum) of the whole-number columns: the limits of what each feeds.
_INT_COLUMNS: dict[str, tuple[int, int]] = {
    "min_context": (0, MAX_CONTEXT), "min_lanes": (0, MAX_LANES),
    "target_tpot_ms": (0, MAX_LATENCY_MS), "seed": (0, 2**63 - 1),
    "failures_tolerated": (0, MAX_NODES), "max_states": (1, DEFAULT_MAX_STATES)}
# Finite numbers of at least 0; a horizon above 0.
_NUMBER_COLUMNS = ("annual_failure_rate", "repair_hours", "horizon_hours", "price_scale")
_TEXT_COLUMNS = ("fleet", "model", "kv_cache_type", "catalog", "kinds")

RESULT_COLUMNS: dict[str, dict[str, str]] = {
    "plan": {"node_count": "Int64", "context_length": "Int64", "stage_count": "Int64",
             "parallel_lanes": "Int64", "estimated_decode_network_ms_per_token": "Int64",
             "meets_targets": "boolean"},
    "size": {"sized_fleet": "string", "node_count": "Int64", "cost_per_hour_usd": "Float64",
             "context_length": "Int64", "stage_count": "Int64", "parallel_lanes": "Int64",
             "estimated_tpot_ms": "Float64", "tokens_per_s": "Float64",
             "cost_per_million_tokens_usd": "Float64", "plans_evaluated": "Int64"},
    "availability": {"node_count": "Int64", "availability": "Float64",
                     "availability_lower": "Float64", "availability_upper": "Float64",
                     "states_evaluated": "Int64", "expected_hours_down_per_year": "Float64",
                     "full_context_probability": "Float64"},
    "simulation": {"node_count": "Int64", "horizon_hours": "Float64",
                   "hours_down": "Float64", "hours_reduced_context": "Float64",
                   "simulated_availability": "Float64", "failures": "Int64",
                   "replans": "Int64", "claim_messages": "Int64"},
}
ERROR_COLUMNS = {"error_code": "string", "error_message": "string"}
EVALUATIONS = tuple(RESULT_COLUMNS)
# Result columns that are shares of time or probability, within [0, 1]; every other
# number a sweep reports is at least 0.
SHARE_COLUMNS = frozenset({"availability", "availability_lower", "availability_upper",
                           "full_context_probability", "simulated_availability"})

# Below this many scenarios the sweep runs in this process: starting workers costs more.
IN_PROCESS_LIMIT = 32


# -- the grid ---------------------------------------------------------------------------


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
                if (type(value), value) not in seen and not _is_missing(value):
                    seen.add((type(value), value))
                    _check_value(name, value, _bad_cell(position * stride, name))
        for name, value in self.fixed.items():
            if not _is_missing(value):
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
                if name in found and not _is_missing(found[name])}

    def distinct(self, name: str) -> list[Any]:
        """The distinct values of a column, missing ones left out."""
        values = self.axes.get(name, (self.fixed[name],) if name in self.fixed else ())
        return list(dict.fromkeys(v for v in values if not _is_missing(v)))

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


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def _clean(name: str, value: Any) -> Any:
    """Plain Python values: numpy scalars become int / float, and a whole-number column's
    floats (a column with blanks holds 2 as 2.0) become ints."""
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()
    if name in _INT_COLUMNS and isinstance(value, float):
        value = int(value)
    return value


def _check_value(name: str, value: Any, fail: Fail) -> None:
    if name in _INT_COLUMNS:
        low, high = _INT_COLUMNS[name]
        if isinstance(value, float) or type(value).__name__.startswith("float"):
            # A column with blanks holds its whole numbers as floats (2.0).
            if not float(number(value, fail)).is_integer():
                raise fail("must be a whole number", value)
            value = int(value)
        integer(value, fail, minimum=low, maximum=high)
    elif name in _NUMBER_COLUMNS:
        number(value, fail, **({"above": 0} if name == "horizon_hours" else {}))
    elif name in _TEXT_COLUMNS:
        text(value, fail)
        if len(value) > MAX_GRID_TEXT:
            raise fail(f"must be at most {MAX_GRID_TEXT:,} characters", value)


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
            if not _is_missing(value):
                _check_value(name, value, _bad_cell(index, name))
    return grid


def _bad_cell(index: int, name: str) -> Fail:
    return lambda problem, value: SweepError(
        "InvalidGrid", f"row {index}, column {name!r}: {problem} (got {shown(value)})",
        column=name, row=index, value=value)


class _Rows:
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
                if not _is_missing(column[index])}

    def distinct(self, name: str) -> list[Any]:
        if self.grid is not None:
            return self.grid.distinct(name)
        if name not in self.names:
            return []
        values = self.columns[self.names.index(name)]
        return list(dict.fromkeys(v for v in values if not _is_missing(v)))


def load_grid(path: str | Path) -> tuple[SweepGrid, str]:
    """A grid file: ``evaluate = "availability"``, ``[axes]`` (lists) and ``[fixed]``
    (single values). Relative ``fleet`` and ``catalog`` paths start at the file's folder.
    Returns the grid (its rows built as a sweep takes them) and the evaluation."""
    if not isinstance(path, str | os.PathLike) or not str(path).strip():
        raise _setting("path")("must be a file path", path)
    path = Path(path)
    try:
        data = tomllib.loads(read_regular_file(path).decode("utf-8"))
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


# -- evaluating one scenario ------------------------------------------------------------


@lru_cache(maxsize=64)
def _catalog(path: str | None) -> tuple[Any, ...]:
    from planner.models import load_gpu_catalog

    return tuple(load_gpu_catalog(path))


Documents = Mapping[str, "FleetDocument | CodedError"]
"""Each fleet file a grid names, read once: its document, or why it could not be read
(the error of each scenario that names it)."""


def _document(row: Mapping[str, Any], documents: Documents) -> FleetDocument:
    if "fleet" not in row:
        raise SweepError("InvalidGrid", "this evaluation needs a fleet column", column="fleet")
    document = documents.get(row["fleet"])
    if document is None:
        raise SweepError("InvalidGrid", f"fleet {shown(row['fleet'])} is not among the fleet "
                         "documents given", column="fleet", field="documents")
    if isinstance(document, CodedError):
        raise document
    if "model" in row:
        document = replace(document, model=ModelChoice(preset=row["model"],
                                                       kv_cache_type=row.get("kv_cache_type")))
    elif "kv_cache_type" in row:
        document = replace(document, model=replace(document.model,
                                                   kv_cache_type=row["kv_cache_type"]))
    if "target_tpot_ms" in row:
        document = replace(document, target_decode_tpot_ms=int(row["target_tpot_ms"]))
    return document


def _targets(row: Mapping[str, Any], request: Any) -> Targets:
    """The row's targets for the request's model: the fleet file's (minimum nodes, TPOT
    target) with the row's minimum context and lanes, as ``planner availability`` takes
    them."""
    return Targets.from_request(request, minimum_context=row.get("min_context") or None,
                                minimum_lanes=int(row.get("min_lanes") or 1)
                                ).for_request(request)


def _evaluate_plan(row: Mapping[str, Any], document: FleetDocument) -> dict[str, Any]:
    request = document.to_request()
    targets = _targets(row, request)
    plan = plan_topology(request)
    estimator = _estimator(row, document, targets)
    return {"node_count": len(request.nodes), "context_length": plan.context_length,
            "stage_count": plan.stage_count, "parallel_lanes": plan.parallel_lanes,
            "estimated_decode_network_ms_per_token":
                plan.estimated_decode_network_ms_per_token,
            "meets_targets": targets.meets(plan, None if estimator is None
                                           else estimator(request, plan))}


def _estimator(row: Mapping[str, Any], document: FleetDocument, targets: Targets
               ) -> SpeedEstimator | None:
    """The speed estimator a TPOT target is judged with (none without a target)."""
    if targets.target_decode_tpot_ms is None:
        return None
    return SpeedEstimator.for_document(document, _catalog(row.get("catalog")))


def _reliability(row: Mapping[str, Any], document: FleetDocument) -> dict[str, Any]:
    return fleet_reliability(document.nodes, catalog=_catalog(row.get("catalog")),
                             overrides=document_overrides(document),
                             annual_failure_rate=row.get("annual_failure_rate"),
                             repair_hours=row.get("repair_hours"))


def _evaluate_availability(row: Mapping[str, Any], document: FleetDocument) -> dict[str, Any]:
    request = document.to_request()
    targets = _targets(row, request)
    result = fleet_availability(request, _reliability(row, document), targets=targets,
                                estimator=_estimator(row, document, targets),
                                max_states=int(row.get("max_states", QUICK_MAX_STATES)))
    top = max(result.context_distribution, default=0)
    return {"node_count": len(request.nodes), "availability": result.availability,
            "availability_lower": result.availability_lower,
            "availability_upper": result.availability_upper,
            "states_evaluated": result.states_evaluated,
            "expected_hours_down_per_year": result.expected_hours_down_per_year,
            "full_context_probability": result.context_distribution.get(top, 0.0)
            if top else 0.0}


def _evaluate_simulation(row: Mapping[str, Any], document: FleetDocument) -> dict[str, Any]:
    from planner.simulation import simulate

    request = document.to_request()
    targets = _targets(row, request)
    year = simulate(request, _reliability(row, document),
                    horizon_hours=float(row.get("horizon_hours", 8760)),
                    seed=int(row.get("seed", 0)), targets=targets,
                    estimator=_estimator(row, document, targets))
    return {"node_count": len(request.nodes), **year.summary()}


def _evaluate_size(row: Mapping[str, Any], documents: Documents) -> dict[str, Any]:
    from planner.models import ModelSpec, load_preset

    model: ModelSpec | dict[str, Any]
    if "model" in row:
        model = load_preset(row["model"], kv_cache_type=row.get("kv_cache_type"))
        planning: dict[str, Any] = {}
    else:
        document = _document(row, documents)
        model = document.model.spec(document.base_dir) or document.model.resolve(
            document.base_dir)
        planning = {"context_length_override": document.context_length_override,
                    "parallel_lanes_override": document.parallel_lanes_override}
    catalog = list(_catalog(row.get("catalog")))
    scale = row.get("price_scale")
    if scale is not None:
        catalog = [gpu if gpu.price_per_hour is None else
                   replace(gpu, price_per_hour=gpu.price_per_hour * scale) for gpu in catalog]
    targets = Targets(
        minimum_context=int(row["min_context"]) if "min_context" in row else None,
        minimum_lanes=int(row.get("min_lanes", 1)),
        target_decode_tpot_ms=int(row["target_tpot_ms"]) if "target_tpot_ms" in row else None,
        failures_tolerated=int(row.get("failures_tolerated", 0)))
    kinds = [k for k in row["kinds"].split(",") if k.strip()] if "kinds" in row else None
    result = size_fleet(model, catalog, targets, top=1, kinds=kinds, pareto=False,
                        **planning)
    best = result.fleets[0]
    return {"sized_fleet": best.label, "node_count": best.node_count,
            "cost_per_hour_usd": best.cost_per_hour_usd,
            "context_length": best.plan.context_length, "stage_count": best.plan.stage_count,
            "parallel_lanes": best.plan.parallel_lanes,
            "estimated_tpot_ms": best.estimated_tpot_ms, "tokens_per_s": best.tokens_per_s,
            "cost_per_million_tokens_usd": best.cost_per_million_tokens_usd,
            "plans_evaluated": result.plans_evaluated}


_EVALUATORS: dict[str, Callable[[Mapping[str, Any], FleetDocument], dict[str, Any]]] = {
    "plan": _evaluate_plan,
    "availability": _evaluate_availability,
    "simulation": _evaluate_simulation,
}




@dataclass(frozen=True, slots=True)
class Batch:
    """Scenarios sent to one worker: ``(index, key, row)`` each, and the fleet documents
    they name (read once by the caller, so workers need no access to the files)."""

    evaluation: str
    scenarios: tuple[tuple[int, str, dict[str, Any]], ...]
    documents: dict[str, FleetDocument | CodedError]


def _evaluation(value: Any) -> str:
    if not isinstance(value, str) or value not in EVALUATIONS:
        raise _setting("evaluation")(f"must be one of {', '.join(EVALUATIONS)}", value)
    return value


def _mapping(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _setting(name)("must be a mapping", value)
    return value


def evaluate_scenario(evaluation: str, row: Mapping[str, Any],
                      documents: Documents) -> dict[str, Any]:
    """One scenario's result columns; a coded error becomes ``error_code`` and
    ``error_message`` instead of stopping the sweep."""
    _evaluation(evaluation)
    _mapping(row, "row")
    _mapping(documents, "documents")
    try:
        if evaluation == "size":
            values = _evaluate_size(row, documents)
        else:
            values = _EVALUATORS[evaluation](row, _document(row, documents))
        return {**values, "error_code": None, "error_message": None}
    except CodedError as error:
        return {"error_code": error.code, "error_message": error.message}


def evaluate_batch(batch: Batch) -> list[dict[str, Any]]:
    """Evaluate a batch; each result carries ``scenario`` and ``scenario_key``. This is
    the function every executor runs."""
    return [{"scenario": index, "scenario_key": key,
             **evaluate_scenario(batch.evaluation, row, batch.documents)}
            for index, key, row in batch.scenarios]


def scenario_key(evaluation: str, row: Mapping[str, Any],
                 inputs: Mapping[str, Any] | None = None) -> str:
    """What a saved result is matched by: the evaluation, the row, and ``inputs``, what
    identifies the files the row names (so an edited fleet file or catalog is evaluated
    again instead of resumed from a stale result)."""
    _evaluation(evaluation)
    _mapping(row, "row")
    if inputs is not None:
        _mapping(inputs, "inputs")
    text = json.dumps([evaluation, sorted(row.items()), sorted((inputs or {}).items())],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _read_documents(names: Iterable[str]) -> dict[str, FleetDocument | CodedError]:
    documents: dict[str, FleetDocument | CodedError] = {}
    for name in names:
        try:
            documents[name] = load_fleet(name)
        except CodedError as error:  # the scenarios naming it report it
            documents[name] = error
    return documents


class _Keys:
    """Each scenario's key, from its row and a fingerprint of the files it reads (one
    per fleet and catalog, made once)."""

    def __init__(self, evaluation: str, rows: _Rows, documents: Documents) -> None:
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


def record_problem(evaluation: str) -> Callable[[Mapping[str, Any]], str | None]:
    """What is wrong with a saved record of ``evaluation`` (``None`` when it could be a
    result): its columns, their types, and their ranges (shares within [0, 1], other
    numbers at least 0, whole numbers within 64 bits)."""
    _evaluation(evaluation)
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


class _Results:
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
        raise _setting("grid")("must be a pandas DataFrame or a SweepGrid", grid)
    schema = {**RESULT_COLUMNS[_evaluation(evaluation)], **ERROR_COLUMNS}
    _mapping(columns, "columns")
    for name in schema:
        values = columns.get(name)
        if (isinstance(values, str | bytes) or not isinstance(values, Sequence)
                or len(values) != len(grid)):
            raise _setting("columns")(f"must hold {name} as a list of {len(grid)} values",
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
        raise _setting("frame")("must be a pandas DataFrame", frame)
    if not isinstance(output, str | os.PathLike) or not str(output).strip():
        raise _setting("output")("must be a file path", output)
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


# -- running a sweep --------------------------------------------------------------------

Progress = Callable[[int, int], None]

# A Dask address: tcp:// (or tls://) and host:port, the host a name, an IPv4 address or
# an IPv6 address in brackets.
_SCHEDULER = re.compile(r"(?:(?P<scheme>tcp|tls)://)?(?P<host>\[[^\]]*\]|[^:/\[\]]+)"
                        r":(?P<port>[0-9]{1,5})")


def _scheduler_problem(scheduler: Any) -> str | None:
    if scheduler is None or scheduler == "dask":
        return None
    if not isinstance(scheduler, str):
        from planner import sweep_dask

        return None if sweep_dask.is_client(scheduler) else (
            "must be a Dask scheduler address, 'dask' or a dask.distributed.Client")
    match = _SCHEDULER.fullmatch(scheduler)
    if match is None or not 0 < int(match["port"]) < 65536:
        return ("must be a Dask scheduler address tcp://host:port (or tls://), with a port "
                "from 1 to 65535, or 'dask' for a LocalCluster")
    host = match["host"]
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return "has a bracketed host that is not an IPv6 address"
    else:
        problem = host_problem(host)
        if problem is not None:
            return problem
    if match["scheme"] == "tls":
        from planner import sweep_dask

        return sweep_dask.tls_problem()
    return None


def _setting(name: str) -> Fail:
    return lambda problem, value: SweepError(
        "InvalidGrid", f"{name} {problem} (got {shown(value)})", field=name, value=value)


def sweep(
    grid: pd.DataFrame | SweepGrid,
    evaluate: str = "plan",
    *,
    workers: int | None = None,
    scheduler: Any = None,
    executor: str = "auto",
    output: str | Path | None = None,
    batch_size: int | None = None,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Evaluate every scenario of ``grid`` and return the results, in grid order.

    ``executor``: ``"auto"`` (in this process up to :data:`IN_PROCESS_LIMIT` scenarios,
    else local processes; Dask whenever ``scheduler`` is given), ``"inline"``,
    ``"processes"`` or ``"dask"`` (``scheduler`` an address, a ``Client`` or ``None`` for a
    new ``LocalCluster`` of ``workers`` workers). ``output`` (``.parquet`` or ``.csv``)
    saves the results, and each finished batch along the way so that a stopped sweep
    resumes; it is checked and locked before anything is computed
    (``OutputUnavailable``). ``progress(done, total)`` is called as scenarios finish.
    ``warn(text)`` hears what the sweep worked around (saved records it could not use);
    by default a :class:`~planner.sweep_store.SweepWarning`.
    """
    if evaluate not in EVALUATIONS:
        raise SweepError("InvalidGrid", f"evaluate must be one of {', '.join(EVALUATIONS)} "
                         f"(got {shown(evaluate)})", value=evaluate)
    if executor not in ("auto", "inline", "processes", "dask"):
        raise SweepError("InvalidGrid", "executor must be auto, inline, processes or dask "
                         f"(got {shown(executor)})", value=executor)
    if workers is not None:
        workers = integer(workers, _setting("workers"), minimum=1, maximum=MAX_SWEEP_WORKERS)
    if batch_size is not None:
        batch_size = integer(batch_size, _setting("batch_size"), minimum=1,
                             maximum=MAX_SWEEP_BATCH)
    for name, function in (("progress", progress), ("warn", warn)):
        if function is not None and not callable(function):
            raise _setting(name)("must be a function", function)
    problem = _scheduler_problem(scheduler)
    if problem is not None:
        raise SweepError("InvalidScheduler", f"scheduler {problem} (got {shown(scheduler)})",
                         value=shown(scheduler))
    grid = check_grid(grid)
    out = None
    if output is not None:
        if not isinstance(output, str | os.PathLike) or not str(output).strip():
            raise _setting("output")("must be a file path", output)
        out = Path(output)
        if out.suffix not in (".parquet", ".csv"):
            raise SweepError("InvalidGrid", f"output {str(out)!r} must end in .parquet or "
                             ".csv", path=str(out))
    rows = _Rows(grid)
    with PartsFolder(out) as parts:
        documents = _read_documents(rows.distinct("fleet"))
        keys = _Keys(evaluate, rows, documents)
        results = _Results(evaluate, rows.count)
        for record in parts.load(keys.current, record_problem(evaluate),
                                 warn or sweep_store.warn).values():
            results.add(record)
        if progress is not None:
            progress(results.done, results.total)
        pending = results.total - results.done
        if executor == "auto":
            executor = ("dask" if scheduler is not None else
                        "inline" if pending <= IN_PROCESS_LIMIT else "processes")
        if pending:
            count = workers or (os.cpu_count() or 1)
            size = batch_size or max(1, min(50, math.ceil(pending / (count * 4))))
            batches = _batches(evaluate, rows, keys, results, documents, size)

            def finished(batch_records: list[dict[str, Any]]) -> None:
                parts.save(batch_records)
                for record in batch_records:
                    results.add(record)
                if progress is not None:
                    progress(results.done, results.total)

            def interrupted(cause: str) -> SweepError:
                return _interrupted(cause, parts, results)

            if executor == "inline":
                for batch in batches:
                    finished(evaluate_batch(batch))
            elif executor == "processes":
                _run_processes(batches, min(count, math.ceil(pending / size)), finished,
                               interrupted)
            else:
                _run_dask(batches, scheduler, workers, finished, interrupted)
        frame = results_frame(grid, evaluate, results.columns)
        if out is not None:
            write_results(frame, out)
            parts.clear()
    return frame


def _batches(evaluation: str, rows: _Rows, keys: _Keys, results: _Results,
             documents: Documents, size: int) -> Iterator[Batch]:
    """The scenarios not finished yet, ``size`` at a time, each with the fleet documents
    it names; built as they are taken, so only the batches in flight are in memory."""
    chunk: list[tuple[int, str, dict[str, Any]]] = []
    for index in range(rows.count):
        if results.finished[index]:
            continue
        row = rows[index]
        chunk.append((index, keys.of(index, row), row))
        if len(chunk) == size:
            names = {row["fleet"] for _, _, row in chunk if "fleet" in row}
            yield Batch(evaluation, tuple(chunk), {n: documents[n] for n in names})
            chunk = []
    if chunk:
        names = {row["fleet"] for _, _, row in chunk if "fleet" in row}
        yield Batch(evaluation, tuple(chunk), {n: documents[n] for n in names})


def _run_processes(batches: Iterator[Batch], workers: int,
                   finished: Callable[[list[dict[str, Any]]], None],
                   interrupted: Callable[[str], SweepError]) -> None:
    # At most two batches per worker are in flight: the rest wait in the iterator.
    with ProcessPoolExecutor(max_workers=workers) as pool:
        running: set[Future[list[dict[str, Any]]]] = set()
        try:
            for batch in batches:
                running.add(pool.submit(evaluate_batch, batch))
                if len(running) >= 2 * workers:
                    done, running = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        finished(future.result())
            while running:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    finished(future.result())
        except BrokenProcessPool:
            raise interrupted("a worker process died") from None


def _run_dask(batches: Iterator[Batch], scheduler: Any, workers: int | None,
              finished: Callable[[list[dict[str, Any]]], None],
              interrupted: Callable[[str], SweepError]) -> None:
    from planner import sweep_dask

    where = f" at {scheduler!r}" if isinstance(scheduler, str) and scheduler != "dask" else ""
    done = sweep_dask.results(batches, evaluate_batch, scheduler=scheduler, workers=workers)
    try:
        while True:
            # Only the cluster's own failures are caught: saving a batch is not in here.
            try:
                batch_records = next(done)
            except StopIteration:
                return
            except sweep_dask.CLUSTER_FAILURES as error:
                raise interrupted(f"the Dask cluster{where} failed ({error})") from None
            finished(batch_records)
    finally:
        done.close()


def _interrupted(cause: str, parts: PartsFolder, results: _Results) -> SweepError:
    where = (f"; the finished ones are saved in {parts.folder} and running the same "
             "sweep again resumes from them" if parts.folder is not None else
             "; give an output file to keep finished scenarios across runs")
    return SweepError("SweepInterrupted",
                      f"{cause}: {results.done} of {results.total} scenarios finished{where}",
                      finished=results.done, total=results.total)


__all__ = ["ERROR_COLUMNS", "EVALUATIONS", "GRID_COLUMNS", "RESULT_COLUMNS", "Batch",
           "SweepError", "SweepGrid", "SweepOutputError", "SweepWarning", "check_grid",
           "evaluate_batch", "evaluate_scenario", "grid_from_axes", "load_grid",
           "record_problem", "results_frame", "scenario_key", "sweep", "write_csv",
           "write_results"]
