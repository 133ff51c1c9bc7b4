"""``planner verify PLAN_OR_FLEET LOG ...``: a launched split's log against its plan's
estimate, device by device."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from planner.cli._common import (
    EXIT_NO_TOPOLOGY,
    EXIT_OK,
    UserError,
    add_calibration_argument,
    add_catalog_argument,
    add_command,
    add_memory_model_argument,
    load_request,
    options_named,
    plan_or_exit_code,
)
from planner.limits import DEFAULT_UBATCH
from planner.llamacpp import model_from_gguf
from planner.llamacpp.launch import launch_for_plan, launch_settings
from planner.llamacpp.log import MIB, read_log
from planner.llamacpp.verify import MEMORY_FIGURES, Check, Verification, speed_estimates, verify
from planner.models import ModelError, gpu_catalog_with
from planner.performance import fleet_model_traffic
from planner.planning import Plan
from planner.reports.tables import TextTable, terminal_safe, text_table

NAME = "verify"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run,
        help="compare a launched split's log with its plan's memory and speed estimate",
        description=(
            "Read the log of a split launched with planner launch's commands (llama-server's "
            "or llama-cli's output, with its buffer and timing lines) and print, per device, "
            "the weights, KV cache, compute buffer and total llama.cpp allocated against "
            "the estimate, and the decode and prefill speed it measured against the "
            "estimate for the same requests (one lane, their mean prompt and depth), with "
            "the difference and the error the estimate states: memory within 0.05 MiB "
            "(weights, KV, output), 10 % (compute) and 5 % (total); speed within the "
            "calibration's median error on held-out runs (so about half of correct "
            "estimates miss it).\n\n"
            "PLAN_OR_FLEET is the fleet file the plan was made from (it is planned again, "
            "with the same options launch took), or a plan saved by planner plan --json, "
            "with --fleet. A log of another run (other devices, context, lanes, cache "
            "type, micro-batch, flash attention or layers) is refused."),
        examples=("planner verify fleet.toml llama-server.log",
                  "planner verify fleet.toml server.log --json",
                  "planner verify plan.json server.log --fleet fleet.toml"),
        exit_codes="0 every figure within the estimate's stated error, 1 a figure outside "
                   "it, 2 bad input or a log of another run")
    parser.add_argument("plan_or_fleet", metavar="PLAN_OR_FLEET",
                        help="the fleet file, or a plan saved by planner plan --json")
    parser.add_argument("logs", metavar="LOG", nargs="+",
                        help="llama-server's or llama-cli's log of a run of the plan")
    parser.add_argument("--fleet", metavar="FLEET",
                        help="the fleet file a saved plan was made from")
    parser.add_argument("--model", metavar="PATH",
                        help="the GGUF file (default: the fleet file's gguf)")
    parser.add_argument("--flash-attn", choices=("on", "off"), default="on",
                        help="flash attention as launched (default on)")
    parser.add_argument("--ubatch", type=int, default=DEFAULT_UBATCH, metavar="U",
                        help=f"physical batch size as launched (default {DEFAULT_UBATCH})")
    add_memory_model_argument(parser)
    add_catalog_argument(parser, "for the nodes' kinds")
    add_calibration_argument(parser)
    parser.add_argument("--json", action="store_true",
                        help="print each log's checks, notes and verdict as JSON")


def _saved_plan(path: str) -> Plan | None:
    """The plan in ``path`` when it is a saved plan (``planner plan --json``)."""
    if not path.lower().endswith(".json"):
        return None
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None  # read as a fleet file, which names what is wrong with it
    if not isinstance(data, dict) or "stages" not in data or "context_length" not in data:
        return None
    return Plan.from_dict(data)


def run(args: argparse.Namespace) -> int:
    saved = _saved_plan(args.plan_or_fleet)
    fleet = args.fleet if saved is not None else args.plan_or_fleet
    if saved is not None and args.fleet is None:
        raise UserError(f"{args.plan_or_fleet} is a plan, which holds no model: give the "
                        "fleet file it was planned from with --fleet")
    if saved is None and args.fleet is not None:
        raise UserError("--fleet goes with a saved plan; the first argument is already a "
                        "fleet file")
    document, request = load_request(fleet, args.memory_model, gguf=args.model)
    if saved is not None:
        unknown = sorted(set(saved.node_ids) - {node.node_id for node in request.nodes})
        if unknown:
            raise UserError(f"the plan's nodes {', '.join(unknown)} are not in {fleet}")
        plan = saved
    else:
        planned = plan_or_exit_code(fleet, request, args.json)
        if isinstance(planned, int):
            return planned
        plan = planned
    flash_attn = args.flash_attn == "on"
    with options_named({"ubatch": "--ubatch"}):
        launch = launch_for_plan(document, plan, model_path=args.model,
                                 flash_attn=flash_attn, ubatch=args.ubatch)
        settings = launch_settings(document, plan, flash_attn=flash_attn, ubatch=args.ubatch)
    gguf = str(document.model.gguf_path(document.base_dir))
    try:
        model = model_from_gguf(gguf)
        catalog = gpu_catalog_with(args.catalog)
    except ModelError as error:
        raise UserError(f"{error.message}") from None
    traffic = fleet_model_traffic(document.model, document.base_dir)
    results = []
    for path in args.logs:
        measured = read_log(path)
        speed = speed_estimates(request, plan, traffic, catalog, measured,
                                node_kinds=document.node_kinds)
        results.append((path, verify(launch, model, settings, measured, speed)))
    if args.json:
        print(json.dumps({"plan": plan.to_dict(),
                          "logs": [{"log": path, **result.to_dict()}
                                   for path, result in results]}, indent=2))
    else:
        for index, (path, result) in enumerate(results):
            if index:
                print()
            _print(path, plan, result)
    return EXIT_OK if all(result.passed for _, result in results) else EXIT_NO_TOPOLOGY


def _print(path: str, plan: Plan, result: Verification) -> None:
    print(terminal_safe(f"{path}: the plan's {plan.stage_count} stage(s) at context "
                        f"{plan.context_length:,}, {plan.parallel_lanes} lane(s)"))
    print(text_table(_table(result.checks)))
    for note in result.notes:
        print(terminal_safe(f"- {note}"))
    misses = result.misses
    if misses:
        print(terminal_safe(f"{len(misses)} figure(s) outside the estimate's stated error: "
                            + ", ".join(f"{c.device} {c.figure}" for c in misses)))
    else:
        print("every figure within the estimate's stated error")


def _table(checks: tuple[Check, ...]) -> TextTable:
    def shown(check: Check, value: float | None) -> str:
        if value is None:
            return "—"
        if check.figure in MEMORY_FIGURES:
            return f"{value / MIB:,.2f} MiB"
        return f"{value:,.2f}"

    def difference(check: Check) -> str:
        if check.estimated is None or check.measured is None:
            return "—"
        delta = check.estimated - check.measured
        error = "" if check.error is None else f" ({check.error:+.1%})"
        if check.figure in MEMORY_FIGURES:
            return f"{delta / MIB:+,.3f} MiB{error}"
        return f"{delta:+,.2f}{error}"

    def verdict(value: Any) -> str:
        return "—" if value is None else ("yes" if value else "NO")

    rows = tuple((check.device, check.layers, check.figure.removesuffix("_bytes"),
                  shown(check, check.estimated), shown(check, check.measured),
                  difference(check), check.allowed, verdict(check.within))
                 for check in checks)
    return TextTable(("device", "layers", "figure", "estimated", "measured", "difference",
                      "allowed", "within"), rows, ("l", "l", "l", "r", "r", "r", "l", "l"))
