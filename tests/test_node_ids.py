"""Node ids that look alike: two ids a person cannot tell apart on a screen are refused
by name, and an id whose edges are blank is refused; every other id is kept exactly as
written (docs/rules.md §2 compares ids exactly, and a single decomposed "café" plans)."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from planner.errors import InvalidInput
from planner.fleet import (
    FleetDocument,
    FleetFileError,
    ModelChoice,
    parse_fleet_json,
    parse_fleet_toml,
)
from planner.planning import NodeBudget, PlanningInput, plan_topology
from planner.reports.tables import terminal_safe

NFC = unicodedata.normalize("NFC", "caf\u00e9")
NFD = unicodedata.normalize("NFD", "caf\u00e9")
GIB = 2**30

# Pairs of different ids that print the same (or the same but for what cannot be seen).
LOOK_ALIKES = {
    "nfc-nfd": (NFC, NFD),
    "zero-width-space": ("gpu-01", "gpu\u200b-01"),
    "zero-width-joiner": ("gpu-01", "gpu-\u200d01"),
    "word-joiner": ("gpu-01", "gpu-01\u2060"),
    "no-break-space": ("gpu 01", "gpu\u00a001"),
    "fullwidth": ("gpu-01", "\uff47\uff50\uff55-01"),
    "ligature": ("fine-01", "\ufb01ne-01"),
    "bell-and-escape": ("gpu\x07", "gpu\x1b"),
    "control-and-question-mark": ("gpu\x07", "gpu?"),
    "bidi-override": ("gpu\u202e", "gpu\u202d"),
    "soft-hyphen": ("gpu01", "gpu\u00ad01"),
}


def _toml(*ids: str, count: int | None = None, planning: str = "") -> str:
    nodes = "".join(f"[[nodes]]\nid = {json.dumps(node_id)}\nvram = \"48 GiB\"\n"
                    + (f"count = {count}\n" if count and index == 0 else "") + "\n"
                    for index, node_id in enumerate(ids))
    return ("[model]\nnative_context_length = 65536\nlayer_count = 40\n"
            'model_weight_bytes = "40 GiB"\nkv_bytes_per_token = 65536\n\n' + planning
            + nodes)


def _request(*ids: str) -> dict[str, object]:
    return {"native_context_length": 65536, "layer_count": 40,
            "model_weight_bytes": 40 * GIB, "kv_bytes_per_token": 65536,
            "nodes": [{"node_id": node_id, "detected_vram_bytes": 48 * GIB}
                      for node_id in ids]}


def _escaped(node_id: str) -> str:
    return node_id.encode("unicode_escape").decode("ascii")


@pytest.mark.parametrize("pair", LOOK_ALIKES.values(), ids=LOOK_ALIKES.keys())
def test_a_fleet_file_with_two_look_alike_ids_is_refused_naming_both(
        pair: tuple[str, str]) -> None:
    first, second = pair
    assert first != second
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml(_toml(first, second), "fleet.toml")
    assert caught.value.code == "DuplicateNodeId"
    assert "looks the same as" in caught.value.message
    assert _escaped(first) in caught.value.message and _escaped(second) in caught.value.message
    assert caught.value.details["field"] == "nodes[1].id"


@pytest.mark.parametrize("pair", LOOK_ALIKES.values(), ids=LOOK_ALIKES.keys())
def test_a_request_and_a_json_fleet_with_look_alike_ids_are_refused(
        pair: tuple[str, str]) -> None:
    with pytest.raises(InvalidInput) as caught:
        PlanningInput.from_dict(_request(*pair))
    assert "looks the same as" in caught.value.message
    with pytest.raises(FleetFileError) as json_caught:
        parse_fleet_json(json.dumps(_request(*pair)), "fleet.json")
    assert json_caught.value.code == "InvalidField"
    assert "looks the same as" in json_caught.value.message


@pytest.mark.parametrize("pair", LOOK_ALIKES.values(), ids=LOOK_ALIKES.keys())
def test_a_fleet_document_with_look_alike_ids_is_refused(pair: tuple[str, str]) -> None:
    with pytest.raises(FleetFileError) as caught:
        FleetDocument(model=ModelChoice(preset="llama-3.1-70b"),
                      nodes=tuple(NodeBudget(node_id, 48 * GIB) for node_id in pair))
    assert caught.value.code == "DuplicateNodeId"
    assert "looks the same as" in caught.value.message


def test_a_count_entry_whose_ids_look_like_another_nodes_is_refused() -> None:
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml(_toml(NFD, f"{NFC}-01", count=2), "fleet.toml")
    assert caught.value.code == "DuplicateNodeId"
    assert _escaped(f"{NFD}-01") in caught.value.message


@pytest.mark.parametrize("node_id", ["gpu-01 ", " gpu-01", "gpu-01\t", "gpu-01\u00a0",
                                     "\u3000gpu", "gpu\n"])
def test_an_id_with_blank_edges_is_refused_alone(node_id: str) -> None:
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml(_toml(node_id), "fleet.toml")
    assert caught.value.code == "InvalidField"
    assert caught.value.details["field"] == "nodes[0].id"
    assert "starts or ends with a blank" in caught.value.message
    with pytest.raises(InvalidInput) as request_caught:
        NodeBudget(node_id, 48 * GIB)
    assert request_caught.value.field == "node_id"


@pytest.mark.parametrize("node_id", [NFD, NFC, "gpu\u200b-01", "\u202egnp.exe", "gpu 01",
                                     "\uff47\uff50\uff55"])
def test_a_single_unusual_id_is_kept_exactly_and_planned(node_id: str) -> None:
    document = parse_fleet_toml(_toml(node_id, "other", planning="[planning]\n"
                                      "minimum_nodes = 2\n\n"), "fleet.toml")
    assert document.nodes[0].node_id == node_id
    plan = plan_topology(document.to_request())
    assert {stage.node_id for stage in plan.stages} == {node_id, "other"}


@pytest.mark.parametrize(("node_id", "shown"), [("gpu\u200b-01", "gpu?-01"),
                                                ("gpu-\u200d01", "gpu-?01"),
                                                ("gpu\u00ad01", "gpu?01"),
                                                ("\ufeffgpu", "?gpu")])
def test_an_invisible_character_is_shown(node_id: str, shown: str) -> None:
    assert terminal_safe(node_id) == shown


def test_ids_that_merely_resemble_each_other_are_kept() -> None:
    document = parse_fleet_toml(_toml("gpu-01", "GPU-01", "gpu-1", "gpu-01a"), "fleet.toml")
    assert [node.node_id for node in document.nodes] == ["gpu-01", "GPU-01", "gpu-1",
                                                         "gpu-01a"]


def test_the_command_line_names_the_look_alike_ids(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from planner.cli import main

    path = tmp_path / "fleet.toml"
    path.write_text(_toml(NFC, NFD), encoding="utf-8")
    assert main(["plan", str(path)]) == 2
    said = capsys.readouterr().err
    assert "looks the same as" in said and "cafe\\u0301" in said and "caf\\xe9" in said


def test_an_id_holding_a_lone_surrogate_is_refused_as_a_fleet_file_refuses_it() -> None:
    with pytest.raises(InvalidInput) as caught:
        NodeBudget("gpu\ud800", 48 * GIB)
    assert caught.value.field == "node_id" and "lone surrogate" in caught.value.message
