"""Sweeps: a grid of what-ifs as a DataFrame in, one result row per scenario out.

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
``max_states``           failure states planned at most (availability; default 2,000,
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
``error_code`` / ``error_message`` for a scenario that could not be evaluated (a bad
value in one row never stops the sweep).

Where it runs: in this process for small grids, on local processes for large ones, or on
a Dask cluster (``scheduler="tcp://host:8786"``, a ``dask.distributed.Client``, or
``"dask"`` for a new ``LocalCluster``; see :mod:`planner.sweep_dask`). Results are the same
whatever runs them: every scenario is evaluated by the same pure function and rows come
back in grid order.

With ``output``, each finished batch is saved at once under ``<output>.parts/``; a sweep
that stops (a worker dies, the machine reboots) picks up from there when run again with
the same grid and output, evaluating only what is missing. A saved result is used only
for the same scenario on the same inputs: editing a fleet file (or a catalog or GGUF file
a scenario reads) evaluates its scenarios again.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import shutil
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from planner._validate import Fail, integer, number, shown, text
from planner.availability import (
    QUICK_MAX_STATES,
    document_overrides,
    fleet_availability,
    fleet_reliability,
)
from planner.errors import CodedError
from planner.fleet import FleetDocument, ModelChoice, load_fleet
from planner.planning import plan_topology
from planner.sizing import size_fleet
from planner.targets import SpeedEstimator, Targets


class SweepError(CodedError):
    """A sweep that cannot start or did not finish.

    ``InvalidGrid``: the grid or grid file is malformed (names the column or key);
    ``SweepInterrupted``: workers died, or the Dask cluster failed or could not be
    reached, before every scenario finished; what finished is
    saved and running the same sweep again resumes from it.
    """

    codes = ("InvalidGrid", "SweepInterrupted")


GRID_COLUMNS = ("fleet", "model", "kv_cache_type", "min_context", "min_lanes",
                "target_tpot_ms", "annual_failure_rate", "repair_hours", "catalog",
                "max_states", "seed", "horizon_hours", "failures_tolerated", "price_scale",
                "kinds")
_INT_COLUMNS = ("min_context", "min_lanes", "target_tpot_ms", "seed", "failures_tolerated",
                "max_states")
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

# Below this many scenarios the sweep runs in this process: starting workers costs more.
IN_PROCESS_LIMIT = 32


# -- the grid ---------------------------------------------------------------------------


def grid_from_axes(axes: Mapping[str, Sequence[Any]],
                   fixed: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Every combination of the ``axes`` values (the first axis varies slowest), with the
    ``fixed`` values in every row."""
    for name, values in axes.items():
        if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            raise SweepError("InvalidGrid", f"axis {name!r} must be a non-empty list of values",
                             column=name)
    names = list(axes)
    rows = [dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(axes[n] for n in names))]
    for row in rows:
        row.update(fixed or {})
    return check_grid(pd.DataFrame(rows))


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def _clean(value: Any) -> Any:
    """Plain Python values (numpy scalars become int / float; NaN and NA become None)."""
    if _is_missing(value):
        return None
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()
    return value


def _row_dicts(grid: pd.DataFrame) -> list[dict[str, Any]]:
    columns = [c for c in GRID_COLUMNS if c in grid.columns]
    return [{c: _clean(v) for c, v in zip(columns, values, strict=True) if not _is_missing(v)}
            for values in grid[columns].itertuples(index=False, name=None)]


def check_grid(grid: pd.DataFrame) -> pd.DataFrame:
    """The grid with a fresh 0..n-1 index; refuses unknown columns and wrong types."""
    if not isinstance(grid, pd.DataFrame):
        raise SweepError("InvalidGrid", "the grid must be a pandas DataFrame",
                         value=type(grid).__name__)
    unknown = [c for c in grid.columns if c not in GRID_COLUMNS]
    if unknown:
        raise SweepError("InvalidGrid", f"unknown grid column {unknown[0]!r}; columns are "
                         f"{', '.join(GRID_COLUMNS)}", column=unknown[0])
    grid = grid.reset_index(drop=True)
    for index, row in enumerate(_row_dicts(grid)):
        for name, value in row.items():
            fail = _bad_cell(index, name)
            if name in _INT_COLUMNS or name in _NUMBER_COLUMNS:
                # A column with blanks holds its whole numbers as floats (2.0).
                if name in _INT_COLUMNS and not float(number(value, fail)).is_integer():
                    raise fail("must be a whole number", value)
                number(value, fail)
            elif name in _TEXT_COLUMNS:
                text(value, fail)
    return grid


def _bad_cell(index: int, name: str) -> Fail:
    return lambda problem, value: SweepError(
        "InvalidGrid", f"row {index}, column {name!r}: {problem} (got {shown(value)})",
        column=name, row=index, value=value)


def load_grid(path: str | Path) -> tuple[pd.DataFrame, str]:
    """A grid file: ``evaluate = "availability"``, ``[axes]`` (lists) and ``[fixed]``
    (single values). Relative ``fleet`` and ``catalog`` paths start at the file's folder.
    Returns the grid and the evaluation."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SweepError("InvalidGrid", f"{path}: cannot read the grid file ({error.strerror})",
                         path=str(path)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise SweepError("InvalidGrid", f"{path}: not valid TOML: {error}",
                         path=str(path)) from None
    for key in data:
        if key not in ("evaluate", "axes", "fixed"):
            raise SweepError("InvalidGrid", f"{path}: unknown key {key!r}; expected evaluate, "
                             "axes and fixed", path=str(path), column=key)
    evaluation = data.get("evaluate", "plan")
    if evaluation not in EVALUATIONS:
        raise SweepError("InvalidGrid", f"{path}: evaluate must be one of "
                         f"{', '.join(EVALUATIONS)} (got {evaluation!r})", path=str(path))
    axes, fixed = data.get("axes", {}), data.get("fixed", {})
    if not isinstance(axes, dict) or not isinstance(fixed, dict):
        raise SweepError("InvalidGrid", f"{path}: [axes] and [fixed] must be tables",
                         path=str(path))
    base = path.parent

    def rebase(name: str, value: Any) -> Any:
        if name in ("fleet", "catalog") and isinstance(value, str):
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


def _document(row: Mapping[str, Any], documents: Mapping[str, FleetDocument]) -> FleetDocument:
    if "fleet" not in row:
        raise SweepError("InvalidGrid", "this evaluation needs a fleet column", column="fleet")
    document = documents[row["fleet"]]
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


def _evaluate_size(row: Mapping[str, Any], documents: Mapping[str, FleetDocument]
                   ) -> dict[str, Any]:
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
    documents: dict[str, FleetDocument]


def evaluate_scenario(evaluation: str, row: Mapping[str, Any],
                      documents: Mapping[str, FleetDocument]) -> dict[str, Any]:
    """One scenario's result columns; a coded error becomes ``error_code`` and
    ``error_message`` instead of stopping the sweep."""
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
    """What a saved result is matched by: the evaluation, the row, and ``inputs``, the
    contents of the files the row names (so an edited fleet file or catalog is evaluated
    again instead of resumed from a stale result)."""
    text = json.dumps([evaluation, sorted(row.items()), sorted((inputs or {}).items())],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"  # the scenario reports the error itself


def _row_inputs(row: Mapping[str, Any], documents: Mapping[str, FleetDocument]
                ) -> dict[str, Any]:
    inputs: dict[str, Any] = {}
    if "fleet" in row:
        document = documents[row["fleet"]]
        inputs["fleet"] = {**document.to_dict(), "source": None}
        gguf = document.model.gguf_path(document.base_dir)
        if gguf is not None:
            inputs["gguf"] = _file_digest(str(gguf))
    if "catalog" in row:
        inputs["catalog"] = _file_digest(row["catalog"])
    return inputs


# -- running a sweep --------------------------------------------------------------------


class _Parts:
    """Finished batches saved as JSON lines (floats round-trip exactly) under a folder."""

    def __init__(self, output: Path | None) -> None:
        self.folder = None if output is None else output.with_name(output.name + ".parts")
        self.count = 0

    def load(self, keys: Mapping[int, str]) -> dict[int, dict[str, Any]]:
        done: dict[int, dict[str, Any]] = {}
        if self.folder is None or not self.folder.is_dir():
            return done
        for part in sorted(self.folder.glob("part-*.jsonl")):
            self.count += 1
            for line in part.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a batch cut off while being written: evaluate it again
                index = record.get("scenario")
                if keys.get(index) == record.get("scenario_key"):
                    done[index] = record
        return done

    def save(self, records: Sequence[dict[str, Any]]) -> None:
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        self.count += 1
        path = self.folder / f"part-{os.getpid()}-{self.count:06d}.jsonl"
        temporary = path.with_suffix(".tmp")
        temporary.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        temporary.replace(path)

    def clear(self) -> None:
        if self.folder is not None and self.folder.is_dir():
            shutil.rmtree(self.folder)


def _batches(evaluation: str, pending: Sequence[tuple[int, str, dict[str, Any]]],
             documents: Mapping[str, FleetDocument], size: int) -> list[Batch]:
    batches = []
    for start in range(0, len(pending), size):
        chunk = tuple(pending[start:start + size])
        names = {row["fleet"] for _, _, row in chunk if "fleet" in row}
        batches.append(Batch(evaluation, chunk, {n: documents[n] for n in names}))
    return batches


def _read_documents(rows: Iterable[Mapping[str, Any]]) -> dict[str, FleetDocument]:
    documents: dict[str, FleetDocument] = {}
    for row in rows:
        name = row.get("fleet")
        if name is not None and name not in documents:
            documents[name] = load_fleet(name)
    return documents


def results_frame(grid: pd.DataFrame, evaluation: str,
                  records: Mapping[int, Mapping[str, Any]]) -> pd.DataFrame:
    """The grid's columns, ``scenario``, then the evaluation's typed result columns."""
    schema = {**RESULT_COLUMNS[evaluation], **ERROR_COLUMNS}
    rows = [{name: records[index].get(name) for name in schema} for index in range(len(grid))]
    results = pd.DataFrame(rows, columns=list(schema))
    for name, dtype in schema.items():
        results[name] = pd.array(results[name].tolist(), dtype=dtype)
    frame = grid.reset_index(drop=True).copy()
    frame.insert(0, "scenario", range(len(grid)))
    for name in schema:
        if name in frame.columns:  # an input column the evaluation reports back
            frame = frame.drop(columns=name)
    return pd.concat([frame, results], axis=1)


def write_results(frame: pd.DataFrame, output: str | Path) -> Path:
    """Parquet for ``.parquet``, CSV for ``.csv``."""
    path = Path(output)
    temporary = path.with_name(path.name + ".tmp")
    if path.suffix == ".parquet":
        frame.to_parquet(temporary, index=False)
    elif path.suffix == ".csv":
        frame.to_csv(temporary, index=False)
    else:
        raise SweepError("InvalidGrid", f"output {str(path)!r} must end in .parquet or .csv",
                         path=str(path))
    temporary.replace(path)
    return path


Progress = Callable[[int, int], None]


def sweep(
    grid: pd.DataFrame,
    evaluate: str = "plan",
    *,
    workers: int | None = None,
    scheduler: Any = None,
    executor: str = "auto",
    output: str | Path | None = None,
    batch_size: int | None = None,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Evaluate every scenario of ``grid`` and return the results, in grid order.

    ``executor``: ``"auto"`` (in this process up to :data:`IN_PROCESS_LIMIT` scenarios,
    else local processes; Dask whenever ``scheduler`` is given), ``"inline"``,
    ``"processes"`` or ``"dask"`` (``scheduler`` an address, a ``Client`` or ``None`` for a
    new ``LocalCluster`` of ``workers`` workers). ``output`` (``.parquet`` or ``.csv``)
    saves the results, and each finished batch along the way so that a stopped sweep
    resumes. ``progress(done, total)`` is called as scenarios finish.
    """
    if evaluate not in EVALUATIONS:
        raise SweepError("InvalidGrid", f"evaluate must be one of {', '.join(EVALUATIONS)} "
                         f"(got {evaluate!r})", value=evaluate)
    if executor not in ("auto", "inline", "processes", "dask"):
        raise SweepError("InvalidGrid", "executor must be auto, inline, processes or dask "
                         f"(got {executor!r})", value=executor)
    if workers is not None:
        workers = integer(workers, lambda problem, value: SweepError(
            "InvalidGrid", f"workers: {problem} (got {shown(value)})", value=value), minimum=1)
    grid = check_grid(grid)
    out = Path(output) if output is not None else None
    if out is not None and out.suffix not in (".parquet", ".csv"):
        raise SweepError("InvalidGrid", f"output {str(out)!r} must end in .parquet or .csv",
                         path=str(out))
    rows = _row_dicts(grid)
    documents = _read_documents(rows)
    keys = {index: scenario_key(evaluate, row, _row_inputs(row, documents))
            for index, row in enumerate(rows)}
    parts = _Parts(out)
    records = parts.load(keys)
    total = len(rows)
    if progress is not None:
        progress(len(records), total)
    pending = [(index, keys[index], row) for index, row in enumerate(rows)
               if index not in records]
    if executor == "auto":
        executor = ("dask" if scheduler is not None else
                    "inline" if len(pending) <= IN_PROCESS_LIMIT else "processes")
    if pending:
        count = workers or (os.cpu_count() or 1)
        size = batch_size or max(1, min(50, math.ceil(len(pending) / (count * 4))))
        batches = _batches(evaluate, pending, documents, size)

        def finished(batch_records: list[dict[str, Any]]) -> None:
            parts.save(batch_records)
            for record in batch_records:
                records[record["scenario"]] = record
            if progress is not None:
                progress(len(records), total)

        if executor == "inline":
            for batch in batches:
                finished(evaluate_batch(batch))
        elif executor == "processes":
            _run_processes(batches, count, finished, parts, total, records)
        else:
            _run_dask(batches, scheduler, workers, finished, parts, total, records)
    frame = results_frame(grid, evaluate, records)
    if out is not None:
        write_results(frame, out)
        parts.clear()
    return frame


def _run_processes(batches: Sequence[Batch], workers: int,
                   finished: Callable[[list[dict[str, Any]]], None], parts: _Parts,
                   total: int, records: Mapping[int, Any]) -> None:
    with ProcessPoolExecutor(max_workers=min(workers, len(batches))) as pool:
        futures = [pool.submit(evaluate_batch, batch) for batch in batches]
        try:
            for future in as_completed(futures):
                finished(future.result())
        except BrokenProcessPool:
            raise _interrupted("a worker process died", parts, total, records) from None


def _run_dask(batches: Sequence[Batch], scheduler: Any, workers: int | None,
              finished: Callable[[list[dict[str, Any]]], None], parts: _Parts,
              total: int, records: Mapping[int, Any]) -> None:
    from planner import sweep_dask

    where = f" at {scheduler!r}" if isinstance(scheduler, str) and scheduler != "dask" else ""
    with contextlib.closing(sweep_dask.results(batches, evaluate_batch, scheduler=scheduler,
                                               workers=workers)) as done:
        while True:
            # Only the cluster's own failures are caught: saving a batch is not in here.
            try:
                batch_records = next(done)
            except StopIteration:
                return
            except sweep_dask.CLUSTER_FAILURES as error:
                raise _interrupted(f"the Dask cluster{where} failed ({error})", parts, total,
                                   records) from None
            finished(batch_records)


def _interrupted(cause: str, parts: _Parts, total: int,
                 records: Mapping[int, Any]) -> SweepError:
    where = (f"; the finished ones are saved in {parts.folder} and running the same "
             "sweep again resumes from them" if parts.folder is not None else
             "; give an output file to keep finished scenarios across runs")
    return SweepError("SweepInterrupted",
                      f"{cause}: {len(records)} of {total} scenarios finished{where}",
                      finished=len(records), total=total)
