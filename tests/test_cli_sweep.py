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


def test_a_terminal_sees_a_tqdm_progress_bar(tmp_path) -> None:
    import fcntl
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from test_cli import ROOT

    grid_file = tmp_path / "grid.toml"
    grid_file.write_text('evaluate = "plan"\n[axes]\nmin_context = [65536, 131072, 262144]\n'
                         f'[fixed]\nfleet = "{FIVE}"\n')
    # Standard error is a terminal: the bar is drawn there, the results go to the file.
    controller, terminal = pty.openpty()
    # A new terminal is 0 columns wide, where tqdm draws nothing: make it 100 x 24.
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        done = subprocess.run([sys.executable, "-m", "planner.cli", "sweep", str(grid_file),
                               "-o", str(tmp_path / "out.csv")], stderr=terminal,
                              stdout=subprocess.PIPE, cwd=ROOT, timeout=120)
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal's other end is closed: all is read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(controller)
    assert done.returncode == 0
    text = shown.decode(errors="replace")
    assert "plan: 100%" in text and "3/3" in text and "scenario" in text
