"""Sizes, latencies and context lengths read the same way in fleet files, the Python API
and the workbench: one parser each (planner.units)."""

from __future__ import annotations

import pytest

from planner import candidates, plan_topology
from planner.errors import InvalidInput
from planner.fleet import FleetFileError, fleet_to_toml, parse_fleet_toml
from planner.planning import NodeBudget, PlanningInput
from planner.planning.tables import node_budgets
from planner.workbench.editor_fields import NodeRow, PlanOptions
from planner.workbench.problems import WorkbenchInputError

GIB = 2**30
MODEL = """
[model]
native_context_length = {native}
layer_count = 10
model_weight_bytes = "100 GiB"
kv_bytes_per_token = 1024
"""


def fleet(nodes: str, native: str = "262144", planning: str = "") -> str:
    return MODEL.format(native=native) + planning + nodes


def node(latency: str) -> str:
    return f'\n[[nodes]]\nid = "gpu"\ncount = 2\nvram = "80 GiB"\nlatency_ms = {latency}\n'


# -- latency ----------------------------------------------------------------------------


@pytest.mark.parametrize(("written", "expected"), [
    ("5", 5), ('"5 ms"', 5), ("0.5", 0.5), ('"0.5 ms"', 0.5), ('"500 us"', 0.5),
    ("5.0", 5), ('"0.25ms"', 0.25),
])
def test_a_fleet_file_reads_latency_as_the_workbench_does(written: str,
                                                          expected: int | float) -> None:
    document = parse_fleet_toml(fleet(node(written)))
    assert [n.stage_transfer_latency_ms for n in document.nodes] == [expected, expected]
    typed = NodeRow("gpu-00", "80 GiB", latency_ms=written.strip('"')).to_budget(0)
    assert typed.stage_transfer_latency_ms == expected


def test_a_fractional_latency_is_saved_and_read_back() -> None:
    document = parse_fleet_toml(fleet(node('"0.25 ms"')))
    text = fleet_to_toml(document)
    assert "latency_ms = 0.25" in text
    assert parse_fleet_toml(text) == document


@pytest.mark.parametrize(("written", "words"), [("0.0005", "microsecond"),
                                                ('"5 s"', "'5 ms'"), ("-1", "negative")])
def test_a_bad_latency_in_a_fleet_file_names_field_and_node(written: str, words: str) -> None:
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml(fleet(node(written)))
    assert caught.value.field == "nodes[0].latency_ms" and caught.value.node_id == "gpu"
    assert words in caught.value.message


def test_the_api_takes_fractional_latency_and_normalises_whole_floats() -> None:
    assert NodeBudget("a", GIB, stage_transfer_latency_ms=0.5).stage_transfer_latency_ms == 0.5
    whole = NodeBudget("a", GIB, stage_transfer_latency_ms=5.0)
    assert whole == NodeBudget("a", GIB, stage_transfer_latency_ms=5)
    assert type(whole.stage_transfer_latency_ms) is int
    for bad in ("5", 0.0001, float("nan"), True):
        with pytest.raises(InvalidInput, match="stage_transfer_latency_ms"):
            NodeBudget("a", GIB, stage_transfer_latency_ms=bad)  # type: ignore[arg-type]


def _ten_stage_request(latency: float, target: int | None) -> PlanningInput:
    # Each 16 GiB node holds one 10 GiB layer and its cache: ten stages are needed.
    return PlanningInput(
        native_context_length=65_536, layer_count=10, model_weight_bytes=100 * GIB,
        kv_bytes_per_token=10 * 1024,
        nodes=tuple(NodeBudget(f"n{i}", 16 * GIB, stage_transfer_latency_ms=latency)
                    for i in range(10)),
        target_decode_tpot_ms=target,
    )


def test_fractional_latencies_sum_exactly_against_the_target() -> None:
    # In floats 10 * 0.7 is 7.000000000000001, which would miss a 7 ms target.
    plan = plan_topology(_ten_stage_request(0.7, 7))
    assert len(plan.stages) == 10
    assert plan.estimated_decode_network_ms_per_token == 7
    assert plan.decode_tpot_target_met is True
    missed = plan_topology(_ten_stage_request(0.701, 7))
    assert missed.estimated_decode_network_ms_per_token == 7.01
    assert missed.decode_tpot_target_met is False


def test_fractional_latency_tables_are_float_and_whole_ones_stay_integer() -> None:
    request = _ten_stage_request(0.25, None)
    table = candidates(request)
    column = table["estimated_decode_network_ms_per_token"]
    assert str(column.dtype) == "Float64"
    assert column[table["selected"]].tolist() == [2.5]
    assert str(node_budgets(request)["stage_transfer_latency_ms"].dtype) == "Float64"
    whole = candidates(_ten_stage_request(1, None))
    assert str(whole["estimated_decode_network_ms_per_token"].dtype) == "Int64"


def test_a_sub_millisecond_link_is_preferred_over_a_slower_one() -> None:
    request = PlanningInput(
        native_context_length=65_536, layer_count=4, model_weight_bytes=4 * GIB,
        kv_bytes_per_token=1024,
        nodes=(NodeBudget("slow", 80 * GIB, stage_transfer_latency_ms=1),
               NodeBudget("fast", 80 * GIB, stage_transfer_latency_ms=0.5)),
    )
    plan = plan_topology(request)
    assert [s.node_id for s in plan.stages] == ["fast"]
    assert plan.estimated_decode_network_ms_per_token == 0.5


# -- context ----------------------------------------------------------------------------


def test_a_fleet_file_takes_128k_for_a_context() -> None:
    text = fleet(node("5"), native='"256k"',
                 planning="\n[planning]\ncontext_length_override = \"128k\"\n")
    document = parse_fleet_toml(text)
    assert document.model.numbers is not None
    assert document.model.numbers["native_context_length"] == 262_144
    assert document.context_length_override == 131_072


def test_a_bad_context_in_a_fleet_file_names_the_field() -> None:
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml(fleet(node("5"), planning='\n[planning]\ncontext_length_override'
                               ' = "128 KiB"\n'))
    assert caught.value.field == "planning.context_length_override"
    assert "k = 1024" in caught.value.message and caught.value.line is not None


def test_the_workbench_context_box_takes_128k() -> None:
    assert PlanOptions(context_length_override="128k").planning_fields()[
        "context_length_override"] == 131_072
    with pytest.raises(WorkbenchInputError, match="k = 1024"):
        PlanOptions(context_length_override="128 KiB").planning_fields()


# -- sizes ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["vram", "max_vram", "headroom"])
def test_a_bare_number_for_a_node_size_is_refused_with_the_forms(key: str) -> None:
    entry = '\n[[nodes]]\nid = "box"\nvram = "80 GiB"\n' if key != "vram" else ""
    entry = entry.replace('vram = "80 GiB"', f'vram = "80 GiB"\n{key} = 24') if entry else (
        '\n[[nodes]]\nid = "box"\nvram = 24\n')
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml(fleet(entry))
    error = caught.value
    assert (error.field, error.node_id) == (f"nodes[0].{key}", "box")
    assert "'24 GiB'" in error.message and "'24 B'" in error.message
    assert f"nodes[0].{key} (node 'box')" in str(error)


def test_byte_keys_and_zero_take_bare_numbers() -> None:
    text = MODEL.format(native=262144).replace('"100 GiB"', "107374182400") + (
        '\n[[nodes]]\nid = "box"\nvram = "80 GiB"\nheadroom = 0\n')
    document = parse_fleet_toml(text)
    assert document.model.numbers is not None
    assert document.model.numbers["model_weight_bytes"] == 100 * GIB
    assert document.nodes[0].runtime_headroom_bytes == 0


def test_the_workbench_vram_box_refuses_a_bare_number() -> None:
    with pytest.raises(WorkbenchInputError) as caught:
        NodeRow("box", "24").to_budget(0)
    assert caught.value.field == "nodes[0].vram" and caught.value.node_id == "box"
    assert "'24 GiB'" in caught.value.message
