"""A fleet-wide latency for nodes without their own (``default_latency_ms``): a number, or
``"measured"`` for the slowest latency measured. It changes only what latency such nodes
are given; the planning rules rank the latencies as docs/rules.md §6 says."""

from __future__ import annotations

from dataclasses import replace
from html import unescape
from pathlib import Path

import pytest

import planner
from planner.fleet import (
    FleetFileError,
    example_fleet,
    fleet_to_json,
    fleet_to_toml,
    load_fleet,
    parse_fleet_json,
    parse_fleet_toml,
)
from planner.workbench import Workbench, WorkbenchState, evaluate

NUMBERS = """
[model]
native_context_length = 65536
layer_count = 8
model_weight_bytes = "8 GiB"
kv_bytes_per_token = 8
"""


def _fleet(planning: str = "", latencies: tuple[str | None, ...] = ("5", None, None)) -> str:
    nodes = "".join(f'[[nodes]]\nid = "n{i}"\nvram = "8 GiB"\n'
                    + (f"latency_ms = {latency}\n" if latency is not None else "")
                    for i, latency in enumerate(latencies))
    return NUMBERS + (f"[planning]\n{planning}\n" if planning else "") + nodes


@pytest.mark.parametrize(("value", "read"), [
    ("5", 5), ("0.5", 0.5), ('"500 us"', 0.5), ('"measured"', "measured"),
    ('"Measured"', "measured")])
def test_the_key_reads_a_latency_or_measured(value: str, read: object) -> None:
    document = parse_fleet_toml(_fleet(f"default_latency_ms = {value}"))
    assert document.default_latency_ms == read
    assert parse_fleet_toml(fleet_to_toml(document)) == document
    assert parse_fleet_json(fleet_to_json(document)) == document


@pytest.mark.parametrize("value", ['"soon"', "-1", "true", '"5 parsecs"'])
def test_a_bad_default_is_refused_by_name(value: str) -> None:
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml(_fleet(f"default_latency_ms = {value}"))
    assert caught.value.code == "InvalidField"
    assert caught.value.field == "planning.default_latency_ms"
    assert "measured" in caught.value.message


@pytest.mark.parametrize(("planning", "expected"), [
    ("", (5, None, None)),
    ("default_latency_ms = 2", (5, 2, 2)),
    ('default_latency_ms = "measured"', (5, 5, 5)),
])
def test_nodes_without_a_latency_are_given_the_default(planning: str,
                                                       expected: tuple) -> None:
    document = parse_fleet_toml(_fleet(planning))
    assert [n.stage_transfer_latency_ms for n in document.nodes] == [5, None, None]
    request = document.to_request()
    assert tuple(n.stage_transfer_latency_ms for n in request.nodes) == expected
    # The rules are unchanged: the plan is that of the nodes given those latencies.
    given = planner.PlanningInput.from_dict({**request.to_dict()})
    assert planner.plan_topology(request) == planner.plan_topology(given)


def test_measured_with_no_measurement_leaves_every_latency_unknown() -> None:
    document = parse_fleet_toml(_fleet('default_latency_ms = "measured"', (None, None)))
    assert all(n.stage_transfer_latency_ms is None for n in document.to_request().nodes)
    assert document.latency_note() == ""


def _qwen(latency: str = "", default: str = "") -> WorkbenchState:
    state = WorkbenchState.from_document(load_fleet(example_fleet("qwen480b-5x80")))
    nodes = list(state.nodes)
    nodes[0] = replace(nodes[0], latency_ms=latency)
    state = state.with_nodes(nodes)
    return state.with_options(replace(state.options, default_latency_ms=default))


def test_one_measured_link_no_longer_decides_which_nodes_are_left_out() -> None:
    """5 x 80 GiB with 5 ms on qwen-node-00: the others' unknown latency counted as 0 ms,
    so the plan left out the one node measured (262,144 on 5 stages -> 65,536 on 4).
    The page says so, and a default latency gives the others one."""
    unknown = evaluate(_qwen("5"))
    assert unknown.plan is not None and "qwen-node-00" not in unknown.plan.node_ids
    assert (unknown.plan.stage_count, unknown.plan.context_length) == (4, 65_536)
    assert ("4 nodes without a latency count as 0 ms" in unknown.latency_note
            and "default latency" in unknown.latency_note), unknown.latency_note
    for default in ("measured", "5 ms"):
        given = evaluate(_qwen("5", default))
        assert given.plan is not None
        assert given.plan.node_ids == ("qwen-node-00", "qwen-node-01", "qwen-node-02",
                                       "qwen-node-03")
        # Four stages of 5 ms each: the planner's network estimate, known now.
        assert given.plan.estimated_decode_network_ms_per_token == 20
        assert "4 nodes without their own latency are planned at 5 ms" in given.latency_note
        assert all(n.stage_transfer_latency_ms == 5 for n in given.request.nodes)
    assert "the slowest measured" in evaluate(_qwen("5", "measured")).latency_note
    assert "the fleet's default latency" in evaluate(_qwen("5", "5 ms")).latency_note
    assert evaluate(_qwen()).latency_note == ""  # no latency anywhere: nothing to say


def test_the_workbench_box_plans_and_saves_the_default(tmp_path: Path) -> None:
    bench = Workbench(_qwen("5"), fleet_dir=tmp_path)
    note = bench.view.latency_note
    assert "count as 0 ms" in unescape(note.value) and note.layout.display != "none"
    bench.options_editor.default_latency_ms.value = "measured"
    assert bench.evaluation.plan is not None
    assert "qwen-node-00" in bench.evaluation.plan.node_ids
    assert "planned at 5 ms, the slowest measured" in unescape(note.value)
    saved = bench.save_fleet("measured.toml")
    assert 'default_latency_ms = "measured"' in saved.read_text()
    assert load_fleet(saved).default_latency_ms == "measured"
    bench.options_editor.default_latency_ms.value = "soon"
    assert "default latency" in unescape(bench.view.problem.value)


def test_the_report_says_which_latency_nodes_without_one_have(tmp_path: Path) -> None:
    from planner.reports import build_report, render_report

    document = parse_fleet_toml(_fleet('default_latency_ms = "measured"'))
    markdown = render_report(build_report(document), "md")
    assert "2 nodes without their own latency are planned at 5 ms, the slowest measured" in (
        markdown)
