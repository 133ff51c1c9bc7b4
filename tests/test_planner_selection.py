"""docs/rules.md §6 worked by hand, with latency on some nodes only.

The planner and the exhaustive reference share one reading of docs/rules.md; these expected
plans are worked from its text alone, so a misreading common to both shows here.
Every model below has uniform weights, so a layer at context ``c`` needs
``ceil(model_weight_bytes / layer_count) + ceil(kv_bytes_per_token / layer_count) * c``.
"""

from __future__ import annotations

from typing import Any

import pytest
import reference_planner as ref

import planner
from planner.errors import PlanError


def _node(node_id: str, usable: int, latency: int | None) -> dict[str, Any]:
    return {"node_id": node_id, "detected_vram_bytes": usable,
            "stage_transfer_latency_ms": latency}


# Four layers of 100 B weights and 1 B KV per token each (kv_bytes_per_token 4 over 4
# layers); native 512 gives the one context 512, so a layer needs 100 + 512 = 612 B.
SMALL = {"native_context_length": 512, "layer_count": 4, "model_weight_bytes": 400,
         "kv_bytes_per_token": 4}
LAYER = 612


def _stages(*ranges: tuple[str, int, int]) -> list[tuple[str, int, int]]:
    return list(ranges)


def _c8_b3_a() -> list[dict[str, Any]]:
    """c holds all 4 layers at 8 ms; b (3 ms) and a (no latency) hold 2 each."""
    return [_node("c", 4 * LAYER, 8), _node("b", 2 * LAYER, 3), _node("a", 2 * LAYER, None)]


CASES = [
    pytest.param(
        # a holds all 4 layers, no latency; b holds all 4, 10 ms. One stage on a: the
        # estimate is unknown and ranks as 0, below b alone (1 x 10) and a+b (2 x 10: a
        # adds nothing to the max). The plan reports the unknown as null.
        dict(SMALL, nodes=[_node("a", 4 * LAYER, None), _node("b", 4 * LAYER, 10)]),
        (512, _stages(("a", 0, 4)), None, None),
        id="unknown-estimate-ranks-as-zero",
    ),
    pytest.param(
        # Same fleet, target 5 ms: a alone has no estimate, which counts as met (rank
        # rule 1), and its estimate ranks as 0 (rule 2); b alone would miss (10 > 5).
        # decode_tpot_target_met stays null because the estimate is unknown.
        dict(SMALL, target_decode_tpot_ms=5,
             nodes=[_node("a", 4 * LAYER, None), _node("b", 4 * LAYER, 10)]),
        (512, _stages(("a", 0, 4)), None, None),
        id="unknown-estimate-counts-as-met",
    ),
    pytest.param(
        # a and b hold 2 layers each (a without a latency, b 3 ms); c holds all 4 at 8 ms.
        # c alone: 1 x 8 = 8. a+b: 2 x max(3) = 6, a adds nothing. a+c, b+c: 2 x 8 = 16;
        # all three 3 x 8 = 24. Lowest estimate: a+b, in stage order a then b (equal
        # usable bytes, ids ascending), two layers each.
        dict(SMALL, nodes=_c8_b3_a()),
        (512, _stages(("a", 0, 2), ("b", 2, 4)), 6, None),
        id="node-without-latency-adds-nothing-to-the-max",
    ),
    pytest.param(
        # The same with a 5 ms target: nothing meets it (a+b 6, c 8), so rule 1 ties and
        # the lower estimate wins again; the plan says the target is missed.
        dict(SMALL, target_decode_tpot_ms=5,
             nodes=_c8_b3_a()),
        (512, _stages(("a", 0, 2), ("b", 2, 4)), 6, False),
        id="no-set-meets-the-target",
    ),
    pytest.param(
        # With a 8 ms target c alone meets it (8 <= 8) and so does a+b (6): both meet,
        # the lower estimate wins.
        dict(SMALL, target_decode_tpot_ms=8,
             nodes=_c8_b3_a()),
        (512, _stages(("a", 0, 2), ("b", 2, 4)), 6, True),
        id="both-meet-lower-estimate-wins",
    ),
]

# Two layers of 1 B weights and 1 B KV per token each; native 131,072 gives the contexts
# 131,072 and 65,536, where a layer needs 131,073 B and 65,537 B.
TWO_CONTEXTS = {"native_context_length": 131072, "layer_count": 2, "model_weight_bytes": 2,
                "kv_bytes_per_token": 2}

CASES += [
    pytest.param(
        # x (131,074 B, no latency) holds both layers at 65,536 (2 x 65,537) but one at
        # 131,072; y (131,073 B, 4 ms) holds one layer at either context. At 131,072 only
        # x+y fits: 2 x max(4) = 8. At 65,536 x alone fits with an unknown estimate
        # (ranks as 0), which beats 8 before the context is looked at.
        dict(TWO_CONTEXTS, nodes=[_node("x", 131074, None), _node("y", 131073, 4)]),
        (65536, _stages(("x", 0, 2)), None, None),
        id="unknown-estimate-beats-higher-context",
    ),
    pytest.param(
        # The only latency is on z, which has no usable memory: planning is latency-aware
        # but every fitting set's estimate is unknown (0), so the higher context wins the
        # tie: x+y at 131,072 (x first: more usable bytes), one layer each.
        dict(TWO_CONTEXTS, nodes=[_node("x", 131074, None), _node("y", 131073, None),
                                  _node("z", 0, 7)]),
        (131072, _stages(("x", 0, 1), ("y", 1, 2)), None, None),
        id="equal-estimates-higher-context-wins",
    ),
]


def _reference_plan(request: dict[str, Any]) -> dict[str, Any]:
    return ref.plan(request)


@pytest.mark.parametrize(("request_", "expected"), CASES)
def test_hand_worked_latency_aware_choice(request_: dict[str, Any],
                                          expected: tuple[Any, ...]) -> None:
    context, stages, estimate, met = expected
    for plan in (planner.plan_topology(request_).to_dict(), _reference_plan(request_)):
        assert plan["context_length"] == context
        assert [(s["node_id"], s["layer_start"], s["layer_end"])
                for s in plan["stages"]] == stages
        assert plan["parallel_lanes"] == 4
        assert plan["estimated_decode_network_ms_per_token"] == estimate
        assert plan["decode_tpot_target_met"] is met


def test_candidates_selects_the_hand_worked_row() -> None:
    request = CASES[2].values[0]
    frame = planner.candidates(request)
    chosen = frame[frame["selected"]]
    assert len(chosen) == 1
    assert tuple(chosen.iloc[0]["node_ids"]) == ("a", "b")
    one = frame[(frame["stage_count"] == 1) & (frame["parallel_lanes"] == 4)].iloc[0]
    assert tuple(one["node_ids"]) == ("c",)
    assert one["estimated_decode_network_ms_per_token"] == 8


def test_stage_usage_remaining_is_the_stage_walk() -> None:
    request = planner.PlanningInput.from_dict(CASES[2].values[0])
    plan = planner.plan_topology(request)
    usage = planner.stage_usage(request, plan)
    # a and b hold 2 x 612 B and use it all.
    assert usage["remaining_bytes"].tolist() == [0, 0]
    assert usage["used_bytes"].tolist() == [2 * LAYER, 2 * LAYER]


def test_stage_usage_refuses_a_plan_of_another_request() -> None:
    request = planner.PlanningInput.from_dict(CASES[2].values[0])
    plan = planner.plan_topology(request)
    other = planner.Plan.from_dict({**plan.to_dict(), "stages": [
        {**plan.stages[0].to_dict(), "layer_end": 1},
        {**plan.stages[1].to_dict(), "layer_start": 1}]})
    with pytest.raises(PlanError) as caught:
        planner.stage_usage(request, other)
    assert caught.value.code == "PlanMismatch"
    stranger = planner.Plan.from_dict({**plan.to_dict(), "stages": [
        {**plan.stages[0].to_dict(), "node_id": "nobody"}, plan.stages[1].to_dict()]})
    with pytest.raises(PlanError, match="nobody"):
        planner.stage_usage(request, stranger)


def test_infeasible_rows_say_why_for_each_count() -> None:
    frame = planner.candidates({
        "native_context_length": 512, "layer_count": 4, "model_weight_bytes": 4000,
        "kv_bytes_per_token": 4, "parallel_lanes_override": 1,
        "nodes": [{"node_id": "big", "detected_vram_bytes": 2100},
                  {"node_id": "small", "detected_vram_bytes": 900},
                  {"node_id": "empty", "detected_vram_bytes": 0}]})
    reasons = dict(zip(frame["stage_count"], frame["reason"], strict=True))
    assert reasons[1] == "no 1 nodes fit; the 1 largest hold 1 of 4 layers"
    assert reasons[2] == ("no 2 nodes fit; with the 2 largest, small (900 B usable) cannot "
                          "hold layer 1 (1.48 KiB)")
    assert reasons[3] == "only 2 nodes have usable memory"
