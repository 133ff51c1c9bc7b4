"""Sweeps: a grid of what-ifs in (a DataFrame, or a SweepGrid of axes), one result row per
scenario out.

A grid row is one scenario. Its columns (all optional unless the evaluation needs them):

``fleet``                a fleet file (its model, planning options and nodes)
``model``                a model preset id that replaces the fleet file's model
``kv_cache_type``        the KV cache type of that preset
``file_bytes``           the size of the file that preset (or the fleet file's) is run
                         from, where it stores the weights at other precisions
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
finished batch is saved at once under ``<output>.parts/`` (:mod:`planner.sweep._store`); a
sweep that stops (a worker dies, the machine reboots) picks up from there when run again
with the same grid and output, evaluating only what is missing. A saved result is used
only for the same scenario on the same inputs: editing a fleet file (or a catalog or GGUF
file a scenario reads; each is fingerprinted by its size, time and a bounded digest)
evaluates its scenarios again.
"""

from planner.sweep._columns import (
    ERROR_COLUMNS,
    EVALUATIONS,
    GRID_COLUMNS,
    RESULT_COLUMNS,
    SHARE_COLUMNS,
    SweepError,
)
from planner.sweep._evaluators import Batch, evaluate_batch, evaluate_scenario
from planner.sweep._grid import SweepGrid, check_grid, grid_from_axes, load_grid
from planner.sweep._keys import scenario_key
from planner.sweep._results import record_problem, results_frame, write_csv, write_results
from planner.sweep._runner import IN_PROCESS_LIMIT, sweep
from planner.sweep._store import SweepOutputError, SweepWarning

__all__ = ["ERROR_COLUMNS", "EVALUATIONS", "GRID_COLUMNS", "IN_PROCESS_LIMIT",
           "RESULT_COLUMNS", "SHARE_COLUMNS", "Batch", "SweepError", "SweepGrid",
           "SweepOutputError", "SweepWarning", "check_grid", "evaluate_batch",
           "evaluate_scenario", "grid_from_axes", "load_grid", "record_problem",
           "results_frame", "scenario_key", "sweep", "write_csv", "write_results"]
