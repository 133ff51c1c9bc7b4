"""Fleet files: reading, writing, node count expansion, errors that point at the problem."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import DATA
from fleet_strategies import documents, node_sizes
from gguf import GGUFWriter
from hypothesis import given

import planner
from planner.fleet import (
    FleetDocument,
    FleetFileError,
    ModelChoice,
    expanded_node_ids,
    fleet_to_json,
    fleet_to_toml,
    load_fleet,
    parse_fleet_json,
    parse_fleet_toml,
    save_fleet,
)
from planner.limits import MAX_NODE_BYTES
from planner.models import load_preset

FLEETS = Path(__file__).resolve().parent.parent / "data" / "fleets"
GIB = 1024**3
SEED_CASES = {case["name"]: case for case in
              json.loads((DATA / "planner_seed_scenarios.json").read_text())}
DESIGN_FLEETS = ("qwen480b-4x70", "qwen480b-4x80", "qwen480b-5x80", "qwen480b-10x80",
                 "qwen480b-two-studios", "qwen480b-4x80-latency10-tpot33")

NUMBERS = """
[model]
native_context_length = 65536
layer_count = 40
model_weight_bytes = "40 GiB"
kv_bytes_per_token = 65536
"""


def write_tiny_gguf(path: Path, layers: int = 4) -> Path:
    """A small but real llama GGUF file (F32 tensors), as llama.cpp would read it."""
    writer = GGUFWriter(path, "llama")
    writer.add_string("general.name", "Tiny Test Llama")
    for key, value in (("llama.block_count", layers), ("llama.context_length", 8192),
                       ("llama.embedding_length", 64), ("llama.attention.head_count", 4),
                       ("llama.attention.head_count_kv", 2)):
        writer.add_uint32(key, value)
    writer.add_tensor("token_embd.weight", np.zeros((32, 64), dtype=np.float32))
    for layer in range(layers):
        writer.add_tensor(f"blk.{layer}.attn_q.weight", np.zeros((64, 64), dtype=np.float32))
        writer.add_tensor(f"blk.{layer}.ffn_up.weight", np.zeros((128, 64), dtype=np.float32))
    writer.add_tensor("output.weight", np.zeros((32, 64), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def fleet_error(text: str, source: str = "fleet.toml") -> FleetFileError:
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml(text, source)
    return caught.value


# -- the shipped fleets -----------------------------------------------------------------


@pytest.mark.parametrize("name", DESIGN_FLEETS)
def test_design_fleets_are_the_design_scenarios(name: str) -> None:
    document = load_fleet(FLEETS / f"{name}.toml")
    case = SEED_CASES[name]
    assert document.to_request().to_dict() == case["input"]
    expected = case["expected"]
    if expected["ok"]:
        plan = planner.plan_topology(document.to_request()).to_dict()
        assert plan["context_length"] == expected["context_length"]
        assert [(s["node_id"], s["layer_start"], s["layer_end"]) for s in plan["stages"]] == [
            (s["node_id"], s["layer_start"], s["layer_end"]) for s in expected["stages"]]
    else:
        with pytest.raises(planner.PlanError) as caught:
            planner.plan_topology(document.to_request())
        assert caught.value.code == expected["error"]


def test_two_studios_numbers_are_exact() -> None:
    nodes = {n.node_id: n for n in load_fleet(FLEETS / "qwen480b-two-studios.toml").nodes}
    assert nodes["studio-james"].detected_vram_bytes == 115448725504
    assert nodes["studio-james"].max_vram_bytes == 115448725504
    assert nodes["studio-mic"].detected_vram_bytes == 239143780352
    assert nodes["studio-mic"].max_vram_bytes == 239143780352


@pytest.mark.parametrize("path", sorted(FLEETS.glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_fleet_loads_resolves_and_survives_a_save(path: Path,
                                                                tmp_path: Path) -> None:
    document = load_fleet(path)
    request = document.to_request()
    assert len(request.nodes) >= 2
    again = load_fleet(save_fleet(document, tmp_path / path.name))
    assert again == document
    assert again.to_request() == request


def test_mixed_fleets_use_presets_and_find_a_plan() -> None:
    mixed = [p for p in FLEETS.glob("*.toml") if not p.stem.startswith("qwen480b")]
    assert len(mixed) >= 3
    for path in mixed:
        document = load_fleet(path)
        assert document.model.preset is not None
        planner.plan_topology(document.to_request())


# -- node count expansion ---------------------------------------------------------------


def test_count_expands_to_numbered_ids() -> None:
    document = parse_fleet_toml(NUMBERS + """
[[nodes]]
id = "gpu"
count = 3
vram = "80 GiB"
headroom = "2 GiB"
latency_ms = 5
""")
    assert [n.node_id for n in document.nodes] == ["gpu-00", "gpu-01", "gpu-02"]
    assert {(n.detected_vram_bytes, n.runtime_headroom_bytes, n.stage_transfer_latency_ms)
            for n in document.nodes} == {(80 * GIB, 2 * GIB, 5)}


@pytest.mark.parametrize(("count", "first", "last"), [
    (1, "g-00", "g-00"), (10, "g-00", "g-09"), (100, "g-00", "g-99"),
    (101, "g-000", "g-100"), (1001, "g-0000", "g-1000"),
])
def test_expansion_pads_to_the_widest_number(count: int, first: str, last: str) -> None:
    ids = expanded_node_ids("g", count)
    assert (len(ids), ids[0], ids[-1]) == (count, first, last)
    assert len({len(i) for i in ids}) == 1


def test_expansion_collision_names_both_entries_and_the_line() -> None:
    text = NUMBERS + """
[[nodes]]
id = "gpu"
count = 3
vram = "80 GiB"

[[nodes]]
id = "gpu-01"
vram = "24 GiB"
"""
    error = fleet_error(text)
    assert error.code == "DuplicateNodeId"
    assert error.field == "nodes[1].id"
    assert error.node_id == "gpu-01"
    assert "nodes[0]" in error.message and "count = 3" in error.message
    assert error.line == text.splitlines().index('id = "gpu-01"') + 1
    assert str(error).startswith(f"fleet.toml:{error.line}: nodes[1].id (node 'gpu-01')")


def test_two_counted_entries_that_overlap_are_refused() -> None:
    error = fleet_error(NUMBERS + """
[[nodes]]
id = "a"
count = 2
vram = "1024 B"
[[nodes]]
id = "a"
count = 3
vram = "2 KiB"
""")
    assert error.code == "DuplicateNodeId" and error.node_id == "a-00"


# -- errors name the file, the line, the field and the node -----------------------------


def test_syntax_error_carries_the_line() -> None:
    text = NUMBERS + '\n[[nodes]]\nid = "a"\nvram = = "80 GiB"\n'
    error = fleet_error(text, "/srv/fleets/bad.toml")
    assert error.code == "InvalidToml"
    assert error.line == len(text.splitlines())
    assert str(error).startswith(f"/srv/fleets/bad.toml:{error.line}: not valid TOML")


@pytest.mark.parametrize(("entry", "field", "words"), [
    ('vram = "80 GiX"', "nodes[1].vram", "unknown unit"),
    ("vram = 80.5", "nodes[1].vram", "GiB"),
    ('vram = "80 GiB"\nmax_vram = -1', "nodes[1].max_vram", "negative"),
    ('vram = "80 GiB"\nlatency_ms = -3', "nodes[1].latency_ms", "negative"),
    ('vram = "80 GiB"\nlatency_ms = "fast"', "nodes[1].latency_ms", "'5 ms'"),
    ('vram = "80 GiB"\nlatency_ms = 0.0005', "nodes[1].latency_ms", "microsecond"),
    ("vram = 24", "nodes[1].vram", "'24 GiB'"),
    ('vram = "80 Gb"', "nodes[1].vram", "bits"),
    ('vram = "1,5 TiB"', "nodes[1].vram", "thousands separator"),
    ('vram = "80\\nGiB"', "nodes[1].vram", "'80 GiB'"),
    ('vram = "80 GiB"\ncount = 0', "nodes[1].count", "at least 1"),
    ('vram = "80 GiB"\nvram_gb = 80', "nodes[1].vram_gb", "unknown field"),
    ('headroom = "1 GiB"', "nodes[1].vram", "is required"),
])
def test_node_errors_name_the_field_node_and_line(entry: str, field: str, words: str) -> None:
    text = NUMBERS + f'\n[[nodes]]\nid = "ok"\nvram = "1 B"\n\n[[nodes]]\nid = "box-b"\n{entry}\n'
    error = fleet_error(text)
    assert error.field == field
    assert error.node_id == "box-b"
    assert words in error.message
    assert error.line is not None
    line_text = text.splitlines()[error.line - 1]
    key = field.rsplit(".", 1)[1]
    assert line_text.startswith(key) or line_text == "[[nodes]]"
    assert "fleet.toml:" in str(error) and "box-b" in str(error)


@pytest.mark.parametrize(("text", "code", "field"), [
    ('[model]\npreset = "x"\nlayer_count = 3\n', "InvalidField", "model"),
    ("[model]\n", "MissingField", "model"),
    ('name = "no model"\n', "MissingField", "model"),
    ("[model]\nlayer_count = 40\n", "MissingField", "model.native_context_length"),
    (NUMBERS + 'kv_cache_type = "q8_0"\n', "InvalidField", "model.kv_cache_type"),
    (NUMBERS + "layer_weight_bytes = [1, 2]\n", "InvalidField", "model.layer_weight_bytes"),
    (NUMBERS + 'colour = "red"\n', "UnknownField", "model.colour"),
    (NUMBERS + "[planning]\nminimum_nodes = -1\n", "InvalidField", "planning.minimum_nodes"),
    (NUMBERS + "[planning]\ncontext_length = 1\n", "UnknownField", "planning.context_length"),
    ('owner = "me"\n' + NUMBERS, "UnknownField", "owner"),
    (NUMBERS + "output_head_parameters = 1000\n", "MissingField", "model.parameter_count"),
    (NUMBERS + "parameter_count = 1000\noutput_head_parameters = 1001\n", "InvalidField",
     "model.output_head_parameters"),
    (NUMBERS + "parameter_count = 1000\noutput_head_parameters = 0\n", "InvalidField",
     "model.output_head_parameters"),
])
def test_model_and_planning_errors(text: str, code: str, field: str) -> None:
    error = fleet_error(text)
    assert (error.code, error.field) == (code, field)
    assert error.path == "fleet.toml"


def test_error_line_points_at_the_model_key() -> None:
    text = NUMBERS.replace('"40 GiB"', '"forty"')
    error = fleet_error(text)
    assert error.field == "model.model_weight_bytes"
    assert text.splitlines()[error.line - 1].startswith("model_weight_bytes")


def test_missing_file_and_wrong_extension(tmp_path: Path) -> None:
    with pytest.raises(FleetFileError) as missing:
        load_fleet(tmp_path / "absent.toml")
    assert missing.value.code == "FileNotFound" and "absent.toml" in str(missing.value)
    (tmp_path / "fleet.yaml").write_text("nodes: []")
    with pytest.raises(FleetFileError) as wrong:
        load_fleet(tmp_path / "fleet.yaml")
    assert wrong.value.code == "UnsupportedFormat"


# -- JSON in the request's raw names -------------------------------------------------------


def test_json_request_loads_with_its_model_name(tmp_path: Path) -> None:
    request = SEED_CASES["qwen480b-5x80"]["input"]
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"model_name": "Qwen3-Coder-480B-A35B", **request}))
    document = load_fleet(path)
    assert document.model.name == "Qwen3-Coder-480B-A35B"
    assert document.to_request().to_dict() == request
    assert document.source == str(path)


def test_json_errors_name_line_field_and_node() -> None:
    broken = '{\n  "layer_count": 40,\n  "nodes": [\n}\n'
    with pytest.raises(FleetFileError) as syntax:
        parse_fleet_json(broken, "req.json")
    assert syntax.value.code == "InvalidJson" and syntax.value.line == 4
    request = json.loads(json.dumps(SEED_CASES["small-2x23"]["input"]))
    request["nodes"][1]["detected_vram_bytes"] = -5
    with pytest.raises(FleetFileError) as field:
        parse_fleet_json(json.dumps(request), "req.json")
    assert field.value.field == "nodes[1].detected_vram_bytes"
    assert field.value.node_id == "b-01"
    request["nodes"][1]["detected_vram_bytes"] = 5
    request["colour"] = "red"
    with pytest.raises(FleetFileError) as unknown:
        parse_fleet_json(json.dumps(request), "req.json")
    assert (unknown.value.code, unknown.value.field) == ("UnknownField", "colour")


def test_a_preset_fleet_saved_as_json_reads_back_as_the_same_fleet(tmp_path: Path) -> None:
    """Saving as JSON used to resolve a preset to bare numbers and drop the rpc-server
    addresses: the speed estimate and `planner launch` then lost what the TOML held."""
    document = parse_fleet_toml(
        '[model]\npreset = "qwen3-coder-480b-a35b"\nkv_cache_type = "f16"\n'
        '[[nodes]]\nid = "a"\nvram = "80 GiB"\naddress = "10.0.0.5:50052"\n'
        'gpu = "h100-sxm-80gb"\n')
    path = save_fleet(document, tmp_path / "fleet.json")
    data = json.loads(path.read_text())
    assert (data["preset"], data["kv_cache_type"]) == ("qwen3-coder-480b-a35b", "f16")
    assert data["layer_count"] == 62  # still a planning request any reader can plan
    assert data["nodes"][0]["address"] == "10.0.0.5:50052"
    again = load_fleet(path)
    assert replace(again, source=None) == replace(document, source=None)
    assert again.to_request() == document.to_request()


def test_json_numbers_that_disagree_with_their_preset_are_refused(tmp_path: Path) -> None:
    document = parse_fleet_toml(
        '[model]\npreset = "qwen3-coder-480b-a35b"\n[[nodes]]\nid = "a"\nvram = "80 GiB"\n')
    path = save_fleet(document, tmp_path / "fleet.json")
    data = json.loads(path.read_text())
    data["layer_count"] = 61
    path.write_text(json.dumps(data))
    with pytest.raises(FleetFileError) as refused:
        load_fleet(path)
    assert (refused.value.code, refused.value.field) == ("InvalidField", "layer_count")
    assert "qwen3-coder-480b-a35b resolves to 62" in refused.value.message


@pytest.mark.parametrize("name", ["bad\0name.json", "x" * 300 + ".json"])
def test_a_save_to_a_name_no_file_system_takes_is_named(tmp_path: Path, name: str) -> None:
    document = parse_fleet_toml('[model]\npreset = "llama-3.1-70b"\n'
                                '[[nodes]]\nid = "a"\nvram = "80 GiB"\n')
    with pytest.raises(FleetFileError) as refused:
        save_fleet(document, tmp_path / name)
    assert refused.value.code == "WriteFailed"


# -- models: presets and GGUF files -----------------------------------------------------


def test_preset_resolves_through_the_model_catalogue() -> None:
    choice = ModelChoice(preset="qwen3-coder-480b-a35b", kv_cache_type="f16")
    fields = choice.resolve()
    expected = load_preset("qwen3-coder-480b-a35b", kv_cache_type="f16").planning_fields()
    assert fields["layer_count"] == expected["layer_count"]
    assert fields["kv_bytes_per_token"] == expected["kv_bytes_per_token"]
    assert set(fields) == {"native_context_length", "layer_count", "model_weight_bytes",
                           "kv_bytes_per_token", "layer_weight_bytes",
                           "layer_kv_bytes_per_token", "layer_state_bytes_per_sequence"}
    # A uniform model's layers all cost the same: the uniform rule plans it.
    assert fields["layer_kv_bytes_per_token"] is None
    assert fields["layer_state_bytes_per_sequence"] is None


def test_unknown_preset_names_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text('[model]\npreset = "no-such-model"\n[[nodes]]\nid = "a"\nvram = "1 B"\n')
    document = load_fleet(path)
    with pytest.raises(FleetFileError) as caught:
        document.to_request()
    assert caught.value.code == "ModelUnavailable"
    assert caught.value.field == "model.preset"
    assert caught.value.path == str(path)
    assert "no-such-model" in str(caught.value)


def test_relative_gguf_path_starts_at_the_fleet_files_folder(tmp_path: Path) -> None:
    from planner.models import from_gguf

    folder = tmp_path / "fleets"
    folder.mkdir()
    write_tiny_gguf(folder / "tiny.gguf")
    path = folder / "fleet.toml"
    path.write_text('[model]\ngguf = "tiny.gguf"\nkv_cache_type = "q8_0"\n'
                    '[[nodes]]\nid = "a"\nvram = "1 GiB"\n')
    request = load_fleet(path).to_request()
    spec = from_gguf(folder / "tiny.gguf", kv_cache_type="q8_0")
    assert request.layer_count == spec.layer_count == 4
    assert request.kv_bytes_per_token == spec.kv_bytes_per_token
    assert request.model_weight_bytes == spec.model_weight_bytes


def test_saving_elsewhere_keeps_a_relative_gguf_path_pointing_at_the_file(
        tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "out").mkdir()
    write_tiny_gguf(tmp_path / "models" / "tiny.gguf")
    source = tmp_path / "models" / "fleet.toml"
    source.write_text('[model]\ngguf = "tiny.gguf"\n[[nodes]]\nid = "a"\nvram = "1 GiB"\n')
    moved = load_fleet(save_fleet(load_fleet(source), tmp_path / "out" / "fleet.toml"))
    assert moved.model.gguf == "../models/tiny.gguf"
    assert moved.to_request() == load_fleet(source).to_request()


def test_missing_gguf_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text('[model]\ngguf = "gone.gguf"\n[[nodes]]\nid = "a"\nvram = "1 B"\n')
    with pytest.raises(FleetFileError) as caught:
        load_fleet(path).to_request()
    assert caught.value.code == "ModelUnavailable"
    assert str(tmp_path / "gone.gguf") in str(caught.value)


# -- atomic saves -----------------------------------------------------------------------


def _small_document(vram: int) -> FleetDocument:
    return parse_fleet_toml(NUMBERS + f'[[nodes]]\nid = "a"\nvram = "{vram} B"\n')


def test_a_crash_mid_save_leaves_the_old_file_whole(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = save_fleet(_small_document(1000), tmp_path / "fleet.toml")
    before = path.read_text()

    def crash(*_: Any) -> None:
        raise KeyboardInterrupt  # the process dies after writing, before the rename

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        save_fleet(_small_document(2000), path)
    monkeypatch.undo()
    assert path.read_text() == before
    assert load_fleet(path) == _small_document(1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.toml"]


def test_a_failed_write_reports_and_leaves_no_temporary_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save_fleet(_small_document(1000), tmp_path / "fleet.toml")

    def disk_full(_: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(FleetFileError) as caught:
        save_fleet(_small_document(2000), path)
    assert caught.value.code == "WriteFailed" and "No space left" in str(caught.value)
    assert load_fleet(path) == _small_document(1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.toml"]


def test_saved_file_is_an_ordinary_readable_file(tmp_path: Path) -> None:
    path = save_fleet(_small_document(1000), tmp_path / "fleet.toml")
    assert path.stat().st_mode & 0o777 == 0o644


# -- round trips ------------------------------------------------------------------------

@given(documents())
def test_toml_text_round_trips(document: FleetDocument) -> None:
    assert parse_fleet_toml(fleet_to_toml(document)) == document


@given(documents())
def test_save_then_load_gives_an_equal_document(tmp_path_factory: pytest.TempPathFactory,
                                                document: FleetDocument) -> None:
    path = tmp_path_factory.mktemp("fleet") / "fleet.toml"
    assert load_fleet(save_fleet(document, path)) == document


@given(documents(numbers_only=True, with_addresses=False))
def test_json_round_trips_for_models_given_by_numbers(document: FleetDocument) -> None:
    assert parse_fleet_json(fleet_to_json(document)) == document


@given(documents())
def test_plain_data_round_trips(document: FleetDocument) -> None:
    assert FleetDocument.from_dict(json.loads(json.dumps(document.to_dict()))) == document


def test_identical_numbered_nodes_are_written_back_as_one_counted_entry() -> None:
    document = parse_fleet_toml(NUMBERS + '[[nodes]]\nid = "gpu"\ncount = 12\nvram = "80 GiB"\n'
                                '[[nodes]]\nid = "mac"\nvram = "115448725504 B"\n')
    text = fleet_to_toml(document)
    assert text.count("[[nodes]]") == 2
    assert 'count = 12' in text and 'vram = "80 GiB"' in text
    assert parse_fleet_toml(text) == document


@pytest.mark.parametrize(("size", "written"), [
    (80 * GIB, '"80 GiB"'), (315_680_000_000, '"315.68 GB"'), (1536 * 1024**2, '"1.5 GiB"'),
    (24 * 10**9, '"24 GB"'), (115_448_725_504, '"115448725504 B"'), (0, '"0"'),
    (1000, '"1000 B"'), (MAX_NODE_BYTES - 1, f'"{MAX_NODE_BYTES - 1} B"'),
])
def test_sizes_are_written_in_exact_human_units(size: int, written: str) -> None:
    assert f"\nvram = {written}\n" in fleet_to_toml(_small_document(size))


@given(node_sizes)
def test_written_sizes_read_back_exactly(size: int) -> None:
    from planner.units import parse_bytes

    written = fleet_to_toml(_small_document(size)).rsplit("vram = ", 1)[1].splitlines()[0]
    assert parse_bytes(json.loads(written)) == size


def test_source_is_not_part_of_equality(tmp_path: Path) -> None:
    document = _small_document(5)
    loaded = load_fleet(save_fleet(document, tmp_path / "x.toml"))
    assert loaded.source == str(tmp_path / "x.toml")
    assert loaded == document == dataclasses.replace(loaded, source=None)


def test_a_long_line_of_spaces_does_not_stall_the_line_finder() -> None:
    # A multi-line string holding "[", thousands of spaces and "x" once made the table
    # header pattern backtrack cubically (minutes for a 6 KB file). Run it in a child
    # process so a regression fails at the timeout instead of hanging the suite.
    script = textwrap.dedent('''
        from planner.fleet import FleetFileError, parse_fleet_toml
        text = (
            'name = """\\n[' + " " * 6000 + 'x\\n"""\\n'
            '[model]\\nnative_context_length = 65536\\nlayer_count = 40\\n'
            'model_weight_bytes = "40 GiB"\\nkv_bytes_per_token = 65536\\n'
            '[[nodes]]\\nid = "a"\\nvram = "lots"\\n'
        )
        try:
            parse_fleet_toml(text, "fleet.toml")
        except FleetFileError as error:
            print(error.line, text.splitlines()[error.line - 1])
    ''')
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split(None, 1) == ["11", 'vram = "lots"\n']


def test_a_gguf_path_naming_a_user_without_a_home_is_a_missing_file(tmp_path: Path) -> None:
    # "~nobody-here/m.gguf" once raised RuntimeError ("Could not determine home
    # directory") from Path.expanduser, on save and on planning.
    document = FleetDocument(model=ModelChoice(gguf="~nobody-here/m.gguf"),
                             nodes=(planner.NodeBudget("a", GIB),))
    loaded = load_fleet(save_fleet(document, tmp_path / "fleet.toml"))
    assert loaded == document
    with pytest.raises(FleetFileError) as caught:
        loaded.to_request()
    assert caught.value.code == "ModelUnavailable" and caught.value.field == "model.gguf"


@pytest.mark.parametrize("gguf", ["a\x00b.gguf", "folder"])
def test_a_gguf_path_no_file_can_have_is_a_missing_file(tmp_path: Path, gguf: str) -> None:
    # A NUL byte once raised ValueError ("embedded null byte") when a save moved the
    # path to another folder; a folder is no GGUF file either.
    (tmp_path / "folder").mkdir()
    (tmp_path / "elsewhere").mkdir()
    document = FleetDocument(model=ModelChoice(gguf=gguf), nodes=(planner.NodeBudget("a", GIB),))
    first = load_fleet(save_fleet(document, tmp_path / "fleet.toml"))
    loaded = load_fleet(save_fleet(first, tmp_path / "elsewhere" / "fleet.toml"))
    assert loaded.model.gguf == f"../{gguf}"
    with pytest.raises(FleetFileError) as caught:
        loaded.to_request()
    assert caught.value.code == "ModelUnavailable" and caught.value.field == "model.gguf"


def test_a_model_s_numbers_carry_its_output_head_to_the_speed_estimate() -> None:
    """The output head a prompt leaves out but for its last token (docs/speed.md): typed
    with the parameters, it reaches the estimate's traffic."""
    from planner.performance import fleet_model_traffic

    document = parse_fleet_toml(NUMBERS + "parameter_count = 40_000_000_000\n"
                                "hidden_size = 5120\noutput_head_parameters = 655_360_000\n"
                                '[[nodes]]\nid = "a"\nvram = "80 GiB"\n')
    traffic = fleet_model_traffic(document.model)
    assert traffic is not None and traffic.output_head_parameters == 655_360_000


# -- a preset run from a file of its own size ---------------------------------------------

GPT_OSS_FILE = '[model]\npreset = "gpt-oss-20b"\nfile_bytes = "11.27 GiB"\n' \
    '[[nodes]]\nid = "a"\nvram = "24 GiB"\n'


def test_a_preset_is_planned_at_the_size_of_the_file_it_is_run_from(tmp_path: Path) -> None:
    """The gpt-oss-20b preset counts 12.82 GiB where the file every benchmark runs is
    11.27 GiB; a fleet file could not say so, and planned and estimated the preset's."""
    document = parse_fleet_toml(GPT_OSS_FILE)
    stored = round(11.27 * GIB)
    assert document.model.file_bytes == stored
    own = load_preset("gpt-oss-20b")
    request = document.to_request()
    assert request.model_weight_bytes == stored < own.model_weight_bytes
    assert request.layer_weight_bytes is not None and sum(request.layer_weight_bytes) == stored
    spec = document.model.spec()
    assert spec is not None and spec.notes[-1].startswith("weights: stored in a file of 11.27")
    # Each part keeps its share of the weights; what is no weight does not change.
    scale = stored / own.model_weight_bytes
    assert spec.routed_expert_bytes == round(own.routed_expert_bytes * scale)
    assert spec.active_weight_bytes == round(own.active_weight_bytes * scale)
    assert (spec.parameter_count, spec.kv_bytes_per_token) == (own.parameter_count,
                                                               own.kv_bytes_per_token)
    for saved in (save_fleet(document, tmp_path / "f.toml"),
                  save_fleet(document, tmp_path / "f.json")):
        again = load_fleet(saved)
        assert replace(again, source=None) == replace(document, source=None), saved
        assert again.to_request() == request
    assert json.loads((tmp_path / "f.json").read_text())["file_bytes"] == stored


@pytest.mark.parametrize(("model", "said"), [
    ('gguf = "tiny.gguf"\nfile_bytes = "10 GiB"', "GGUF file's tensors state their own bytes"),
    (NUMBERS + 'file_bytes = "10 GiB"', "model_weight_bytes is the file's size"),
    ('preset = "gpt-oss-20b"\nfile_bytes = 0', "must be at least 1 byte (got 0)"),
    ('preset = "gpt-oss-20b"\nfile_bytes = "11.27"', "is not a whole number of bytes"),
    ('preset = "gpt-oss-20b"\nfile_bytes = "99 PiB"', "is larger than"),
])
def test_a_file_size_it_cannot_take_is_refused_by_name(model: str, said: str) -> None:
    error = fleet_error(model if model.startswith("\n[model]") else f"[model]\n{model}\n")
    assert (error.code, error.field) == ("InvalidField", "model.file_bytes")
    assert said in error.message and error.path == "fleet.toml"


def test_a_file_too_small_for_the_preset_is_said_when_it_is_planned() -> None:
    document = parse_fleet_toml(GPT_OSS_FILE.replace('"11.27 GiB"', '"1 KB"'))
    with pytest.raises(FleetFileError) as refused:
        document.to_request()
    assert (refused.value.code, refused.value.field) == ("InvalidField", "model.file_bytes")
    assert refused.value.message.startswith("a file of 1,000 bytes cannot hold gpt-oss-20b: "
                                            "its 20,914,757,184 parameters would be")


@pytest.mark.parametrize(("key", "value", "said"), [
    ("preset", "no-such-model", "no preset named 'no-such-model'"),
    ("kv_cache_type", "zz", "no KV figure for cache type 'zz'"),
    ("file_bytes", 1000, "a file of 1,000 bytes cannot hold gpt-oss-20b"),
    ("file_bytes", "11 GiB", "must be an integer"),
])
def test_a_json_fleet_s_model_error_names_the_key_the_file_has(tmp_path: Path, key: str,
                                                              value: Any, said: str) -> None:
    """The JSON form states the model's source beside the request; its errors named a
    ``model.`` table the file does not have (``model.kv_cache_type``)."""
    document = parse_fleet_toml(GPT_OSS_FILE)
    data = json.loads(fleet_to_json(document))
    data[key] = value
    with pytest.raises(FleetFileError) as refused:
        parse_fleet_json(json.dumps(data), "fleet.json")
    assert refused.value.field == key and said in refused.value.message
    assert str(refused.value).startswith(f"fleet.json: {key}: ")
