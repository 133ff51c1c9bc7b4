"""Why the planner chose its shape: the chosen shape beside the best one at each higher
context, and the docs/rules.md §6 rule that ranked it lower.

Without latencies the highest context that fits wins outright, so no higher context has a
feasible shape. With latencies the estimate ranks before the context, and a deeper
topology at a higher context can lose to a shallower one; the explanation says so with
the numbers ("262,144 needs 5 stages: 25 ms vs 20 ms").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.planning.api import (
    Request,
    Shape,
    Shapes,
    no_valid_topology,
    select_shape,
    shape_rank,
    target_met,
)
from planner.planning.inputs import PlanningInput, as_planning_input
from planner.planning.rules import check_request, context_candidates
from planner.units import format_milliseconds, latency_microseconds

TARGET_MET = "target_met"
LOWER_ESTIMATE = "lower_estimate"
RULE_TEXT = {
    TARGET_MET: "meeting the TPOT target ranks first",
    LOWER_ESTIMATE: "the lower network estimate of the TPOT ranks before the higher context",
}
"""Each rule of :class:`HigherContext` in words."""


@dataclass(frozen=True, slots=True)
class ShapeOption:
    """One shape and its best node set (docs/rules.md §5), as the planner ranks it."""

    context_length: int
    stage_count: int
    parallel_lanes: int
    node_ids: tuple[str, ...]
    estimated_decode_network_ms_per_token: int | float | None
    """None when none of its nodes has a latency (ranked as 0)."""
    decode_tpot_target_met: bool | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "context_length": self.context_length,
            "stage_count": self.stage_count,
            "parallel_lanes": self.parallel_lanes,
            "node_ids": list(self.node_ids),
            "estimated_decode_network_ms_per_token": self.estimated_decode_network_ms_per_token,
            "decode_tpot_target_met": self.decode_tpot_target_met,
        }


@dataclass(frozen=True, slots=True)
class HigherContext:
    """The best shape at a context above the chosen one, and why it ranked lower.

    ``rule`` is ``"target_met"`` (it misses the TPOT target the chosen shape meets) or
    ``"lower_estimate"`` (the chosen shape's estimated TPOT is lower); ``reason`` says it
    with the numbers.
    """

    option: ShapeOption
    rule: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"option": self.option.to_dict(), "rule": self.rule, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class ChoiceExplanation:
    """The chosen shape, and for each higher context with a feasible shape the best
    shape there and the rule that decided, highest context first."""

    latency_aware: bool
    target_decode_tpot_ms: int | None
    chosen: ShapeOption
    higher_contexts: tuple[HigherContext, ...]
    summary: str
    """One sentence for people."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "latency_aware": self.latency_aware,
            "target_decode_tpot_ms": self.target_decode_tpot_ms,
            "chosen": self.chosen.to_dict(),
            "higher_contexts": [item.to_dict() for item in self.higher_contexts],
            "summary": self.summary,
        }


def explain_choice(request: Request) -> ChoiceExplanation:
    """Why the plan has its context, stage count and lanes (docs/rules.md §6).

    Raises :class:`~planner.errors.PlanError` exactly like :func:`plan_topology`.

    >>> explain_choice(fleet).higher_contexts[0].reason  # 5 x 80 GiB, 5 ms each
    '262,144 needs 5 stages: 25 ms vs 20 ms'
    """
    req = as_planning_input(request)
    check_request(req)
    explanation = explain_with(req, Shapes(req))
    if explanation is None:
        raise no_valid_topology(req)
    return explanation


def explain_with(request: PlanningInput, shapes: Shapes) -> ChoiceExplanation | None:
    """The explanation of a checked request from ``shapes``' searches (None when no shape
    fits)."""
    shape = select_shape(request, shapes)
    if shape is None:
        return None
    chosen = _option(request, shape)
    higher = []
    for context in context_candidates(request):
        if context <= shape.choice.context_length:
            break
        best = select_shape(request, shapes, contexts=(context,))
        if best is not None:
            higher.append(_compare(request, _option(request, best), chosen))
    return ChoiceExplanation(
        latency_aware=request.has_latency,
        target_decode_tpot_ms=request.target_decode_tpot_ms,
        chosen=chosen,
        higher_contexts=tuple(higher),
        summary=_summary(request, chosen, higher),
    )


def _option(request: PlanningInput, shape: Shape) -> ShapeOption:
    choice = shape.choice
    estimate = choice.estimated_decode_network_ms_per_token
    return ShapeOption(
        context_length=choice.context_length,
        stage_count=choice.stage_count,
        parallel_lanes=shape.lanes,
        node_ids=choice.node_ids.as_tuple(),
        estimated_decode_network_ms_per_token=estimate,
        decode_tpot_target_met=target_met(request, estimate),
    )


def _us(option: ShapeOption) -> int:
    """The estimate in whole microseconds, unknown as 0, as the planner ranks it."""
    return latency_microseconds(option.estimated_decode_network_ms_per_token or 0)


def _ms(estimate: int | float | None) -> str:
    return "unknown (counts as 0 ms)" if estimate is None else format_milliseconds(estimate)


def _stages(count: int) -> str:
    return f"{count} stage{'s' if count != 1 else ''}"


def _compare(request: PlanningInput, option: ShapeOption, chosen: ShapeOption) -> HigherContext:
    """The docs/rules.md §6 rule by which ``option`` (a higher context) ranks below ``chosen``."""
    mine = shape_rank(request, _us(option), option.context_length)
    theirs = shape_rank(request, _us(chosen), chosen.context_length)
    needs = f"{option.context_length:,} needs {_stages(option.stage_count)}"
    target = request.target_decode_tpot_ms
    if mine[0] != theirs[0] and target is not None:
        # A higher context loses first on the target: it misses what the chosen one meets.
        return HigherContext(option, TARGET_MET,
                             f"{needs}: {_ms(option.estimated_decode_network_ms_per_token)} "
                             f"misses the {format_milliseconds(target)} target")
    if mine[1] <= theirs[1]:
        raise AssertionError("a higher context with an estimate as low would have won")
    return HigherContext(option, LOWER_ESTIMATE,
                         f"{needs}: {_ms(option.estimated_decode_network_ms_per_token)} vs "
                         f"{_ms(chosen.estimated_decode_network_ms_per_token)}")


def _summary(request: PlanningInput, chosen: ShapeOption, higher: list[HigherContext]) -> str:
    shape = (f"context {chosen.context_length:,} on {_stages(chosen.stage_count)} with "
             f"{chosen.parallel_lanes} lanes")
    if not request.has_latency:
        return (f"{shape}: the highest context that fits, on the fewest nodes "
                "(no node has a latency, so the estimate does not rank)")
    text = (f"{shape}, network estimate of the TPOT "
            f"{_ms(chosen.estimated_decode_network_ms_per_token)}")
    if not higher:
        return text + ": no higher context fits"
    reasons = "; ".join(item.reason for item in higher)
    return (f"{text}: latency-aware planning ranks the estimate before the context "
            f"({reasons})")
