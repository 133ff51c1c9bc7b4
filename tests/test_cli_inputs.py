"""Hostile inputs at the command line: each one exits 2 with one line naming what is wrong
(never 1, which means "no valid topology", and never a traceback)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_fleetfile import write_tiny_gguf

ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def run(*args: str | Path, cwd: Path = ROOT, stdout: int | None = None,
        preexec_fn: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planner.cli", *map(str, args)],
                          stdout=subprocess.PIPE if stdout is None else stdout,
                          stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=60,
                          preexec_fn=preexec_fn)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("planner: ")
    assert result.stderr.count("\n") == 1, result.stderr
    assert "unexpected error" not in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def _drop_file_capabilities() -> None:
    # Root reads any file through these two capabilities; without them in the bounding
    # set the child (still uid 0) is held to the file's mode bits like anyone else.
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.fixture
def as_unprivileged() -> Callable[[], None] | None:
    """What runs the command so that a mode-000 file is unreadable to it."""
    if os.geteuid() != 0:
        return None
    probe = subprocess.run([sys.executable, "-c", "pass"], preexec_fn=_drop_file_capabilities,
                           capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("running as root without CAP_SETPCAP: a mode-000 file stays readable")
    return _drop_file_capabilities


@pytest.fixture
def unreadable_gguf(tmp_path: Path) -> Path:
    path = write_tiny_gguf(tmp_path / "locked.gguf")
    path.chmod(0)
    return path


def test_an_unreadable_gguf_is_named(unreadable_gguf: Path,
                                     as_unprivileged: Callable[[], None] | None) -> None:
    result = run("inspect", unreadable_gguf, preexec_fn=as_unprivileged)
    assert_one_line_error(result, "UnreadableGguf", "locked.gguf", "Permission denied")


def test_an_unreadable_gguf_named_by_a_fleet_file(
        unreadable_gguf: Path, as_unprivileged: Callable[[], None] | None) -> None:
    fleet = unreadable_gguf.parent / "fleet.toml"
    fleet.write_text('[model]\ngguf = "locked.gguf"\n\n[[nodes]]\nid = "a"\nvram = "80 GiB"\n')
    result = run("plan", fleet, preexec_fn=as_unprivileged)
    assert_one_line_error(result, "fleet.toml", "model.gguf", "UnreadableGguf",
                          "Permission denied")


def test_a_file_that_cannot_be_read_at_all() -> None:
    assert_one_line_error(run("inspect", "/proc/self/mem"), "UnreadableGguf", "/proc/self/mem")


def test_output_that_cannot_be_written_exits_2() -> None:
    with open("/dev/full", "w") as full:
        result = run("presets", stdout=full.fileno())
    assert_one_line_error(result, "No space left on device")


def test_plan_warns_when_layer_weights_disagree_with_the_model_weight(tmp_path: Path) -> None:
    request = {
        "native_context_length": 8192, "layer_count": 3, "model_weight_bytes": 40 * GIB,
        "layer_weight_bytes": [1, 1, 1], "kv_bytes_per_token": 1024,
        "nodes": [{"node_id": "a", "detected_vram_bytes": 80 * GIB}],
    }
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(request))
    result = run("plan", path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ("warning: the per-layer weights add up to 3 B but the model "
                             "weight is 40 GiB; the plan uses the per-layer weights\n")


_NUMBERS = {"native_context_length": 8192, "layer_count": 2, "model_weight_bytes": GIB,
            "kv_bytes_per_token": 1024}


@pytest.mark.parametrize(("name", "text", "words"), [
    ("deep.toml", "name = " + "[" * 1000 + "]" * 1000,
     ("deep.toml", "nested too deeply")),
    ("deep.json", '{"nodes": ' + "[" * 1000 + "]" * 1000 + "}",
     ("deep.json", "nested too deeply")),
    ("digits.toml", '[model]\nlayer_count = ' + "9" * 5000,
     ("digits.toml:2", "more than 4,300 digits")),
    ("digits.json", '{"layer_count": ' + "9" * 5000 + "}",
     ("digits.json:1", "more than 4,300 digits")),
])
def test_fleet_files_no_parser_should_take(tmp_path: Path, name: str, text: str,
                                           words: tuple[str, ...]) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert_one_line_error(run("plan", path), *words)


def test_a_lone_surrogate_in_a_node_id_writes_no_report(tmp_path: Path) -> None:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({**_NUMBERS, "nodes": [
        {"node_id": "a\ud800", "detected_vram_bytes": 80 * GIB}]}))
    assert_one_line_error(run("plan", path), "nodes[0].node_id", "lone surrogate")
    out = tmp_path / "report.html"
    assert_one_line_error(run("report", path, "-o", out), "lone surrogate")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.json"]


def test_a_fifo_named_x_toml_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    os.mkfifo(path)
    assert_one_line_error(run("plan", path), "x.toml", "not a regular file")


def test_an_unreadable_fleet_file(tmp_path: Path,
                                  as_unprivileged: Callable[[], None] | None) -> None:
    tmp_path.chmod(0o755)
    path = tmp_path / "locked.toml"
    path.write_text('[model]\npreset = "qwen3-coder-480b-a35b"\n')
    path.chmod(0)
    assert_one_line_error(run("plan", path, preexec_fn=as_unprivileged),
                          "locked.toml", "cannot be read: Permission denied")


@pytest.mark.parametrize("command", [("speed", "--gpu", "rtx-4090"), ("size",),
                                     ("calibrate", "bench.json", "--gpu", "rtx-4090")])
@pytest.mark.parametrize(("given", "said"), [
    ("a-folder", "is a folder"), ("notes", "is a file without a .gguf, .toml or .json suffix"),
    ("./missing/model", "does not exist")])
def test_a_model_path_that_is_none_of_its_kinds_is_named_as_what_it_is(
        tmp_path: Path, command: tuple[str, ...], given: str, said: str) -> None:
    """A model argument that is a path but no GGUF or fleet file is refused by what it is,
    not looked up as a preset id ("no preset named './missing/model'"), and a preset id
    is one whatever the folder it is typed in holds."""
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "notes").write_text("not a model\n")
    (tmp_path / "bench.json").write_text("[]\n")
    option = "--model" if command[0] == "calibrate" else "MODEL"
    args = (*command, "--model", given) if command[0] == "calibrate" else (
        command[0], given, *command[1:])
    result = run(*args, cwd=tmp_path)
    assert_one_line_error(result, f"{option}: {given!r} {said}")
    assert "preset named" not in result.stderr
    (tmp_path / "gpt-oss-20b").mkdir()
    named = run("speed", "gpt-oss-20b", "--gpu", "rtx-4090", "--context", "1k",
                "--prompt-tokens", "256", cwd=tmp_path)
    assert named.returncode == 0, named.stderr


def test_calibrate_takes_no_fleet_file_as_its_model(tmp_path: Path) -> None:
    (tmp_path / "bench.json").write_text("[]\n")
    result = run("calibrate", "bench.json", "--gpu", "rtx-4090", "--model",
                 ROOT / "data" / "fleets" / "qwen480b-5x80.toml", cwd=tmp_path)
    assert_one_line_error(result, "is a fleet file; --model is a preset id or a GGUF file")
