"""Hostile fleet files: each is refused with a named FleetFileError, fast."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path

import pytest

from planner.fleet import FleetFileError, load_fleet, parse_fleet_json, parse_fleet_toml

GIB = 2**30
DEEP = 1000


def _refused(path: Path) -> FleetFileError:
    with pytest.raises(FleetFileError) as caught:
        load_fleet(path)
    assert str(path) in str(caught.value)
    assert len(str(caught.value)) < 300
    return caught.value


@pytest.mark.parametrize(("name", "text"), [
    ("arrays.toml", "name = " + "[" * DEEP + "]" * DEEP + "\n"),
    ("tables.toml", "name = " + "{a = " * DEEP + "1" + "}" * DEEP + "\n"),
    ("arrays.json", '{"nodes": ' + "[" * DEEP + "]" * DEEP + "}"),
    ("objects.json", '{"a": ' * DEEP + "1" + "}" * DEEP),
])
def test_deep_nesting_is_refused(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    error = _refused(path)
    assert error.code == ("InvalidToml" if name.endswith(".toml") else "InvalidJson")
    assert error.message == "values are nested too deeply to read"


@pytest.mark.parametrize(("name", "text", "line"), [
    ("layers.toml", '[model]\npreset = "x"\n\n[[nodes]]\nid = "a"\ncount = 1' + "0" * 5000,
     6),
    ("layers.json", '{\n"layer_count": ' + "9" * 5000 + "}", 2),
    ("negative.json", '{"layer_count": -' + "9" * 5000 + "}", 1),
])
def test_integers_of_more_than_4300_digits_are_refused(tmp_path: Path, name: str, text: str,
                                                       line: int) -> None:
    path = tmp_path / name
    path.write_text(text)
    error = _refused(path)
    assert error.code == ("InvalidToml" if name.endswith(".toml") else "InvalidJson")
    assert error.line == line
    assert "more than 4,300 digits" in error.message


def test_a_lone_surrogate_in_a_json_node_id_is_refused() -> None:
    request = {"native_context_length": 8192, "layer_count": 2, "model_weight_bytes": GIB,
               "kv_bytes_per_token": 1024,
               "nodes": [{"node_id": "ok", "detected_vram_bytes": 80 * GIB},
                         {"node_id": "a\ud800b", "detected_vram_bytes": 80 * GIB}]}
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_json(json.dumps(request), "fleet.json")
    assert caught.value.code == "InvalidJson"
    assert caught.value.field == "nodes[1].node_id"
    assert "lone surrogate" in caught.value.message
    with pytest.raises(FleetFileError, match="lone surrogate"):
        parse_fleet_json('{"\\udfff": 1}', "fleet.json")


def test_a_lone_surrogate_in_toml_text_is_refused() -> None:
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml('\n[model]\nname = "a\ud800"\n', "fleet.toml")
    assert caught.value.code == "InvalidToml" and caught.value.line == 3
    assert "U+D800" in caught.value.message


def test_a_fifo_named_like_a_fleet_file_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    os.mkfifo(path)

    released: list[bool] = []

    def release_a_blocked_reader() -> None:
        # Only if the loader waits for a writer: open the other end, so the loader goes
        # on and the test fails instead of hanging (with no reader waiting, this open
        # fails and does nothing).
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            released.append(True)

    timer = threading.Timer(5, release_a_blocked_reader)
    timer.start()
    try:
        error = _refused(path)
    finally:
        timer.cancel()
    assert not released, "the loader waited for a writer on the FIFO"
    assert error.code == "UnreadableFile" and "not a regular file" in error.message


def test_a_file_that_cannot_be_read(tmp_path: Path) -> None:
    link = tmp_path / "mem.toml"
    link.symlink_to("/proc/self/mem")
    error = _refused(link)
    assert error.code == "UnreadableFile"
    assert error.message == "cannot be read: Input/output error"


def test_line_endings_are_read_as_before(tmp_path: Path) -> None:
    text = '[model]\npreset = "qwen3-coder-480b-a35b"\n\n[[nodes]]\nid = "a"\nvram = "80 GiB"\n'
    for ending in ("\r\n", "\r"):
        path = tmp_path / "fleet.toml"
        path.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", ending).encode())
        assert load_fleet(path) == parse_fleet_toml(text, str(path))


def test_a_bad_address_is_quoted_short() -> None:
    text = ('[model]\npreset = "qwen3-coder-480b-a35b"\n\n[[nodes]]\nid = "a"\n'
            'vram = "80 GiB"\naddress = "' + "h" * 5000 + ':99999"\n')
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml(text, "fleet.toml")
    assert caught.value.field == "nodes[0].address" and len(str(caught.value)) < 300
