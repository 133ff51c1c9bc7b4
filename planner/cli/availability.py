"""``planner availability FLEET``: how often the fleet's plan meets its targets when nodes
fail and are repaired."""

from __future__ import annotations

import argparse
import json
import sys

from planner.availability import (
    DEFAULT_ANNUAL_FAILURE_RATE,
    DEFAULT_REPAIR_HOURS,
    DEFAULT_TOLERANCE,
    QUICK_MAX_STATES,
    AvailabilityError,
)
from planner.availability.fleet import fleet_file_availability
from planner.cli._common import (
    EXIT_NO_TOPOLOGY,
    EXIT_OK,
    UserError,
    add_catalog_argument,
    add_command,
    add_fleet_argument,
    load_request,
    option_error,
    token_count,
)
from planner.limits import MAX_AVAILABILITY_NODE_PLANS
from planner.models import ModelError, gpu_catalog_with
from planner.planning.rules import CONTEXT_FLOOR
from planner.reports.tables import TextTable, terminal_safe, text_table
from planner.targets import plan_or_none
from planner.units import format_milliseconds

NAME = "availability"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run, help="how often the fleet can run the model when nodes fail",
        description=(
            "Each node is down a share u = repair_hours / (8760 / annual_failure_rate + "
            "repair_hours) of the time, independently. Print the probability that the "
            "surviving nodes have a plan meeting the targets, and the context the plan "
            "gets. Failure rates and repair times come from the node's own fleet-file "
            "entry (annual_failure_rate, repair_hours), else --afr / --repair-hours, else "
            "its catalog kind (the gpu it names, a <kind>-NN id, or the one kind with its "
            f"memory), else the defaults ({DEFAULT_ANNUAL_FAILURE_RATE:g} failures a year, "
            f"{DEFAULT_REPAIR_HOURS:g} hours). The targets "
            "are the fleet file's (minimum_nodes, and target_decode_tpot_ms judged by the "
            "speed estimate) with --min-context and --min-lanes, by one rule with planner "
            "size."),
        examples=("planner availability data/fleets/qwen480b-5x80.toml",
                  "planner availability data/fleets/qwen480b-5x80.toml --min-context 131072 "
                  "--json"),
        exit_codes="0 computed, 1 no valid topology even with every node up, 2 bad input")
    add_fleet_argument(parser)
    add_catalog_argument(parser, "for its failure figures")
    parser.add_argument("--min-context", metavar="N",
                        help="context the plan must reach, e.g. 131072 or 128k (default the "
                             "context floor, "
                             f"min(native, {CONTEXT_FLOOR}))")
    parser.add_argument("--min-lanes", type=int, default=1, metavar="N",
                        help="parallel lanes the plan must reach (default 1)")
    parser.add_argument("--afr", type=float, metavar="F",
                        help="failures per node-year for nodes without their own")
    parser.add_argument("--repair-hours", type=float, metavar="H",
                        help="mean hours to repair for nodes without their own")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, metavar="T",
                        help="large fleets: stop when the unexplored probability is below "
                             f"T (default {DEFAULT_TOLERANCE:g})")
    parser.add_argument("--max-states", type=int, default=QUICK_MAX_STATES, metavar="N",
                        help="large fleets: plan at most N failure states, then report the "
                             f"interval so far (default {QUICK_MAX_STATES:,}; each costs a "
                             "plan)")
    parser.add_argument("--json", action="store_true",
                        help="print availability, availability_lower, availability_upper, "
                             "states_evaluated and context_distribution as JSON")


# The fields whose fleet-wide value only an option gives, by the option.
_OPTION_OF = {"annual_failure_rate": "--afr", "repair_hours": "--repair-hours",
              "tolerance": "--tolerance", "max_states": "--max-states"}


def run(args: argparse.Namespace) -> int:
    document, request = load_request(args.fleet)
    minimum_context = (None if args.min_context is None
                       else token_count(args.min_context, "--min-context"))
    for name in ("min_lanes", "max_states"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1 (got {value})")
    try:
        catalog = gpu_catalog_with(args.catalog)
    except ModelError as error:
        raise UserError(f"{args.catalog or 'catalog'}: {error.message}") from None
    try:
        # Removing nodes never makes a plan fit, so a fleet with every node up and no
        # plan is never up; asked first, as a large fleet's states are not all seen.
        if request.nodes and plan_or_none(request) is None:
            message = "no valid topology even with every node up; see 'planner plan'"
            if args.json:
                print(json.dumps({"error": {"code": "NoValidTopology", "message": message}}))
            print(terminal_safe(f"planner: {args.fleet}: {message}"), file=sys.stderr)
            return EXIT_NO_TOPOLOGY
        # The figures, targets and speed estimate the workbench's panel uses too: the
        # targets the fleet file states with the command's on top (one rule with
        # planner size: a minimum context above the model's native one is refused).
        found = fleet_file_availability(
            document, request, catalog=catalog, annual_failure_rate=args.afr,
            repair_hours=args.repair_hours, minimum_context=minimum_context,
            minimum_lanes=args.min_lanes, tolerance=args.tolerance,
            max_states=args.max_states)
        result, targets = found.result, found.targets
        missed = found.missed_with_every_node_up
    except (AvailabilityError, ModelError) as error:
        # A figure given on the command line is the option's fault, not the fleet file's.
        named = (option_error(error, _OPTION_OF) if error.details.get("node_id") is None
                 else None)
        if named is not None:
            raise named from None
        raise UserError(f"{args.fleet}: {error.message}") from None
    if not result.exact and result.unexplored_mass > args.tolerance:
        bound = (f"--max-states {args.max_states:,}; raise it to narrow the interval"
                 if result.states_evaluated >= args.max_states else
                 f"the work bound of {MAX_AVAILABILITY_NODE_PLANS:,} nodes planned in all")
        print(f"planner: stopped after {result.states_evaluated:,} plans of failure states "
              f"({bound}) with {result.unexplored_mass:.3g} of the probability unexplored "
              f"(more than --tolerance {args.tolerance:g}); the interval holds the exact "
              "value", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return EXIT_OK
    tpot = ("" if targets.target_decode_tpot_ms is None
            else f", estimated TPOT <= {format_milliseconds(targets.target_decode_tpot_ms)}")
    print(terminal_safe(f"{document.title}: {len(request.nodes)} nodes, targets context >= "
                        f"{targets.minimum_context:,}, lanes >= {targets.minimum_lanes}"
                        f"{tpot}"))
    if result.exact:
        print(f"availability {result.availability:.6%} (exact, "
              f"{result.states_evaluated:,} plans of failure states)")
    else:
        print(f"availability between {result.availability_lower:.6%} and "
              f"{result.availability_upper:.6%} ({result.states_evaluated:,} plans of the "
              "most likely failure states)")
    if missed:
        print("with every node up, the plan misses the targets: " + "; ".join(missed))
    expected = result.expected_hours_down_per_year
    fewest, most = result.hours_down_per_year
    if expected is not None:
        print(f"expected time below the targets: {expected:,.1f} hours a year")
    else:
        print(f"time below the targets: between {fewest:,.1f} and {most:,.1f} hours a "
              "year (not known more closely)")
    rows = [["no plan" if context == 0 else f"{context:,}", f"{probability:.6%}"]
            for context, probability in sorted(result.context_distribution.items(),
                                               reverse=True)]
    if result.unexplored_mass:
        rows.append(["not explored", f"{result.unexplored_mass:.6%}"])
    print()
    print(text_table(TextTable(("context", "probability"), tuple(map(tuple, rows)),
                               ("r", "r"))))
    return EXIT_OK
