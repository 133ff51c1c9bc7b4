"""What a sweep's grid and result rows hold, and the sweep's errors: the columns, their
types, and the checks of a sweep's own settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner._validate import Fail, shown
from planner.errors import CodedError


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


GRID_COLUMNS = ("fleet", "model", "kv_cache_type", "file_bytes", "min_context", "min_lanes",
                "target_tpot_ms", "annual_failure_rate", "repair_hours", "catalog",
                "max_states", "seed", "horizon_hours", "failures_tolerated", "price_scale",
                "kinds")
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


def checked_evaluation(value: Any) -> str:
    if not isinstance(value, str) or value not in EVALUATIONS:
        raise setting_error("evaluation")(f"must be one of {', '.join(EVALUATIONS)}", value)
    return value


def checked_mapping(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise setting_error(name)("must be a mapping", value)
    return value


def setting_error(name: str) -> Fail:
    return lambda problem, value: SweepError(
        "InvalidGrid", f"{name} {problem} (got {shown(value)})", field=name, value=value)
