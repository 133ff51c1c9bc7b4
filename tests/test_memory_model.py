"""Planning with memory_model="llamacpp": the same search on what llama.cpp allocates;
the design rule stays the default and unchanged."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from test_memory import write_gemma_like

import planner
from planner.errors import InvalidInput
from planner.fleet import parse_fleet_toml
from planner.llamacpp import (
    SCHED_MAX_COPIES,
    LayerLayout,
    LlamaCppCosts,
    LlamaCppModel,
    LlamaCppSettings,
    estimate,
    stage_compute_bytes,
)
from planner.llamacpp.check import within_target
from planner.planning.memory_rule import DESIGN_RULE
from planner.planning.tables import stage_usage
from planner.reports.content import build_report

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20
CONTEXT = 65536
WEIGHT = 64 * MIB
ELEMENTS = 1024  # K and V elements per cell per layer: f16 rows of 2 KiB each


def _model() -> LlamaCppModel:
    return LlamaCppModel(
        name="hand", architecture="llama", native_context_length=CONTEXT,
        embedding_length=1024, vocab_size=32000, head_count=8, feed_forward_length=4096,
        layers=tuple(LayerLayout(WEIGHT, ELEMENTS, ELEMENTS) for _ in range(4)),
        input_bytes=32000 * 1024 * 2, output_bytes=32000 * 1024 * 2)


def _request(memory_model: str = "design", vram: int = 1400 * MIB) -> planner.PlanningInput:
    rule = LlamaCppCosts(_model(), lanes=1) if memory_model == "llamacpp" else DESIGN_RULE
    return planner.PlanningInput(
        native_context_length=CONTEXT, layer_count=4, model_weight_bytes=4 * WEIGHT,
        # K and V, 2 bytes each, 1024 elements, 4 layers: 16 KiB per token.
        kv_bytes_per_token=4 * 2 * ELEMENTS * 2,
        nodes=(planner.NodeBudget("a", vram), planner.NodeBudget("b", vram)),
        parallel_lanes_override=1, memory_rule=rule)


def test_the_two_memory_models_give_different_plans_worked_by_hand() -> None:
    # Design: each layer is 64 MiB + ceil(16 KiB / 4) x 65,536 = 64 + 256 = 320 MiB, so
    # the four layers (1,280 MiB) fit node a's 1,400 MiB alone.
    design = planner.plan_topology(_request())
    assert [(s.node_id, s.layer_start, s.layer_end) for s in design.stages] == [("a", 0, 4)]
    # llama.cpp: the same 320 MiB per layer (65,536 cells x 2 KiB for K and for V), but
    # every node first loses a pipeline stage's compute buffer (4 copies of the
    # 65,536 x 512 f16 KQ mask, 256 MiB, plus activations), and the last layer carries
    # the 62.5 MiB output head and the output device's compute buffer (on top of its
    # masks, the 32,000 float logits of the one token llama-server computes per lane).
    model = _model()
    costs = LlamaCppCosts(model, lanes=1)
    settings = costs.settings(CONTEXT)
    reserve, output_compute = stage_compute_bytes(model, settings)
    masks = SCHED_MAX_COPIES * CONTEXT * 512 * 2
    assert masks == 256 * MIB and reserve > masks
    assert masks + 32000 * 4 < output_compute < masks + 32000 * 512 * 4
    completion = replace(settings, program="llama-completion")
    assert stage_compute_bytes(model, completion)[1] > masks + 32000 * 512 * 4
    layer = WEIGHT + 2 * CONTEXT * ELEMENTS * 2
    assert layer == 320 * MIB
    output = 32000 * 1024 * 2 + output_compute
    assert costs.layer_bytes(CONTEXT) == (layer, layer, layer, layer + output)
    budget = 1400 * MIB - reserve
    assert 3 * layer <= budget < 4 * layer + output  # one node is not enough
    assert layer + output <= budget
    llamacpp = planner.plan_topology(_request("llamacpp"))
    # The walk: a takes the most layers it can while leaving one for b: 3 (960 MiB).
    assert [(s.node_id, s.layer_start, s.layer_end) for s in llamacpp.stages] == [
        ("a", 0, 3), ("b", 3, 4)]
    usage = stage_usage(_request("llamacpp"), llamacpp)
    assert list(usage["remaining_bytes"]) == [budget - 3 * layer, budget - layer - output]
    assert list(usage["usable_vram_bytes"]) == [budget, budget]
    frame = planner.candidates(_request("llamacpp"))
    one = frame[frame["stage_count"] == 1].iloc[0]
    assert not one["feasible"] and "hold 3 of 4 layers" in one["reason"]
    assert frame[frame["selected"]]["node_ids"].tolist() == [("a", "b")]


def test_node_overheads_come_off_each_node() -> None:
    model = _model()
    plain = LlamaCppCosts(model, lanes=1)
    with_overhead = LlamaCppCosts(model, lanes=1, overhead_bytes=(("a", 457 * MIB),))
    assert with_overhead.reserve_bytes("a", CONTEXT) == plain.reserve_bytes("a",
                                                                           CONTEXT) + 457 * MIB
    assert with_overhead.reserve_bytes("b", CONTEXT) == plain.reserve_bytes("b", CONTEXT)
    assert LlamaCppCosts.from_dict(with_overhead.to_dict()) == with_overhead


def test_the_design_rule_is_the_default_and_its_request_has_the_spec_fields_only() -> None:
    request = _request()
    assert request.memory_model == "design" and request.memory_rule == DESIGN_RULE
    assert "memory_rule" not in request.to_dict()
    llamacpp = _request("llamacpp")
    data = json.loads(json.dumps(llamacpp.to_dict()))
    assert data["memory_rule"]["name"] == "llamacpp"
    with pytest.raises(InvalidInput) as caught:
        planner.PlanningInput.from_dict(data)
    assert caught.value.field == "memory_rule" and "from_dict" in caught.value.message
    again = planner.PlanningInput.from_dict(
        {**data, "memory_rule": LlamaCppCosts.from_dict(data["memory_rule"])})
    assert again == llamacpp
    assert planner.plan_topology(again) == planner.plan_topology(llamacpp)


@pytest.mark.parametrize("changes", [
    {"memory_rule": "llamacpp"},
    {"memory_rule": None},
    {"memory_rule": {"name": "design"}},
    {"memory_rule": LlamaCppCosts(_model()), "layer_count": 5},
])
def test_bad_memory_rules_are_refused_by_field(changes: dict) -> None:
    with pytest.raises(InvalidInput) as caught:
        planner.PlanningInput.from_dict({**_request().to_dict(), **changes})
    assert caught.value.field == "memory_rule"


def _fleet(tmp_path: Path, model: str, vram: str = "300 MiB") -> Path:
    path = tmp_path / f"fleet-{vram.split()[0]}.toml"
    path.write_text(f"""
[model]
{model}

[[nodes]]
id = "a"
vram = "{vram}"

[[nodes]]
id = "b"
vram = "{vram}"
""")
    return path


def test_fleet_files_and_reports_plan_with_the_chosen_model(tmp_path: Path) -> None:
    gguf = write_gemma_like(tmp_path)
    document = parse_fleet_toml(_fleet(tmp_path, f"gguf = {json.dumps(str(gguf))}")
                                .read_text())
    assert document.to_request().memory_model == "design"
    request = document.to_request("llamacpp")
    assert request.memory_model == "llamacpp" and request.memory_rule.layer_count == 6
    # The small model's weights and KV are a few MiB, but llama.cpp's compute buffer on
    # one device (the KQ masks at 32k cells, the logits of a ubatch over its vocabulary)
    # is over 30 MiB more: 40 MiB nodes fit it by design only (split over two, each
    # stage would carry pipeline parallelism's copies of its inputs too).
    small = parse_fleet_toml(_fleet(tmp_path, f"gguf = {json.dumps(str(gguf))}", "40 MiB")
                             .read_text())
    assert planner.plan_topology(small.to_request()).stage_count == 1
    with pytest.raises(planner.PlanError) as caught:
        planner.plan_topology(small.to_request("llamacpp"))
    assert caught.value.code == "NoValidTopology"
    assert planner.plan_topology(request).stage_count == 1
    content = build_report(document, memory_model="llamacpp", include_what_if=False)
    assert content.planning["memory_model"] == "llamacpp"
    rows = content.memory["stages"]
    assert [row["stage_id"] for row in rows] == ["stage-0", "host"]
    model = request.memory_rule.model
    # The stage holds the tied head's second copy of token_embd; the host the first.
    assert rows[0]["weights_bytes"] == (sum(layer.weight_bytes for layer in model.layers)
                                        + model.output_bytes + model.tied_embedding_bytes)
    assert rows[1]["weights_bytes"] == model.input_bytes == model.tied_embedding_bytes
    assert all(row["total_bytes"] == sum(row[k] for k in (
        "weights_bytes", "kv_bytes", "compute_bytes", "output_bytes", "overhead_bytes"))
        for row in rows)
    assert build_report(document, include_what_if=False).memory == {
        "memory_model": "design", "stages": []}


def test_a_plan_of_one_stage_charges_what_llama_cpp_allocates_on_its_node(
        tmp_path: Path) -> None:
    """One stage runs on one device, without pipeline parallelism: the plan charges that
    device's compute buffer alone (not a pipeline's output stage plus a pipeline stage's
    reserve), so the stage table's used bytes are the memory table's total for it."""
    gguf = write_gemma_like(tmp_path)
    document = parse_fleet_toml(_fleet(tmp_path, f"gguf = {json.dumps(str(gguf))}")
                                .read_text())
    request = document.to_request("llamacpp")
    plan = planner.plan_topology(request)
    assert plan.stage_count == 1
    usage = stage_usage(request, plan)
    content = build_report(document, memory_model="llamacpp", include_what_if=False)
    stage = content.memory["stages"][0]
    assert stage["stage_id"] == "stage-0"
    assert usage["used_bytes"].tolist() == [stage["total_bytes"]]
    assert usage["usable_vram_bytes"].tolist() == [300 * MIB]  # no pipeline reserve
    node = next(row for row in content.nodes if row["node_id"] == plan.stages[0].node_id)
    assert node["memory_rule_reserve_bytes"] == 0
    # Split over two stages, every node still reserves a pipeline stage's compute buffer.
    rule = request.memory_rule
    assert rule.for_stages(1).one_device and rule.for_stages(2) is rule
    assert rule.for_stages(2).reserve_bytes("a", plan.context_length) > 0
    assert LlamaCppCosts.from_dict(rule.for_stages(1).to_dict()) == rule.for_stages(1)


def test_the_one_stage_charge_is_what_the_recorded_run_on_one_device_allocated() -> None:
    """make validate's gemma-3-270m run on one device: what a plan of one stage charges
    its node is llama.cpp's total there within the 5 % target; the pipeline's charges
    (an output stage and a stage's reserve) were not."""
    recorded = json.loads((ROOT / "validation" / "results" / "llamacpp-runs.json")
                          .read_text())
    model = LlamaCppModel.from_dict(recorded["model_layout"])
    run_ = next(r for r in recorded["runs"] if r["setting"] == "1dev-c4096-f16-fa")
    assert run_["settings"]["parallel"] == 1 and run_["layer_ranges"] == [[0, 18]]
    with (ROOT / "validation" / "results" / "llamacpp-memory.csv").open() as handle:
        measured = next(int(r["measured_bytes"]) for r in csv.DictReader(handle)
                        if r["setting"] == run_["setting"] and r["layers"] == "0-18"
                        and r["component"] == "total_bytes")
    # make validate ran llama-completion, which computes the logits of a whole ubatch.
    costs = LlamaCppCosts(model, lanes=1, program="llama-completion")
    context = run_["settings"]["context_length"]

    def charged(rule: LlamaCppCosts) -> int:
        return sum(rule.layer_bytes(context)) + rule.reserve_bytes("node", context)

    assert within_target("total_bytes", charged(costs.for_stages(1)), measured)
    assert not within_target("total_bytes", charged(costs.for_stages(2)), measured)


def test_a_split_charges_each_node_at_least_what_llama_cpp_allocates_there() -> None:
    """make validate's gemma-3-270m splits over two and three devices: every node of a
    split reserves a pipeline stage's compute buffer, the last one the output stage's on
    top, and that covers each device's compute buffer as estimated for the split (within
    10 % of the recorded one): the first stage copies in the host's inputs and reads both
    attention masks, more than a middle stage."""
    recorded = json.loads((ROOT / "validation" / "results" / "llamacpp-runs.json")
                          .read_text())
    model = LlamaCppModel.from_dict(recorded["model_layout"])
    checked = 0
    for run_ in recorded["runs"]:
        ranges = [tuple(r) for r in run_["layer_ranges"]]
        if len(ranges) < 2:
            continue
        settings = LlamaCppSettings(**run_["settings"])
        reserve, output = stage_compute_bytes(model, settings)
        split = estimate(model, settings, ranges)
        for index, device in enumerate(split.devices):
            charged = reserve + (output if index == len(ranges) - 1 else 0)
            assert device.compute_bytes <= charged, (run_["setting"], ranges[index])
            checked += 1
    assert checked >= 20


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planner.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_cli_memory_model_flag(tmp_path: Path) -> None:
    gguf = write_gemma_like(tmp_path)
    fleet = _fleet(tmp_path, f"gguf = {json.dumps(str(gguf))}")
    plan = run("plan", fleet, "--memory-model", "llamacpp")
    assert plan.returncode == 0, plan.stderr
    assert "memory model llamacpp" in plan.stdout
    assert "what llama.cpp allocates per stage" in plan.stdout
    report = run("report", fleet, "--memory-model", "llamacpp", "-o", tmp_path / "r.md")
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "r.md").read_text()
    assert "Memory per stage (llama.cpp)" in text and "| memory model | llamacpp" in text
    preset = run("candidates", _fleet(tmp_path, 'preset = "qwen3-coder-480b-a35b"'),
                 "--memory-model", "llamacpp")
    assert preset.returncode == 2 and "model.gguf" in preset.stderr
    assert "Traceback" not in preset.stderr


def test_a_node_left_with_nothing_usable_is_skipped() -> None:
    # llama.cpp's fixed costs can leave a small node no usable bytes; the search must
    # plan on the others (it once read past its list of stage counts).
    request = _request("llamacpp")
    small = planner.NodeBudget("c", 100 * MIB)
    with_small = planner.PlanningInput.from_dict(
        {**request.to_dict(), "nodes": [*request.nodes, small],
         "memory_rule": request.memory_rule})
    assert planner.plan_topology(with_small) == planner.plan_topology(request)
    design = planner.PlanningInput.from_dict(
        {**_request().to_dict(), "nodes": [*_request().nodes,
                                           planner.NodeBudget("z", 0)]})
    assert planner.plan_topology(design).node_ids == ("a",)
