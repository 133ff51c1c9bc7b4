"""One search serves the plan, the candidates, the explanation and the stage table, and
the stage table shows one memory rule's figures only."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_memory import write_gemma_like

import planner
from planner.cli import main
from planner.fleet import load_fleet
from planner.llamacpp import LlamaCppCosts, layer_kv_bytes
from planner.planning import explain_choice, search
from planner.planning.rules import context_candidates, layer_costs
from planner.units import format_bytes
from planner.workbench.evaluation import evaluate
from planner.workbench.state import WorkbenchState

MIB = 2**20
GIB = 2**30


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[Any]]:
    """Counts the searches started, by context length and the memory rule searched (under
    llama.cpp's rule a plan of one stage has its own: one device, no pipeline)."""
    started: Counter[Any] = Counter()
    original = search.ContextSearch.__init__

    def counted(self: Any, request: Any, context_length: int, *args: Any,
                **kwargs: Any) -> None:
        started[(context_length, getattr(request.memory_rule, "one_device", False))] += 1
        original(self, request, context_length, *args, **kwargs)

    monkeypatch.setattr(search.ContextSearch, "__init__", counted)
    yield started


def _mesh() -> planner.PlanningInput:
    """Eight nodes of distinct sizes with latencies: every context is ranked."""
    nodes = [planner.NodeBudget(f"n{i}", (20 + 3 * i) * GIB, stage_transfer_latency_ms=1 + i)
             for i in range(8)]
    return planner.PlanningInput(native_context_length=131072, layer_count=32,
                                 model_weight_bytes=60 * GIB, kv_bytes_per_token=2**17,
                                 nodes=tuple(nodes), target_decode_tpot_ms=20)


def test_the_result_searches_each_context_once(searches: Counter[Any]) -> None:
    request = _mesh()
    result = planner.plan_request(request)
    assert result.plan is not None and result.error is None
    _ = result.candidates, result.explanation, result.stages
    contexts = context_candidates(request)
    assert dict(searches) == {(context, False): 1 for context in contexts}
    # And it is what the three separate calls give, each of which searches on its own.
    searches.clear()
    assert result.plan == planner.plan_topology(request)
    assert result.candidates.equals(planner.candidates(request))
    assert result.explanation == explain_choice(request)
    assert result.stages.equals(planner.stage_usage(request, result.plan))
    assert sum(searches.values()) == 3 * len(contexts)


def test_a_request_nothing_fits_gives_a_result_with_the_error(searches: Counter[Any]) -> None:
    request = planner.PlanningInput(native_context_length=4096, layer_count=4,
                                    model_weight_bytes=100 * GIB, kv_bytes_per_token=4,
                                    nodes=(planner.NodeBudget("a", GIB),))
    result = planner.plan_request(request)
    assert result.plan is None and result.explanation is None and result.stages is None
    assert result.error is not None and result.error.code == "NoValidTopology"
    assert not result.candidates["feasible"].any()
    with pytest.raises(planner.PlanError) as caught:
        result.plan_or_raise()
    assert caught.value.code == "NoValidTopology"
    assert sum(searches.values()) == len(context_candidates(request))


def test_each_workbench_edit_searches_once(searches: Counter[Any]) -> None:
    state = WorkbenchState.design_default()
    evaluation = evaluate(state)
    assert evaluation.plan is not None and evaluation.choice is not None
    assert evaluation.stages is not None and evaluation.candidates is not None
    request = evaluation.request
    assert dict(searches) == {(context, False): 1
                              for context in context_candidates(request)}


def test_each_candidate_keeps_the_layers_its_nodes_take(tmp_path: Path) -> None:
    # Under llama.cpp's rule a plan of one stage is searched with its own costs.
    llama = load_fleet(_fleet(tmp_path)).to_request("llamacpp")
    assert isinstance(llama.memory_rule, LlamaCppCosts)
    for request in (WorkbenchState.design_default().to_request(), llama):
        result = planner.plan_request(request)
        assert result.plan is not None
        table = result.candidates
        feasible = table[table["feasible"]]
        assert len(feasible)
        if request is llama:
            assert set(feasible["stage_count"]) == {1, 2}
        for row in feasible.itertuples(index=False):
            assert len(row.stage_layer_counts) == row.stage_count
            assert sum(row.stage_layer_counts) == request.layer_count
            assert min(row.stage_layer_counts) >= 1
        assert all(counts == () for counts in table.loc[~table["feasible"],
                                                        "stage_layer_counts"])
        chosen = table[table["selected"]].iloc[0]
        assert chosen["stage_layer_counts"] == tuple(
            stage.layer_end - stage.layer_start for stage in result.plan.stages)


def _fleet(tmp_path: Path) -> Path:
    gguf = write_gemma_like(tmp_path)
    path = tmp_path / "fleet.toml"
    path.write_text(f"[model]\ngguf = {json.dumps(str(gguf))}\n\n"
                    '[[nodes]]\nid = "a"\nvram = "300 MiB"\n\n'
                    '[[nodes]]\nid = "b"\nvram = "300 MiB"\n')
    return path


def test_planner_plan_with_llama_cpp_reads_the_model_once_and_searches_once(
        tmp_path: Path, searches: Counter[Any], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import planner.llamacpp.costs

    reads: list[Path] = []
    original = planner.llamacpp.costs.model_from_gguf

    def counted(path: Any) -> Any:
        reads.append(Path(path))
        return original(path)

    monkeypatch.setattr(planner.llamacpp.costs, "model_from_gguf", counted)
    fleet = _fleet(tmp_path)
    assert main(["plan", str(fleet), "--memory-model", "llamacpp"]) == 0
    assert "what llama.cpp allocates per stage" in capsys.readouterr().out
    assert len(reads) == 1
    request = load_fleet(fleet).to_request()
    assert max(searches.values()) == 1
    assert {context for context, _ in searches} <= set(context_candidates(request))


def test_the_stage_table_shows_one_rule(tmp_path: Path) -> None:
    document = load_fleet(_fleet(tmp_path))
    for memory_model in ("design", "llamacpp"):
        request = document.to_request(memory_model)
        result = planner.plan_request(request)
        table = result.stages
        plan = result.plan
        assert table is not None and plan is not None
        costs = layer_costs(request, plan.context_length, plan.parallel_lanes)
        parts = ["parameter_bytes", "kv_cache_bytes", "state_bytes", "other_bytes"]
        assert (table[parts].sum(axis=1) == table["used_bytes"]).all()
        assert (table["used_bytes"] + table["remaining_bytes"]
                == table["usable_vram_bytes"]).all()
        for stage, row in zip(plan.stages, table.itertuples(), strict=True):
            assert row.parameter_bytes == stage.parameter_bytes
            assert row.parameter_bytes == sum(costs.weights[stage.layer_start:stage.layer_end])
        if memory_model == "design":
            # The GGUF's own per-layer KV: its sliding-window layers cache less.
            per_token = request.layer_kv_bytes_per_token
            assert per_token is not None and len(set(per_token)) > 1
            assert list(table["kv_cache_bytes"]) == [
                plan.context_length * sum(per_token[s.layer_start:s.layer_end])
                for s in plan.stages]
            assert not table["other_bytes"].any()
            continue
        rule = request.memory_rule
        assert isinstance(rule, LlamaCppCosts)
        model = rule.model
        settings = rule.settings(plan.context_length)
        for stage, row in zip(plan.stages, table.itertuples(), strict=True):
            layers = range(stage.layer_start, stage.layer_end)
            # llama.cpp's weights and KV, never the design rule's.
            assert row.parameter_bytes == sum(model.layers[j].weight_bytes for j in layers)
            assert row.kv_cache_bytes == sum(layer_kv_bytes(model, j, settings)
                                             for j in layers)
        # The last stage carries the output head and its compute buffer.
        assert table["other_bytes"].iloc[-1] > model.output_bytes


def _stage_rows(text: str, header_start: str) -> list[dict[str, str]]:
    """The rows of the text table whose header line starts with ``header_start``, by
    column header."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    headers = [cell.strip() for cell in re.split(r"\s{2,}", lines[start].strip())]
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        cells = [cell.strip() for cell in line.split("  ") if cell.strip()]
        rows.append(dict(zip(headers, cells, strict=True)))
    return rows


def _markdown_rows(text: str, heading: str) -> list[dict[str, str]]:
    """The rows of the Markdown table under ``heading``, by column header."""
    lines = text.splitlines()
    start = lines.index(heading)
    end = next((i for i, line in enumerate(lines[start + 1:]) if line.startswith("#")),
               len(lines))
    table = [line for line in lines[start + 1:start + 1 + end] if line.startswith("|")]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in table]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]


def _llama_figures(fleet: Path) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Per stage, llama.cpp's (weights, KV, used) as the stage table must show them, and
    the design rule's weights for the same layers."""
    document = load_fleet(fleet)
    request = document.to_request("llamacpp")
    result = planner.plan_request(request)
    plan, table = result.plan, result.stages
    assert plan is not None and table is not None
    rule = request.memory_rule
    assert isinstance(rule, LlamaCppCosts)
    settings = rule.settings(plan.context_length, plan.parallel_lanes)
    expected, design = [], []
    design_costs = layer_costs(document.to_request("design"), plan.context_length,
                               plan.parallel_lanes)
    for stage, row in zip(plan.stages, table.itertuples(), strict=True):
        layers = range(stage.layer_start, stage.layer_end)
        weights = sum(rule.model.layers[j].weight_bytes for j in layers)
        kv = sum(layer_kv_bytes(rule.model, j, settings) for j in layers)
        expected.append((format_bytes(weights), format_bytes(kv), format_bytes(row.used_bytes)))
        design.append(format_bytes(sum(design_costs.weights[stage.layer_start:stage.layer_end])))
    return expected, design


def test_the_command_line_stage_table_shows_llama_cpp_figures_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = _fleet(tmp_path)
    expected, design = _llama_figures(fleet)
    assert main(["plan", str(fleet), "--memory-model", "llamacpp"]) == 0
    rows = _stage_rows(capsys.readouterr().out, "stage    node")
    assert len(rows) == len(expected)
    for row, (weights, kv, used), design_weights in zip(rows, expected, design, strict=True):
        assert (row["weights"], row["KV cache"], row["used"]) == (weights, kv, used)
        assert design_weights != weights  # the fixture tells the two rules apart


def test_the_report_stage_table_shows_llama_cpp_figures_only(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    expected, _ = _llama_figures(fleet)
    out = tmp_path / "report.md"
    assert main(["report", str(fleet), "--memory-model", "llamacpp", "-o", str(out)]) == 0
    rows = _markdown_rows(out.read_text(), "### Stages")
    assert len(rows) == len(expected)
    for row, (weights, kv, used) in zip(rows, expected, strict=True):
        assert (row["weights"], row["KV cache"], row["used"]) == (weights, kv, used)


def test_planner_report_with_llama_cpp_parses_the_model_once_and_searches_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``planner plan`` and ``planner report`` (HTML: plan, candidates, explanation, stage
    table, charts and the failure what-if) read the GGUF once and search each fleet,
    context and lane count once."""
    from planner.models import gguf_file

    parsed: list[Path] = []
    original = gguf_file._Walk.header

    def counted(self: Any, version: int) -> Any:
        parsed.append(self.path)
        return original(self, version)

    started: Counter[tuple[Any, ...]] = Counter()
    search_init = search.ContextSearch.__init__

    def counted_search(self: Any, request: Any, context_length: int,
                       budget: Any = None, lanes: int | None = None) -> None:
        started[(tuple(n.node_id for n in request.nodes), context_length, lanes,
                 getattr(request.memory_rule, "one_device", False))] += 1
        search_init(self, request, context_length, budget, lanes)

    monkeypatch.setattr(gguf_file._Walk, "header", counted)
    monkeypatch.setattr(search.ContextSearch, "__init__", counted_search)
    fleet = _fleet(tmp_path)
    for command in (["plan", str(fleet)], ["report", str(fleet), "-o",
                                          str(tmp_path / "report.html")]):
        gguf_file._read_header_cached.cache_clear()  # each command starts afresh
        parsed.clear()
        started.clear()
        assert main([*command, "--memory-model", "llamacpp"]) == 0
        assert len(parsed) == 1, command
        assert started and max(started.values()) == 1, (command, started)


def test_the_report_node_table_gives_the_usable_bytes_the_stage_table_uses(
        tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    out = tmp_path / "report.md"
    for memory_model in ("design", "llamacpp"):
        assert main(["report", str(fleet), "--memory-model", memory_model, "-o",
                     str(out)]) == 0
        text = out.read_text()
        nodes = {row["node"]: row for row in _markdown_rows(text, "### Nodes")}
        columns = list(next(iter(nodes.values())))
        for stage in _markdown_rows(text, "### Stages"):
            assert nodes[stage["node"]]["= usable"] == stage["usable"], memory_model
            # The stage table gives the same reserve as the node table.
            assert stage.get("llama.cpp reserve", "0 B") == nodes[stage["node"]].get(
                "− llama.cpp reserve", "0 B"), memory_model
        # Under llama.cpp's rule a node of a split reserves a pipeline stage's compute
        # buffer; a plan of one stage runs on one device and reserves none.
        split = len(_markdown_rows(text, "### Stages")) > 1
        assert ("− llama.cpp reserve" in columns) == (memory_model == "llamacpp" and split)
