"""The workbench's llama.cpp panel: the memory-model toggle re-plans, the memory per
stage, the launch commands of the plan on screen, and the flash-attention rule."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from test_memory import write_gemma_like

import planner
from planner.fleet import load_fleet
from planner.llamacpp.launch import launch_for_plan
from planner.workbench.app import Workbench
from planner.workbench.llamacpp_panel import LlamaCppPanel

TITLE = "llama.cpp: memory and launch commands"


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    write_gemma_like(tmp_path)
    path = tmp_path / "fleet.toml"
    path.write_text("""
[model]
gguf = "g.gguf"
kv_cache_type = "q8_0"

[[nodes]]
id = "a"
vram = "400 MiB"
address = "10.0.0.1:6000"

[[nodes]]
id = "b"
vram = "350 MiB"
""")
    return path


def test_the_toggle_plans_with_llama_cpp_memory(fleet: Path) -> None:
    bench = Workbench.from_fleet(fleet)
    panel = bench.panel(TITLE)
    assert isinstance(panel, LlamaCppPanel)
    assert panel.memory_model.value == "design" and "design rule" in panel.memory.value
    design = bench.evaluation
    panel.memory_model.value = "llamacpp"  # as a click does
    assert bench.state.memory_model == "llamacpp"
    request = bench.evaluation.request
    assert request.memory_model == "llamacpp"
    assert bench.evaluation.plan == planner.plan_topology(
        load_fleet(fleet).to_request("llamacpp"))
    # llama.cpp's compute buffers leave node a far less room than the design rule does.
    assert (bench.evaluation.stages["remaining_bytes"].iloc[0]
            < design.stages["remaining_bytes"].iloc[0])
    assert "stage-0" in panel.memory.value and ">host<" in panel.memory.value
    assert "compute" in panel.memory.value
    panel.memory_model.value = "design"
    assert bench.evaluation.request.memory_model == "design"
    assert bench.evaluation.plan == design.plan


def test_launch_commands_are_those_of_the_plan_on_screen(fleet: Path) -> None:
    bench = Workbench.from_fleet(fleet)
    panel = bench.panel(TITLE)
    panel.launch_button.click()
    plan = bench.evaluation.plan
    assert plan is not None
    expected = launch_for_plan(load_fleet(fleet), plan)
    assert panel.commands.value == expected.shell()
    lines = panel.commands.value.splitlines()
    assert "ggml-rpc-server --host 10.0.0.1 --port 6000" in lines  # the file's address
    assert shlex.split(lines[-1]) == list(expected.llama_server)
    panel.model_path.value = "/srv/models/g.gguf"
    panel.launch_button.click()
    argv = shlex.split(panel.commands.value.splitlines()[-1])
    assert argv[argv.index("--model") + 1] == "/srv/models/g.gguf"


def test_a_quantized_v_cache_needs_flash_attention(fleet: Path) -> None:
    bench = Workbench.from_fleet(fleet)
    panel = bench.panel(TITLE)
    assert "needs flash attention" in panel.note.value
    panel.flash_attn.value = False
    panel.launch_button.click()
    assert panel.commands.value == ""
    assert "QuantizedVCacheNeedsFlashAttention" in panel.message.value
    assert "requires Flash Attention" in panel.message.value


def test_a_preset_model_cannot_plan_with_llama_cpp_memory() -> None:
    bench = Workbench.default()
    panel = bench.panel(TITLE)
    panel.memory_model.value = "llamacpp"
    problem = bench.evaluation.problem
    assert problem is not None and "model.gguf" in problem.message
    assert "no plan" in panel.memory.value
    panel.launch_button.click()
    assert "no plan to launch" in panel.message.value


def test_saving_keeps_the_rpc_server_addresses(fleet: Path) -> None:
    bench = Workbench.from_fleet(fleet, fleet_dir=fleet.parent)
    saved = bench.save_fleet("copy.toml")
    assert dict(load_fleet(saved).addresses) == {"a": "10.0.0.1:6000"}


def test_the_toggle_shows_the_rule_the_plan_uses_after_a_load(fleet: Path) -> None:
    bench = Workbench.from_fleet(fleet, fleet_dir=fleet.parent)
    panel = bench.panel(TITLE)
    panel.memory_model.value = "llamacpp"
    (fleet.parent / "other.toml").write_text(fleet.read_text().replace('"350 MiB"',
                                                                       '"380 MiB"'))
    bench.load_fleet(fleet.parent / "other.toml")
    # Loading once reset the plan to the design rule while the toggle still said llama.cpp.
    assert bench.evaluation.request.memory_model == panel.memory_model.value == "llamacpp"
    assert bench.evaluation.plan == planner.plan_topology(
        load_fleet(fleet.parent / "other.toml").to_request("llamacpp"))
    bench.set_state(bench.state.with_memory_model("design"))
    assert panel.memory_model.value == "design"
    assert "planned with the design rule" in panel.memory.value


def test_a_preset_gets_a_gguf_file_to_plan_with_llama_cpp(fleet: Path) -> None:
    bench = Workbench.default(fleet_dir=fleet.parent)
    panel = bench.panel(TITLE)
    panel.memory_model.value = "llamacpp"
    assert "model.gguf" in bench.evaluation.problem.message
    assert panel.gguf_box.layout.display is None  # the chooser is offered
    found = [value for _, value in panel.gguf_choice.options if value]
    assert found == [str((fleet.parent / "g.gguf").resolve())]
    panel.gguf_choice.value = found[0]  # as choosing it does
    assert bench.state.model.gguf == found[0]
    assert bench.evaluation.problem is None and bench.evaluation.plan is not None
    assert bench.evaluation.request.memory_model == "llamacpp"
    # The memory table is the new plan's, not the old model's problem.
    assert "stage-0" in panel.memory.value and "no plan" not in panel.memory.value
    assert panel.gguf_box.layout.display == "none"


def test_a_gguf_path_that_is_no_file_is_said(fleet: Path) -> None:
    bench = Workbench.default(fleet_dir=fleet.parent)
    panel = bench.panel(TITLE)
    panel.gguf_path.value = "missing.gguf"
    panel.gguf_button.click()
    assert "missing.gguf" in panel.message.value
    assert bench.state.model.gguf is None


def _cells(html: str, table_class: str) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of the table of ``table_class`` in ``html``, as text."""
    import re
    from html import unescape

    table = html[html.index(table_class):]
    table = table[:table.index("</table>")]
    headers = [unescape(h) for h in re.findall(r"<th[^>]*>(.*?)</th>", table)]
    rows = [[unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table.split("<tbody>")[1])]
    return headers, rows


def test_the_stage_table_and_the_llamacpp_table_agree(tmp_path: Path) -> None:
    """Under llama.cpp's rule the stage table gave a last stage's weights as its layers'
    and its used bytes without the node's reserve, where llama.cpp's table gives the
    weights with the output head and the total with the compute buffers, and nothing on
    the page said why; its one-layer range read "5–5". Both tables now name the parts,
    and llama.cpp's says what the plan charges each stage: its total there, and on the
    last stage at least as much."""
    write_gemma_like(tmp_path)
    path = tmp_path / "fleet.toml"
    path.write_text('[model]\ngguf = "g.gguf"\n[planning]\nminimum_nodes = 2\n'
                    '[[nodes]]\nid = "a"\nvram = "2 GiB"\n[[nodes]]\nid = "b"\nvram = "260 MiB"\n')
    bench = Workbench.from_fleet(path)
    panel = bench.panel(TITLE)
    panel.memory_model.value = "llamacpp"
    stages = bench.evaluation.stages
    assert stages is not None and len(stages) == 2 and stages["layer_count"].iloc[-1] == 1
    headers, rows = _cells(bench.view.stage_table.value, "wb-table")
    assert {"output & compute", "llama.cpp reserve"} <= set(headers), headers
    assert "what llama.cpp allocates" in bench.view.stage_table.value
    headers, rows = _cells(panel.memory.value, "wb-llamacpp-memory")
    layers = [row[headers.index("layers")] for row in rows]
    assert layers[1] == "5" and "5–5" not in layers, layers
    charged = [row[headers.index("plan charges")] for row in rows]
    totals = [row[headers.index("total")] for row in rows]
    expected = [planner.units.format_bytes(int(used + reserved)) for used, reserved in
                zip(stages["used_bytes"], stages["reserved_bytes"], strict=True)]
    assert charged[:2] == expected
    assert totals[0] == charged[0]
    assert "on the safe side" in panel.memory.value
