"""The ``planner`` command: one module per subcommand.

Exit codes: 0 a plan was found (or the command succeeded), 1 no valid topology, 2 bad
input (the message names the file, line or field). User errors never print a traceback.

A subcommand is a module with ``NAME``, ``add_parser(subparsers)`` (which sets
``handler=run``) and ``run(args) -> int``; listing it in :data:`COMMANDS` adds it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

import planner
from planner.cli import candidates, inspect, plan, presets, report
from planner.cli._common import (
    EXIT_BAD_INPUT,
    EXIT_NO_TOPOLOGY,
    EXIT_OK,
    FORMATTER,
    UserError,
    exit_code,
)
from planner.errors import PlanError
from planner.fleetfile import FleetFileError
from planner.reports.tables import terminal_safe

COMMANDS: tuple[ModuleType, ...] = (plan, candidates, report, inspect, presets)

__all__ = ["COMMANDS", "EXIT_BAD_INPUT", "EXIT_NO_TOPOLOGY", "EXIT_OK", "UserError", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="planner",
        description="Plan how to split a large language model across GPU nodes.",
        epilog=("examples:\n"
                "  planner plan data/fleets/qwen480b-5x80.toml\n"
                "  planner report data/fleets/qwen480b-5x80.toml -o report.html\n\n"
                "exit codes: 0 plan found, 1 no valid topology, 2 bad input"),
        formatter_class=FORMATTER,
    )
    parser.add_argument("--version", action="version",
                        version=f"planner {planner.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except UserError as error:
        print(terminal_safe(f"planner: {error}"), file=sys.stderr)
        return error.exit_code
    except FleetFileError as error:
        print(terminal_safe(f"planner: {error}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    except PlanError as error:
        print(terminal_safe(f"planner: {error}"), file=sys.stderr)
        return exit_code(error)
    except BrokenPipeError:
        # Output piped into e.g. `head`: the reader left, which is not an error.
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
