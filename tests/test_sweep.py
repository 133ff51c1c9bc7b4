"""Sweeps: the same results in this process, on local processes and on a Dask
LocalCluster, and a sweep whose worker dies resumes from what it saved."""

from __future__ import annotations

import multiprocessing
import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner
from planner.availability import NodeReliability, fleet_availability
from planner.fleet import load_fleet
from planner.sweep import SweepError, check_grid, grid_from_axes, load_grid, sweep

FLEETS = Path(__file__).resolve().parents[1] / "data" / "fleets"
FIVE = str(FLEETS / "qwen480b-5x80.toml")
FOUR = str(FLEETS / "qwen480b-4x80.toml")


def _grid() -> pd.DataFrame:
    return grid_from_axes({"fleet": [FIVE, FOUR], "annual_failure_rate": [0.119, 2.0],
                           "min_context": [65536, 262144]}, {"repair_hours": 100})


def test_results_are_the_same_on_every_executor() -> None:
    from distributed import Client

    from planner.sweep_dask import local_cluster

    grid = _grid()
    inline = sweep(grid, "availability", executor="inline")
    processes = sweep(grid, "availability", executor="processes", workers=2, batch_size=1)
    # An existing cluster, given as a Client (threads: the process workers are the slow
    # test below).
    with local_cluster(2, processes=False) as cluster, Client(cluster) as client:
        on_dask = sweep(grid, "availability", scheduler=client, batch_size=3)
    pd.testing.assert_frame_equal(inline, processes)
    pd.testing.assert_frame_equal(inline, on_dask)
    # And they are the library's numbers, row by row.
    row = inline.iloc[5]
    request = load_fleet(row["fleet"]).to_request()
    expected = fleet_availability(request, NodeReliability(row["annual_failure_rate"], 100),
                                  min_context=int(row["min_context"]))
    assert row["availability"] == expected.availability
    assert list(inline["scenario"]) == list(range(len(grid)))
    assert inline["error_code"].isna().all()


@pytest.mark.slow
def test_a_local_dask_cluster_gives_the_same_results_though_a_worker_is_killed(
        tmp_path: Path) -> None:
    grid = _grid()
    killed: list[int] = []

    def kill_a_worker(done: int, total: int) -> None:
        # The LocalCluster's worker processes are children of this one.
        if done >= 2 and not killed:
            workers = multiprocessing.active_children()
            assert workers
            killed.append(workers[0].pid)
            os.kill(workers[0].pid, signal.SIGKILL)

    # Asked for Dask with no address: the sweep starts a LocalCluster of two worker
    # processes and closes it afterwards.
    on_dask = sweep(grid, "availability", executor="dask", workers=2, batch_size=1,
                    output=tmp_path / "out.parquet", progress=kill_a_worker)
    assert killed
    pd.testing.assert_frame_equal(on_dask, sweep(grid, "availability", executor="inline"))
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out.parquet"), on_dask)
    assert not multiprocessing.active_children()  # the cluster is closed


def test_a_worker_that_dies_loses_no_finished_results(tmp_path: Path) -> None:
    grid = grid_from_axes({"annual_failure_rate": [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4],
                           "repair_hours": [24, 200]}, {"fleet": FIVE})
    output = tmp_path / "out.parquet"
    killed: list[int] = []

    def kill_a_worker(done: int, total: int) -> None:
        # Runs in this process as batches finish: the pool's workers are our children.
        if done >= 2 and not killed:
            worker = multiprocessing.active_children()[0]
            killed.append(done)
            os.kill(worker.pid, signal.SIGKILL)

    with pytest.raises(SweepError) as error:
        sweep(grid, "availability", executor="processes", workers=2, batch_size=1,
              output=output, progress=kill_a_worker)
    assert error.value.code == "SweepInterrupted"
    assert "running the same sweep again resumes" in error.value.message
    saved = error.value.details["finished"]
    assert 2 <= saved < len(grid)
    assert not output.exists()

    starts: list[int] = []
    resumed = sweep(grid, "availability", executor="processes", workers=2, batch_size=1,
                    output=output, progress=lambda done, total: starts.append(done))
    assert starts[0] == saved  # the saved scenarios were not evaluated again
    assert output.exists() and not (tmp_path / "out.parquet.parts").exists()
    whole = sweep(grid, "availability", executor="inline")
    pd.testing.assert_frame_equal(resumed, whole)
    pd.testing.assert_frame_equal(pd.read_parquet(output), whole)


def test_an_edited_fleet_file_is_evaluated_again_not_resumed(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(Path(FIVE).read_text())
    grid = grid_from_axes({"repair_hours": [24, 72, 168, 500]}, {"fleet": str(fleet)})
    output = tmp_path / "out.csv"

    class Stop(Exception):
        pass

    def stop_after_two(done: int, total: int) -> None:
        if done == 2:
            raise Stop

    with pytest.raises(Stop):
        sweep(grid, "availability", executor="inline", batch_size=1, output=output,
              progress=stop_after_two)
    # One node fewer: the two saved results are stale.
    fleet.write_text(Path(FIVE).read_text().replace("count = 5", "count = 4"))
    starts: list[int] = []
    resumed = sweep(grid, "availability", executor="inline", batch_size=1, output=output,
                    progress=lambda done, total: starts.append(done))
    assert starts[0] == 0
    assert (resumed["node_count"] == 4).all()
    pd.testing.assert_frame_equal(resumed, sweep(grid, "availability", executor="inline"))


def test_plan_sweep_over_models_with_errors_in_rows(tmp_path: Path) -> None:
    grid = grid_from_axes({"model": ["qwen3-coder-480b-a35b", "no-such-model",
                                     "llama-3.1-70b"]}, {"fleet": FIVE})
    results = sweep(grid, "plan", output=tmp_path / "plans.csv")
    assert list(results["error_code"].fillna("")) == ["", "ModelUnavailable", ""]
    assert results.loc[0, "context_length"] == 262144
    assert pd.isna(results.loc[1, "context_length"])
    written = pd.read_csv(tmp_path / "plans.csv")
    assert list(written.columns) == list(results.columns)
    assert written.loc[2, "stage_count"] == results.loc[2, "stage_count"]


def test_grid_files_and_bad_grids(tmp_path: Path) -> None:
    path = tmp_path / "grid.toml"
    path.write_text('evaluate = "availability"\n[axes]\nannual_failure_rate = [0.1, 0.5]\n'
                    f'[fixed]\nfleet = "{os.path.relpath(FIVE, tmp_path)}"\n')
    # Relative fleet paths start at the grid file's folder.
    grid, evaluation = load_grid(path)
    assert evaluation == "availability" and len(grid) == 2
    assert Path(grid.row(0)["fleet"]).resolve() == Path(FIVE).resolve()
    for bad, words in [({"flet": [FIVE]}, "unknown grid column 'flet'"),
                       ({"min_context": [-5]}, "column 'min_context'"),
                       ({"annual_failure_rate": ["often"]}, "row 0")]:
        with pytest.raises(SweepError) as error:
            check_grid(pd.DataFrame(bad))
        assert error.value.code == "InvalidGrid" and words in error.value.message
    with pytest.raises(SweepError, match="evaluate must be one of"):
        sweep(_grid(), "guess")


def test_notebook_progress_bar_follows_the_sweep() -> None:
    from planner.workbench.progress import ProgressBar

    bar = ProgressBar(display_now=False)
    grid = grid_from_axes({"repair_hours": [24, 72, 168]}, {"fleet": FIVE})
    sweep(grid, "plan", progress=bar)
    assert (bar.bar.value, bar.bar.max) == (3, 3)
    assert bar.label.value == "3 of 3 scenarios" and bar.bar.bar_style == "success"


def test_size_sweep_over_prices_and_failures() -> None:
    from planner.models import load_gpu_catalog, load_preset
    from planner.sizing import SizingTargets, size_fleet

    grid = grid_from_axes({"failures_tolerated": [0, 1], "price_scale": [1.0, 3.0]},
                          {"model": "llama-3.1-70b"})
    results = sweep(grid, "size")
    assert results["error_code"].isna().all()
    direct = size_fleet(load_preset("llama-3.1-70b"), load_gpu_catalog(),
                        SizingTargets(failures_tolerated=1), top=1, pareto=False).fleets[0]
    row = results.iloc[2]
    assert row["sized_fleet"] == direct.label
    assert row["cost_per_hour_usd"] == direct.cost_per_hour_usd
    assert results.iloc[3]["cost_per_hour_usd"] == pytest.approx(3 * direct.cost_per_hour_usd)


def test_a_sweep_over_the_size_of_a_preset_s_file(tmp_path: Path) -> None:
    """Which file of a preset to run (Q8_0 or Q4_K_M) is a what-if a sweep answers: the
    ``file_bytes`` column, as a fleet file's ``model.file_bytes``; a size the preset
    cannot take is that row's error."""
    from planner.models import load_gpu_catalog, load_preset
    from planner.sizing import SizingTargets, size_fleet

    fleet = tmp_path / "gpt-oss.toml"
    fleet.write_text('[model]\npreset = "gpt-oss-20b"\n[[nodes]]\nid = "a"\n'
                     'vram = "15 GiB"\n')
    sizes = [round(11.27 * 2**30), 1000]
    planned = sweep(grid_from_axes({"file_bytes": sizes}, {"fleet": str(fleet)}), "plan")
    document = load_fleet(fleet)
    sized_document = replace(document, model=replace(document.model, file_bytes=sizes[0]))
    plan = planner.plan_topology(sized_document.to_request())
    assert planned.loc[0, "context_length"] == plan.context_length
    assert planned.loc[0, "context_length"] > planner.plan_topology(
        document.to_request()).context_length  # the smaller file leaves the cache room
    assert planned.loc[1, "error_code"] == "InvalidField"
    assert "a file of 1,000 bytes cannot hold gpt-oss-20b" in planned.loc[1, "error_message"]
    costs = sweep(grid_from_axes({"file_bytes": sizes}, {"model": "gpt-oss-20b",
                                                          "kinds": "rtx-4090"}), "size")
    direct = size_fleet(load_preset("gpt-oss-20b").stored_in(sizes[0]), load_gpu_catalog(),
                        SizingTargets(), kinds=["rtx-4090"], top=1, pareto=False).fleets[0]
    assert costs.loc[0, "estimated_tpot_ms"] == direct.to_dict()["estimated_tpot_ms"]
    assert (costs.loc[1, "error_code"], costs.loc[1, "error_message"]) == (
        planned.loc[1, "error_code"], planned.loc[1, "error_message"])  # one rule


def test_simulation_sweep_reports_each_seeded_year() -> None:
    from planner.simulation import simulate

    grid = grid_from_axes({"seed": [1, 2]}, {"fleet": FIVE, "annual_failure_rate": 3.0,
                                              "repair_hours": 300, "horizon_hours": 8760})
    results = sweep(grid, "simulation")
    request = load_fleet(FIVE).to_request()
    for row in results.itertuples(index=False):
        year = simulate(request, NodeReliability(3.0, 300), seed=row.seed, min_context=65536)
        expected = year.summary()
        assert row.hours_down == expected["hours_down"]
        assert row.replans == expected["replans"] > 0
        assert row.claim_messages == expected["claim_messages"]
        assert row.simulated_availability == expected["simulated_availability"]


def test_an_unreachable_scheduler_is_a_named_error(tmp_path: Path) -> None:
    import dask

    grid = grid_from_axes({"repair_hours": [24, 72]}, {"fleet": FIVE})
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}), \
            pytest.raises(SweepError) as error:
        sweep(grid, "availability", scheduler="tcp://127.0.0.1:9", output=tmp_path / "o.csv")
    assert error.value.code == "SweepInterrupted"
    assert "the Dask cluster at 'tcp://127.0.0.1:9' failed" in error.value.message
    assert "0 of 2 scenarios finished" in error.value.message


def test_availability_rows_stop_at_max_states_with_a_sound_interval(tmp_path: Path) -> None:
    # Three kinds of ten nodes: 1,331 failure states.
    fleet = tmp_path / "three-kinds.toml"
    fleet.write_text('[model]\npreset = "qwen3-coder-480b-a35b"\nkv_cache_type = "q8_0"\n'
                     + "".join(f'[[nodes]]\nid = "k{i}"\ncount = 10\nvram = "80 GiB"\n'
                               f'headroom = "{i} GiB"\n' for i in range(3)))
    grid = grid_from_axes({"max_states": [3, 30]}, {"fleet": str(fleet),
                                                    "annual_failure_rate": 20.0,
                                                    "repair_hours": 500})
    results = sweep(grid, "availability")
    assert list(results["states_evaluated"]) == [3, 30]
    assert results["availability"].isna().all()
    narrow, wide = results.iloc[1], results.iloc[0]
    assert wide["availability_lower"] <= narrow["availability_lower"]
    assert narrow["availability_upper"] <= wide["availability_upper"]
    assert narrow["availability_upper"] - narrow["availability_lower"] < (
        wide["availability_upper"] - wide["availability_lower"])


def test_availability_rows_use_each_nodes_own_figures(tmp_path: Path) -> None:
    fleet = tmp_path / "mixed.toml"
    fleet.write_text('[model]\npreset = "qwen3-coder-480b-a35b"\nkv_cache_type = "q8_0"\n'
                     '[[nodes]]\nid = "flaky"\ncount = 3\nvram = "80 GiB"\n'
                     'annual_failure_rate = 2.0\nrepair_hours = 300\n'
                     '[[nodes]]\nid = "steady"\ncount = 2\nvram = "80 GiB"\n')
    grid = grid_from_axes({"repair_hours": [24, 100]}, {"fleet": str(fleet),
                                                        "annual_failure_rate": 0.5})
    results = sweep(grid, "availability")
    request = load_fleet(fleet).to_request()
    for row in results.itertuples(index=False):
        own = {**{f"flaky-0{i}": NodeReliability(2.0, 300) for i in range(3)},
               **{f"steady-0{i}": NodeReliability(0.5, row.repair_hours) for i in range(2)}}
        assert row.availability == fleet_availability(request, own,
                                                      min_context=65536).availability


_COLUMN_VALUES = {
    "min_context": st.integers(0, 2**31 + 1), "min_lanes": st.integers(0, 5000),
    "seed": st.integers(0, 9), "annual_failure_rate": st.floats(0, 1e6) | st.integers(0, 9),
    "file_bytes": st.integers(0, 2**53 + 1),
    "repair_hours": st.floats(0, 1e6), "horizon_hours": st.floats(0, 1e6),
    "fleet": st.sampled_from([FIVE, "missing.toml", "x"]), "catalog": st.just("gpus.toml")}


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(_COLUMN_VALUES)), st.booleans(), max_size=4),
       st.data())
def test_a_sweep_grid_gives_each_row_as_its_dataframe_does(columns: dict[str, bool],
                                                            data: st.DataObject) -> None:
    from planner.sweep import SweepGrid
    from planner.sweep._grid import Rows

    axes: dict[str, list[Any]] = {}
    fixed: dict[str, Any] = {}
    for name, is_axis in columns.items():
        values = data.draw(st.lists(_COLUMN_VALUES[name], min_size=1, max_size=3))
        if is_axis:
            axes[name] = values
        else:
            fixed[name] = values[0]
    try:
        grid = SweepGrid(axes, fixed)
    except SweepError as error:
        assert error.code == "InvalidGrid"
        with pytest.raises(SweepError) as caught:
            check_grid(_frame(axes, fixed))
        assert caught.value.message == error.message
        return
    frame_rows = Rows(check_grid(grid.to_frame()))
    assert len(grid) == frame_rows.count
    for index in range(len(grid)):
        assert grid.row(index) == frame_rows[index]
    assert SweepGrid.from_dict(grid.to_dict()) == grid


def _frame(axes: dict[str, list[Any]], fixed: dict[str, Any]) -> pd.DataFrame:
    names = list(axes)
    grid = (pd.MultiIndex.from_product([axes[n] for n in names], names=names)
            .to_frame(index=False) if names else pd.DataFrame(index=range(1)))
    for name, value in fixed.items():
        grid[name] = pd.Series([value] * len(grid))
    return grid


def test_a_sweep_grid_and_its_dataframe_sweep_to_the_same_results(tmp_path: Path) -> None:
    grid = grid_from_axes({"fleet": [FIVE, str(tmp_path / "missing.toml")],
                           "min_lanes": [1, 2, 64], "annual_failure_rate": [0.1, 3]},
                          {"repair_hours": 48, "max_states": 20})
    for evaluation in ("plan", "availability"):
        lazy = sweep(grid, evaluation)
        pd.testing.assert_frame_equal(lazy, sweep(grid.to_frame(), evaluation))
        assert len(lazy) == len(grid) == 12


@pytest.mark.parametrize(("axes", "fixed", "words"), [
    ({"min_lanes": [1, 2]}, {"min_lanes": 3}, "both an axis and a fixed value"),
    ({"flet": [FIVE]}, {}, "unknown grid column 'flet'"),
    ({}, {"flet": FIVE}, "unknown grid column 'flet'"),
    ({"min_lanes": [1, 2], "min_context": [4096, -5]}, {}, "row 1, column 'min_context'"),
    ({"min_lanes": [[1]]}, {}, "values must be numbers or text"),
    ({"min_lanes": []}, {}, "non-empty list"),
    ({"min_lanes": "12"}, {}, "non-empty list"),
])
def test_a_bad_sweep_grid_is_refused_naming_the_column(axes: dict[str, Any],
                                                       fixed: dict[str, Any],
                                                       words: str) -> None:
    from planner.sweep import SweepGrid

    with pytest.raises(SweepError) as caught:
        SweepGrid(axes, fixed)
    assert caught.value.code == "InvalidGrid" and words in caught.value.message
