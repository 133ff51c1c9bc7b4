"""The ``planner`` command: plan a fleet file, list candidates, write reports, inspect models.

Exit codes: 0 a plan was found (or the command succeeded), 1 no valid topology, 2 bad
input (the message names the file, line or field). User errors never print a traceback.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import planner
from planner.errors import PlanError
from planner.fleetfile import FleetDocument, FleetFileError, load_fleet
from planner.reports.content import build_report, candidate_records
from planner.reports.tables import (
    TextTable,
    candidate_rows_table,
    stage_table,
    terminal_safe,
    text_table,
)

EXIT_OK = 0
EXIT_NO_TOPOLOGY = 1
EXIT_BAD_INPUT = 2


class UserError(Exception):
    """A problem the user can fix, printed as ``planner: <message>``."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _exit_code(error: PlanError) -> int:
    return EXIT_NO_TOPOLOGY if error.code == "NoValidTopology" else EXIT_BAD_INPUT


def _load(path: str) -> tuple[FleetDocument, planner.PlanningInput]:
    document = load_fleet(path)
    try:
        return document, document.to_request()
    except planner.InvalidInput as error:
        raise UserError(f"{path}: {error.message}") from None


def _say_error(source: str, error: PlanError) -> None:
    print(terminal_safe(f"planner: {source}: {error.code}: {error.message}"), file=sys.stderr)


# -- planner plan -----------------------------------------------------------------------


def _command_plan(args: argparse.Namespace) -> int:
    document, request = _load(args.fleet)
    try:
        plan = planner.plan_topology(request)
    except PlanError as error:
        if args.json:
            print(json.dumps({"error": error.to_dict()}, indent=2))
        _say_error(args.fleet, error)
        return _exit_code(error)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2))
        return EXIT_OK
    content = build_report(document, include_candidates=False, include_what_if=False)
    print(terminal_safe(f"{document.title}: {document.model.label}"))
    print(f"context {plan.context_length:,} tokens, {plan.parallel_lanes} parallel lanes, "
          f"{plan.stage_count} stage{'s' if plan.stage_count != 1 else ''}")
    estimate = plan.estimated_decode_network_ms_per_token
    if estimate is not None:
        met = plan.decode_tpot_target_met
        target = ("" if met is None else
                  f" (target {request.target_decode_tpot_ms} ms {'met' if met else 'missed'})")
        print(f"estimated decode network time {estimate} ms per token{target}")
    print()
    print(text_table(stage_table(content)))
    if content.quorum is not None:
        quorum = content.quorum
        print(f"\nstartup quorum: {quorum['quorum_requirement']} of "
              f"{quorum['planned_stages']} stages must accept; tolerates "
              f"{quorum['tolerated_failures']} stage failure(s)")
    for warning in content.warnings:
        print(terminal_safe(f"warning: {warning['message']}"), file=sys.stderr)
    return EXIT_OK


# -- planner candidates -----------------------------------------------------------------


def _csv_cell(value: Any) -> Any:
    if isinstance(value, list):
        return ";".join(value)
    if value is None:
        return ""
    return value


def _command_candidates(args: argparse.Namespace) -> int:
    _, request = _load(args.fleet)
    try:
        frame = planner.candidates(request)
    except PlanError as error:
        _say_error(args.fleet, error)
        return _exit_code(error)
    records = candidate_records(frame)
    if args.csv:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(planner.CANDIDATE_COLUMNS)
        for record in records:
            writer.writerow([_csv_cell(record[column]) for column in planner.CANDIDATE_COLUMNS])
        sys.stdout.write(buffer.getvalue())
    else:
        print(text_table(candidate_rows_table(records)))
    if not any(record["selected"] for record in records):
        print(f"planner: {terminal_safe(args.fleet)}: NoValidTopology: no candidate shape "
              "fits (see the reasons above)", file=sys.stderr)
        return EXIT_NO_TOPOLOGY
    return EXIT_OK


# -- planner report ---------------------------------------------------------------------


def _command_report(args: argparse.Namespace) -> int:
    from planner.fleetfile import write_text_atomic
    from planner.reports import REPORT_SUFFIXES, render_report

    output = Path(args.output)
    if output.suffix.lower() not in REPORT_SUFFIXES:
        raise UserError(f"{args.output}: a report file ends in .html, .md or .json")
    document = load_fleet(args.fleet)
    try:
        content = build_report(document, title=args.title)
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


# -- planner inspect / presets ----------------------------------------------------------


def _command_inspect(args: argparse.Namespace) -> int:
    from planner import models

    path = Path(args.model)
    if not path.is_file():
        raise UserError(f"{args.model}: no such file")
    try:
        spec = models.from_gguf(path, kv_cache_type=args.kv_cache_type)
    except models.ModelError as error:
        raise UserError(f"{args.model}: {error}") from None
    if args.json:
        print(json.dumps(spec.to_dict(), indent=2))
    else:
        print(models.describe_model(spec))
    return EXIT_OK


def _command_presets(args: argparse.Namespace) -> int:
    from planner import models
    from planner.units import format_bytes

    try:
        specs = {name: models.load_preset(name) for name in models.list_presets()}
    except models.ModelError as error:
        raise UserError(str(error)) from None
    if args.json:
        print(json.dumps([{"preset": name, **spec.to_dict()} for name, spec in specs.items()],
                         indent=2))
        return EXIT_OK
    rows = [(name, spec.name, str(spec.layer_count), format_bytes(spec.model_weight_bytes),
             f"{spec.native_context_length:,}",
             f"{spec.kv_cache_type} ({format_bytes(spec.kv_bytes_per_token)}/token)")
            for name, spec in specs.items()]
    print(text_table(TextTable(
        ("preset", "model", "layers", "weights", "native context", "default KV cache"),
        tuple(rows), tuple("llrrrl"))))
    print("\nUse one in a fleet file as [model] preset = \"<preset>\" "
          "(kv_cache_type = \"q8_0\" etc. to change the KV cache).")
    return EXIT_OK


# -- argument parsing -------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="planner",
        description="Plan how to split a large language model across GPU nodes.",
        epilog=("examples:\n"
                "  planner plan data/fleets/qwen480b-5x80.toml\n"
                "  planner report data/fleets/qwen480b-5x80.toml -o report.html\n\n"
                "exit codes: 0 plan found, 1 no valid topology, 2 bad input"),
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version",
                        version=f"planner {planner.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    plan = commands.add_parser(
        "plan", help="print the plan for a fleet file", formatter_class=formatter,
        description="Plan a fleet file (.toml, or .json in the SPEC's field names) and "
                    "print the stages as a table.",
        epilog=("examples:\n"
                "  planner plan data/fleets/qwen480b-5x80.toml\n"
                "  planner plan data/fleets/qwen480b-5x80.toml --json   # SPEC section 7\n\n"
                "exit codes: 0 plan found, 1 no valid topology, 2 bad input"))
    plan.add_argument("fleet", metavar="FLEET", help="fleet file (.toml or .json)")
    plan.add_argument("--json", action="store_true",
                      help="print the plan as JSON with the SPEC's field names")
    plan.set_defaults(handler=_command_plan)

    cands = commands.add_parser(
        "candidates", help="list every shape the planner considers", formatter_class=formatter,
        description="List every (context, stage count, lanes) shape the planner tries, in "
                    "order, with the best node set for each or why none fits.",
        epilog=("examples:\n"
                "  planner candidates data/fleets/qwen480b-10x80.toml\n"
                "  planner candidates data/fleets/qwen480b-10x80.toml --csv > shapes.csv\n\n"
                "exit codes: 0 a shape is selected, 1 no valid topology, 2 bad input"))
    cands.add_argument("fleet", metavar="FLEET", help="fleet file (.toml or .json)")
    cands.add_argument("--csv", action="store_true",
                       help="print CSV (node ids joined with ';') instead of a table")
    cands.set_defaults(handler=_command_candidates)

    report = commands.add_parser(
        "report", help="write an HTML, Markdown or JSON report", formatter_class=formatter,
        description="Write a topology report: inputs, usable memory per node, the plan, "
                    "charts (HTML), candidates, startup quorum, failure what-if and "
                    "warnings. The format follows OUT's extension.",
        epilog=("examples:\n"
                "  planner report data/fleets/qwen480b-5x80.toml -o report.html\n"
                "  planner report data/fleets/qwen480b-4x70.toml -o report.md\n\n"
                "exit codes: 0 plan found, 1 no valid topology (the report is still "
                "written),\n2 bad input"))
    report.add_argument("fleet", metavar="FLEET", help="fleet file (.toml or .json)")
    report.add_argument("-o", "--output", metavar="OUT", required=True,
                        help="report file ending in .html, .md or .json")
    report.add_argument("--title", help="report title (default: the fleet's name)")
    report.set_defaults(handler=_command_report)

    inspect = commands.add_parser(
        "inspect", help="show what the planner reads from a GGUF file",
        formatter_class=formatter,
        description="Read a GGUF model file's metadata and print the numbers the planner "
                    "uses: layers, native context, weight bytes, KV bytes per token.",
        epilog=("examples:\n"
                "  planner inspect models/Qwen3-Coder-480B-A35B-Q4_K_M-00001-of-00006.gguf\n"
                "  planner inspect model.gguf --kv-cache-type q8_0\n\n"
                "exit codes: 0 read, 2 bad input"))
    inspect.add_argument("model", metavar="MODEL.gguf", help="GGUF file (first shard)")
    inspect.add_argument("--kv-cache-type", default="f16",
                         help="KV cache type to size the cache for (default f16)")
    inspect.add_argument("--json", action="store_true", help="print the model spec as JSON")
    inspect.set_defaults(handler=_command_inspect)

    presets = commands.add_parser(
        "presets", help="list the model presets", formatter_class=formatter,
        description="List the model presets a fleet file can name in [model] preset = ...",
        epilog="examples:\n  planner presets\n  planner presets --json")
    presets.add_argument("--json", action="store_true", help="print the presets as JSON")
    presets.set_defaults(handler=_command_presets)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
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
        return _exit_code(error)
    except BrokenPipeError:
        # Output piped into e.g. `head`: the reader left, which is not an error.
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
