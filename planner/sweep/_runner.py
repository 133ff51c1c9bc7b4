"""Running a sweep: the grid's unfinished scenarios in batches, in this process, on local
processes or through the Dask adapter, each finished batch saved as it comes in."""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pandas as pd

from planner._validate import integer, shown
from planner.fleet._fields import host_problem
from planner.limits import MAX_SWEEP_BATCH, MAX_SWEEP_WORKERS
from planner.sweep._columns import EVALUATIONS, SweepError, setting_error
from planner.sweep._evaluators import Batch, Documents, evaluate_batch, read_documents
from planner.sweep._grid import Rows, SweepGrid, check_grid
from planner.sweep._keys import Keys
from planner.sweep._results import Results, record_problem, results_frame, write_results
from planner.sweep._store import PartsFolder
from planner.sweep._store import warn as warn_by_default

# Below this many scenarios the sweep runs in this process: starting workers costs more.
IN_PROCESS_LIMIT = 32



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
    by default a :class:`~planner.sweep.SweepWarning`.
    """
    if evaluate not in EVALUATIONS:
        raise SweepError("InvalidGrid", f"evaluate must be one of {', '.join(EVALUATIONS)} "
                         f"(got {shown(evaluate)})", value=evaluate)
    if executor not in ("auto", "inline", "processes", "dask"):
        raise SweepError("InvalidGrid", "executor must be auto, inline, processes or dask "
                         f"(got {shown(executor)})", value=executor)
    if workers is not None:
        workers = integer(workers, setting_error("workers"), minimum=1, maximum=MAX_SWEEP_WORKERS)
    if batch_size is not None:
        batch_size = integer(batch_size, setting_error("batch_size"), minimum=1,
                             maximum=MAX_SWEEP_BATCH)
    for name, function in (("progress", progress), ("warn", warn)):
        if function is not None and not callable(function):
            raise setting_error(name)("must be a function", function)
    problem = _scheduler_problem(scheduler)
    if problem is not None:
        raise SweepError("InvalidScheduler", f"scheduler {problem} (got {shown(scheduler)})",
                         value=shown(scheduler))
    grid = check_grid(grid)
    out = None
    if output is not None:
        if not isinstance(output, str | os.PathLike) or not str(output).strip():
            raise setting_error("output")("must be a file path", output)
        out = Path(output)
        if out.suffix not in (".parquet", ".csv"):
            raise SweepError("InvalidGrid", f"output {str(out)!r} must end in .parquet or "
                             ".csv", path=str(out))
    rows = Rows(grid)
    with PartsFolder(out) as parts:
        documents = read_documents(rows.distinct("fleet"))
        keys = Keys(evaluate, rows, documents)
        results = Results(evaluate, rows.count)
        for record in parts.load(keys.current, record_problem(evaluate),
                                 warn or warn_by_default).values():
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


def _batches(evaluation: str, rows: Rows, keys: Keys, results: Results,
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


def _interrupted(cause: str, parts: PartsFolder, results: Results) -> SweepError:
    where = (f"; the finished ones are saved in {parts.folder} and running the same "
             "sweep again resumes from them" if parts.folder is not None else
             "; give an output file to keep finished scenarios across runs")
    return SweepError("SweepInterrupted",
                      f"{cause}: {results.done} of {results.total} scenarios finished{where}",
                      finished=results.done, total=results.total)
