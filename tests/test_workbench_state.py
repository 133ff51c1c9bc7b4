"""The workbench's pure state and evaluation: reading typed values, edits, diagnosis."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

import planner
from planner.fleet import load_fleet, save_fleet
from planner.performance import ESTIMATE_COLUMNS
from planner.units import exact_size_text
from planner.workbench import (
    ModelFields,
    NodeRow,
    PlanOptions,
    WorkbenchInputError,
    WorkbenchState,
    evaluate,
    fleet_warnings,
)
from planner.workbench.evaluation import unused_nodes
from planner.workbench.node_ids import gpu_id_base
from planner.workbench.typed_values import parse_size, parse_whole

GIB = 1024**3


def fleet(*vram: str, **options: str | int) -> WorkbenchState:
    rows = tuple(NodeRow(f"gpu-{i:02d}", size) for i, size in enumerate(vram))
    return WorkbenchState.design_default().with_nodes(rows).with_options(
        PlanOptions(**options))


# -- reading typed values ------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("80 GiB", 80 * GIB), ("80GiB", 80 * GIB), (" 24 GB ", 24 * 10**9), ("1024 B", 1024),
    ("1.5 KiB", 1536), ("315.68 GB", 315_680_000_000),
])
def test_sizes_read_with_units(text: str, expected: int) -> None:
    assert parse_size(text, "f", label="f") == expected


@pytest.mark.parametrize(("text", "problem"), [
    ("80 GQ", "unknown unit 'GQ'"),
    ("-5 GiB", "cannot be negative"),
    ("eighty", "cannot read 'eighty'"),
    ("", "is required"),
    ("1.5 B", "not a whole number of bytes"),
    ("24", "'24 GiB'"),
    ("80 Gb", "bits"),
    ("0,5 GiB", "thousands separator"),
])
def test_bad_sizes_name_the_field_and_node(text: str, problem: str) -> None:
    with pytest.raises(WorkbenchInputError) as caught:
        parse_size(text, "nodes[0].vram", label="node 'a' VRAM", node_id="a")
    error = caught.value
    assert problem in error.message
    assert error.message.startswith("node 'a' VRAM: ")
    assert (error.field, error.node_id, error.code) == ("nodes[0].vram", "a", "InvalidEditorValue")


def test_optional_size_blank_is_none() -> None:
    assert parse_size("  ", "f", label="f", optional=True) is None


@pytest.mark.parametrize(("text", "expected"), [("", None), ("12", 12), ("12 ms", 12),
                                                ("65,536", 65536), ("0", 0)])
def test_whole_numbers(text: str, expected: int | None) -> None:
    assert parse_whole(text, "f", label="f", unit="ms") == expected


@pytest.mark.parametrize(("text", "problem"), [("-3", "cannot be negative"),
                                               ("1.5", "whole number"), ("3 s", "whole number"),
                                               ("ten", "whole number")])
def test_bad_whole_numbers(text: str, problem: str) -> None:
    with pytest.raises(WorkbenchInputError, match=problem):
        parse_whole(text, "latency", label="latency", unit="ms")


@pytest.mark.parametrize(("value", "text"), [
    (80 * GIB, "80 GiB"), (315_680_000_000, "315.68 GB"), (24 * 10**9, "24 GB"),
    (1536, "1.5 KiB"), (0, "0"), (1000, "1000 B"), (115_448_725_504, "115448725504 B"),
])
def test_exact_size_text_reads_back_exactly(value: int, text: str) -> None:
    assert exact_size_text(value) == text
    assert planner.parse_bytes(text) == value


def test_node_row_round_trips_through_a_budget() -> None:
    budget = planner.NodeBudget("n1", 96 * GIB, 80 * GIB, 2 * GIB, 7)
    row = NodeRow.from_budget(budget)
    assert row == NodeRow("n1", "96 GiB", "80 GiB", "2 GiB", "7")
    assert row.to_budget(0) == budget
    assert NodeRow.from_dict(row.to_dict()) == row


def test_node_row_without_id_is_refused() -> None:
    with pytest.raises(WorkbenchInputError, match="row 3 id: every node needs an id"):
        NodeRow("  ", "80 GiB").to_budget(2)


def test_duplicate_ids_name_both_rows() -> None:
    state = fleet("80 GiB", "80 GiB", "80 GiB")
    state = state.with_node(2, NodeRow("gpu-00", "80 GiB"))
    with pytest.raises(WorkbenchInputError) as caught:
        state.to_request()
    assert "rows 1 and 3 both use this id" in caught.value.message
    assert caught.value.node_id == "gpu-00"


def test_request_holds_what_was_typed() -> None:
    state = fleet("80 GiB", "48 GiB", context_length_override="65536",
                  parallel_lanes_override="2", target_decode_tpot_ms="40 ms", minimum_nodes=2)
    state = state.with_node(1, NodeRow("gpu-01", "48 GiB", "40 GiB", "1 GiB", "9"))
    request = state.to_request()
    assert request.native_context_length == 262_144
    assert request.model_weight_bytes == 315_680_000_000
    assert request.kv_bytes_per_token == 131_072
    assert request.nodes[1] == planner.NodeBudget("gpu-01", 48 * GIB, 40 * GIB, GIB, 9)
    assert (request.context_length_override, request.parallel_lanes_override,
            request.target_decode_tpot_ms, request.minimum_nodes) == (65536, 2, 40, 2)


def test_the_document_is_what_the_editors_read_as() -> None:
    state = fleet("80 GiB", "24 GB", target_decode_tpot_ms="33")
    assert state.document == state.to_document()
    assert state.document.nodes[1].detected_vram_bytes == 24 * 10**9
    assert state.document.target_decode_tpot_ms == 33
    # Text that cannot be read leaves the document as it was, and says so.
    bad = state.with_node(1, NodeRow("gpu-01", "24 GX"))
    assert bad.document == state.document
    with pytest.raises(WorkbenchInputError, match="'GX'"):
        bad.to_document()
    fixed = bad.with_node(1, NodeRow("gpu-01", "48 GiB"))
    assert fixed.document.nodes[1].detected_vram_bytes == 48 * GIB


# -- edits ----------------------------------------------------------------------------------


def test_add_duplicate_and_remove_keep_ids_unique() -> None:
    state = fleet("80 GiB", "48 GiB")
    state = state.add_node()
    assert state.nodes[-1] == NodeRow("gpu-02", "48 GiB")
    state = state.duplicate_node(0)
    assert [row.node_id for row in state.nodes] == ["gpu-00", "gpu-03", "gpu-01", "gpu-02"]
    assert state.nodes[1].vram == "80 GiB"
    state = state.remove_node(1)
    assert [row.node_id for row in state.nodes] == ["gpu-00", "gpu-01", "gpu-02"]
    state.to_request()  # still valid


def test_add_node_to_an_empty_fleet() -> None:
    state = fleet().add_node()
    assert state.nodes == (NodeRow("node-00", "80 GiB"),)


def test_duplicate_an_unnumbered_node() -> None:
    state = fleet().with_nodes((NodeRow("studio", "192 GiB"),)).duplicate_node(0)
    assert [row.node_id for row in state.nodes] == ["studio", "studio-00"]


def test_add_gpus_numbers_on_from_ids_in_use() -> None:
    state = fleet().with_nodes((NodeRow("h100-80gb-00", "80 GiB"),))
    state = state.add_gpus("NVIDIA H100 80GB", 80 * GIB, 3)
    assert [row.node_id for row in state.nodes] == [
        "h100-80gb-00", "h100-80gb-01", "h100-80gb-02", "h100-80gb-03"]
    assert {row.vram for row in state.nodes} == {"80 GiB"}
    with pytest.raises(WorkbenchInputError, match="at least 1"):
        state.add_gpus("NVIDIA H100 80GB", 80 * GIB, 0)


@pytest.mark.parametrize(("name", "base"), [
    ("NVIDIA H100 80GB", "h100-80gb"), ("AMD Instinct MI300X", "instinct-mi300x"),
    ("Apple M3 Ultra 512GB", "m3-ultra-512gb"), ("NVIDIA GeForce RTX 4090", "rtx-4090"),
])
def test_gpu_id_base(name: str, base: str) -> None:
    assert gpu_id_base(name) == base


def test_typing_model_numbers_leaves_the_preset() -> None:
    model = ModelFields(layer_count=4, native_context_length=65536,
                        model_weight_bytes="4000", kv_bytes_per_token="8",
                        layer_weight_bytes=(1000, 1000, 1500, 500), name="P",
                        preset="p", kv_cache_type="f16")
    state = fleet("80 GiB").with_model(model)
    same = state.with_model_numbers(layer_count=4)
    assert same is state
    kv = state.with_model_numbers(kv_bytes_per_token="16")
    assert kv.model.preset is None and kv.model.kv_cache_type is None and kv.model.name is None
    assert kv.model.layer_weight_bytes == (1000, 1000, 1500, 500)  # still the same layers
    fewer = state.with_model_numbers(layer_count=3)
    assert fewer.model.layer_weight_bytes is None
    heavier = state.with_model_numbers(model_weight_bytes="5000")
    assert heavier.model.layer_weight_bytes is None


# -- fleet documents --------------------------------------------------------------------


FLEET_TOML = """
name = "Two sizes"

[model]
name = "Qwen3-Coder-480B-A35B"
native_context_length = 262144
layer_count = 62
model_weight_bytes = "315.68 GB"
kv_bytes_per_token = 131072

[planning]
minimum_nodes = 2
target_decode_tpot_ms = 60

[[nodes]]
id = "big"
count = 4
vram = "80 GiB"
latency_ms = 8

[[nodes]]
id = "small"
vram = "48 GiB"
max_vram = "40 GiB"
headroom = "1 GiB"
"""


def test_state_from_a_fleet_file_and_back(tmp_path: Path) -> None:
    path = tmp_path / "two.toml"
    path.write_text(FLEET_TOML)
    document = load_fleet(path)
    state = WorkbenchState.from_document(document)
    assert state.name == "Two sizes" and state.source == str(path)
    assert state.document == document and state.provenance == "from two.toml"
    assert state.model.model_weight_bytes == "315.68 GB"
    assert state.nodes[0] == NodeRow("big-00", "80 GiB", "", "0", "8")
    assert state.nodes[4] == NodeRow("small", "48 GiB", "40 GiB", "1 GiB", "")
    assert state.options == PlanOptions(2, "", "", "60")
    assert state.to_request() == document.to_request()
    saved = save_fleet(state.to_document(), tmp_path / "copy.toml")
    assert load_fleet(saved).to_request() == document.to_request()


def test_a_preset_model_is_saved_as_the_preset(tmp_path: Path) -> None:
    from planner.workbench.catalog import preset_source

    source = preset_source("qwen3-coder-480b-a35b", "f16")
    state = fleet("80 GiB", "80 GiB").with_model(source.fields)
    document = state.to_document()
    assert document.model.preset == "qwen3-coder-480b-a35b"
    assert document.model.kv_cache_type == "f16"
    assert document.to_request() == state.to_request()
    text = save_fleet(document, tmp_path / "p.toml").read_text()
    assert 'preset = "qwen3-coder-480b-a35b"' in text


# -- evaluation ------------------------------------------------------------------------------


def test_design_default_plans_like_the_design() -> None:
    evaluation = evaluate(WorkbenchState.design_default())
    assert evaluation.ok and evaluation.problem is None
    plan = evaluation.plan
    assert (plan.stage_count, plan.context_length, plan.parallel_lanes) == (5, 262_144, 4)
    assert evaluation.summary() == ("5 stages · context 262,144 · 4 lanes · "
                                    "estimated TPOT unknown: the model's decode traffic is "
                                    "unknown " + evaluation.estimate_reason.split(
                                        "unknown ", 1)[1])
    assert list(evaluation.stages["node_id"]) == list(plan.node_ids)
    assert int(evaluation.candidates["selected"].sum()) == 1
    assert evaluation.warnings == ()
    assert evaluation.unused == ()


def test_evaluation_matches_the_planner() -> None:
    state = fleet("80 GiB", "80 GiB", "48 GiB", "141 GiB", "24 GiB", "80 GiB")
    evaluation = evaluate(state)
    request = state.to_request()
    assert evaluation.request == request
    assert evaluation.plan == planner.plan_topology(request)
    # The planner's columns, then the speed estimate's (NA here: no catalog kinds).
    table = planner.candidates(request)
    assert evaluation.candidates[list(table.columns)].equals(table)
    assert evaluation.candidates[list(ESTIMATE_COLUMNS)].isna().all().all()


def test_bad_size_gives_a_problem_not_an_exception() -> None:
    state = fleet("80 GiB", "80 GQ")
    evaluation = evaluate(state)
    assert not evaluation.ok and evaluation.request is None
    assert evaluation.problem.code == "InvalidEditorValue"
    assert evaluation.problem.field == "nodes[1].vram"
    assert evaluation.problem.node_id == "gpu-01"
    assert "'GQ'" in evaluation.problem.message
    # The page's headline: "Plan: No plan: InvalidEditorValue" read twice "plan".
    assert evaluation.summary() == "No plan (InvalidEditorValue)"


def test_an_unknown_tpot_says_why() -> None:
    """A 96 GiB node is of no catalog kind, and numbers typed by hand have no decode
    traffic: the summary said "estimated TPOT unknown" with no reason, where the command
    line names it."""
    from planner.fleet import example_fleet, load_fleet

    state = WorkbenchState.from_document(load_fleet(example_fleet("qwen480b-5x80")))
    nodes = list(state.nodes)
    nodes[0] = replace(nodes[0], vram="96 GiB")
    summary = evaluate(state.with_nodes(nodes)).summary()
    assert ("estimated TPOT unknown: node qwen-node-00 has no memory bandwidth: give it a "
            "catalog kind") in summary, summary
    summary = evaluate(state.with_model_numbers(kv_bytes_per_token="131,000")).summary()
    assert "estimated TPOT unknown: the model's decode traffic is unknown" in summary
    # With an estimate, its measured error is a sentence of its own.
    evaluation = evaluate(state)
    assert evaluation.estimate is not None
    note = evaluation.estimate.error_note
    assert note.startswith("Median error on "), note
    assert f"(estimate). {note}" in evaluation.summary(), evaluation.summary()


def test_no_valid_topology_keeps_the_candidates() -> None:
    evaluation = evaluate(fleet("70 GiB", "70 GiB", "70 GiB", "70 GiB"))
    assert evaluation.problem.code == "NoValidTopology"
    assert "65,536" in evaluation.problem.message
    assert evaluation.candidates is not None and not evaluation.candidates["feasible"].any()
    assert evaluation.plan is None and evaluation.stages is None
    assert {u.reason for u in evaluation.unused} == {"no plan"}


@pytest.mark.parametrize(("options", "code"), [
    ({"context_length_override": "300000"}, "ContextExceedsNative"),
    ({"context_length_override": "32768"}, "ContextBelowMinimum"),
    ({"parallel_lanes_override": "0"}, "ZeroParallelLanes"),
])
def test_request_refusals_are_problems(options: dict[str, str], code: str) -> None:
    evaluation = evaluate(fleet("80 GiB", "80 GiB", "80 GiB", "80 GiB", "80 GiB", **options))
    assert evaluation.problem is not None and evaluation.problem.code == code
    assert evaluation.candidates is None


def test_model_problems() -> None:
    state = fleet("80 GiB").with_model_numbers(layer_count=0)
    assert evaluate(state).problem.code == "MissingLayers"
    state = fleet("80 GiB").with_model_numbers(kv_bytes_per_token="12 XB")
    problem = evaluate(state).problem
    assert (problem.code, problem.field) == ("InvalidEditorValue", "kv_bytes_per_token")


def test_empty_fleet_is_a_problem() -> None:
    assert evaluate(fleet()).problem.code == "MissingNodes"


def test_limiting_node_is_the_stage_with_least_room() -> None:
    evaluation = evaluate(fleet("80 GiB", "80 GiB", "80 GiB", "80 GiB", "80 GiB"))
    stages = evaluation.stages
    least = stages.loc[stages["remaining_bytes"].idxmin()]
    limiting = evaluation.limiting
    assert (limiting.node_id, limiting.stage_id) == (least["node_id"], least["stage_id"])
    assert limiting.remaining_bytes == int(least["remaining_bytes"])
    assert limiting.context_limit is None  # the plan runs at native context
    assert limiting.describe().startswith(f"{least['node_id']} ({least['stage_id']}) limits")


def test_limiting_node_explains_a_lower_context() -> None:
    evaluation = evaluate(fleet("80 GiB", "80 GiB", "80 GiB", "80 GiB"))
    assert evaluation.plan.context_length == 65_536
    assert evaluation.limiting.context_limit.startswith("Context 131,072 does not fit: ")


def test_limiting_node_explains_a_context_lost_to_tpot() -> None:
    state = fleet(*["80 GiB"] * 5, target_decode_tpot_ms="45")
    state = state.with_nodes([replace(row, latency_ms="10") for row in state.nodes])
    evaluation = evaluate(state)
    assert evaluation.plan.context_length == 65_536  # 4 stages, 40 ms, beats 5 x 10 ms
    assert evaluation.limiting.context_limit == (
        "Context 131,072 fits but was not chosen: "
        "131,072 needs 5 stages: 50 ms misses the 45 ms target")


def test_a_context_lost_to_an_unknown_estimate_names_no_none() -> None:
    # Latency on gpu-00 only, no TPOT target: 4 stages without it have no estimate (ranked
    # as 0 ms) and beat the 5 stages at 131,072 that must include it (5 x 5 ms).
    state = fleet(*["80 GiB"] * 5)
    state = state.with_nodes([replace(row, latency_ms="5") if row.node_id == "gpu-00"
                              else row for row in state.nodes])
    evaluation = evaluate(state)
    assert evaluation.plan.context_length == 65_536
    assert evaluation.plan.estimated_decode_network_ms_per_token is None
    assert evaluation.limiting.context_limit == (
        "Context 131,072 fits but was not chosen: "
        "131,072 needs 5 stages: 25 ms vs unknown (counts as 0 ms)")
    assert "None" not in evaluation.limiting.describe()


def test_warnings() -> None:
    state = fleet("80 GiB", "80 GiB", "80 GiB", "80 GiB", "80 GiB", "80 GiB")
    state = state.with_node(0, NodeRow("gpu-00", "80 GiB", latency_ms="5"))
    state = state.with_node(1, NodeRow("gpu-01", "16 GiB", headroom="20 GiB"))
    state = state.with_node(2, NodeRow("gpu-02", "80 GiB", max_vram="96 GiB"))
    warnings = fleet_warnings(state.to_request())
    assert warnings[0].startswith("latency is set on 1 of 6 nodes; nodes without one (gpu-01")
    assert any(w.startswith("node gpu-01 has 0 usable bytes") for w in warnings)
    assert any("gpu-02: max VRAM 96 GiB is above its detected VRAM" in w for w in warnings)
    assert evaluate(state).warnings == warnings


def test_target_without_latency_warns() -> None:
    warnings = fleet_warnings(fleet("80 GiB", target_decode_tpot_ms="30").to_request())
    assert warnings == ("a TPOT target is set but no node has a latency, so whether it is "
                        "met is unknown",)


def test_unused_node_reasons() -> None:
    state = fleet("80 GiB", "80 GiB", "80 GiB", "80 GiB", "80 GiB", "80 GiB", "24 GiB")
    state = state.with_node(5, NodeRow("gpu-05", "80 GiB", headroom="80 GiB"))
    evaluation = evaluate(state)
    reasons = {u.node_id: u.reason for u in evaluation.unused}
    assert set(reasons) == {"gpu-05", "gpu-06"}
    assert reasons["gpu-05"].startswith("no usable memory")
    assert reasons["gpu-06"].startswith("smaller than the chosen nodes (24 GiB usable")

    ten = evaluate(fleet(*["80 GiB"] * 10))
    assert ten.plan.stage_count == 5
    assert all(u.reason.startswith("not needed: 5 stages suffice") for u in ten.unused)


def test_unused_node_slower_than_the_plan() -> None:
    state = fleet(*["80 GiB"] * 6)
    state = state.with_nodes([replace(row, latency_ms="20" if i == 0 else "5")
                              for i, row in enumerate(state.nodes)])
    evaluation = evaluate(state)
    assert "gpu-00" not in evaluation.plan.node_ids
    request = state.to_request()
    assert unused_nodes(request, evaluation.plan)[0].reason == (
        "its latency 20 ms is above the plan's slowest link (5 ms)")


def test_state_and_evaluation_import_no_widgets_or_plotting() -> None:
    import subprocess
    import sys

    script = (
        "import sys, planner.workbench, planner.workbench.evaluation\n"
        "print(','.join(sorted(m for m in sys.modules\n"
        "    if m.split('.')[0] in {'ipywidgets', 'plotly', 'anywidget', 'IPython'})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == ""


@pytest.mark.parametrize("huge", ["9" * 5000, "9" * 5000 + " ms", "0." + "9" * 5000, "1e5000"])
def test_a_huge_latency_or_target_is_a_problem_not_an_exception(huge: str) -> None:
    state = WorkbenchState.design_default()
    timed = state.with_node(0, replace(state.nodes[0], latency_ms=huge))
    problem = evaluate(timed).problem
    assert problem is not None and problem.code == "InvalidEditorValue"
    assert problem.field == "nodes[0].latency_ms" and len(problem.message) < 300
    target = evaluate(state.with_options(PlanOptions(target_decode_tpot_ms=huge))).problem
    assert target is not None and target.field == "target_decode_tpot_ms"


def test_weights_show_in_one_form_for_every_preset_and_plan_exactly() -> None:
    from planner.workbench.catalog import preset_names, preset_source
    from planner.workbench.typed_values import weight_size_text

    assert weight_size_text(315_680_000_000) == "315.68 GB"
    assert weight_size_text(712_965_570_400) == "712.97 GB"
    assert weight_size_text(1_340_000_000_000) == "1.34 TB"
    state = WorkbenchState.design_default()
    for name in preset_names():
        source = preset_source(name)
        shown = source.fields.model_weight_bytes
        assert re.fullmatch(r"\d+\.\d\d [MGTP]B", shown), (name, shown)
        model = state.with_model(source.fields)
        # The rounded text stands for the preset's exact weights.
        assert (model.model.planning_fields()["model_weight_bytes"]
                == source.fields.exact_weight_bytes)
        assert WorkbenchState.from_document(model.to_document()).model == model.model
    # Typing a new figure plans that figure.
    retyped = state.with_model(preset_source(name).fields).with_model_numbers(
        model_weight_bytes="300 GB")
    assert retyped.model.exact_weight_bytes is None
    assert retyped.model.planning_fields()["model_weight_bytes"] == 300 * 10**9


def test_a_model_s_typed_speed_numbers_are_estimated_as_planner_plan_estimates_them(
        tmp_path: Path) -> None:
    """A fleet file's model given by its numbers with what the speed estimate reads
    (hidden_size, parameter_count, ...): ``planner plan`` estimated its TPOT while the
    workbench said its decode traffic was unknown. Both now read the numbers alike, and
    numbers that contradict each other give the reason, not an exception."""
    from planner.fleet import parse_fleet_toml
    from planner.models import load_gpu_catalog
    from planner.performance import fleet_model_traffic, try_estimate

    text = ("[model]\nnative_context_length = 8192\nlayer_count = 4\n"
            'model_weight_bytes = "4 GiB"\nkv_bytes_per_token = 4096\n'
            "hidden_size = 4096\nparameter_count = 4_000_000_000\n"
            "output_head_parameters = 500_000_000\n"
            '[[nodes]]\nid = "a"\nvram = "24 GiB"\ngpu = "rtx-4090"\n')
    path = tmp_path / "typed.toml"
    path.write_text(text)
    document = load_fleet(path)
    evaluation = evaluate(WorkbenchState.from_document(document))
    assert evaluation.plan is not None and evaluation.estimate is not None, (
        evaluation.estimate_reason)
    request = document.to_request()
    expected, _ = try_estimate(request, evaluation.plan, fleet_model_traffic(document.model),
                               load_gpu_catalog(), node_kinds=document.node_kinds)
    assert expected is not None
    assert evaluation.estimate.estimated_tpot_ms == pytest.approx(expected.estimated_tpot_ms)
    # A head larger than the parameters a token computes with (a tenth of them read).
    contradicting = parse_fleet_toml(text.replace(
        "hidden_size = 4096\n", 'hidden_size = 4096\nactive_weight_bytes = "400 MiB"\n')
        .replace("500_000_000", "3_000_000_000"))
    refused = evaluate(WorkbenchState.from_document(contradicting))
    assert refused.plan is not None and refused.estimate is None
    assert "output_head_parameters" in (refused.estimate_reason or "")


def test_the_sizing_panel_says_what_contradicts_in_typed_speed_numbers(
        tmp_path: Path) -> None:
    """Made on a fleet whose typed numbers contradict each other, the sizing panel said
    nothing: reading the model raised while the panel was made, out of the page's sight.
    It is made, and says why it cannot size."""
    from planner.workbench import Workbench
    from planner.workbench.sizing_panel import SizingPanel

    path = tmp_path / "contradicting.toml"
    path.write_text("[model]\nnative_context_length = 8192\nlayer_count = 4\n"
                    'model_weight_bytes = "4 GiB"\nkv_bytes_per_token = 4096\n'
                    'hidden_size = 4096\nactive_weight_bytes = "400 MiB"\n'
                    "parameter_count = 4_000_000_000\n"
                    "output_head_parameters = 3_000_000_000\n"
                    '[[nodes]]\nid = "a"\nvram = "24 GiB"\ngpu = "rtx-4090"\n')
    panel = SizingPanel(Workbench.from_fleet(path))
    assert "output_head_parameters" in panel.problem.value
    assert panel.min_nodes.value == "1"
