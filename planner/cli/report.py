"""``planner report FLEET -o OUT``: a topology report in HTML, Markdown or JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import planner
from planner.cli._common import (
    EXIT_BAD_INPUT,
    EXIT_NO_TOPOLOGY,
    EXIT_OK,
    UserError,
    add_command,
    add_fleet_argument,
    add_memory_model_argument,
)
from planner.fleet import load_fleet, write_text_atomic
from planner.reports.content import build_report
from planner.reports.tables import terminal_safe

NAME = "report"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run, help="write an HTML, Markdown or JSON report",
        description="Write a topology report: inputs, usable memory per node, the plan, "
                    "charts (HTML), candidates, startup quorum, failure what-if and "
                    "warnings. The format follows OUT's extension.",
        examples=("planner report data/fleets/qwen480b-5x80.toml -o report.html",
                  "planner report data/fleets/qwen480b-4x70.toml -o report.md"),
        exit_codes="0 plan found, 1 no valid topology (the report is still written),\n2 bad "
                   "input")
    add_fleet_argument(parser)
    add_memory_model_argument(parser)
    parser.add_argument("-o", "--output", metavar="OUT", required=True,
                        help="report file ending in .html, .md or .json")
    parser.add_argument("--title", help="report title (default: the fleet's name)")


def run(args: argparse.Namespace) -> int:
    from planner.reports import REPORT_SUFFIXES, render_report

    output = Path(args.output)
    if output.suffix.lower() not in REPORT_SUFFIXES:
        raise UserError(f"{args.output}: a report file ends in .html, .md or .json")
    document = load_fleet(args.fleet)
    try:
        content = build_report(document, title=args.title,
                               memory_model=args.memory_model)
    except planner.InvalidInput as error:
        raise UserError(f"{args.fleet}: {error.message}") from None
    write_text_atomic(output, render_report(content, output.suffix))
    if content.error is not None:
        code = content.error["code"]
        print(terminal_safe(f"wrote {output} (no plan: {code})"))
        print(terminal_safe(f"planner: {args.fleet}: {code}: {content.error['message']}"),
              file=sys.stderr)
        return EXIT_NO_TOPOLOGY if code == "NoValidTopology" else EXIT_BAD_INPUT
    print(terminal_safe(f"wrote {output}"))
    return EXIT_OK
