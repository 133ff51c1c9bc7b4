"""One scenario evaluated: the four evaluations (plan, size, availability, simulation), each a
pure function of the grid row and the fleet documents it names, and the batches every
executor runs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from planner._validate import shown
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
from planner.sweep._columns import SweepError, checked_evaluation, checked_mapping
from planner.targets import SpeedEstimator, Targets


@lru_cache(maxsize=64)
def _catalog(path: str | None) -> tuple[Any, ...]:
    from planner.models import gpu_catalog_with

    return tuple(gpu_catalog_with(path))


Documents = Mapping[str, "FleetDocument | CodedError"]
"""Each fleet file a grid names, read once: its document, or why it could not be read
(the error of each scenario that names it)."""


def _row_model(row: Mapping[str, Any]) -> ModelChoice:
    """The preset a row names, at its KV cache type and stored in its file size, as a
    fleet file would give it (every evaluation reads it so)."""
    return ModelChoice(preset=row["model"], kv_cache_type=row.get("kv_cache_type"),
                       file_bytes=row.get("file_bytes"))


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
        document = replace(document, model=_row_model(row))
    else:
        changes = {name: row[name] for name in ("kv_cache_type", "file_bytes") if name in row}
        if changes:
            document = replace(document, model=replace(document.model, **changes))
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
    from planner.models import ModelSpec

    model: ModelSpec | dict[str, Any]
    if "model" in row:
        model = _row_model(row).spec()
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


def evaluate_scenario(evaluation: str, row: Mapping[str, Any],
                      documents: Documents) -> dict[str, Any]:
    """One scenario's result columns; a coded error becomes ``error_code`` and
    ``error_message`` instead of stopping the sweep."""
    checked_evaluation(evaluation)
    checked_mapping(row, "row")
    checked_mapping(documents, "documents")
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


def read_documents(names: Iterable[str]) -> dict[str, FleetDocument | CodedError]:
    documents: dict[str, FleetDocument | CodedError] = {}
    for name in names:
        try:
            documents[name] = load_fleet(name)
        except CodedError as error:  # the scenarios naming it report it
            documents[name] = error
    return documents
