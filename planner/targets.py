"""What a plan must achieve, and the one check of whether it does.

:class:`Targets` is the one answer to "does this plan meet the targets?" for sizing,
availability, the simulation, sweeps, their commands and the workbench's panels. A plan
**meets** the targets when

- its context is at least ``minimum_context`` (``None``: the context floor,
  ``min(native_context_length, 65_536)``, docs/rules.md §3, which every plan reaches);
- its parallel lanes are at least ``minimum_lanes``;
- its stages are at least ``minimum_nodes`` (0 counts as 1);
- with a ``target_ttft_ms`` (and the ``prompt_tokens`` it is for), the estimated time to
  first token of such a prompt (:mod:`planner.performance`'s prefill) is within it, and
  likewise unknown never counts as met;
- with a ``target_decode_tpot_ms``, the speed estimate of the plan
  (:mod:`planner.performance`: each stage reads its weights and KV cache at its node's
  memory bandwidth, plus the hops) is within it. A TPOT that cannot be estimated (the
  model's decode traffic or a node's bandwidth is unknown) never counts as met, and
  availability refuses such a target up front (``TpotNotEstimable``).

``failures_tolerated`` is sizing's: the fleet must still meet the targets after losing
any that many nodes. A planning request's own ``target_decode_tpot_ms`` only steers the
planner's choice among plans (docs/rules.md §6); it is judged here only as a target
(:meth:`Targets.from_request` takes it from a fleet file).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from planner._validate import integer, shown
from planner.errors import CodedError, PlanError
from planner.fleet.document import FleetDocument
from planner.limits import (
    MAX_CONTEXT,
    MAX_FAILURES_TOLERATED,
    MAX_LANES,
    MAX_LATENCY_MS,
    MAX_MINIMUM_NODES,
)
from planner.models.gpus import GpuModel
from planner.performance import (
    ModelTraffic,
    NodeSpeed,
    PerformanceError,
    PlanEstimate,
    estimate_plan,
    fleet_model_traffic,
    node_speeds,
)
from planner.planning.api import plan_topology
from planner.planning.inputs import NodeBudget, PlanningInput
from planner.planning.plan import Plan
from planner.planning.rules import context_floor
from planner.units import format_milliseconds


class TargetsError(CodedError):
    """Targets that cannot be judged.

    ``code`` is ``InvalidTargets`` (a target out of range, or a minimum context above the
    model's native context; ``field`` names it), ``PromptExceedsNativeContext`` (a TTFT
    target's prompt longer than the model's native context), ``TpotNotEstimable`` (a TPOT
    target on a fleet whose decode speed cannot be estimated) or ``TtftNotEstimable`` (a
    TTFT target on a model whose prefill cannot be estimated); the message says what is
    missing.
    """

    codes = ("InvalidTargets", "PromptExceedsNativeContext", "TpotNotEstimable",
             "TtftNotEstimable")


def _whole(value: Any, name: str, low: int, high: int) -> int:
    return integer(value, lambda problem, got: TargetsError(
        "InvalidTargets", f"{name}: {problem} (got {shown(got)})", field=name, value=got),
        minimum=low, maximum=high)


@dataclass(frozen=True, slots=True)
class Targets:
    """What a plan (and, for sizing, a fleet) must achieve; see the module."""

    minimum_context: int | None = None
    minimum_lanes: int = 1
    minimum_nodes: int = 1
    target_decode_tpot_ms: int | None = None
    failures_tolerated: int = 0
    target_ttft_ms: int | None = None
    prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        for name, low, high, optional in (
                ("minimum_context", 1, MAX_CONTEXT, True),
                ("minimum_lanes", 1, MAX_LANES, False),
                ("minimum_nodes", 0, MAX_MINIMUM_NODES, False),
                ("target_decode_tpot_ms", 1, MAX_LATENCY_MS, True),
                ("failures_tolerated", 0, MAX_FAILURES_TOLERATED, False),
                ("target_ttft_ms", 1, MAX_LATENCY_MS, True),
                ("prompt_tokens", 1, MAX_CONTEXT, True)):
            value = getattr(self, name)
            if not (optional and value is None):
                object.__setattr__(self, name, _whole(value, name, low, high))
        if (self.target_ttft_ms is None) != (self.prompt_tokens is None):
            raise TargetsError("InvalidTargets", "target_ttft_ms and prompt_tokens go "
                               "together: a time to first token is for a prompt size",
                               field="prompt_tokens" if self.prompt_tokens is None
                               else "target_ttft_ms")

    @property
    def estimate_options(self) -> dict[str, Any]:
        """What :func:`planner.performance.estimate_plan` needs to judge these targets
        (the prompt of a time-to-first-token target)."""
        return {} if self.prompt_tokens is None else {"prompt_tokens": self.prompt_tokens}

    @classmethod
    def from_request(cls, request: PlanningInput, **given: Any) -> Targets:
        """The targets a planning request (a fleet file's ``[planning]``) states, its
        ``minimum_nodes`` and ``target_decode_tpot_ms``, with ``given`` (``None`` values
        left out) on top."""
        stated: dict[str, Any] = {"minimum_nodes": request.minimum_nodes,
                                  "target_decode_tpot_ms": request.target_decode_tpot_ms}
        stated.update({key: value for key, value in given.items() if value is not None})
        return cls(**stated)

    def context_for(self, request: PlanningInput) -> int:
        """The minimum context for this model: ``minimum_context``, else the context
        floor, and at least a TTFT target's prompt (a context that cannot hold the prompt
        cannot answer it). ``PromptExceedsNativeContext`` when the prompt is longer than the
        model's native context, ``InvalidTargets`` when the minimum is (no plan can reach
        it)."""
        floor = context_floor(request)
        minimum = floor if self.minimum_context is None else self.minimum_context
        if self.prompt_tokens is not None:
            if self.prompt_tokens > request.native_context_length:
                raise TargetsError(
                    "PromptExceedsNativeContext",
                    f"prompt_tokens: a {self.prompt_tokens:,}-token prompt is longer than "
                    f"the model's native context of {request.native_context_length:,} "
                    "tokens", field="prompt_tokens", value=self.prompt_tokens)
            minimum = max(minimum, self.prompt_tokens)
        if minimum > request.native_context_length:
            raise TargetsError(
                "InvalidTargets",
                f"minimum_context {minimum:,} exceeds the model's native context "
                f"{request.native_context_length:,}", field="minimum_context",
                value=minimum)
        return minimum

    def for_request(self, request: PlanningInput) -> Targets:
        """These targets with the minimum context worked out for the request's model
        (:meth:`context_for`)."""
        return replace(self, minimum_context=self.context_for(request))

    def apply(self, request: PlanningInput) -> PlanningInput:
        """The request planned under these targets: at least ``minimum_nodes`` stages and
        the TPOT target (which steers the planner's choice, docs/rules.md §6)."""
        changes: dict[str, Any] = {}
        if self.minimum_nodes > request.minimum_nodes:
            changes["minimum_nodes"] = self.minimum_nodes
        if self.target_decode_tpot_ms is not None:
            changes["target_decode_tpot_ms"] = self.target_decode_tpot_ms
        return replace(request, **changes) if changes else request

    def shortfalls(self, plan: Plan, estimate: PlanEstimate | None = None) -> list[str]:
        """What ``plan`` misses, in words (empty: it meets the targets). ``estimate`` is
        the plan's speed estimate, needed to judge a TPOT target."""
        missed = []
        if self.minimum_context is not None and plan.context_length < self.minimum_context:
            missed.append(f"context {plan.context_length:,} < {self.minimum_context:,}")
        if plan.parallel_lanes < self.minimum_lanes:
            missed.append(f"{plan.parallel_lanes} lanes < {self.minimum_lanes}")
        if plan.stage_count < max(self.minimum_nodes, 1):
            missed.append(f"{plan.stage_count} stages < {self.minimum_nodes}")
        target = self.target_decode_tpot_ms
        if target is not None:
            if estimate is None:
                missed.append("no TPOT estimate")
            elif estimate.estimated_tpot_ms > target:
                missed.append("estimated TPOT "
                              f"{format_milliseconds(estimate.estimated_tpot_ms, estimated=True)}"
                              f" > {format_milliseconds(target)}")
        ttft = self.target_ttft_ms
        if ttft is not None and self.prompt_tokens is not None and (
                plan.context_length < self.prompt_tokens):
            missed.append(f"context {plan.context_length:,} holds no "
                          f"{self.prompt_tokens:,}-token prompt")
        elif ttft is not None:
            if estimate is None or estimate.ttft_ms is None:
                missed.append("no time-to-first-token estimate")
            elif estimate.ttft_ms > ttft:
                missed.append("estimated TTFT "
                              f"{format_milliseconds(estimate.ttft_ms, estimated=True)} > "
                              f"{format_milliseconds(ttft)} ({self.prompt_tokens:,}-token "
                              "prompt)")
        return missed

    def meets(self, plan: Plan, estimate: PlanEstimate | None = None) -> bool:
        """Whether ``plan`` meets the targets (the module says how)."""
        return not self.missed(plan, estimate)

    def missed(self, plan: Plan, estimate: PlanEstimate | None = None) -> list[str]:
        """The targets ``plan`` misses, each said with the plan's figure; empty when it
        meets them all."""
        found = []
        if self.minimum_context is not None and plan.context_length < self.minimum_context:
            found.append(f"context {plan.context_length:,} < {self.minimum_context:,}")
        if plan.parallel_lanes < self.minimum_lanes:
            found.append(f"{plan.parallel_lanes} lanes < {self.minimum_lanes}")
        if plan.stage_count < max(self.minimum_nodes, 1):
            found.append(f"{plan.stage_count} stages < {self.minimum_nodes}")
        target = self.target_decode_tpot_ms
        if target is not None:
            if estimate is None:
                found.append(f"TPOT not estimated (target {format_milliseconds(target)})")
            elif estimate.estimated_tpot_ms > target:
                found.append("estimated TPOT "
                             f"{format_milliseconds(estimate.estimated_tpot_ms, estimated=True)}"
                             f" > {format_milliseconds(target)}")
        ttft = self.target_ttft_ms
        if ttft is not None and self.prompt_tokens is not None and (
                plan.context_length < self.prompt_tokens):
            found.append(f"context {plan.context_length:,} holds no "
                         f"{self.prompt_tokens:,}-token prompt")
        elif ttft is not None:
            if estimate is None or estimate.ttft_ms is None:
                found.append("time to first token not estimated "
                             f"(target {format_milliseconds(ttft)})")
            elif estimate.ttft_ms > ttft:
                found.append("estimated time to first token "
                             f"{format_milliseconds(estimate.ttft_ms, estimated=True)} > "
                             f"{format_milliseconds(ttft)}")
        return found

    def to_dict(self) -> dict[str, Any]:
        return {"minimum_context": self.minimum_context, "minimum_lanes": self.minimum_lanes,
                "minimum_nodes": self.minimum_nodes,
                "target_decode_tpot_ms": self.target_decode_tpot_ms,
                "failures_tolerated": self.failures_tolerated,
                "target_ttft_ms": self.target_ttft_ms, "prompt_tokens": self.prompt_tokens}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Targets:
        known = ("minimum_context", "minimum_lanes", "minimum_nodes",
                 "target_decode_tpot_ms", "failures_tolerated", "target_ttft_ms",
                 "prompt_tokens")
        for key in data:
            if key not in known:
                raise TargetsError("InvalidTargets", f"{key} is not a target; expected one "
                                   f"of {', '.join(known)}", field=str(key))
        return cls(**dict(data))


def tpot_verdicts(target_decode_tpot_ms: int | float | None,
                  estimated_tpots_ms: Sequence[float | None],
                  network_met: Sequence[bool | None]) -> list[bool | None]:
    """Whether each shape of one table (candidates, a chart) meets a TPOT target, judged
    as :func:`plan_tpot_target_met` judges a plan: by the speed estimates where the table
    has any (a shape without one is then unknown, ``None``), else by the planner's
    judgement of its network estimate (``network_met``)."""
    if not any(tpot is not None for tpot in estimated_tpots_ms):
        return list(network_met)  # judged against the request's own target
    if target_decode_tpot_ms is None:
        return [None] * len(estimated_tpots_ms)
    return [None if tpot is None else tpot <= target_decode_tpot_ms
            for tpot in estimated_tpots_ms]


def plan_tpot_target_met(target_decode_tpot_ms: int | None, plan: Plan,
                         estimate: PlanEstimate | None) -> bool | None:
    """Whether one plan's TPOT is within a fleet's ``target_decode_tpot_ms``, wherever a
    single plan is shown (the workbench, reports, ``planner plan``): judged by the speed
    estimate as :meth:`Targets.meets` judges it when the plan has one; else by the
    planner's network estimate (``plan.decode_tpot_target_met``, docs/rules.md §6, which
    only ranks the shapes and leaves out the weight reads); ``None`` without a target or
    without either estimate."""
    if target_decode_tpot_ms is None:
        return None
    if estimate is None:
        return plan.decode_tpot_target_met
    return Targets(target_decode_tpot_ms=target_decode_tpot_ms).meets(plan, estimate)


class SpeedEstimator:
    """The speed estimate of any plan of a fleet's nodes (or a subset of them), for
    judging a TPOT target: the model's decode ``traffic`` and each node's bandwidth from
    its catalog kind (:func:`planner.models.gpus.node_gpu_kind`), worked out once."""

    def __init__(self, nodes: Sequence[NodeBudget], traffic: ModelTraffic | None,
                 catalog: Sequence[GpuModel], node_kinds: Mapping[str, str] | None = None,
                 **options: Any) -> None:
        self.traffic = traffic
        self.speeds: dict[str, NodeSpeed] = (
            node_speeds(nodes, catalog, node_kinds) if traffic is not None else {})
        self.options = options

    def with_copies(self, copies: Mapping[str, NodeSpeed | None]) -> SpeedEstimator:
        """This estimator, knowing added nodes too: each new node id with the speed it
        has (a copy of a fleet node's or a catalog kind's; ``None``: unknown)."""
        added = copy.copy(self)
        added.speeds = {**self.speeds, **{node_id: replace(speed, node_id=node_id)
                                          for node_id, speed in copies.items()
                                          if speed is not None}}
        return added

    @classmethod
    def for_document(cls, document: FleetDocument, catalog: Sequence[GpuModel],
                     **options: Any) -> SpeedEstimator:
        """The estimator of a fleet file's fleet: its model's traffic (unknown for a
        model typed as numbers) and the kinds its nodes name (``gpu``)."""
        return cls(document.nodes, fleet_model_traffic(document.model, document.base_dir),
                   catalog, document.node_kinds, **options)

    def __call__(self, request: PlanningInput, plan: Plan) -> PlanEstimate | None:
        return self.estimate(request, plan)[0]

    def estimate(self, request: PlanningInput, plan: Plan) -> tuple[PlanEstimate | None, str]:
        """The estimate, or ``None`` and why there is none."""
        if self.traffic is None:
            return None, ("the model's decode traffic is unknown (the model is typed as "
                          "numbers without hidden_size; give a preset or GGUF model, or "
                          "the model's speed fields)")
        try:
            return estimate_plan(request, plan, self.traffic, self.speeds,
                                 **self.options), ""
        except PerformanceError as error:
            return None, error.message


def require_estimable(targets: Targets, request: PlanningInput, plan: Plan | None,
                      estimator: SpeedEstimator | None) -> None:
    """Refuse a TPOT target that cannot be judged on this fleet (``TpotNotEstimable``):
    no estimator, or no estimate of the plan of every node."""
    target = targets.target_decode_tpot_ms
    if target is None or plan is None:
        return
    why = ("no speed estimator was given (estimator=SpeedEstimator(...))"
           if estimator is None else estimator.estimate(request, plan)[1])
    if why:
        raise TargetsError(
            "TpotNotEstimable",
            f"the TPOT target ({format_milliseconds(target)}) is judged by the speed "
            f"estimate, and this fleet has none: {why}", target_decode_tpot_ms=target)


def plan_or_none(request: PlanningInput) -> Plan | None:
    """The plan of ``request``, ``None`` when nothing fits (other refusals raise)."""
    try:
        return plan_topology(request)
    except PlanError as error:
        if error.code == "NoValidTopology":
            return None
        raise
