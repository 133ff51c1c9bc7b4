"""What a topology report says, as plain data (no HTML, no plotting).

:func:`build_report` plans a request and gathers everything a report shows: the model,
each node's usable bytes step by step, the plan and its per-stage memory, the candidate
shapes, the startup quorum, a failure what-if per node and warnings. The renderers
(HTML, Markdown, JSON) only format this content.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pandas as pd

import planner
from planner.errors import PlanError
from planner.fence import quorum_requirement
from planner.fleet import FleetDocument
from planner.models import GpuModel, load_gpu_catalog
from planner.performance import (
    ESTIMATE_COLUMNS,
    ESTIMATE_NOTE,
    ModelTraffic,
    PlanEstimate,
    fleet_model_traffic,
    try_estimate,
    with_candidate_estimates,
    with_stage_estimates,
)
from planner.planning import (
    Plan,
    PlanningInput,
    PlanningResult,
    as_planning_input,
    plan_request,
    plan_reserves,
    plan_topology,
)
from planner.planning.api import candidate_frame
from planner.planning.nodesets import NodeIds, layer_count_entries, node_set_entries
from planner.planning.rules import (
    context_floor,
    kv_bytes_per_layer_token,
    layer_weights,
)
from planner.planning.warnings import fleet_warnings
from planner.targets import plan_tpot_target_met
from planner.units import format_milliseconds

ReportSource = FleetDocument | PlanningInput | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ReportContent:
    """Everything a report shows, as JSON-ready plain data.

    ``request`` is the planning request (docs/rules.md §1) and ``plan`` the plan (docs/rules.md
    §7, ``None`` when there is none); ``error`` describes why there is no plan.
    ``nodes`` rows derive each node's usable bytes: detected -> cap -> headroom -> usable.
    """

    title: str
    generated_at: str
    tool_version: str
    source: str | None
    model: dict[str, Any]
    planning: dict[str, Any]
    request: dict[str, Any]
    nodes: tuple[dict[str, Any], ...]
    plan: dict[str, Any] | None
    error: dict[str, Any] | None
    summary: str
    stages: tuple[dict[str, Any], ...]
    quorum: dict[str, Any] | None
    candidates: tuple[dict[str, Any], ...]
    failure_what_if: tuple[dict[str, Any], ...]
    warnings: tuple[dict[str, Any], ...] = field(default=())
    choice: dict[str, Any] | None = None
    """Why the plan has its shape (:func:`planner.planning.explain_choice`), or None."""
    estimate: dict[str, Any] | None = None
    """The plan's speed and cost ESTIMATE (:meth:`planner.performance.PlanEstimate.to_dict`
    plus ``available``), or ``{"available": False, "reason": ...}``; ``None`` without a
    plan."""
    memory: dict[str, Any] | None = None
    """The memory model the plan was made with (``memory_model``: ``design`` or
    ``llamacpp``) and, for ``llamacpp``, what llama.cpp allocates on each stage's node
    and on the host (``stages``: one row per stage, then the host, each component in
    bytes)."""
    source_edited: bool = False
    """Whether the fleet reported differs from the file ``source`` (edited in the
    workbench): the report then says "edited from" the file."""
    tpot_target_met: bool | None = None
    """Whether the plan meets the fleet's TPOT target, by the speed estimate where there is
    one (:func:`planner.targets.plan_tpot_target_met`); ``None`` without a target."""

    @property
    def provenance(self) -> str:
        """How the fleet relates to ``source``: ``"from"``, or ``"edited from"``."""
        return "edited from" if self.source_edited else "from"

    @property
    def ok(self) -> bool:
        """Whether the request has a plan."""
        return self.plan is not None

    def planning_input(self) -> PlanningInput:
        """The request as it was planned, with its memory rule (llama.cpp's read back
        from its plain form)."""
        request = dict(self.request)
        if isinstance(request.get("memory_rule"), Mapping):
            from planner.llamacpp import LlamaCppCosts

            request["memory_rule"] = LlamaCppCosts.from_dict(request["memory_rule"])
        return PlanningInput.from_dict(request)

    def plan_object(self) -> Plan | None:
        return Plan.from_dict(self.plan) if self.plan is not None else None

    def candidates_frame(self) -> pd.DataFrame:
        """The candidate rows as the DataFrame :func:`planner.candidates` returns, with
        the speed estimate's columns where the rows have them
        (:func:`planner.performance.with_candidate_estimates`)."""
        frame = candidate_frame(self.candidates)
        for column in ESTIMATE_COLUMNS:
            if any(column in row for row in self.candidates):
                frame[column] = pd.array([row.get(column) for row in self.candidates],
                                         dtype="Float64")
        return frame

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "generated_at": self.generated_at,
            "tool_version": self.tool_version,
            "source": self.source,
            "model": self.model,
            "planning": self.planning,
            "request": self.request,
            "nodes": list(self.nodes),
            "ok": self.ok,
            "plan": self.plan,
            "error": self.error,
            "summary": self.summary,
            "stages": list(self.stages),
            "quorum": self.quorum,
            "candidates": [{**row, "node_ids": node_set_entries(row["node_ids"]),
                            "stage_layer_counts": layer_count_entries(
                                row["stage_layer_counts"])}
                           for row in self.candidates],
            "failure_what_if": list(self.failure_what_if),
            "warnings": list(self.warnings),
            "choice": self.choice,
            "estimate": self.estimate,
            "memory": self.memory,
            "source_edited": self.source_edited,
            "tpot_target_met": self.tpot_target_met,
        }


def _plain(value: Any) -> Any:
    """pandas/numpy scalars and NA as JSON-ready Python values."""
    if isinstance(value, NodeIds):  # read as a tuple; kept compact (see to_dict)
        return value
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if value is None or value is pd.NA:
        return None
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    if hasattr(value, "item"):
        return value.item()
    return value


def _model_section(source: ReportSource, request: PlanningInput,
                   model_name: str | None) -> dict[str, Any]:
    kind, reference, kv_cache_type, architecture = "numbers", None, None, None
    file_bytes = None
    label = model_name
    if isinstance(source, FleetDocument):
        choice = source.model
        spec = choice.spec(source.base_dir)
        if spec is not None:
            kv_cache_type, architecture = spec.kv_cache_type, spec.architecture
        kind, reference, file_bytes = choice.kind, choice.preset or choice.gguf, choice.file_bytes
        if label is None:
            label = choice.name or (spec.name if spec is not None else choice.label)
    weights = layer_weights(request) if request.layer_count else ()
    return {
        "name": label if label is not None else "custom model",
        "kind": kind,
        "reference": reference,
        # A preset run from a file of other precisions than its own: the file's size.
        "file_bytes": file_bytes,
        "kv_cache_type": kv_cache_type,
        "architecture": architecture,
        "native_context_length": request.native_context_length,
        "layer_count": request.layer_count,
        "model_weight_bytes": request.model_weight_bytes,
        "kv_bytes_per_token": request.kv_bytes_per_token,
        "exact_layer_weights": request.layer_weight_bytes is not None,
        "largest_layer_weight_bytes": max(weights) if weights else 0,
        "kv_bytes_per_layer_token": (
            kv_bytes_per_layer_token(request) if request.layer_count else 0),
        "context_floor": context_floor(request),
    }


def _node_rows(request: PlanningInput, plan: Plan | None) -> tuple[dict[str, Any], ...]:
    """Each node's usable bytes as the plan's search had them: under llama.cpp's rule,
    after what it reserves on the node at the plan's context and lanes."""
    stage_of = {stage.node_id: stage.stage_id for stage in plan.stages} if plan else {}
    reserves = plan_reserves(request, plan) if plan else {}
    rows = []
    for node in request.nodes:
        reserve = reserves.get(node.node_id, 0)
        rows.append({
            "node_id": node.node_id,
            "detected_vram_bytes": node.detected_vram_bytes,
            "max_vram_bytes": node.max_vram_bytes,
            "capped_vram_bytes": node.capped_vram_bytes,
            "capped_away_bytes": node.detected_vram_bytes - node.capped_vram_bytes,
            "runtime_headroom_bytes": node.runtime_headroom_bytes,
            "memory_rule_reserve_bytes": reserve,
            "usable_vram_bytes": max(0, node.usable_bytes - reserve),
            "stage_transfer_latency_ms": node.stage_transfer_latency_ms,
            "stage_id": stage_of.get(node.node_id),
        })
    return tuple(rows)


def _warnings(request: PlanningInput) -> tuple[dict[str, Any], ...]:
    return tuple(warning.to_dict() for warning in fleet_warnings(request))


def _summary(plan: Plan, estimate: PlanEstimate | None, met: bool | None) -> str:
    text = (f"{plan.stage_count} stage{'s' if plan.stage_count != 1 else ''}, context "
            f"{plan.context_length:,}, {plan.parallel_lanes} lanes")
    if estimate is not None:
        text += (", estimated TPOT "
                 + format_milliseconds(estimate.estimated_tpot_ms, estimated=True))
    elif plan.estimated_decode_network_ms_per_token is not None:
        text += (", estimated decode network "
                 + format_milliseconds(plan.estimated_decode_network_ms_per_token))
    if met is not None:
        text += " (target met)" if met else " (target missed)"
    return text


def _try_plan(request: PlanningInput) -> tuple[Plan | None, PlanError | None]:
    try:
        return plan_topology(request), None
    except PlanError as error:
        return None, error


def _try_result(request: PlanningInput) -> tuple[PlanningResult | None, PlanError | None]:
    """The request planned once, or the error that refused it before any search."""
    try:
        result = plan_request(request)
    except PlanError as error:
        return None, error
    return result, result.error


def _error_dict(error: PlanError) -> dict[str, Any]:
    return {"code": error.code, "message": error.message,
            "details": {key: _plain(value) for key, value in error.details.items()}}


def _without(request: PlanningInput, node_id: str) -> PlanningInput:
    return replace(request, nodes=tuple(n for n in request.nodes if n.node_id != node_id))


def _what_if(request: PlanningInput, plan: Plan) -> tuple[dict[str, Any], ...]:
    """For each node: the plan the other nodes give, or why there is none.

    Losing a node the plan does not use leaves the plan as it is, as long as planning
    stays in the same mode: every node set still available was available before and
    ranked no better, and the chosen set remains. Losing the only node with a latency
    switches latency-aware planning off, which changes the rules, so that is re-planned.
    """
    rows = []
    planned = set(plan.node_ids)
    with_latency = sum(n.stage_transfer_latency_ms is not None for n in request.nodes)
    for node in request.nodes:
        row: dict[str, Any] = {"lost_node_id": node.node_id,
                               "in_plan": node.node_id in planned}
        same_mode = node.stage_transfer_latency_ms is None or with_latency > 1
        if node.node_id not in planned and same_mode:
            row.update(ok=True, plan=plan.to_dict(), error=None, summary="plan unchanged",
                       unchanged=True)
        elif len(request.nodes) == 1:
            row.update(ok=False, plan=None, unchanged=False, summary="no nodes would be left",
                       error={"code": "MissingNodes", "message": "no nodes would be left",
                              "details": {}})
        else:
            fallback, error = _try_plan(_without(request, node.node_id))
            if fallback is not None:
                same = fallback == plan
                row.update(ok=True, plan=fallback.to_dict(), error=None, unchanged=same,
                           summary="plan unchanged" if same else _summary(
                               fallback, None, fallback.decode_tpot_target_met))
            else:
                assert error is not None
                row.update(ok=False, plan=None, error=_error_dict(error), unchanged=False,
                           summary=f"no plan: {error.message}")
        rows.append(row)
    return tuple(rows)


def candidate_records(frame: pd.DataFrame) -> tuple[dict[str, Any], ...]:
    """The rows of a :func:`planner.candidates` table as JSON-ready dicts, but for their
    ``node_ids`` and ``stage_layer_counts``: a search's
    :class:`~planner.planning.nodesets.NodeIds` stay as they are (read as tuples), and
    so do the layer counts, tuples of ints (a set at the caps has thousands);
    :meth:`ReportContent.to_dict` lists them as
    :func:`~planner.planning.nodesets.node_set_entries` and
    :func:`~planner.planning.nodesets.layer_count_entries` do."""
    return tuple({key: value if key == "stage_layer_counts" else _plain(value)
                  for key, value in record.items()}
                 for record in frame.to_dict(orient="records"))


def _candidate_rows(result: PlanningResult | None, traffic: ModelTraffic | None,
                    catalog: Sequence[GpuModel],
                    node_kinds: Mapping[str, str]) -> tuple[dict[str, Any], ...]:
    if result is None:
        return ()
    return candidate_records(with_candidate_estimates(
        result.candidates, result.request, traffic, catalog, node_kinds=node_kinds))


def _traffic(source: ReportSource) -> ModelTraffic | None:
    """A preset or GGUF model's decode traffic, or its numbers' when they state the speed
    fields (:func:`planner.performance.model_traffic`)."""
    if not isinstance(source, FleetDocument):
        return None
    return fleet_model_traffic(source.model, source.base_dir)


def _node_kinds(source: ReportSource) -> dict[str, str]:
    """The catalog kinds a fleet file's nodes name (``gpu``), by node id."""
    overrides = getattr(source, "reliability", None) or {}
    return {node_id: kind for node_id, override in overrides.items()
            if (kind := getattr(override, "gpu", None))}


def estimate_section(estimate: PlanEstimate | None, reason: str) -> dict[str, Any]:
    """The report's ``estimate``: the plan's estimate, or why there is none."""
    if estimate is None:
        return {"available": False, "reason": reason, "notes": [ESTIMATE_NOTE]}
    return {"available": True, **estimate.to_dict()}


def build_report(
    source: ReportSource,
    *,
    model_name: str | None = None,
    title: str | None = None,
    now: datetime | None = None,
    include_candidates: bool = True,
    include_what_if: bool = True,
    catalog: Sequence[GpuModel] | None = None,
    traffic: ModelTraffic | None = None,
    memory_model: str = "design",
    planned: PlanningResult | None = None,
    source_edited: bool = False,
) -> ReportContent:
    """Plan ``source`` (a :class:`~planner.fleet.FleetDocument`, a
    :class:`~planner.planning.PlanningInput` or a planning request dict) and gather the report.

    A request the planner refuses (no valid topology, an override out of range) still
    gives a report, whose ``error`` says why. ``include_candidates`` and
    ``include_what_if`` may leave out the two costly sections (they are then empty).
    The speed and cost estimate (stage, candidate and ``estimate`` fields) takes each
    node's bandwidth and price from its ``catalog`` kind (default: the shipped catalog)
    and the model's decode traffic from a preset or GGUF model (or ``traffic``).
    ``memory_model`` (``design`` or ``llamacpp``) is the memory rule a fleet document is
    planned with; a request carries its own. ``planned``, when given, is the source's
    request already planned (:func:`planner.planning.plan_request`; its GGUF file already
    read): the report uses its one search for the plan, candidates, explanation and
    stage table. Otherwise the request is planned once here. ``source_edited`` says the
    document was edited since it was read from its file (the report says so).
    A malformed request or a model that cannot be resolved raises
    (:class:`~planner.errors.InvalidInput`, :class:`~planner.fleet.FleetFileError`).
    """
    if planned is not None:
        request = planned.request
        default_title = source.title if isinstance(source, FleetDocument) else (
            model_name or "Topology report")
        origin = source.source if isinstance(source, FleetDocument) else None
    elif isinstance(source, FleetDocument):
        request = source.to_request(memory_model)
        default_title = source.title
        origin = source.source
    else:
        request = as_planning_input(source)
        default_title = model_name or "Topology report"
        origin = None
    result, error = (planned, planned.error) if planned is not None else _try_result(request)
    plan = result.plan if result is not None else None
    moment = (now or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    stages: tuple[dict[str, Any], ...] = ()
    quorum = None
    estimate = None
    found: PlanEstimate | None = None
    catalog = load_gpu_catalog() if catalog is None else catalog
    traffic = traffic or _traffic(source)
    kinds = _node_kinds(source)
    if plan is not None:
        found, reason = try_estimate(request, plan, traffic, catalog, node_kinds=kinds)
        estimate = estimate_section(found, reason)
        assert result is not None and result.stages is not None
        usage = with_stage_estimates(result.stages, found)
        stages = tuple({key: _plain(value) for key, value in record.items()}
                       for record in usage.to_dict(orient="records"))
        needed = quorum_requirement(plan.stage_count)
        quorum = {
            "planned_stages": plan.stage_count,
            "quorum_requirement": needed,
            "tolerated_failures": plan.stage_count - needed,
        }
    met = (plan_tpot_target_met(request.target_decode_tpot_ms, plan, found)
           if plan is not None else None)
    return ReportContent(
        title=title or default_title,
        generated_at=moment.isoformat().replace("+00:00", "Z"),
        tool_version=planner.__version__,
        source=origin,
        model=_model_section(source, request, model_name),
        planning={
            "minimum_nodes": request.minimum_nodes,
            "context_length_override": request.context_length_override,
            "parallel_lanes_override": request.parallel_lanes_override,
            "target_decode_tpot_ms": request.target_decode_tpot_ms,
            "latency_aware": request.has_latency,
            "memory_model": request.memory_model,
            "unknown_latency": (source.latency_note() if isinstance(source, FleetDocument)
                                else ""),
        },
        request=request.to_dict(),
        nodes=_node_rows(request, plan),
        plan=plan.to_dict() if plan is not None else None,
        error=_error_dict(error) if error is not None else None,
        summary=_summary(plan, found, met) if plan is not None else f"no plan: {error}",
        stages=stages,
        quorum=quorum,
        candidates=(_candidate_rows(result, traffic, catalog, kinds)
                    if include_candidates else ()),
        # Without a plan there is nothing to lose: fewer nodes never fit where more did not.
        failure_what_if=(_what_if(request, plan)
                         if plan is not None and include_what_if else ()),
        warnings=_warnings(request),
        choice=(result.explanation.to_dict()
                if result is not None and result.explanation is not None else None),
        estimate=estimate,
        memory=memory_section(request, plan),
        source_edited=source_edited and origin is not None,
        tpot_target_met=met,
    )


def memory_section(request: PlanningInput, plan: Plan | None) -> dict[str, Any]:
    """Which memory rule planned ``request`` and, under ``llamacpp``, each stage's
    components as llama.cpp allocates them (:func:`planner.llamacpp.estimate`)."""
    section: dict[str, Any] = {"memory_model": request.memory_model, "stages": []}
    from planner.llamacpp import LlamaCppCosts, estimate

    costs = request.memory_rule
    if not isinstance(costs, LlamaCppCosts) or plan is None:
        return section
    result = estimate(costs.model, costs.settings(plan.context_length, plan.parallel_lanes),
                      [(stage.layer_start, stage.layer_end) for stage in plan.stages])
    overheads = dict(costs.overhead_bytes)
    rows = []
    for stage, part in zip(plan.stages, result.devices, strict=True):
        row = part.to_dict()
        row["overhead_bytes"] = overheads.get(stage.node_id, 0)
        row["total_bytes"] += row["overhead_bytes"]
        rows.append({"stage_id": stage.stage_id, "node_id": stage.node_id,
                     **{k: v for k, v in row.items() if k != "device"}})
    host = result.host.to_dict()
    rows.append({"stage_id": "host", "node_id": "",
                 **{k: v for k, v in host.items() if k != "device"}})
    section["stages"] = rows
    section["notes"] = list(result.notes)
    return section
