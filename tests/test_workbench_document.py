"""The workbench edits the fleet document itself: nothing a fleet file holds is lost on
save, and the page plans every fleet exactly as the command line does."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from fleet_strategies import documents
from hypothesis import HealthCheck, given, settings
from test_memory import write_gemma_like

import planner
from planner.availability import fleet_availability, fleet_reliability
from planner.cli import main as cli_main
from planner.fleet import FleetDocument, example_fleet, load_fleet, save_fleet
from planner.planning.rules import context_floor
from planner.workbench import WorkbenchState
from planner.workbench.app import Workbench

FLEETS = sorted(example_fleet("qwen480b-5x80").parent.glob("*.toml"))
LLAMACPP = "llama.cpp: memory and launch commands"

HOME_LAB = """\
# Two desktops and a mini PC on a LAN; each node's kind and failure figures are its own.
name = "home lab"

[model]
gguf = "g.gguf"
kv_cache_type = "q8_0"

[planning]
target_decode_tpot_ms = 40

[[nodes]]
id = "desk"
count = 2
vram = "2 GiB"
headroom = "256 MiB"
latency_ms = 3
gpu = "rtx-4090"
annual_failure_rate = 0.6
repair_hours = 240

[[nodes]]
id = "den"
vram = "2 GiB"
latency_ms = 4.5
gpu = "rtx-3090"
repair_hours = 500
address = "10.0.0.7:50052"

[[nodes]]
id = "mini"
vram = "1 GiB"
"""


@pytest.fixture
def home_lab(tmp_path: Path) -> Path:
    write_gemma_like(tmp_path)
    path = tmp_path / "home-lab.toml"
    path.write_text(HOME_LAB)
    return path


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=documents())
def test_load_open_save_load_gives_the_same_document(tmp_path_factory: pytest.TempPathFactory,
                                                     document: FleetDocument) -> None:
    folder = tmp_path_factory.mktemp("fleet")
    loaded = load_fleet(save_fleet(document, folder / "fleet.toml"))
    state = WorkbenchState.from_document(loaded)
    saved = load_fleet(save_fleet(state.to_document(), folder / "again.toml"))
    assert saved == document
    assert state.document == loaded


def test_a_save_from_the_page_keeps_every_key(home_lab: Path, tmp_path: Path) -> None:
    before = load_fleet(home_lab)
    bench = Workbench.from_fleet(home_lab, fleet_dir=tmp_path)
    saved = load_fleet(bench.save_fleet("saved.toml"))
    assert saved == before
    assert saved.reliability["desk-00"].gpu == "rtx-4090"
    assert saved.reliability["den"].repair_hours == 500
    assert dict(saved.addresses) == {"den": "10.0.0.7:50052"}
    # ... and so the availability of the saved file is the one of the file loaded.
    request = before.to_request()
    figures = [fleet_reliability(request.nodes, overrides=doc.reliability)
               for doc in (before, saved)]
    assert figures[0] == figures[1]
    answers = [fleet_availability(request, f, min_context=context_floor(request)).to_dict()
               for f in figures]
    assert answers[0] == answers[1]


def test_edits_keep_each_nodes_kind_and_figures(home_lab: Path, tmp_path: Path) -> None:
    bench = Workbench.from_fleet(home_lab, fleet_dir=tmp_path)
    rows = bench.fleet_editor.row_editors
    rows[2].node_id.value = "den-box"  # renamed: its kind, figures and address follow
    rows[0].vram.value = "3 GiB"
    bench.duplicate_node(0)  # the copy is the same kind of GPU at another address
    saved = load_fleet(bench.save_fleet("edited.toml"))
    assert [n.node_id for n in saved.nodes] == ["desk-00", "desk-02", "desk-01", "den-box",
                                                "mini"]
    assert saved.reliability["den-box"] == load_fleet(home_lab).reliability["den"]
    assert saved.reliability["desk-02"] == saved.reliability["desk-00"]
    assert dict(saved.addresses) == {"den-box": "10.0.0.7:50052"}
    assert saved.nodes[0].detected_vram_bytes == 3 * 2**30


def _cli_plan(capsys: pytest.CaptureFixture[str], path: Path, memory_model: str
              ) -> planner.Plan | str:
    """``planner plan --json``'s plan, or the code of its error."""
    code = cli_main(["plan", str(path), "--json", "--memory-model", memory_model])
    out = json.loads(capsys.readouterr().out)
    if code != 0:
        return str(out["error"]["code"])
    return planner.Plan.from_dict(out)


def _shown(bench: Workbench) -> planner.Plan | str:
    """The plan on the page, or the code of the problem it shows."""
    evaluation = bench.evaluation
    if evaluation.plan is not None:
        return evaluation.plan
    assert evaluation.problem is not None
    return evaluation.problem.code


def _page(path: Path, memory_model: str) -> Workbench:
    bench = Workbench.from_fleet(path)
    if memory_model != "design":
        bench.panel(LLAMACPP).memory_model.value = memory_model  # as a click does
    return bench


@pytest.mark.parametrize("path", FLEETS, ids=lambda path: path.stem)
def test_the_page_plans_every_shipped_fleet_as_the_cli(path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    bench = _page(path, "design")
    assert bench.evaluation.request == load_fleet(path).to_request()
    assert _shown(bench) == _cli_plan(capsys, path, "design")


@pytest.mark.parametrize("path", FLEETS, ids=lambda path: path.stem)
def test_under_llama_cpp_the_page_plans_as_the_cli(path: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Each shipped fleet with a small GGUF model in place of its own (the shipped fleets
    name presets, and llama.cpp's rule reads a GGUF file): every node's llama.cpp
    overhead comes from its catalog kind on the page as on the command line."""
    gguf = write_gemma_like(tmp_path)
    document = load_fleet(path)
    # The nodes shrunk to the small model's size, keeping room for llama.cpp's overhead.
    small = replace(document, model=planner.fleet.ModelChoice(gguf=str(gguf),
                                                              kv_cache_type="q8_0"),
                    nodes=tuple(replace(node, detected_vram_bytes=2**30
                        + node.detected_vram_bytes // 2**8, max_vram_bytes=None,
                        runtime_headroom_bytes=0) for node in document.nodes),
                    context_length_override=None, minimum_nodes=1)
    fleet = save_fleet(small, tmp_path / path.name)
    request = load_fleet(fleet).to_request("llamacpp")
    bench = _page(fleet, "llamacpp")
    assert bench.evaluation.request == request
    assert _shown(bench) == _cli_plan(capsys, fleet, "llamacpp")


def test_the_page_takes_each_nodes_llama_cpp_overhead_from_its_kind(
        home_lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = load_fleet(home_lab).to_request("llamacpp")
    overheads = dict(request.memory_rule.overhead_bytes)
    assert overheads["desk-00"] > 0 and overheads["den"] > 0 and "mini" not in overheads
    bench = _page(home_lab, "llamacpp")
    assert dict(bench.evaluation.request.memory_rule.overhead_bytes) == overheads
    assert bench.evaluation.plan == _cli_plan(capsys, home_lab, "llamacpp")
    stages = bench.evaluation.stages.set_index("node_id")
    plan = planner.plan_topology(request)
    expected = planner.stage_usage(request, plan).set_index("node_id")
    assert (stages["usable_vram_bytes"] == expected["usable_vram_bytes"]).all()


def test_the_speed_estimate_reads_each_nodes_named_kind(tmp_path: Path) -> None:
    # 24 GiB is the memory of two catalog kinds and the ids name none: only `gpu` says
    # what each node is.
    text = HOME_LAB.replace('gguf = "g.gguf"', 'preset = "llama-3.1-70b"').replace(
        '"2 GiB"', '"24 GiB"').replace("count = 2", "count = 4").split(
        "[[nodes]]\nid = \"mini\"")[0]
    path = tmp_path / "preset-lab.toml"
    path.write_text(text)
    content = planner.reports.build_report(load_fleet(path), include_candidates=False,
                                           include_what_if=False)
    assert content.estimate["available"], content.estimate
    estimate = Workbench.from_fleet(path).evaluation.estimate
    assert estimate is not None
    assert estimate.estimated_tpot_ms == content.estimate["estimated_tpot_ms"]


def test_a_model_s_speed_numbers_survive_the_page(tmp_path: Path) -> None:
    """The page has no box for what the speed estimate reads (hidden_size, active weight
    bytes, experts): they stay through an edit and a save (a save dropped them), and an
    edit they no longer fit is refused naming the field and where it comes from."""
    path = tmp_path / "moe.toml"
    path.write_text("""[model]
native_context_length = 32768
layer_count = 48
model_weight_bytes = "60 GB"
kv_bytes_per_token = 98304
hidden_size = 4096
active_weight_bytes = "6 GB"
expert_count = 128
experts_used = 8

[[nodes]]
id = "n"
count = 2
vram = "48 GiB"
""")
    loaded = load_fleet(path)
    state = WorkbenchState.from_document(loaded)
    edited = replace(state, model=replace(state.model, native_context_length=16384))
    saved = load_fleet(save_fleet(edited.to_document(), tmp_path / "saved.toml"))
    assert saved.model.numbers is not None and loaded.model.numbers is not None
    assert saved.model.numbers == {**loaded.model.numbers, "native_context_length": 16384}
    shrunk = replace(state, model=replace(state.model, model_weight_bytes="1 GB"))
    with pytest.raises(planner.workbench.WorkbenchInputError) as refused:
        shrunk.to_document()
    assert refused.value.field == "active_weight_bytes"
    assert "fleet file" in refused.value.message
