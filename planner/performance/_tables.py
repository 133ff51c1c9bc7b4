"""The estimate as table columns: per stage, and for every feasible row of the candidates
table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from planner.models.gpus import GpuModel
from planner.performance.estimate import PlanEstimate, fleet_estimate, node_speeds
from planner.performance.traffic import ModelTraffic
from planner.planning.inputs import PlanningInput
from planner.planning.plan import Plan
from planner.planning.rules import build_stages, layer_weights

ESTIMATE_COLUMNS = ("estimated_tpot_ms", "tokens_per_s", "estimated_context_fill_ms",
                    "cost_per_hour_usd", "cost_per_million_tokens_usd")


def stage_estimates(estimate: PlanEstimate) -> pd.DataFrame:
    """One row per stage: ``stage_id``, ``node_id``, ``weight_read_bytes``,
    ``kv_read_bytes``, ``memory_bandwidth_bytes_per_s``, ``stage_read_ms``,
    ``compute_ms``, ``fixed_ms``, ``stage_ms``, ``hop_ms`` (estimates, per decode step)."""
    columns = ["stage_id", "node_id", "weight_read_bytes", "kv_read_bytes",
               "memory_bandwidth_bytes_per_s", "stage_read_ms", "compute_ms", "fixed_ms",
               "stage_ms", "hop_ms"]
    return pd.DataFrame([s.to_dict() for s in estimate.stages], columns=columns)


def with_stage_estimates(stage_table: pd.DataFrame, estimate: PlanEstimate | None) -> pd.DataFrame:
    """A stage table (``planner.stage_usage``) with the estimate's per-stage columns
    ``stage_read_ms`` and ``hop_ms`` added (NA without an estimate)."""
    table = stage_table.copy()
    if estimate is None:
        table["stage_read_ms"] = pd.Series([pd.NA] * len(table), dtype="Float64")
        table["hop_ms"] = pd.Series([pd.NA] * len(table), dtype="Float64")
        return table
    by_stage = {s.stage_id: s for s in estimate.stages}
    table["stage_read_ms"] = [by_stage[i].stage_read_ms for i in table["stage_id"]]
    table["hop_ms"] = [by_stage[i].hop_ms for i in table["stage_id"]]
    return table


def with_candidate_estimates(frame: pd.DataFrame, request: PlanningInput,
                             traffic: ModelTraffic | None, catalog: Sequence[GpuModel],
                             *, node_kinds: Mapping[str, str] | None = None,
                             **options: Any) -> pd.DataFrame:
    """The candidates table (``planner.candidates``) with :data:`ESTIMATE_COLUMNS` for
    every feasible row whose nodes are catalog kinds (NA elsewhere); each row is
    estimated as the plan its node set and shape would give, at the fleet's cost
    (:func:`fleet_estimate`: every node of the fleet is paid for)."""
    weights = layer_weights(request)
    nodes = {node.node_id: node for node in request.nodes}
    speeds = node_speeds(request.nodes, catalog, node_kinds)
    values: dict[str, list[Any]] = {column: [] for column in ESTIMATE_COLUMNS}
    for row in frame.itertuples(index=False):
        estimate = None
        # Rows with a node of unknown bandwidth are left NA: most fleets typed by hand
        # name no catalog kind, and this runs on every edit.
        if row.feasible and traffic is not None and all(
                node_id in speeds and speeds[node_id].memory_bandwidth_bytes_per_s
                for node_id in row.node_ids):
            # The plan the row's shape would give: its nodes take the layers the search
            # found them to take.
            stages = build_stages([nodes[node_id] for node_id in row.node_ids],
                                  row.stage_layer_counts, weights)
            plan = Plan(int(row.context_length), int(row.parallel_lanes), stages, None, None)
            estimate = fleet_estimate(request, plan, traffic, speeds, **options)
        for column in ESTIMATE_COLUMNS:
            value = None if estimate is None else getattr(estimate, column)
            values[column].append(pd.NA if value is None else value)
    table = frame.copy()
    for column in ESTIMATE_COLUMNS:
        table[column] = pd.array(values[column], dtype="Float64")
    return table
