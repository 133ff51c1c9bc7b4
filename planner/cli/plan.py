"""``planner plan FLEET``: the plan for a fleet file, as a table or as docs/rules.md §7 JSON."""

from __future__ import annotations

import argparse
import json
import sys

from planner.cli._common import (
    EXIT_OK,
    add_calibration_argument,
    add_catalog_argument,
    add_command,
    add_fleet_argument,
    add_memory_model_argument,
    load_request,
    result_or_exit_code,
)
from planner.models import gpu_catalog_with
from planner.reports.content import build_report
from planner.reports.tables import (
    TextTable,
    choice_table,
    choice_text,
    estimate_rows,
    memory_model_text,
    memory_table,
    stage_table,
    terminal_safe,
    text_table,
)
from planner.units import counted, format_bytes, format_milliseconds

NAME = "plan"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run, help="print the plan for a fleet file",
        description="Plan a fleet file (.toml, or .json with a planning request's field names) and "
                    "print the stages as a table.",
        examples=("planner plan data/fleets/qwen480b-5x80.toml",
                  "planner plan data/fleets/qwen480b-5x80.toml --json   # docs/rules.md §7"),
        exit_codes="0 plan found, 1 no valid topology, 2 bad input")
    add_fleet_argument(parser)
    add_memory_model_argument(parser)
    add_catalog_argument(parser, "for the nodes' kinds")
    add_calibration_argument(parser)
    parser.add_argument("--json", action="store_true",
                        help="print the plan as JSON (the plan's field names)")


def run(args: argparse.Namespace) -> int:
    document, request = load_request(args.fleet, args.memory_model)
    result = result_or_exit_code(args.fleet, request, args.json)
    if isinstance(result, int):
        return result
    plan = result.plan_or_raise()
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2))
        return EXIT_OK
    catalog = gpu_catalog_with(args.catalog) if args.catalog is not None else None
    content = build_report(document, include_candidates=False, include_what_if=False,
                           planned=result, catalog=catalog)
    # The model's own name whichever way the file gives it (preset, GGUF or numbers), as
    # the reports show it.
    stored = content.model["file_bytes"]
    print(terminal_safe(f"{document.title}: {content.model['name']}" + (
        "" if stored is None else f", run from a file of {format_bytes(stored)}")))
    print(f"context {plan.context_length:,} tokens, {plan.parallel_lanes} parallel lanes, "
          f"{plan.stage_count} stage{'s' if plan.stage_count != 1 else ''}")
    network = plan.estimated_decode_network_ms_per_token
    speed = content.estimate if content.estimate and content.estimate.get("available") else None
    if network is not None:
        ranks = " (ranks the shapes, docs/rules.md §6)" if speed is not None else ""
        print(f"estimated decode network time {format_milliseconds(network)} per token{ranks}")
    if content.tpot_target_met is not None:
        verdict = "met" if content.tpot_target_met else "missed"
        judged = ("estimated TPOT "
                  + format_milliseconds(speed["estimated_tpot_ms"], estimated=True)
                  if speed is not None
                  else "network estimate "
                  + ("unknown" if network is None else format_milliseconds(network))
                  + " (no speed estimate)")
        target = request.target_decode_tpot_ms
        print(f"TPOT target {'none' if target is None else format_milliseconds(target)} "
              f"{verdict}: {judged}")
    print(terminal_safe(f"memory model {memory_model_text(content)}"))
    print()
    print(text_table(stage_table(content)))
    rows = estimate_rows(content)
    if rows:
        print()
        print("speed and cost (ESTIMATE):")
        figures = tuple(row for row in rows if row[0] != "estimate note")
        print(text_table(TextTable(("estimate", "value"), figures, ("l", "l"))))
        for label, note in rows:
            if label == "estimate note":
                print(terminal_safe(f"- {note}"))
    if memory_table(content).rows:
        print()
        print("what llama.cpp allocates per stage:")
        print(text_table(memory_table(content)))
    print()
    print(terminal_safe(f"why this shape: {choice_text(content)}"))
    if content.choice and content.choice["higher_contexts"]:
        print(text_table(choice_table(content)))
    if content.quorum is not None:
        quorum = content.quorum
        print(f"\nstartup quorum: {quorum['quorum_requirement']} of "
              f"{quorum['planned_stages']} stages must accept; tolerates "
              f"{counted(quorum['tolerated_failures'], 'stage failure')}")
    for warning in content.warnings:
        print(terminal_safe(f"warning: {warning['message']}"), file=sys.stderr)
    return EXIT_OK
