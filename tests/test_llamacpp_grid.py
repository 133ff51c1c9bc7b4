"""The grid of llama.cpp settings the memory estimate is checked at (planner/llamacpp/grid.py):
a covering design that holds every pair of values of two settings llama.cpp runs, built the
same way every time, and the uneven layer ranges of its splits."""

from __future__ import annotations

import hashlib
import json
from itertools import combinations, pairwise, product
from pathlib import Path
from typing import Any

import pytest

from planner.llamacpp import LlamaCppSettings, estimate
from planner.llamacpp.check import (
    GRID_KNOWN_MISSES,
    GridRun,
    compare_grid,
    grid_miss_summary,
    grid_misses,
    grid_summary,
    load_grid,
    model_from_header,
)
from planner.llamacpp.estimate import MemoryModelError
from planner.llamacpp.grid import (
    FACTORS,
    GRID,
    Factor,
    covered_pairs,
    covering_rows,
    runs_in_llama_cpp,
    uneven_ranges,
)
from planner.llamacpp.launch import layer_devices, tensor_split
from planner.llamacpp.log import parse_log

ROOT = Path(__file__).resolve().parents[1]


def _pairs(factors: tuple[Factor, ...] | list[Factor], allowed: Any = lambda row: True
           ) -> set[tuple[str, Any, str, Any]]:
    """Every pair of values of two factors, counted directly from the factors."""
    return {(f.name, a, g.name, b) for f, g in combinations(factors, 2)
            for a in f.levels for b in g.levels if allowed({f.name: a, g.name: b})}


def test_the_grid_holds_every_pair_of_settings_llama_cpp_runs() -> None:
    assert covered_pairs(GRID) == _pairs(FACTORS, runs_in_llama_cpp)
    assert all(runs_in_llama_cpp(row) for row in GRID)
    assert all(list(row) == [f.name for f in FACTORS] for row in GRID)


def test_the_grid_refuses_what_llama_cpp_refuses() -> None:
    """llama.cpp stops on a quantized V cache without flash attention."""
    assert not runs_in_llama_cpp({"cache_type_v": "q8_0", "flash_attn": False})
    assert not runs_in_llama_cpp({"cache_type_v": "q4_0", "flash_attn": False})
    assert runs_in_llama_cpp({"cache_type_v": "f16", "flash_attn": False})
    assert runs_in_llama_cpp({"cache_type_k": "q4_0", "flash_attn": False})


def test_the_grid_is_the_same_every_time_and_small() -> None:
    assert covering_rows(FACTORS, runs_in_llama_cpp) == list(GRID)
    # Every pair of context and micro-batch needs a row of its own: 16 at the least.
    assert 16 <= len(GRID) <= 20
    # Out of the 3,456 combinations the factors make, allowed or not.
    assert len(list(product(*(f.levels for f in FACTORS)))) == 3456


@pytest.mark.parametrize("sizes", [(2, 2, 2), (3, 3, 3, 3), (2, 5, 3), (4, 4, 2, 2, 2, 2),
                                   (1, 3, 2), (6,), (3, 2, 2, 2, 2, 2, 2, 2, 2, 2)])
def test_covering_rows_holds_every_pair(sizes: tuple[int, ...]) -> None:
    factors = [Factor(f"f{i}", tuple(range(size))) for i, size in enumerate(sizes)]
    rows = covering_rows(factors)
    assert covered_pairs(rows) == _pairs(factors)
    assert all({row[f.name] for row in rows} == set(f.levels) for f in factors)
    assert len(rows) >= max([a * b for a, b in combinations(sizes, 2)] + list(sizes))
    assert len(rows) <= max(1, len(list(product(*(range(s) for s in sizes)))))
    assert covering_rows(factors) == rows


def test_covering_rows_leaves_out_the_pairs_refused() -> None:
    factors = [Factor("a", (0, 1, 2)), Factor("b", (0, 1, 2)), Factor("c", ("x", "y"))]

    def allowed(row: dict[str, Any]) -> bool:
        return not (row.get("a") == 2 and row.get("c") == "y")

    rows = covering_rows(factors, allowed)
    assert covered_pairs(rows) == _pairs(factors, allowed)
    assert all(allowed(row) for row in rows)


def test_a_pair_no_row_can_complete_is_named() -> None:
    factors = [Factor("a", (0, 1)), Factor("b", (0, 1)), Factor("c", (0,))]

    def allowed(row: dict[str, Any]) -> bool:
        return not (row.get("a") == 1 and row.get("c") == 0 and "b" in row)

    with pytest.raises(ValueError, match="no level of c completes the row"):
        covering_rows(factors, allowed)


@pytest.mark.parametrize("devices", [1, 2, 3])
@pytest.mark.parametrize("layer_count", range(1, 41))
def test_uneven_ranges_place_every_layer(layer_count: int, devices: int) -> None:
    if layer_count + 1 < devices:
        with pytest.raises(ValueError, match="cannot be split"):
            uneven_ranges(layer_count, devices)
        return
    ranges = uneven_ranges(layer_count, devices)
    assert len(ranges) == devices and ranges[0][0] == 0 and ranges[-1][1] == layer_count
    assert all(a[1] == b[0] for a, b in pairwise(ranges))
    units = [end - start for start, end in ranges]
    units[-1] += 1  # the output layer
    assert all(count >= 1 for count in units) and sum(units) == layer_count + 1
    assert units == sorted(units, reverse=True)
    # llama.cpp's --tensor-split places the layers there.
    expected = [d for d, count in enumerate(units) for _ in range(count)]
    assert layer_devices(ranges, layer_count) == expected
    assert tensor_split(ranges) == units


def test_uneven_ranges_examples() -> None:
    assert uneven_ranges(26, 3) == [(0, 14), (14, 23), (23, 26)]
    assert uneven_ranges(26, 2) == [(0, 18), (18, 26)]
    assert uneven_ranges(2, 3) == [(0, 1), (1, 2), (2, 2)]
    assert uneven_ranges(7, 1) == [(0, 7)]


def _dense() -> Any:
    entry = json.loads((ROOT / "validation" / "results" / "archs" / "llama-dense.json")
                       .read_text())
    header = entry["header"]
    from types import SimpleNamespace
    tensors = [SimpleNamespace(name=n, type_name=t, n_bytes=b) for n, t, b in header["tensors"]]
    return model_from_header(entry["file"], header["metadata"], tensors, entry["file"])


def test_a_last_device_may_hold_the_output_layer_alone() -> None:
    model = _dense()
    assert model.layer_count == 2
    result = estimate(model, LlamaCppSettings(context_length=512),
                      [(0, 1), (1, 2), (2, 2)])
    last = result.devices[-1]
    assert last.kv_bytes == 0 and last.weights_bytes == model.output_bytes
    for ranges in ([(0, 0), (0, 2)], [(0, 1), (1, 1), (1, 2)], [(0, 2), (2, 2), (2, 2)],
                   [(2, 2)], [(0, 0)]):
        with pytest.raises(MemoryModelError) as caught:
            estimate(model, LlamaCppSettings(context_length=512), ranges)
        assert caught.value.code == "InvalidMemorySettings"


def test_the_four_decimal_compute_buffers_are_kept() -> None:
    log = "\n".join([
        "I load_tensors: RPC0[127.0.0.1:38001] model buffer size =     2.14 MiB",
        "I sched_reserve: RPC0[127.0.0.1:38001] compute buffer size =     0.69 MiB",
        "I sched_reserve:        CPU compute buffer size =     0.75 MiB",
        "I sched_reserve: reserve took 10.49 ms, sched copies = 4",
        "D ~llama_context: RPC0[127.0.0.1:38001] compute buffer size is   0.6901 MiB, "
        "matches expectation of   0.6901 MiB",
        "D ~llama_context:        CPU compute buffer size is   0.7545 MiB, matches "
        "expectation of   0.7545 MiB"])
    memory = parse_log(log).memory
    assert memory["127.0.0.1:38001"]["compute_bytes"] == round(0.6901 * 2**20)
    assert memory["host"]["compute_bytes"] == round(0.7545 * 2**20)
    assert memory["127.0.0.1:38001"]["weights_bytes"] == round(2.14 * 2**20)


# -- the recorded grid (validation/results/grid/, make validate) -----------------------

GRID_PATH = ROOT / "validation" / "results" / "grid"
GRID_START, GRID_END = "<!-- validation-grid:start -->", "<!-- validation-grid:end -->"


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    return load_grid(GRID_PATH)


@pytest.fixture(scope="module")
def grid_runs(record: dict[str, Any]) -> list[GridRun]:
    return compare_grid(record)


def test_the_record_is_every_model_at_every_row_of_the_design(record: dict[str, Any]) -> None:
    assert record["design"] == {"factors": {f.name: list(f.levels) for f in FACTORS},
                                "rows": [dict(row) for row in GRID]}
    archs = {path.stem for path in (ROOT / "validation" / "results" / "archs").glob("*.json")
             if path.stem != "run"}
    assert {Path(name).stem for name in record["models"]} == archs | {"gemma-3-270m-q4_k_m"}
    assert sorted((run["file"], run["row"]) for run in record["runs"]) == sorted(
        (name, row) for name in record["models"] for row in range(len(GRID)))
    for name, info in record["models"].items():
        header = record["headers"][name]
        digest = hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest()
        assert info["header_sha256"] == digest, name


def test_each_split_ran_the_uneven_ranges_as_planned(record: dict[str, Any]) -> None:
    for run in record["runs"]:
        devices = GRID[run["row"]]["devices"]
        metadata = record["headers"][run["file"]]["metadata"]
        layer_count = metadata[f"{metadata['general.architecture']}.block_count"]
        if devices == 1:
            assert "ranges" not in run
            continue
        assert [tuple(r) for r in run["ranges"]] == uneven_ranges(layer_count, devices)
        if "error" not in run:
            assert run["layers_as_planned"], (run["file"], run["row"])
            assert set(run["memory"]) == {f"device-{d}" for d in range(devices)} | {"host"}


def test_llama_cpp_refused_only_what_it_names(record: dict[str, Any]) -> None:
    """A refused run keeps llama.cpp's own reason; llama.cpp refuses only cache types."""
    reasons = {run["error"] for run in record["runs"] if "error" in run}
    assert reasons and all(reason.startswith("llama_init_from_model: ") for reason in reasons)
    assert all("cache" in reason for reason in reasons)


def test_every_run_meets_every_target_on_every_device_but_the_known_misses(
        grid_runs: list[GridRun]) -> None:
    """Weights, output, KV cache and recurrent state within 0.05 MiB, the compute buffer
    within 10 % and the total within 5 %, on every device of every run of the grid, and
    a run llama.cpp refused refused by the estimate too; but the known misses
    (planner.llamacpp.check.GRID_KNOWN_MISSES), each with its reason. A known miss that
    now meets every target fails here until it is struck off."""
    known = {(file, row) for _, models in GRID_KNOWN_MISSES
             for file, rows in models.items() for row in rows}
    assert grid_misses(grid_runs) == known
    assert all(len(reason) > 20 for reason, _ in GRID_KNOWN_MISSES)


def test_the_estimate_refuses_what_llama_cpp_refused(grid_runs: list[GridRun]) -> None:
    refused = [run for run in grid_runs if run.refused]
    assert len(refused) == 112
    assert all(run.estimate_refused for run in refused)
    assert not [run for run in grid_runs if run.estimate_refused and not run.refused]


def test_the_published_grid_table_is_true_of_the_estimator_today(
        record: dict[str, Any], grid_runs: list[GridRun]) -> None:
    table = grid_summary(grid_runs, record["design"]["factors"])
    shown = (ROOT / "docs" / "llamacpp.md").read_text().split(GRID_START)[1].split(GRID_END)[0]
    assert table in shown
    assert grid_miss_summary(grid_runs) in shown
    assert table in (ROOT / "README.md").read_text()


def test_the_check_prints_the_grid_table(record: dict[str, Any], grid_runs: list[GridRun],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from planner.llamacpp.check import main

    assert main([str(GRID_PATH)]) == 0
    printed = capsys.readouterr().out
    assert grid_summary(grid_runs, record["design"]["factors"]) in printed
    assert grid_miss_summary(grid_runs) in printed
