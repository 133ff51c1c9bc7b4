from __future__ import annotations

import planner
from planner import NodeBudget, PlanningInput
from planner.planning.warnings import fleet_warnings
from planner.reports import build_report, render_report
from planner.workbench import ModelFields, NodeRow, WorkbenchState, evaluate

GIB = 2**30


def request(*nodes: NodeBudget, target: int | None = None) -> PlanningInput:
    return PlanningInput(262144, 62, 315_680_000_000, 131072, nodes,
                         target_decode_tpot_ms=target)


def test_a_plain_fleet_has_no_warnings() -> None:
    assert fleet_warnings(request(NodeBudget("a", 80 * GIB), NodeBudget("b", 80 * GIB))) == ()


def test_each_warning_names_its_nodes() -> None:
    found = fleet_warnings(request(
        NodeBudget("timed", 80 * GIB, stage_transfer_latency_ms=5),
        NodeBudget("untimed", 80 * GIB),
        NodeBudget("full", 16 * GIB, runtime_headroom_bytes=16 * GIB),
        NodeBudget("loose-cap", 48 * GIB, max_vram_bytes=96 * GIB),
    ))
    by_code = {w.code: w for w in found}
    assert list(by_code) == ["PartialLatency", "NoUsableMemory", "IneffectiveCap"]
    assert by_code["PartialLatency"].node_ids == ("untimed", "full", "loose-cap")
    assert "1 of 4 nodes" in by_code["PartialLatency"].message
    assert by_code["NoUsableMemory"].node_ids == ("full",)
    assert "0 usable bytes" in by_code["NoUsableMemory"].message
    assert by_code["IneffectiveCap"].node_ids == ("loose-cap",)
    assert by_code["IneffectiveCap"].to_dict()["node_ids"] == ["loose-cap"]


def test_target_without_any_latency() -> None:
    (warning,) = fleet_warnings(request(NodeBudget("a", 80 * GIB), target=30))
    assert warning.code == "TargetWithoutLatency" and warning.node_ids == ()


def _three_layers(weights: tuple[int, ...] | None) -> PlanningInput:
    return PlanningInput(8192, 3, 40 * GIB, 1024, (NodeBudget("a", 80 * GIB),),
                         layer_weight_bytes=weights)


def test_layer_weights_that_disagree_with_the_model_weight_warn() -> None:
    (warning,) = fleet_warnings(_three_layers((1, 1, 1)))
    assert warning.code == "LayerWeightsMismatch" and warning.node_ids == ()
    assert warning.message == ("the per-layer weights add up to 3 B but the model weight is "
                               "40 GiB; the plan uses the per-layer weights")
    # docs/rules.md §2: planned all the same, with the per-layer figures.
    assert planner.plan_topology(_three_layers((1, 1, 1))).stages[0].parameter_bytes == 3


def test_a_one_byte_difference_is_shown_in_bytes() -> None:
    (warning,) = fleet_warnings(_three_layers((GIB, GIB, 38 * GIB + 1)))
    assert "42,949,672,961 B but the model weight is 42,949,672,960 B" in warning.message


def test_layer_weights_that_add_up_do_not_warn() -> None:
    assert fleet_warnings(_three_layers((GIB, GIB, 38 * GIB))) == ()
    assert fleet_warnings(_three_layers(None)) == ()


def _mismatched_state() -> WorkbenchState:
    state = WorkbenchState.design_default()
    model = ModelFields(layer_count=3, native_context_length=8192,
                        model_weight_bytes="40 GiB", kv_bytes_per_token="1024",
                        layer_weight_bytes=(1, 1, 1))
    return state.with_model(model).with_nodes((NodeRow("a", "80 GiB"),))


def test_the_workbench_and_the_reports_show_the_mismatch() -> None:
    state = _mismatched_state()
    evaluation = evaluate(state)
    assert evaluation.ok
    assert any("per-layer weights add up to 3 B" in text for text in evaluation.warnings)
    content = build_report(state.to_document(), include_candidates=False,
                           include_what_if=False)
    assert [w["code"] for w in content.warnings] == ["LayerWeightsMismatch"]
    for kind in ("md", "html"):
        assert "per-layer weights add up to 3 B" in render_report(content, kind)
