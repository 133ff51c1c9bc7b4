"""``planner sweep``, run as a real process."""

from __future__ import annotations

import os

import pandas as pd
from test_cli import FIVE, assert_user_error, run

from planner.sweep import load_grid, sweep


def test_sweep_writes_what_the_library_returns(tmp_path) -> None:
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text('evaluate = "availability"\n[axes]\nrepair_hours = [24, 500]\n'
                         f'[fixed]\nfleet = "{os.path.relpath(FIVE, tmp_path)}"\n')
    output = tmp_path / "results.csv"
    done = run("sweep", grid_file, "--workers", "1", "-o", output)
    assert done.returncode == 0, done.stderr
    assert "2 scenarios (availability) written" in done.stderr
    grid, evaluation = load_grid(grid_file)
    expected = sweep(grid, evaluation)
    written = pd.read_csv(output)
    assert list(written.columns) == list(expected.columns)
    assert written["availability"].tolist() == expected["availability"].tolist()
    assert written["availability"].iloc[1] < written["availability"].iloc[0]


def test_bad_grid_is_refused_by_name(tmp_path) -> None:
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text('evaluate = "availability"\n[axes]\nrepair_hour = [24]\n')
    assert_user_error(run("sweep", grid_file), 2, "repair_hour", "grid.toml")
