"""``planner size MODEL``: the cheapest fleets of catalog GPUs that meet the targets."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

from planner.cli._common import (
    EXIT_NO_TOPOLOGY,
    EXIT_OK,
    UserError,
    add_calibration_argument,
    add_catalog_argument,
    add_command,
    add_file_size_argument,
    fleet_model_in_file,
    model_source,
    option_error,
    option_kind,
    spec_in_file,
    token_count,
)
from planner.fleet import load_fleet
from planner.limits import DEFAULT_PRICE_KIND
from planner.models import ModelSpec, from_gguf, gpu_catalog_with, load_preset
from planner.models.gpus import PRICE_KINDS
from planner.reports.sizing import answer_text, fleet_table
from planner.reports.tables import spreadsheet_safe, terminal_json, terminal_safe, text_table
from planner.sizing import SizingError, SizingTargets, size_fleet
from planner.targets import TargetsError
from planner.units import format_milliseconds

NAME = "size"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run,
        help="the cheapest fleets of catalog GPUs that meet a model's targets",
        description=(
            "Find the fleets (counts of catalog GPU kinds, nodes <kind>-00, <kind>-01, ...) "
            "with the lowest price per hour whose plan reaches the minimum context and "
            "lanes and, with --tpot, an estimated TPOT within it; with --tolerate F, also "
            "after losing any F nodes. Exact within each kind's max_count. Speeds are "
            "estimates from the catalog's memory bandwidth."),
        examples=("planner size qwen3-coder-480b-a35b --tolerate 1",
                  "planner size llama-3.1-70b --kinds h100-sxm-80gb,l40s --tpot 200 --ttft-ms 5000 "
                  "--prompt-tokens 8192 --json",
                  "planner size data/fleets/qwen480b-5x80.toml --catalog my-gpus.toml --csv"),
        exit_codes="0 fleets found, 1 no fleet meets the targets, 2 bad input")
    parser.add_argument("model", metavar="MODEL",
                        help="a preset id, a GGUF file or a fleet file (its [model] and "
                             "[planning] are used, its nodes ignored)")
    add_catalog_argument(parser, "to size with (--kinds keeps only some)")
    add_file_size_argument(parser)
    parser.add_argument("--min-context", metavar="N",
                        help="context the plan must reach, e.g. 131072 or 128k (default "
                             "the context floor)")
    parser.add_argument("--min-lanes", type=int, default=1, metavar="N",
                        help="parallel lanes the plan must reach (default 1)")
    parser.add_argument("--tolerate", type=int, default=0, metavar="F",
                        help="nodes the fleet must be able to lose (default 0)")
    parser.add_argument("--ttft-ms", type=int, metavar="MS",
                        help="estimated time to first token the plan must stay within, "
                             "for a prompt of --prompt-tokens")
    parser.add_argument("--prompt-tokens", metavar="P",
                        help="the prompt size --ttft-ms is for, e.g. 8192 or 8k")
    parser.add_argument("--tpot", type=int, metavar="MS",
                        help="estimated time per output token the plan must stay within")
    parser.add_argument("--kinds", metavar="NAME,...",
                        help="only these catalog kinds (ids or names, comma-separated)")
    parser.add_argument("--prices", choices=PRICE_KINDS, default=DEFAULT_PRICE_KIND,
                        help="which catalog prices to compare: rented (what a provider "
                             "charges per GPU-hour, the default) or owned (a purchase "
                             "spread over hours of use, as the Apple machines are priced); "
                             "kinds priced the other way are left out")
    add_calibration_argument(parser)
    parser.add_argument("--top", type=int, default=5, metavar="K",
                        help="how many fleets to list (default 5)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true",
                        help='print {"fleets": [...]}, cheapest first')
    output.add_argument("--csv", action="store_true", help="print the fleets as CSV")


def _model(source: str, file_size: str | None
           ) -> tuple[ModelSpec | dict[str, Any], str, dict[str, Any]]:
    """The model (a preset stored in ``file_size`` bytes where given), its display name
    and the fleet file's planning options."""
    kind = model_source(source)
    if kind == "fleet":
        document = load_fleet(source)
        choice, spec = fleet_model_in_file(document.model, file_size, document.base_dir)
        planning = {"minimum_nodes": document.minimum_nodes,
                    "target_decode_tpot_ms": document.target_decode_tpot_ms,
                    "context_length_override": document.context_length_override,
                    "parallel_lanes_override": document.parallel_lanes_override}
        model = spec if spec is not None else {**choice.resolve(document.base_dir),
                                               **(choice.numbers or {})}
        return model, choice.label, planning
    spec = from_gguf(Path(source)) if kind == "gguf" else load_preset(source)
    spec = spec_in_file(spec, file_size, kind)
    return spec, spec.name, {}


def run(args: argparse.Namespace) -> int:
    model, name, planning = _model(args.model, args.file_size)
    catalog = gpu_catalog_with(args.catalog)
    kinds = None if args.kinds is None else [k for k in args.kinds.split(",") if k.strip()]
    if kinds is not None and not kinds:
        raise UserError("--kinds names no kind")
    for kind in kinds or ():
        option_kind(catalog, kind, "--kinds")
    tpot = args.tpot if args.tpot is not None else planning.get("target_decode_tpot_ms")
    minimum_context, prompt_tokens = (
        None if value is None else token_count(value, option)
        for value, option in ((args.min_context, "--min-context"),
                              (args.prompt_tokens, "--prompt-tokens")))
    if (args.ttft_ms is None) != (prompt_tokens is None):
        raise UserError("--ttft-ms and --prompt-tokens go together: a time to first token "
                        "is for a prompt size")
    # The options a target out of range is named by (a fleet file's own TPOT target is the
    # file's, and keeps its name).
    options = {"minimum_lanes": "--min-lanes", "failures_tolerated": "--tolerate",
               "target_ttft_ms": "--ttft-ms", "top": "--top",
               **({"target_decode_tpot_ms": "--tpot"} if args.tpot is not None else {})}
    try:
        targets = SizingTargets(minimum_context=minimum_context,
                                minimum_lanes=args.min_lanes,
                                minimum_nodes=planning.get("minimum_nodes", 1),
                                target_decode_tpot_ms=tpot,
                                failures_tolerated=args.tolerate,
                                target_ttft_ms=args.ttft_ms, prompt_tokens=prompt_tokens)
        result = size_fleet(model, catalog, targets, top=args.top, kinds=kinds,
                            context_length_override=planning.get("context_length_override"),
                            parallel_lanes_override=planning.get("parallel_lanes_override"),
                            pareto=not (args.json or args.csv), price_kind=args.prices)
    except TargetsError as error:
        named = option_error(error, options) if error.code == "InvalidTargets" else None
        if named is None:
            raise
        raise named from None
    except SizingError as error:
        if error.code != "NoFleetMeetsTargets":
            raise
        if args.json:
            print(json.dumps({"fleets": [], "error": error.to_dict()}, indent=2))
        print(terminal_safe(f"planner: {name}: {error.message}"), file=sys.stderr)
        return EXIT_NO_TOPOLOGY
    fleets = [fleet.to_dict() for fleet in result.fleets]
    if args.json:
        print(terminal_json({"fleets": fleets, "price_kind": result.price_kind,
                             "notes": [*result.estimate_notes, *result.notes]}))
        return EXIT_OK
    if args.csv:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        columns = [key for key in fleets[0] if key != "counts"]
        writer.writerow(["fleet", *columns])
        for fleet, record in zip(result.fleets, fleets, strict=True):
            writer.writerow([spreadsheet_safe(fleet.label), *(
                ";".join(record[c]) if c == "nodes" else
                "" if record[c] is None else record[c] for c in columns)])
        sys.stdout.write(buffer.getvalue())
        return EXIT_OK
    print(terminal_safe(f"{name}: context >= {result.minimum_context:,}, lanes >= "
                        f"{targets.minimum_lanes}, tolerating {targets.failures_tolerated} "
                        "failed node(s)"
                        + ("" if tpot is None else f", TPOT <= {format_milliseconds(tpot)}")
                        + ("" if targets.target_ttft_ms is None else
                           f", TTFT <= {format_milliseconds(targets.target_ttft_ms)} for a "
                           f"{targets.prompt_tokens or 0:,}-token prompt")
                        + f"; {result.price_kind} prices"))
    print(terminal_safe(answer_text(result)))
    print()
    print(text_table(fleet_table(result.fleets)))
    if result.pareto:
        print()
        print("Pareto front over cost per hour, context and estimated TPOT:")
        print(text_table(fleet_table(result.pareto)))
    print()
    for note in (*result.estimate_notes, *result.notes):
        print(terminal_safe(note))
    return EXIT_OK
