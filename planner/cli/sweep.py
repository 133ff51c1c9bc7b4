"""``planner sweep GRID``: evaluate a grid of what-ifs and write one row per scenario."""

from __future__ import annotations

import argparse
import sys

from planner.cli._common import EXIT_OK, UserError, add_command
from planner.reports.tables import terminal_safe
from planner.sweep import SweepError, SweepOutputError, load_grid, sweep, write_csv

NAME = "sweep"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run,
        help="evaluate a grid of what-ifs (plan, size, availability, simulation)",
        description=(
            "A grid file names the evaluation and the values to combine:\n\n"
            '  evaluate = "availability"      # plan | size | availability | simulation\n'
            "  [axes]                         # every combination of these lists\n"
            "  annual_failure_rate = [0.05, 0.119, 0.3]\n"
            "  min_context = [65536, 262144]\n"
            "  [fixed]                        # the same in every scenario\n"
            '  fleet = "../data/fleets/qwen480b-5x80.toml"\n\n'
            "Small grids run in this process, larger ones on local processes, and on a "
            "Dask cluster with --scheduler. With -o, finished scenarios are saved as "
            "they come in; running the same command again after an interruption resumes."),
        examples=("planner sweep grid.toml -o results.parquet",
                  "planner sweep grid.toml --workers 4 -o results.csv",
                  "planner sweep grid.toml --scheduler tcp://scheduler:8786 -o results.parquet",
                  "planner sweep grid.toml --scheduler dask      # a LocalCluster"),
        exit_codes="0 every scenario evaluated (a scenario's own error is in its row), 2 bad "
                   "grid or an interrupted sweep")
    parser.add_argument("grid", metavar="GRID", help="grid file (.toml)")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="local worker processes (default: one per core)")
    parser.add_argument("--scheduler", metavar="ADDR",
                        help="a Dask scheduler address (tcp://host:8786), or 'dask' for a "
                             "LocalCluster on this machine")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the results to FILE (.parquet or .csv); default: CSV "
                             "on standard output")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    def warn(text: str) -> None:
        print(terminal_safe(f"warning: {text}"), file=sys.stderr)

    try:
        grid, evaluation = load_grid(args.grid)
        with tqdm(total=len(grid), unit="scenario", desc=evaluation, file=sys.stderr,
                  disable=None) as bar:

            def progress(done: int, total: int) -> None:
                bar.update(done - bar.n)

            results = sweep(grid, evaluation, workers=args.workers,
                            scheduler=args.scheduler, output=args.output, progress=progress,
                            warn=warn)
    except (SweepError, SweepOutputError) as error:
        raise UserError(terminal_safe(f"{error.code}: {error.message}")) from None
    failed = int(results["error_code"].notna().sum())
    if args.output is None:
        write_csv(results, sys.stdout)
    else:
        print(f"{len(results)} scenarios ({evaluation}) written to {args.output}",
              file=sys.stderr)
    if failed:
        print(f"{failed} scenario(s) could not be evaluated; see error_code and "
              "error_message", file=sys.stderr)
    return EXIT_OK
