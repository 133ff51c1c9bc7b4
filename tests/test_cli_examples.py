"""Every example a ``planner`` command's help prints runs as printed: a user copies them.

An example runs from a directory where ``data/`` is the project's, its placeholder inputs
are real files (``model.gguf`` a small GGUF, ``my-*.toml`` catalogs of the ``my-card``
and ``my-cpu`` kinds the examples name) and its outputs land. Examples whose inputs only
a user has (a fleet of their own, llama-bench output, server logs, running
rpc-servers or a Dask scheduler) are left out, and the test says which commands must
have had examples run, so that it cannot pass by skipping them all.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest
from test_models_gguf import llama_metadata, llama_tensors, write_gguf

from planner.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
# A catalog the examples' placeholder files hold: a GPU kind and a CPU kind, by the ids
# the examples name.
PLACEHOLDER_CATALOG = (
    '[[gpu]]\nid = "my-card"\nname = "My card"\nvendor = "AMD"\nmemory = "16 GiB"\n'
    'backend = "vulkan"\nmemory_type = "gddr"\nmemory_bandwidth_bytes_per_s = 640000000000\n'
    'shader_count = 4096\nboost_clock_mhz = 2970\narchitecture = "rdna4"\n'
    '[[gpu]]\nid = "my-cpu"\nname = "My CPU"\nvendor = "AMD"\nmemory = "128 GiB"\n'
    'backend = "cpu"\nmemory_type = "ddr"\nmemory_bandwidth_bytes_per_s = 96000000000\n'
    "core_count = 16\nboost_clock_mhz = 5000\nsimd_width_bits = 512\n")
PLACEHOLDER_CATALOGS = ("my-cards.toml", "my-cpus.toml", "my-gpus.toml", "mine.toml")
PLACEHOLDER_MODEL = "model.gguf"
FILE_SUFFIXES = (".toml", ".json", ".gguf", ".md", ".html", ".csv", ".parquet", ".log")
OUTPUT_OPTIONS = ("-o", "--output")
# Commands whose examples need what only a user has: running rpc-servers (discover), a
# launched server's log (verify), llama-bench output (calibrate).
NEEDS_THE_USERS_OWN = {"discover", "verify", "calibrate"}
# Each of these commands must have had an example run.
MUST_RUN = {"plan", "candidates", "report", "presets", "availability", "size", "speed",
            "memory"}
# Examples that show another outcome than 0: the report of a fleet with no valid topology,
# which is still written (and says why).
EXPECTED_CODES = {"report data/fleets/qwen480b-4x70.toml -o report.md": 1}


def _examples() -> list[tuple[str, list[str]]]:
    parser = build_parser()
    epilogs = [("planner", parser.epilog or "")]
    subparsers = next(action for action in parser._actions
                      if isinstance(action, argparse._SubParsersAction))
    epilogs += [(name, sub.epilog or "") for name, sub in subparsers.choices.items()]
    found = []
    for command, epilog in epilogs:
        for line in epilog.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("planner "):
                found.append((command, shlex.split(line)[1:]))
    return found


def _runnable(argv: list[str]) -> bool:
    """Whether every input the example names is the project's or a placeholder here."""
    if argv[0] in NEEDS_THE_USERS_OWN or "--scheduler" in argv:
        return False
    outputs = {argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in OUTPUT_OPTIONS}
    for arg in argv[1:]:
        if not arg.endswith(FILE_SUFFIXES) or arg in outputs:
            continue
        if arg not in (*PLACEHOLDER_CATALOGS, PLACEHOLDER_MODEL) and not (ROOT / arg).is_file():
            return False
    return True


EXAMPLES = _examples()
RUNNABLE = [(command, argv) for command, argv in EXAMPLES if _runnable(argv)]


def test_the_examples_cover_the_commands() -> None:
    assert {argv[0] for _command, argv in RUNNABLE} >= MUST_RUN
    # The speed example of a preset on a kind of the user's own catalog is among them.
    assert any(argv[:2] == ["speed", "llama-3.1-8b"] for _command, argv in RUNNABLE)


@pytest.mark.parametrize(("command", "argv"), RUNNABLE,
                         ids=[" ".join(argv) for _command, argv in RUNNABLE])
def test_every_help_example_runs_as_printed(command: str, argv: list[str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "data").symlink_to(ROOT / "data")
    for name in PLACEHOLDER_CATALOGS:
        (tmp_path / name).write_text(PLACEHOLDER_CATALOG)
    write_gguf(tmp_path / PLACEHOLDER_MODEL, "llama", llama_metadata(layers=18),
               llama_tensors(layers=18))
    monkeypatch.chdir(tmp_path)
    code = main(argv)
    captured = capsys.readouterr()
    expected = EXPECTED_CODES.get(" ".join(argv), 0)
    assert code == expected, f"`planner {' '.join(argv)}` (from {command}'s help): {captured.err}"
    outputs = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in OUTPUT_OPTIONS]
    assert all((tmp_path / output).stat().st_size > 0 for output in outputs)
    assert captured.out.strip() or outputs
