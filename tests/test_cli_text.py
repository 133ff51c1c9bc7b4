"""What the command line says reads as a person would write it: a one-layer stage is its
layer's number, counts agree with their nouns, and a warning on stderr stays on its own
line after the output it follows when stdout and stderr share one pipe."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_memory import write_gemma_like

import planner
from planner.llamacpp import LlamaCppSettings
from planner.llamacpp.launch import build_launch
from planner.units import counted, layer_range

ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30

# Three layers of 1 GiB on a 2.1 GiB and a 1.1 GiB node: stages of two layers and of one.
ONE_LAYER_STAGE = """
name = "one-layer stage"
[model]
name = "tiny"
native_context_length = 4096
layer_count = 3
model_weight_bytes = "3 GiB"
kv_bytes_per_token = 1
[planning]
minimum_nodes = 2
[[nodes]]
id = "big"
vram = "2.1 GiB"
headroom = "0 GiB"
[[nodes]]
id = "small"
vram = "1.1 GiB"
headroom = "0 GiB"
"""


@dataclass
class Stage:
    node_id: str
    layer_start: int
    layer_end: int


def run(*args: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run([sys.executable, "-m", "planner.cli", *map(str, args)],
                          text=True, cwd=ROOT, timeout=120, **streams)


@pytest.mark.parametrize(("start", "end", "text"), [
    (0, 15, "0–14"), (17, 18, "17"), (3, 3, "—"), (0, 2, "0–1")])
def test_a_layer_range_reads_as_written(start: int, end: int, text: str) -> None:
    assert layer_range(start, end) == text


def test_counts_agree_with_their_nouns() -> None:
    assert [counted(n, "layer") for n in (0, 1, 2, 1000)] == [
        "0 layers", "1 layer", "2 layers", "1,000 layers"]
    assert counted(1, "stage failure") == "1 stage failure"


def test_a_one_layer_stage_shows_its_layer_not_a_range(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(ONE_LAYER_STAGE)
    result = run("plan", fleet)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()
            if line.startswith("stage-")}
    assert rows["stage-0"][2:4] == ["0–1", "2"]
    assert rows["stage-1"][2:4] == ["2", "1"]
    assert "tolerates 0 stage failures" in result.stdout
    assert "(s)" not in result.stdout


def test_one_layer_without_room_is_counted_in_the_singular() -> None:
    request = {"native_context_length": 4096, "layer_count": 3,
               "model_weight_bytes": 3 * GIB, "kv_bytes_per_token": 1, "minimum_nodes": 2,
               "nodes": [{"node_id": "big", "detected_vram_bytes": 2 * GIB + GIB // 10},
                         {"node_id": "small", "detected_vram_bytes": GIB // 2}]}
    with pytest.raises(planner.PlanError) as caught:
        planner.plan_topology(request)
    assert "2 of 3 layers fit; the other 1 layer (1 GiB) has no room" in caught.value.message


@pytest.mark.parametrize(("tiny_nodes", "stages"), [(1, "as 2 stages"),
                                                     (2, "as 2 to 3 stages")])
def test_the_stage_counts_tried_read_as_written(tiny_nodes: int, stages: str) -> None:
    # One node holds every layer; the others hold none, so no split of two or more fits.
    request = {"native_context_length": 4096, "layer_count": 3,
               "model_weight_bytes": 3 * GIB, "kv_bytes_per_token": 1, "minimum_nodes": 2,
               "nodes": [{"node_id": "big", "detected_vram_bytes": 4 * GIB},
                         *({"node_id": f"tiny-{i}", "detected_vram_bytes": GIB // 2}
                           for i in range(tiny_nodes))]}
    with pytest.raises(planner.PlanError) as caught:
        planner.plan_topology(request)
    assert f"but not {stages} of at least one layer each" in caught.value.message


def test_the_launch_script_names_a_one_layer_stage_s_layer() -> None:
    launch = build_launch([Stage("a", 0, 3), Stage("b", 3, 4)], "m.gguf",
                          LlamaCppSettings(context_length=4096), 4,
                          {"a": "10.0.0.1:6000", "b": "10.0.0.2:6000"})
    comments = [line for line in launch.shell().splitlines() if line.startswith("# on ")]
    assert comments[:2] == ["# on a (layers 0-2)", "# on b (layer 3)"]


def test_memory_shows_a_one_layer_device_s_layer(tmp_path: Path) -> None:
    gguf = write_gemma_like(tmp_path)
    result = run("memory", gguf, "--context", "4096", "--layers-per-device", "1,5")
    assert result.returncode == 0, result.stderr
    layers = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()
              if line.startswith("device-")}
    assert layers == {"device-0": "0", "device-1": "1-5"}, result.stdout


def test_a_warning_follows_the_output_on_its_own_line_in_one_pipe() -> None:
    fleet = ROOT / "data" / "fleets" / "qwen235b-partial-latency.toml"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    result = run("plan", fleet, env=env, stderr=subprocess.STDOUT)
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    warnings = [i for i, line in enumerate(lines) if "warning: " in line]
    assert warnings, result.stdout
    assert all(lines[i].startswith("warning: ") for i in warnings), result.stdout
    quorum = next(i for i, line in enumerate(lines) if line.startswith("startup quorum"))
    assert min(warnings) > quorum, result.stdout
