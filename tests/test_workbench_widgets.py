"""The workbench widgets without a browser: set ``.value`` on the inputs, as the page would,
and check the summary, the tables, the figures and the messages that follow."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from planner.availability import NodeReliability, fleet_availability
from planner.fleet import load_fleet
from planner.workbench import NodeRow, PlanOptions, Workbench, WorkbenchState
from planner.workbench.editor import CUSTOM_MODEL

GIB = 1024**3


def five_by_80() -> WorkbenchState:
    state = WorkbenchState.design_default()
    return state.with_nodes(tuple(NodeRow(f"gpu-{i:02d}", "80 GiB") for i in range(5))
                            ).with_options(PlanOptions())


@pytest.fixture
def bench(tmp_path: Path) -> Workbench:
    fleets = tmp_path / "fleets"
    fleets.mkdir()
    return Workbench(five_by_80(), fleet_dir=fleets, report_dir=tmp_path / "reports")


def rows(bench: Workbench) -> list:
    return bench.fleet_editor.row_editors


def visible(widget: object) -> bool:
    return widget.layout.display != "none"  # type: ignore[attr-defined]


def memory_labels(bench: Workbench) -> list[str]:
    return list(bench.view.memory.data[0].x)


def test_starts_planned(bench: Workbench) -> None:
    assert "Plan: 5 stages · context 262,144 · 4 lanes" in bench.view.summary.value
    assert not visible(bench.view.problem)
    assert bench.view.stage_table.value.count("<tr class=''>") == 5
    assert memory_labels(bench) == [f"gpu-{i:02d}<br>stage-{i}" for i in range(5)]
    assert "Limiting node" in bench.view.diagnosis.value
    assert bench.evaluations == 1


def test_default_workbench_loads_the_design_fleet() -> None:
    bench = Workbench.default()
    assert bench.state.name == "Qwen 480B on 5 x 80 GiB"
    assert bench.fleet_editor.file_choice.label == "qwen480b-5x80.toml (example)"
    assert bench.fleet_editor.save_name.value == "qwen480b-5x80.toml"
    assert bench.evaluation.summary().startswith("5 stages · context 262,144 · 4 lanes")
    assert bench.message.value == ""


def test_shrinking_a_node_adds_a_stage(bench: Workbench) -> None:
    bench.add_node()
    rows(bench)[5].vram.value = "8 GiB"
    assert bench.evaluation.plan.stage_count == 5  # the small spare is not needed yet
    before = bench.evaluations
    rows(bench)[0].vram.value = "8 GiB"
    assert bench.evaluations == before + 1  # one edit, one plan
    assert "Plan: 6 stages · context 262,144" in bench.view.summary.value
    assert bench.view.stage_table.value.count("<tr class=''>") == 6
    assert len(bench.view.layers.data[0].x) == 6
    assert sum(bench.view.layers.data[0].x) == 62
    assert memory_labels(bench)[4:] == ["gpu-00<br>stage-4", "gpu-05<br>stage-5"]
    selected = bench.view.candidates.data[2]
    assert (tuple(selected.x), tuple(selected.y)) == ((6,), (262_144,))


def test_memory_figure_follows_an_edit(bench: Workbench) -> None:
    weights_before = list(bench.view.memory.data[0].y)
    rows(bench)[0].max_vram.value = "40 GiB"
    labels = memory_labels(bench)
    assert labels[-1] == "gpu-00<br>stage-4"  # the capped node now comes last
    capped_away = next(t for t in bench.view.memory.data if t.name == "capped away")
    assert capped_away.y[-1] == pytest.approx(40.0)
    assert list(capped_away.y[:-1]) == [0, 0, 0, 0]
    assert list(bench.view.memory.data[0].y) == weights_before  # 15, 15, 15, 15, 2 layers
    rows(bench)[0].max_vram.value = "8 GiB"
    assert bench.view.memory.data[0].y[-1] == pytest.approx(0.0)  # gpu-00 is unused now
    assert memory_labels(bench)[-1] == "gpu-00<br>unused"


def test_bad_size_shows_an_inline_error_and_recovers(bench: Workbench) -> None:
    rows(bench)[1].vram.value = "80 GQ"
    assert visible(bench.view.problem)
    assert "InvalidEditorValue" in bench.view.problem.value
    assert "node &#x27;gpu-01&#x27; VRAM: unknown unit &#x27;GQ&#x27;" in bench.view.problem.value
    assert ">No plan (InvalidEditorValue)<" in bench.view.summary.value
    assert not visible(bench.view.results)
    rows(bench)[1].vram.value = "80 GiB"
    assert not visible(bench.view.problem)
    assert visible(bench.view.results)
    assert "5 stages" in bench.view.summary.value


@pytest.mark.parametrize(("field", "value", "shown"), [
    ("headroom", "-2 GiB", "headroom: cannot be negative"),
    ("latency", "-3", "latency: cannot be negative"),
    ("node_id", "gpu-00", "rows 1 and 2 both use this id"),
    ("max_vram", "lots", "max VRAM: cannot read"),
])
def test_row_errors(bench: Workbench, field: str, value: str, shown: str) -> None:
    getattr(rows(bench)[1], field).value = value
    assert bench.evaluation.problem is not None
    assert shown in bench.evaluation.problem.message
    assert "Traceback" not in bench.view.problem.value


def test_no_valid_topology_is_explained(bench: Workbench) -> None:
    bench.remove_node(4)
    for row in rows(bench):
        row.vram.value = "70 GiB"
    assert "NoValidTopology" in bench.view.problem.value
    assert "minimum context 65,536" in bench.view.problem.value
    assert visible(bench.view.results)  # the candidates still show why
    assert "no stages" in bench.view.stage_table.value
    assert all(label.endswith("unused") for label in memory_labels(bench))
    assert len(bench.view.candidates.data[0].x) == 0  # nothing feasible
    assert bench.view.layers.layout.annotations[0].text == "no plan"


def test_options(bench: Workbench) -> None:
    options = bench.options_editor
    options.context_length_override.value = "65536"
    assert bench.evaluation.plan.context_length == 65_536
    options.parallel_lanes_override.value = "2"
    assert bench.evaluation.plan.parallel_lanes == 2
    options.parallel_lanes_override.value = "0"
    assert "ZeroParallelLanes" in bench.view.problem.value
    options.parallel_lanes_override.value = ""
    options.context_length_override.value = "999999"
    assert "ContextExceedsNative" in bench.view.problem.value
    options.context_length_override.value = ""
    options.minimum_nodes.value = "6"
    assert "NoValidTopology" in bench.view.problem.value
    options.minimum_nodes.value = "1"
    assert bench.evaluation.ok


def test_latency_and_tpot_target(bench: Workbench) -> None:
    rows(bench)[0].latency.value = "10"
    assert "latency is set on 1 of 5 nodes" in bench.view.warnings.value
    assert visible(bench.view.warnings)
    for row in rows(bench)[1:]:
        row.latency.value = "10 ms"
    assert not visible(bench.view.warnings)
    # With latencies, the lower estimate wins before the higher context.
    assert "4 stages · context 65,536 · 4 lanes · estimated TPOT 40 ms" in (
        bench.view.summary.value)
    assert "131,072 needs 5 stages: 50 ms vs 40 ms" in bench.view.diagnosis.value
    bench.options_editor.target_decode_tpot_ms.value = "45"
    assert "estimated TPOT 40 ms · target met" in bench.view.summary.value
    assert "131,072 needs 5 stages: 50 ms misses the 45 ms target" in (
        bench.view.diagnosis.value)
    bench.options_editor.target_decode_tpot_ms.value = "30"
    assert "target missed" in bench.view.summary.value
    marker = bench.view.candidates.data[0].marker
    assert marker.colorscale is not None and "circle-open" in marker.symbol


def shown_text(html: str) -> str:
    """The text a browser shows for ``html``: table cells joined by " | ", rows by lines."""
    html = re.sub(r"</t[dh]>", " | ", html)
    html = re.sub(r"</(tr|div|li)>", "\n", html)
    text = unescape(re.sub(r"<[^>]+>", "", html))
    return "\n".join(" ".join(line.split()) for line in text.splitlines() if line.strip())


def test_the_latency_aware_choice_is_explained_on_screen(bench: Workbench) -> None:
    # 5 x 80 GiB at 5 ms: 4 stages at 65,536 (20 ms) beat 5 stages at 262,144 (25 ms).
    assert ("Why this shape: context 262,144 on 5 stages with 4 lanes: the highest context "
            "that fits") in shown_text(bench.view.diagnosis.value)
    for row in rows(bench):
        row.latency.value = "5"
    shown = shown_text(bench.view.diagnosis.value)
    assert ("Why this shape: context 65,536 on 4 stages with 4 lanes, network estimate of the TPOT "
            "20 ms: "
            "latency-aware planning ranks the estimate before the context") in shown
    lines = shown.splitlines()
    assert "shape | context | stages | est. TPOT | target | rule that decided |" in lines
    assert "chosen | 65,536 | 4 | 20 ms | | |" in lines
    rule = "the lower network estimate of the TPOT ranks before the higher context"
    assert f"higher context | 262,144 | 5 | 25 ms | | {rule} |" in lines
    assert f"higher context | 131,072 | 5 | 25 ms | | {rule} |" in lines
    bench.options_editor.target_decode_tpot_ms.value = "22"
    lines = shown_text(bench.view.diagnosis.value).splitlines()
    assert "chosen | 65,536 | 4 | 20 ms | met | |" in lines
    assert ("higher context | 262,144 | 5 | 25 ms | missed | "
            "meeting the TPOT target ranks first |") in lines


def test_unused_nodes_and_zero_usable_warning(bench: Workbench) -> None:
    bench.add_node()
    rows(bench)[5].headroom.value = "80 GiB"
    assert "node gpu-05 has 0 usable bytes" in bench.view.warnings.value
    assert "Unused nodes</b> (1)" in bench.view.diagnosis.value
    assert "no usable memory" in bench.view.diagnosis.value


def test_row_buttons(bench: Workbench) -> None:
    rows(bench)[2].duplicate_button.click()
    ids = [row.node_id.value for row in rows(bench)]
    assert ids == ["gpu-00", "gpu-01", "gpu-02", "gpu-05", "gpu-03", "gpu-04"]
    assert bench.state.nodes[3] == NodeRow("gpu-05", "80 GiB")
    assert "6 nodes" in bench.fleet_editor.count_label.value
    rows(bench)[0].remove_button.click()
    assert [r.node_id for r in bench.state.nodes] == ["gpu-01", "gpu-02", "gpu-05", "gpu-03",
                                                      "gpu-04"]
    assert len(bench.fleet_editor.rows_box.children) == 5
    bench.fleet_editor.add_button.click()
    assert bench.state.nodes[-1].node_id == "gpu-06"
    assert bench.evaluation.plan.stage_count == 5


def test_edits_after_a_structural_change_reach_the_right_row(bench: Workbench) -> None:
    rows(bench)[0].remove_button.click()
    rows(bench)[0].vram.value = "8 GiB"
    assert bench.state.nodes[0] == NodeRow("gpu-01", "8 GiB")


def test_add_gpus_from_the_catalog(bench: Workbench) -> None:
    editor = bench.fleet_editor
    h200 = next(i for i, gpu in enumerate(editor.catalog) if "H200" in gpu.name)
    editor.gpu_choice.value = h200
    editor.gpu_count.value = "3"
    editor.add_gpus_button.click()
    added = bench.state.nodes[5:]
    assert [row.node_id for row in added] == ["h200-141gb-00", "h200-141gb-01",
                                              "h200-141gb-02"]
    # Written in GiB as the other rows are; planned at the exact 143771 MiB the driver
    # reports, also after another field of the row is edited.
    assert {row.vram for row in added} == {"140.4 GiB"}
    assert [editor.vram.value for editor in rows(bench)[5:]] == ["140.4 GiB"] * 3
    exact = 143_771 * 2**20
    assert {n.detected_vram_bytes for n in bench.evaluation.request.nodes[5:]} == {exact}
    # Three 141 GB nodes beat five 80 GiB ones: fewer stages at native context.
    assert bench.evaluation.plan.stage_count == 3
    rows(bench)[6].latency.value = "2"
    rows(bench)[6].node_id.value = "renamed"
    assert {n.detected_vram_bytes for n in bench.evaluation.request.nodes[5:]} == {exact}
    # A typed figure is the figure typed.
    rows(bench)[7].vram.value = "140.5 GiB"
    assert bench.evaluation.request.nodes[7].detected_vram_bytes == round(140.5 * GIB)


def test_every_catalog_kind_is_added_in_gib_and_planned_exactly() -> None:
    from planner.workbench.catalog import gpu_catalog

    state = five_by_80()
    for gpu in gpu_catalog():
        added = state.add_gpus(gpu.name, gpu.memory_bytes, 1, kind=gpu.kind)
        row = added.nodes[-1]
        assert re.fullmatch(r"\d+(\.\d+)? (GiB|TiB|GB|TB)", row.vram), (gpu.kind, row.vram)
        assert added.to_document().nodes[-1].detected_vram_bytes == gpu.memory_bytes


def test_choosing_a_preset_and_kv_cache_type(bench: Workbench) -> None:
    editor = bench.model_editor
    editor.preset.value = "qwen3-coder-480b-a35b"
    assert bench.state.model.preset == "qwen3-coder-480b-a35b"
    assert editor.kv_cache_type.value == "q8_0" and not editor.kv_cache_type.disabled
    assert editor.kv_bytes_per_token.value == "131072"
    assert editor.layer_count.value == "62"
    editor.kv_cache_type.value = "f16"
    assert editor.kv_bytes_per_token.value == "253952"
    assert bench.evaluation.request.kv_bytes_per_token == 253_952
    assert "f16" in editor.details.value
    # Typing a number makes the model custom again.
    editor.native_context_length.value = "131072"
    assert editor.preset.value == CUSTOM_MODEL
    assert editor.kv_cache_type.disabled
    assert bench.state.model.preset is None
    assert bench.evaluation.plan.context_length == 131_072
    editor.preset.value = "llama-3.1-70b"
    assert bench.evaluation.request.layer_count == int(editor.layer_count.value) == 80
    assert bench.evaluation.ok


def test_model_number_errors(bench: Workbench) -> None:
    bench.model_editor.model_weight_bytes.value = "300 GQ"
    assert "model weight bytes: unknown unit" in bench.view.problem.value
    bench.model_editor.model_weight_bytes.value = "300 GB"
    bench.model_editor.layer_count.value = "0"
    assert "MissingLayers" in bench.view.problem.value


def test_one_plan_per_edit(bench: Workbench) -> None:
    before = bench.evaluations
    bench.model_editor.preset.value = "qwen3-coder-480b-a35b"
    bench.model_editor.kv_cache_type.value = "f16"
    bench.model_editor.layer_count.value = "61"
    bench.options_editor.minimum_nodes.value = "2"
    bench.fleet_editor.add_button.click()
    assert bench.evaluations == before + 5


def test_save_and_load_fleet_files(bench: Workbench, tmp_path: Path) -> None:
    rows(bench)[0].latency.value = "7"
    bench.options_editor.target_decode_tpot_ms.value = "60"
    bench.fleet_editor.save_name.value = "mine"
    bench.fleet_editor.save_button.click()
    saved = bench.fleet_dir / "mine.toml"
    assert saved.is_file()
    assert "Saved" in bench.message.value
    assert bench.fleet_editor.file_choice.label == "mine.toml (saved)"
    assert load_fleet(saved).to_request() == bench.evaluation.request

    rows(bench)[0].vram.value = "8 GiB"
    bench.fleet_editor.load_button.click()
    assert bench.state.nodes[0] == NodeRow("gpu-00", "80 GiB", "", "0", "7")
    assert bench.options_editor.target_decode_tpot_ms.value == "60"
    assert bench.evaluation.request == load_fleet(saved).to_request()
    assert "Loaded" in bench.message.value


def test_a_preset_is_planned_at_the_size_of_the_file_typed(bench: Workbench) -> None:
    """The gpt-oss-20b preset counts 12.82 GiB where its published file is 11.27 GiB: the
    page had no way to say so, and typing the weights made the model numbers typed by
    hand, without the preset's experts and attention the speed estimate reads."""
    editor = bench.model_editor
    assert editor.file_size.disabled  # numbers typed by hand state their own bytes
    editor.preset.value = "gpt-oss-20b"
    assert not editor.file_size.disabled and editor.file_size.value == ""
    own = bench.evaluation.request.model_weight_bytes
    before = bench.evaluations
    editor.file_size.value = "11.27 GiB"
    assert bench.evaluations == before + 1
    stored = round(11.27 * GIB)
    assert bench.evaluation.request.model_weight_bytes == stored < own
    assert editor.model_weight_bytes.value == "12.10 GB"  # the weights box follows
    assert "stored in a file of 11.27 GiB" in editor.details.value
    assert bench.state.model.preset == "gpt-oss-20b"  # still the preset, experts and all
    # Another KV cache type keeps the file's size.
    editor.kv_cache_type.value = "q8_0"
    assert bench.evaluation.request.model_weight_bytes == stored
    # A save keeps it, and loading the file gives it back.
    bench.fleet_editor.save_name.value = "sized.toml"
    bench.fleet_editor.save_button.click()
    saved = bench.fleet_dir / "sized.toml"
    assert load_fleet(saved).model.file_bytes == stored
    # Another preset is its own file; choosing the file's preset again is no edit.
    editor.preset.value = "llama-3.1-70b"
    assert editor.file_size.value == "" and bench.state.model.file_bytes is None
    editor.preset.value = "gpt-oss-20b"
    assert bench.evaluation.request.model_weight_bytes == stored
    # Blank is the preset's own weights again.
    editor.file_size.value = ""
    assert bench.evaluation.request.model_weight_bytes == own


@pytest.mark.parametrize(("typed", "said", "a_fleet_file"), [
    ("11 GQ", "file size: unknown unit 'GQ'", False),
    ("0", "file size: must be at least 1 (got 0)", False),
    # A size a fleet file can state, which no plan can take (as a GGUF path that names no
    # file): saved as typed, and said again when loaded.
    ("1 KB", "a file of 1,000 bytes cannot hold gpt-oss-20b", True),
])
def test_a_file_size_it_cannot_take_is_a_problem_not_a_plan(
        bench: Workbench, typed: str, said: str, a_fleet_file: bool) -> None:
    editor = bench.model_editor
    editor.preset.value = "gpt-oss-20b"
    editor.file_size.value = typed
    assert visible(bench.view.problem) and said in unescape(bench.view.problem.value)
    assert editor.file_size.value == typed  # kept as typed, to be mended
    bench.fleet_editor.save_name.value = "bad.toml"
    bench.fleet_editor.save_button.click()
    assert (bench.fleet_dir / "bad.toml").exists() == a_fleet_file
    if a_fleet_file:
        bench.load_fleet(bench.fleet_dir / "bad.toml")
        assert said in unescape(bench.view.problem.value)


@pytest.mark.parametrize(("name", "shown"), [
    ("", "give a name"), ("../escape.toml", "plain file name"), ("fleet.yaml", ".toml or .json"),
])
def test_bad_save_names_are_messages(bench: Workbench, name: str, shown: str) -> None:
    bench.fleet_editor.save_name.value = name
    bench.fleet_editor.save_button.click()
    assert "wb-error-box" in bench.message.value and shown in bench.message.value
    assert list(bench.fleet_dir.iterdir()) == []


def test_saving_a_bad_fleet_is_a_message(bench: Workbench) -> None:
    rows(bench)[0].vram.value = "80 GQ"
    bench.fleet_editor.save_name.value = "bad.toml"
    bench.fleet_editor.save_button.click()
    assert "InvalidEditorValue" in bench.message.value
    assert not (bench.fleet_dir / "bad.toml").exists()


def test_loading_a_broken_file_is_a_message(bench: Workbench) -> None:
    (bench.fleet_dir / "broken.toml").write_text("[model\n")
    broken = str(bench.fleet_dir / "broken.toml")
    bench.fleet_editor.set_fleet_files([("broken.toml (saved)", broken)], broken)
    bench.fleet_editor.load_button.click()
    assert "InvalidToml" in bench.message.value
    assert bench.evaluation.ok  # the fleet on screen is untouched


def test_export_report(bench: Workbench, tmp_path: Path) -> None:
    bench.export_button.click()
    written = tmp_path / "reports" / "qwen-480b-on-5-x-80-gib.html"
    assert written.is_file(), bench.message.value
    assert "Report written" in bench.message.value
    bench.report_path.value = str(tmp_path / "plan.md")
    bench.export_button.click()
    assert "5" in (tmp_path / "plan.md").read_text()
    bench.report_path.value = str(tmp_path / "plan.txt")
    bench.export_button.click()
    assert "UnsupportedFormat" in bench.message.value


def test_a_relative_report_name_is_written_in_the_report_folder(
        bench: Workbench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notebook_dir = tmp_path / "notebooks"
    notebook_dir.mkdir()
    monkeypatch.chdir(notebook_dir)  # where a kernel started from a notebook runs
    reports = (tmp_path / "reports").resolve()
    assert str(reports) in bench.report_where.value
    bench.report_path.value = "mine.md"
    bench.export_button.click()
    assert (reports / "mine.md").is_file()
    assert list(notebook_dir.iterdir()) == []
    assert bench.message.value == (
        f"<div class='wb-message-box'>Report written to {reports / 'mine.md'}.</div>")
    bench.report_path.value = "  by-week/mine.html "
    bench.export_button.click()
    assert (reports / "by-week" / "mine.html").is_file(), bench.message.value
    assert bench.report_destination("~/x.md") == Path.home() / "x.md"


def write_tiny_gguf(path: Path, layers: int = 2) -> None:
    """A two-layer llama GGUF file with zero weights."""
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(path, "llama")
    writer.add_string("general.name", "Tiny Llama")
    for key, value in (("block_count", layers), ("context_length", 8192),
                       ("embedding_length", 256), ("attention.head_count", 8),
                       ("attention.head_count_kv", 4)):
        writer.add_uint32(f"llama.{key}", value)
    writer.add_tensor("token_embd.weight", np.zeros((100, 256), dtype=np.float16))
    for layer in range(layers):
        writer.add_tensor(f"blk.{layer}.attn_q.weight", np.zeros((256, 256), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_gguf_model_from_a_fleet_file(tmp_path: Path) -> None:
    write_tiny_gguf(tmp_path / "tiny.gguf")
    fleet = tmp_path / "tiny.toml"
    fleet.write_text('[model]\ngguf = "tiny.gguf"\nkv_cache_type = "f16"\n\n'
                     '[[nodes]]\nid = "laptop"\nvram = "1 GiB"\n')
    bench = Workbench.from_fleet(fleet, fleet_dir=tmp_path)
    editor = bench.model_editor
    assert editor.preset.value == "gguf:tiny.gguf"
    assert editor.kv_cache_type.value == "f16" and not editor.kv_cache_type.disabled
    assert editor.layer_count.value == "2" and editor.native_context_length.value == "8192"
    f16 = bench.evaluation.request.kv_bytes_per_token
    assert bench.evaluation.plan.context_length == 8192
    editor.kv_cache_type.value = "q8_0"
    assert bench.state.model.gguf == "tiny.gguf"
    assert bench.evaluation.request.kv_bytes_per_token < f16
    saved = bench.save_fleet("copy.toml")
    assert 'gguf = "tiny.gguf"' in saved.read_text()
    assert load_fleet(saved).to_request() == bench.evaluation.request


def test_panels_under_the_plan_are_made_when_opened(bench: Workbench) -> None:
    from planner.workbench.availability_panel import AvailabilityPanel

    assert bench.panels in bench.children
    assert bench.panels.titles == ("Availability", "Size a fleet",
                                   "llama.cpp: memory and launch commands")
    assert bench.panels.selected_index is None
    assert bench.panels.children[0].children == ()  # not made before it is opened
    bench.panels.selected_index = 0  # as a click on its title does
    (panel,) = bench.panels.children[0].children
    assert isinstance(panel, AvailabilityPanel)
    assert "Available" in panel.summary.value and panel.problem.value == ""
    assert bench.panel("Availability") is panel  # made once
    # It reads the fleet on screen: with a node shrunk the plan, and so the panel, changes.
    before = panel.view.result
    rows(bench)[0].vram.value = "40 GiB"
    panel.compute()
    request = bench.evaluation.request
    assert request.nodes[0].detected_vram_bytes == 40 * GIB
    expected = fleet_availability(request, NodeReliability(0.119, 72.0),
                                  min_context=panel.view.min_context)
    assert panel.view.result == expected != before
    with pytest.raises(KeyError, match="no panel 'Nope'"):
        bench.panel("Nope")


def test_a_panel_can_be_added(bench: Workbench) -> None:
    import ipywidgets as widgets

    made: list[Workbench] = []

    def factory(workbench: Workbench) -> widgets.Widget:
        made.append(workbench)
        return widgets.HTML("sized")

    bench.add_panel("Extra", factory)
    assert bench.panels.titles[-1] == "Extra" and len(bench.panels.titles) == 4
    assert made == []
    assert bench.panel("Extra").value == "sized"
    assert made == [bench] and bench.panels.selected_index == 3


def test_a_saved_note_is_cleared_by_the_next_edit(bench: Workbench) -> None:
    bench.save_fleet("kept.toml")
    assert "Saved" in bench.message.value
    rows(bench)[0].vram.value = "60 GiB"
    assert bench.message.value == ""
    bench.load_fleet(bench.fleet_dir / "kept.toml")
    assert "Loaded" in bench.message.value


def _save(bench: Workbench, name: str) -> None:
    """As the page does: the name box, then the button."""
    bench.fleet_editor.save_name.value = name
    bench.fleet_editor.save_button.click()


def test_a_save_that_would_drop_comments_asks_first(bench: Workbench) -> None:
    path = bench.fleet_dir / "inline.toml"
    written = ('# kept by hand\nname = "inline"\n'
               'nodes = [ { id = "a", vram = "80 GiB" } ]  # one card\n')
    path.write_text(written)
    _save(bench, "inline.toml")
    assert "WouldOverwrite" in bench.message.value
    assert "drops 2 of its comments" in bench.message.value
    assert "drop_comments" not in bench.message.value
    assert visible(bench.overwrite_button)
    assert path.read_text() == written  # nothing written yet
    _save(bench, "other.toml")  # another file: the question is no longer open
    assert not visible(bench.overwrite_button)
    _save(bench, "inline.toml")
    assert path.read_text() == written
    bench.overwrite_button.click()  # asked, and answered: overwritten
    assert "Saved" in bench.message.value and "# one card" not in path.read_text()
    assert load_fleet(path).to_request() == bench.evaluation.request


def test_a_save_never_replaces_another_file_without_asking(bench: Workbench) -> None:
    other = bench.fleet_dir / "other.toml"
    text = ('# Two big cards.\nname = "two"\n\n[model]\npreset = "llama-3.1-70b"\n\n'
            '[[nodes]]\nid = "big"\ncount = 2   # big-00 and big-01\nvram = "80 GiB"\n')
    other.write_text(text)
    _save(bench, "other.toml")
    assert "WouldOverwrite" in bench.message.value and "other.toml" in bench.message.value
    assert "keeping its comments" in bench.message.value
    assert other.read_text() == text
    rows(bench)[0].vram.value = "70 GiB"  # an edit: the question was about another fleet
    assert not visible(bench.overwrite_button)
    bench.overwrite_button.click()
    assert "Nothing to overwrite" in bench.message.value and other.read_text() == text
    _save(bench, "other.toml")
    bench.overwrite_button.click()
    saved = other.read_text()
    assert saved.startswith("# Two big cards.\n")
    assert load_fleet(other).to_request() == bench.evaluation.request


def test_a_save_keeps_the_comment_at_the_end_of_a_changed_line(tmp_path: Path) -> None:
    fleets = tmp_path / "fleets"
    fleets.mkdir()
    path = fleets / "pool.toml"
    path.write_text('[model]\npreset = "llama-3.1-70b"\n\n[[nodes]]\nid = "gpu"\n'
                    'count = 4   # the rack\nvram = "80 GiB"\n')
    bench = Workbench.from_fleet(path, fleet_dir=fleets, report_dir=tmp_path)
    bench.remove_node(3)
    bench.save_fleet("pool.toml")
    assert "count = 3   # the rack" in path.read_text()


def test_saving_the_loaded_file_again_asks_only_when_it_changed_on_disk(
        bench: Workbench) -> None:
    path = bench.save_fleet("mine.toml")
    rows(bench)[0].vram.value = "70 GiB"
    assert bench.save_fleet("mine.toml") == path  # its own file: saved, not asked
    path.write_text(path.read_text() + "# changed by hand\n")
    rows(bench)[0].vram.value = "60 GiB"
    _save(bench, "mine.toml")
    assert "WouldOverwrite" in bench.message.value
    assert "60 GiB" not in path.read_text()


def test_a_name_left_in_the_box_does_not_replace_another_fleet(bench: Workbench) -> None:
    first = bench.save_fleet("first.toml")
    second = bench.fleet_dir / "second.toml"
    second.write_text('[model]\npreset = "llama-3.1-70b"\n\n[[nodes]]\nid = "x"\n'
                      'vram = "80 GiB"\n')
    bench.load_fleet(second)
    assert bench.fleet_editor.save_name.value == "second.toml"
    before = first.read_text()
    _save(bench, "first.toml")
    assert "WouldOverwrite" in bench.message.value and first.read_text() == before


def test_examples_are_listed_but_saves_go_to_the_workspace(workspace: Path) -> None:
    from planner.workspace import EXAMPLE_FLEETS
    bench = Workbench.default()
    labels = [label for label, _path in bench.fleet_editor.file_choice.options]
    assert "qwen480b-4x70.toml (example)" in labels
    example = EXAMPLE_FLEETS / "qwen480b-4x70.toml"
    shipped = example.read_bytes()
    bench.remove_node(0)
    written = bench.save_fleet("qwen480b-4x70.toml")
    assert written == workspace / "fleets" / "qwen480b-4x70.toml"
    assert example.read_bytes() == shipped
    assert "qwen480b-4x70.toml (saved)" in [label for label, _path in
                                              bench.fleet_editor.file_choice.options]


def test_nothing_is_saved_inside_the_package(tmp_path: Path) -> None:
    from planner.workspace import EXAMPLE_FLEETS
    bench = Workbench(five_by_80(), fleet_dir=EXAMPLE_FLEETS, report_dir=tmp_path)
    _save(bench, "new-in-the-package.toml")
    assert "WriteFailed" in bench.message.value and "installed package" in bench.message.value
    assert not (EXAMPLE_FLEETS / "new-in-the-package.toml").exists()


def test_reports_go_to_the_workspace_and_never_replace_a_file_unasked(
        workspace: Path, tmp_path: Path) -> None:
    bench = Workbench(five_by_80())
    bench.export_button.click()
    written = workspace / "reports" / "qwen-480b-on-5-x-80-gib.html"
    assert written.is_file(), bench.message.value
    notes = tmp_path / "notes.md"
    notes.write_text("mine")
    bench.report_path.value = str(notes)
    bench.export_button.click()
    assert "WouldOverwrite" in bench.message.value and notes.read_text() == "mine"
    bench.overwrite_button.click()
    assert "Report written" in bench.message.value and notes.read_text() != "mine"


def test_the_title_follows_the_fleet_once_its_name_no_longer_fits() -> None:
    bench = Workbench.default()
    assert bench.state.title == "Qwen 480B on 5 x 80 GiB"
    bench.add_node()
    assert bench.state.title == "qwen3-coder-480b-a35b on 6 x 80 GiB"
    assert "6 x 80 GiB" in bench.title.value
    assert bench.state.to_document().name is None  # the stale name is not saved
    bench.remove_node(5)
    assert bench.state.title == "Qwen 480B on 5 x 80 GiB"  # it fits again
    bench.fleet_editor.fleet_name.value = "Lab rack"
    bench.remove_node(4)
    assert bench.state.title == "Lab rack"  # a typed name holds
    assert bench.state.to_document().name == "Lab rack"


def test_lazy_sections_make_each_section_once_when_first_opened() -> None:
    from planner.workbench.sections import LazySections

    made: list[str] = []

    def maker(name: str) -> Any:
        import ipywidgets as widgets

        return lambda: made.append(name) or widgets.HTML(name)

    sections = LazySections()
    assert sections.add("one", maker("one")) == 0 and sections.add("two", maker("two")) == 1
    assert sections.titles == ("one", "two") and sections.selected_index is None
    assert made == [] and sections.section(0) is None
    sections.selected_index = 1  # as a click on its title does
    assert made == ["two"] and sections.children[1].children == (sections.section(1),)
    sections.selected_index = None
    sections.selected_index = 1
    assert sections.open_section(1).value == "two" and made == ["two"]  # made once
    assert sections.open_section(0).value == "one" and sections.selected_index == 0
    assert made == ["two", "one"]


def test_a_panel_that_fails_to_open_shows_a_message(bench: Workbench) -> None:
    def broken(_bench: Workbench) -> Any:
        raise OSError("disk gone")

    bench.add_panel("Broken", broken)
    bench.panels.selected_index = len(bench.panels.titles) - 1  # a click, not code
    assert "disk gone" in bench.message.value and "wb-error-box" in bench.message.value
    assert bench.panels.section(len(bench.panels.titles) - 1) is None


HOME_LAB = Path(__file__).resolve().parents[1] / "data" / "fleets" / "llama70b-home-lab.toml"


def test_a_preset_change_keeps_the_chosen_kv_cache_type(tmp_path: Path) -> None:
    bench = Workbench.from_fleet(HOME_LAB, fleet_dir=tmp_path)
    editor = bench.model_editor
    assert editor.kv_cache_type.value == bench.state.model.kv_cache_type == "q8_0"
    editor.preset.value = "gpt-oss-120b"
    assert editor.kv_cache_type.value == bench.state.model.kv_cache_type == "q8_0"
    editor.kv_cache_type.value = "q4_0"
    editor.preset.value = "llama-3.1-70b"
    assert editor.kv_cache_type.value == bench.state.model.kv_cache_type == "q4_0"
    assert bench.evaluation.request.kv_bytes_per_token == int(editor.kv_bytes_per_token.value)


def test_a_typed_model_then_a_preset_takes_the_files_cache_type(tmp_path: Path) -> None:
    bench = Workbench.from_fleet(HOME_LAB, fleet_dir=tmp_path)
    editor = bench.model_editor
    editor.preset.value = CUSTOM_MODEL
    editor.preset.value = "llama-3.1-70b"
    assert editor.kv_cache_type.value == bench.state.model.kv_cache_type == "q8_0"


def test_the_title_and_report_follow_the_edits(tmp_path: Path) -> None:
    bench = Workbench.from_fleet(HOME_LAB, fleet_dir=tmp_path, report_dir=tmp_path)
    assert "Llama 3.1 70B on a home lab" in bench.title.value
    bench.export_report("as-loaded.md")
    text = (tmp_path / "as-loaded.md").read_text()
    assert re.search(r"Generated .* from \S*llama70b-home-lab\.toml\.", text)
    assert "edited from" not in text
    bench.model_editor.preset.value = "gpt-oss-120b"
    assert "Llama 3.1 70B" not in bench.title.value
    assert "gpt-oss-120b on 5 x 24 GiB" in bench.title.value
    assert "edited from llama70b-home-lab.toml" in bench.title.value
    for name in ("edited.md", "edited.html"):
        bench.export_report(name)
        text = unescape((tmp_path / name).read_text())
        assert "gpt-oss-120b on 5 x 24 GiB" in text
        assert re.search(r"edited from \S*llama70b-home-lab\.toml\.", text), name
        assert not re.search(r"[^d] from \S*llama70b-home-lab\.toml\.", text), name
    payload = bench.export_report("edited.json")
    assert payload is not None
    import json
    report = json.loads(payload.read_text())
    assert report["source_edited"] is True and report["title"] == "gpt-oss-120b on 5 x 24 GiB"


def test_the_page_gives_one_estimated_tpot_where_a_speed_estimate_and_latencies_meet() -> None:
    """With catalog GPUs (a speed estimate) and latencies (the planner's network estimate
    ranks the shapes), "estimated TPOT" names one figure on the page: the speed estimate.
    The planner's ranking figure is named its network estimate."""
    from planner.fleet import example_fleet

    bench = Workbench.from_fleet(example_fleet("qwen480b-5x80.toml"))
    for row in rows(bench):
        row.latency.value = "5"
    text = shown_text(bench.view.summary.value + bench.view.diagnosis.value)
    figures = set(re.findall(r"estimated TPOT ([\d,.]+ ms)", text))
    assert len(figures) == 1, text
    assert "network estimate of the TPOT 20 ms" in text


def test_a_preset_named_by_its_display_name_is_that_preset(tmp_path: Path) -> None:
    """A fleet file may name its preset by display name: the model list then showed no
    entry, and choosing the same preset by id counted as an edit ("edited from")."""
    fleet = tmp_path / "named.toml"
    fleet.write_text(HOME_LAB.read_text().replace('preset = "llama-3.1-70b"',
                                                  'preset = "Llama-3.1-70B-Instruct"'))
    bench = Workbench.from_fleet(fleet, fleet_dir=tmp_path)
    assert bench.model_editor.preset.value == "llama-3.1-70b"
    assert bench.state.provenance == "from named.toml"
    bench.model_editor.preset.value = "llama-3.1-70b"
    assert bench.state.provenance == "from named.toml"
    assert bench.state.to_document().model == load_fleet(fleet).model
    bench.model_editor.preset.value = "gpt-oss-120b"
    assert bench.state.provenance == "edited from named.toml"


def test_a_number_out_of_range_is_refused_by_name_never_clamped(bench: Workbench) -> None:
    """Number boxes clamped without a word: a native context of 99,999,999,999 became
    2,147,483,648, and -3 layers became 0."""
    editor = bench.model_editor
    before = bench.state.model
    editor.native_context_length.value = "99,999,999,999"
    message = unescape(bench.message.value)
    assert "native context: must be at most 2,147,483,648 (got '99,999,999,999')" in message
    assert editor.native_context_length.value == "99,999,999,999"  # left as typed
    assert bench.state.model == before
    editor.layer_count.value = "-3"
    assert "layers: cannot be negative (got '-3')" in unescape(bench.message.value)
    assert bench.state.model == before
    editor.layer_count.value = str(before.layer_count)
    editor.native_context_length.value = "131,072"
    assert bench.state.model.native_context_length == 131_072
    bench.options_editor.minimum_nodes.value = "-1"
    assert "minimum nodes: cannot be negative" in unescape(bench.message.value)
    bench.fleet_editor.gpu_count.value = "0"
    bench.fleet_editor.add_gpus_button.click()
    assert "number of GPUs to add: must be at least 1 (got '0')" in unescape(
        bench.message.value)


def test_every_table_cell_carries_its_column_name(bench: Workbench) -> None:
    """In a box narrower than a table needs, each row is drawn as a card of "name: value"
    pairs (its columns were behind a horizontal scroll): every cell names its column."""
    import re

    for html in (bench.view.stage_table.value, bench.view.candidates_table.value):
        headers = [unescape(h) for h in re.findall(r"<th(?: [^>]*)?>(.*?)</th>", html)]
        for row in re.findall(r"<tr class='[^']*'>(.*?)</tr>", html):
            labels = [unescape(label) for label in re.findall(r'<td data-label="([^"]*)"', row)]
            assert labels == headers, (labels, headers)
        assert "class='wb-fit'" in html


def test_the_load_button_names_the_file_it_loads(bench: Workbench) -> None:
    """The Load button's tooltip names the chosen file, as the kernel has it: what a click
    would load, and what a page can wait for before clicking (the page sends a choice
    after its previous change is answered but a click at once, so a quick click could
    load the file chosen before)."""
    editor = bench.fleet_editor
    assert editor.load_button.tooltip == f"load {editor.file_choice.label}"
    other = next(path for label, path in editor.file_choice.options
                 if label.startswith("llama70b-home-lab"))
    editor.file_choice.value = other
    assert editor.load_button.tooltip == "load llama70b-home-lab.toml (example)"
    editor.load_button.click()
    assert bench.state.source == other
    assert editor.load_button.tooltip == "load llama70b-home-lab.toml (example)"
