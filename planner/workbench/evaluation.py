"""What a workbench state plans to: :func:`evaluate` and its :class:`Evaluation`.

One evaluation per edit: the request, the candidate shapes, the plan, the stage and node
tables, warnings about the fleet, the node that limits the plan and why the other nodes
are unused. Bad input never raises here; it becomes the evaluation's :class:`Problem`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from planner.errors import CodedError, PlanError
from planner.performance import (
    PlanEstimate,
    try_estimate,
    with_candidate_estimates,
    with_stage_estimates,
)
from planner.planning import (
    ChoiceExplanation,
    Plan,
    PlanningInput,
    node_budgets,
    plan_request,
)
from planner.planning.warnings import fleet_warnings as core_fleet_warnings
from planner.targets import plan_tpot_target_met
from planner.units import format_bytes, format_milliseconds
from planner.workbench.catalog import gpu_catalog, model_traffic
from planner.workbench.problems import Problem
from planner.workbench.state import WorkbenchState


@dataclass(frozen=True, slots=True)
class LimitingNode:
    """The stage with the least room left, and what stops a higher context."""

    node_id: str
    stage_id: str
    remaining_bytes: int
    usable_bytes: int
    context_limit: str | None
    """Why the next higher context does not fit (or was not chosen); None at native."""

    def describe(self) -> str:
        text = (f"{self.node_id} ({self.stage_id}) limits the plan: "
                f"{format_bytes(self.remaining_bytes)} of its "
                f"{format_bytes(self.usable_bytes)} usable left")
        return text + (f". {self.context_limit}" if self.context_limit else "")


@dataclass(frozen=True, slots=True)
class UnusedNode:
    node_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What a :class:`WorkbenchState` plans to, or the problem that stops it."""

    state: WorkbenchState
    request: PlanningInput | None = None
    plan: Plan | None = None
    candidates: pd.DataFrame | None = None
    stages: pd.DataFrame | None = None
    budgets: pd.DataFrame | None = None
    problem: Problem | None = None
    warnings: tuple[str, ...] = ()
    limiting: LimitingNode | None = None
    unused: tuple[UnusedNode, ...] = ()
    choice: ChoiceExplanation | None = None
    """Why the plan has its shape (:func:`planner.explain_choice`); None without a plan."""
    estimate: PlanEstimate | None = None
    """The plan's speed and cost ESTIMATE (nodes named ``<kind>-NN`` of the catalog, a
    preset or GGUF model); ``estimate_reason`` says why there is none."""
    estimate_reason: str = ""
    latency_note: str = ""
    """Which latency the nodes without their own are planned at
    (:meth:`planner.fleet.FleetDocument.latency_note`); empty when all or none have one."""

    @property
    def ok(self) -> bool:
        return self.plan is not None

    def summary(self) -> str:
        """One line: the chosen shape, or the problem."""
        if self.plan is None:
            return "No plan" if self.problem is None else f"No plan ({self.problem.code})"
        plan = self.plan
        tpot = self.tpot_ms
        unknown = "estimated TPOT unknown" + (f": {self.estimate_reason}"
                                              if self.estimate_reason else "")
        parts = [
            f"{plan.stage_count} stage{'s' if plan.stage_count != 1 else ''}",
            f"context {plan.context_length:,}",
            f"{plan.parallel_lanes} lane{'s' if plan.parallel_lanes != 1 else ''}",
            unknown if tpot is None else
            "estimated TPOT " + format_milliseconds(tpot, estimated=self.estimate is not None),
        ]
        met = self.target_met
        if met is not None:
            parts.append("target met" if met else "target missed")
        if self.estimate is not None:
            parts.append(self.estimate_summary())
        return " · ".join(parts)

    @property
    def tpot_ms(self) -> float | None:
        """The plan's one estimated TPOT, wherever the page shows one: the speed estimate
        (:func:`planner.performance.fleet_estimate`) when there is one, else the
        planner's network estimate (docs/rules.md §6), else ``None``."""
        if self.plan is None:
            return None
        if self.estimate is not None:
            return float(self.estimate.estimated_tpot_ms)
        return self.plan.estimated_decode_network_ms_per_token

    @property
    def target_met(self) -> bool | None:
        """Whether :attr:`tpot_ms` is within the fleet's TPOT target (``None``: no target
        or no estimate), judged by :func:`planner.targets.plan_tpot_target_met`."""
        if self.plan is None or self.request is None:
            return None
        return plan_tpot_target_met(self.request.target_decode_tpot_ms, self.plan,
                                    self.estimate)

    def estimate_summary(self) -> str:
        """The rest of the speed and cost estimate (its TPOT is :attr:`tpot_ms`) in one
        line, or why there is none."""
        if self.estimate is None:
            return f"speed estimate unavailable: {self.estimate_reason}"
        estimate = self.estimate
        text = f"{estimate.tokens_per_s:,.1f} tokens/s"
        if estimate.estimated_context_fill_ms is not None:
            text += (f", filling the context takes "
                     f"{format_milliseconds(estimate.estimated_context_fill_ms, estimated=True)}")
        if estimate.cost_per_hour_usd is not None:
            text += (f", USD {estimate.cost_per_hour_usd:,.2f}/h, USD "
                     f"{estimate.cost_per_million_tokens_usd:,.2f} per million tokens")
        return text + " (estimate)" + (f". {estimate.error_note}" if estimate.error_note else "")


def fleet_warnings(request: PlanningInput) -> tuple[str, ...]:
    """The messages of :func:`planner.planning.warnings.fleet_warnings`."""
    return tuple(warning.message for warning in core_fleet_warnings(request))


def _context_limit(plan: Plan, table: pd.DataFrame,
                   choice: ChoiceExplanation | None) -> str | None:
    higher = sorted({int(c) for c in table["context_length"] if c > plan.context_length})
    if not higher:
        return None
    context = higher[0]
    rows = table[table["context_length"] == context]
    if not rows["feasible"].any():
        most = rows[rows["stage_count"] == rows["stage_count"].max()].iloc[0]
        return f"Context {context:,} does not fit: {most['reason']}"
    # It fits, so the docs/rules.md §6 ranking put it below the plan: say by which rule.
    for item in choice.higher_contexts if choice is not None else ():
        if item.option.context_length == context:
            return f"Context {context:,} fits but was not chosen: {item.reason}"
    return f"Context {context:,} fits but was not chosen"


def limiting_node(request: PlanningInput, plan: Plan, stages: pd.DataFrame,
                  table: pd.DataFrame | None,
                  choice: ChoiceExplanation | None) -> LimitingNode:
    """The stage with the smallest remaining bytes (first such stage on ties)."""
    row = stages.loc[stages["remaining_bytes"].idxmin()]
    return LimitingNode(
        node_id=str(row["node_id"]),
        stage_id=str(row["stage_id"]),
        remaining_bytes=int(row["remaining_bytes"]),
        usable_bytes=int(row["usable_vram_bytes"]),
        context_limit=_context_limit(plan, table, choice) if table is not None else None,
    )


def unused_nodes(request: PlanningInput, plan: Plan | None) -> tuple[UnusedNode, ...]:
    """Each node the plan leaves out, with the reason in words."""
    chosen = set(plan.node_ids) if plan is not None else set()
    members = [n for n in request.nodes if n.node_id in chosen]
    smallest = min((n.usable_bytes for n in members), default=0)
    latencies = [n.stage_transfer_latency_ms for n in members
                 if n.stage_transfer_latency_ms is not None]
    slowest = max(latencies, default=None)
    result = []
    for node in request.nodes:
        if node.node_id in chosen:
            continue
        if node.usable_bytes == 0:
            reason = "no usable memory (headroom covers all of its VRAM)"
        elif plan is None:
            reason = "no plan"
        elif (slowest is not None and node.stage_transfer_latency_ms is not None
              and node.stage_transfer_latency_ms > slowest):
            reason = (f"its latency {format_milliseconds(node.stage_transfer_latency_ms)} is "
                      f"above the plan's slowest link ({format_milliseconds(slowest)})")
        elif node.usable_bytes < smallest:
            reason = (f"smaller than the chosen nodes ({format_bytes(node.usable_bytes)} "
                      f"usable, the chosen have at least {format_bytes(smallest)})")
        else:
            reason = (f"not needed: {plan.stage_count} stage"
                      f"{'s' if plan.stage_count != 1 else ''} suffice, and the chosen set "
                      "leaves more room or comes first by node id")
        result.append(UnusedNode(node.node_id, reason))
    return tuple(result)


def evaluate(state: WorkbenchState) -> Evaluation:
    """Plan ``state`` once: request, candidates, plan, tables, warnings and diagnosis.

    Never raises for bad input; the problem is in :attr:`Evaluation.problem`.
    """
    try:
        request = state.to_request()
    except CodedError as error:  # text that cannot be read, a model that cannot be found
        return Evaluation(state=state, problem=Problem.from_exception(error))
    warnings = fleet_warnings(request)
    budgets = node_budgets(request)
    note = state.document.latency_note()
    try:
        # One search serves the candidates, the plan, the stage table and the explanation.
        result = plan_request(request)
    except PlanError as error:
        return Evaluation(state=state, request=request, budgets=budgets,
                          problem=Problem.from_exception(error), warnings=warnings,
                          unused=unused_nodes(request, None), latency_note=note)
    table = result.candidates
    plan = result.plan
    if plan is None:
        assert result.error is not None
        return Evaluation(state=state, request=request, candidates=table, budgets=budgets,
                          problem=Problem.from_exception(result.error), warnings=warnings,
                          unused=unused_nodes(request, None), latency_note=note)
    catalog = gpu_catalog()
    kinds = state.node_kinds
    try:
        traffic = model_traffic(state.model_choice(), state.base_dir)
        estimate, reason = try_estimate(request, plan, traffic, catalog, node_kinds=kinds)
        estimated = with_candidate_estimates(table, request, traffic, catalog,
                                             node_kinds=kinds)
    except CodedError as error:  # a node naming a kind the catalog lacks, speed numbers
        # that contradict each other
        estimate, reason = None, f"{error.code}: {error.message}"
        estimated = with_candidate_estimates(table, request, None, catalog)
    stages = result.stages
    choice = result.explanation
    assert stages is not None and choice is not None
    return Evaluation(
        state=state,
        request=request,
        plan=plan,
        candidates=estimated,
        stages=with_stage_estimates(stages, estimate),
        estimate=estimate,
        estimate_reason=reason,
        budgets=budgets,
        warnings=warnings,
        limiting=limiting_node(request, plan, stages, table, choice),
        unused=unused_nodes(request, plan),
        choice=choice,
        latency_note=note,
    )
