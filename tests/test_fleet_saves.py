"""Saving fleet files: what a killed save leaves is cleaned up, links are written through,
and a hand-written file keeps its comments."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from planner.fleet import (
    FleetFileError,
    fleet_to_toml,
    load_fleet,
    parse_fleet_toml,
    save_fleet,
)
from planner.fleet.edit import toml_comments

GIB = 2**30
HAND_WRITTEN = textwrap.dedent("""\
    # My lab: the studio cards and a loaner.
    name = "lab"   # shown in reports

    [model]
    preset = "qwen3-coder-480b-a35b"   # the big one
    kv_cache_type = "q8_0"

    # Studio GPUs
    [[nodes]]
    id = "studio"
    count = 3        # three identical cards
    vram = "80GiB"   # as nvidia-smi says
    latency_ms = 5

    [[nodes]]
    id = "loaner"    # back in March
    vram = "48 GiB"
    """)

# Saves, then stops for good right before the rename, with its temporary file written.
_STUCK_SAVE = """
import os, sys, time
from planner.fleet import load_fleet, save_fleet
path = sys.argv[1]
document = load_fleet(path)
os.replace = lambda *_: time.sleep(3600)
save_fleet(document, path)
"""


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_save_killed_mid_write_is_cleaned_up_by_the_next(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(HAND_WRITTEN)
    saver = subprocess.Popen([sys.executable, "-c", _STUCK_SAVE, str(path)])
    try:
        deadline = time.monotonic() + 60
        while not _temporaries(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _temporaries(tmp_path), "the save never wrote its temporary file"
        # While that save is alive, its temporary file is not touched.
        save_fleet(load_fleet(path), path)
        assert len(_temporaries(tmp_path)) == 1
    finally:
        saver.send_signal(signal.SIGKILL)
        saver.wait()
    assert path.read_text() == HAND_WRITTEN  # the killed save changed nothing
    save_fleet(load_fleet(path), path)
    assert _temporaries(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.toml"]


def test_only_unlocked_leftovers_of_this_file_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(HAND_WRITTEN)
    # Leftovers are named as mkstemp names a save's temporary file (eight characters).
    stale = tmp_path / ".fleet.toml.dead1234.tmp"
    busy = tmp_path / ".fleet.toml.busy1234.tmp"
    other = tmp_path / ".other.toml.dead1234.tmp"
    mine = tmp_path / ".fleet.toml.mine.tmp"  # a file of the user's, no save's
    for leftover in (stale, busy, other, mine):
        leftover.write_text("half a file")
    with busy.open() as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a save in progress holds its own
        save_fleet(load_fleet(path), path)
    assert not stale.exists()
    assert busy.exists() and other.exists() and mine.read_text() == "half a file"


def test_saving_through_a_symlink_writes_the_target(tmp_path: Path) -> None:
    target = tmp_path / "real" / "fleet.toml"
    target.parent.mkdir()
    target.write_text(HAND_WRITTEN)
    link = tmp_path / "fleet.toml"
    link.symlink_to(os.path.relpath(target, tmp_path))
    document = load_fleet(link)
    edited = replace(document, name="lab 2")
    assert save_fleet(edited, link) == link
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert load_fleet(target) == replace(edited, source=str(target))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.toml", "real"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["fleet.toml"]


def test_a_hand_written_file_keeps_its_comments_and_spelling(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(HAND_WRITTEN)
    document = load_fleet(path)
    nodes = list(document.nodes)
    nodes[-1] = replace(nodes[-1], detected_vram_bytes=24 * GIB)
    edited = replace(document, nodes=tuple(nodes), name="lab 2")
    save_fleet(edited, path)
    assert path.read_text() == (HAND_WRITTEN.replace('"lab"', '"lab 2"')
                                .replace('"48 GiB"', '"24 GiB"'))
    assert load_fleet(path) == edited


def test_unchanged_save_leaves_the_text_as_written(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(HAND_WRITTEN)
    save_fleet(load_fleet(path), path)
    assert path.read_text() == HAND_WRITTEN


def test_comments_of_the_nodes_that_stay_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(HAND_WRITTEN)
    document = load_fleet(path)
    edited = replace(document, nodes=document.nodes[:3], minimum_nodes=2)
    save_fleet(edited, path)
    text = path.read_text()
    assert "# three identical cards" in text and "# as nvidia-smi says" in text
    assert "id = \"loaner\"" not in text and "minimum_nodes = 2" in text
    assert load_fleet(path) == edited


def test_a_file_that_is_not_toml_is_rewritten_whole(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text("this is [not toml\n")
    document = parse_fleet_toml(HAND_WRITTEN, str(path))
    save_fleet(document, path)
    assert path.read_text() == fleet_to_toml(document)


INLINE_NODES = textwrap.dedent("""\
    # nodes written as one inline array: no edit can keep this layout
    name = "lab"
    nodes = [ { id = "a", vram = "80 GiB" }, { id = "b", vram = "48 GiB" } ]  # two cards
    [model]
    preset = "qwen3-coder-480b-a35b"
    """)


def test_a_save_that_would_drop_comments_is_refused_until_asked(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(INLINE_NODES)
    edited = replace(load_fleet(path), name="lab 2")
    with pytest.raises(FleetFileError) as caught:
        save_fleet(edited, path)
    assert caught.value.code == "CommentsWouldBeLost"
    assert str(path) in str(caught.value) and "drop_comments" in str(caught.value)
    assert path.read_text() == INLINE_NODES  # nothing written
    assert save_fleet(edited, path, drop_comments=True) == path
    text = path.read_text()
    assert "two cards" not in text and "inline array" not in text
    assert load_fleet(path) == edited


def test_a_rewrite_of_a_file_without_comments_needs_no_confirmation(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    text = "\n".join(line.split("#")[0].rstrip() for line in INLINE_NODES.splitlines()
                     if not line.startswith("#"))
    path.write_text(text.replace('"a"', '"#a"') + "\n")  # a '#' inside a string is no comment
    edited = replace(load_fleet(path), name="lab 2")
    save_fleet(edited, path)
    assert load_fleet(path) == edited


@pytest.mark.parametrize(("text", "expected"), [
    ('a = 1 # note\n', ["# note"]),
    ('# only a comment\n', ["# only a comment"]),
    ('a = "x # y"\n', []),
    ("a = 'x # y'\n", []),
    ('a = """\n# inside\n"""\n', []),
    ("a = '''\n# inside\n'''\n", []),
    ('a = "q\\" # still a string"\n', []),
    ('a = "q\\\\" # after an escaped backslash\n', ["# after an escaped backslash"]),
    ('a = """x""" # after\n', ["# after"]),
    ('a = [\n  1, # in an array\n]\n', ["# in an array"]),
    ('a = """x\\""""  # four quotes close\n', ["# four quotes close"]),
])
def test_comments_are_found_outside_strings_only(text: str, expected: list[str]) -> None:
    assert toml_comments(text) == expected
