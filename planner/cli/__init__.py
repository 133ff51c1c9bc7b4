"""The ``planner`` command: one module per subcommand.

Exit codes: 0 a plan was found (or the command succeeded), 1 no valid topology, 2 bad
input (the message names the file, line or field) and any other failure. Nothing prints
a traceback: an error the package does not name is reported in one line, exit code 2.

A subcommand is a module with ``NAME``, ``add_parser(subparsers)`` (which sets
``handler=run``) and ``run(args) -> int``; listing it in :data:`COMMANDS` adds it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType

import planner
from planner._validate import clipped, shown
from planner.cli import (
    availability,
    calibrate,
    candidates,
    discover,
    inspect,
    launch,
    memory,
    plan,
    presets,
    report,
    size,
    speed,
    sweep,
    verify,
)
from planner.cli._common import (
    EXIT_BAD_INPUT,
    EXIT_NO_TOPOLOGY,
    EXIT_OK,
    FORMATTER,
    UserError,
    exit_code,
)
from planner.errors import CodedError
from planner.performance import read_calibration, use_calibration
from planner.reports.tables import terminal_safe

COMMANDS: tuple[ModuleType, ...] = (plan, candidates, report, inspect, presets,
                                     availability, sweep, size, speed, memory, launch,
                                     discover, verify, calibrate)

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
    _line_buffered(sys.stdout)
    args = build_parser().parse_args(argv)
    try:
        calibration = getattr(args, "calibration", None)
        with use_calibration(read_calibration(calibration) if calibration else None):
            code = int(args.handler(args))
        # Output that cannot be written (a full disk, a closed pipe) fails here, inside
        # the handlers below, rather than at interpreter exit with a traceback.
        sys.stdout.flush()
        return code
    except CodedError as error:
        _say(str(error))
        return exit_code(error)
    except BrokenPipeError:
        # Output piped into e.g. `head`: the reader left, which is not an error.
        _discard_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
    except RecursionError:
        _say("input nested too deeply to read")
        return EXIT_BAD_INPUT
    except OSError as error:
        _discard_stdout()
        where = f": {shown(error.filename)}" if error.filename is not None else ""
        _say(f"{error.strerror or type(error).__name__}{where}")
        return EXIT_BAD_INPUT
    except Exception as error:  # the last resort: one line, never a traceback
        _say(f"unexpected error: {type(error).__name__}: {clipped(str(error))}")
        return EXIT_BAD_INPUT


def _line_buffered(stream: object) -> None:
    # Into a pipe or file stdout is block-buffered and stderr is not, so with both in one
    # pipe (2>&1) a warning or error would land before, or inside, the lines it follows.
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        with contextlib.suppress(OSError, ValueError):
            reconfigure(line_buffering=True)


def _say(message: str) -> None:
    # When stderr itself is gone, the exit code is all that is left to say it.
    with contextlib.suppress(OSError, ValueError):
        print(terminal_safe(f"planner: {message}"), file=sys.stderr)


def _discard_stdout() -> None:
    # Unwritten output would be flushed again at exit and fail again; drop it.
    try:
        devnull = open(os.devnull, "w")  # noqa: SIM115 - replaces stdout until exit
        os.dup2(devnull.fileno(), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
