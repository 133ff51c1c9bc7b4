"""``planner candidates FLEET``: every shape the planner tries, as a table or CSV."""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any

import planner
from planner.cli._common import (
    EXIT_NO_TOPOLOGY,
    EXIT_OK,
    add_command,
    add_fleet_argument,
    add_memory_model_argument,
    exit_code,
    load_request,
    say_error,
)
from planner.errors import PlanError
from planner.fleet import FleetFileError
from planner.limits import MAX_LISTED_NODE_IDS
from planner.models import load_gpu_catalog
from planner.performance import (
    ESTIMATE_NOTE,
    fleet_model_traffic,
    kinds_error_note,
    load_calibration,
    node_speeds,
    with_candidate_estimates,
)
from planner.planning.nodesets import NodeIds, layer_count_entries, node_set_text
from planner.reports.content import candidate_records
from planner.reports.tables import (
    candidate_rows_table,
    spreadsheet_safe,
    terminal_safe,
    text_table,
)

NAME = "candidates"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run, help="list every shape the planner considers",
        description="List every (context, stage count, lanes) shape the planner tries, in "
                    "order, with the best node set for each or why none fits.",
        examples=("planner candidates data/fleets/qwen480b-10x80.toml",
                  "planner candidates data/fleets/qwen480b-10x80.toml --csv > shapes.csv"),
        exit_codes="0 a shape is selected, 1 no valid topology, 2 bad input")
    add_fleet_argument(parser)
    add_memory_model_argument(parser)
    parser.add_argument("--csv", action="store_true",
                        help="print CSV (node ids and stage layer counts joined with ';', "
                             "a run of r stages of n layers as rxn; a set of more than "
                             f"{MAX_LISTED_NODE_IDS} as runs first..last, the rest counted) "
                             "instead of a table")


def _csv_cell(column: str, value: Any) -> Any:
    if column == "stage_layer_counts":
        return ";".join(layer_count_entries(value))
    if isinstance(value, list | NodeIds):
        value = node_set_text(value, ";")
    if value is None:
        return ""
    if isinstance(value, str):
        return spreadsheet_safe(value)
    return value


def run(args: argparse.Namespace) -> int:
    document, request = load_request(args.fleet, args.memory_model)
    try:
        frame = planner.candidates(request)
    except PlanError as error:
        say_error(args.fleet, error)
        return exit_code(error)
    records = candidate_records(frame)
    if args.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(planner.CANDIDATE_COLUMNS)
        for record in records:
            writer.writerow([_csv_cell(column, record[column])
                             for column in planner.CANDIDATE_COLUMNS])
    else:
        catalog = load_gpu_catalog()
        try:
            traffic = fleet_model_traffic(document.model, document.base_dir)
        except FleetFileError:
            traffic = None
        estimated = candidate_records(with_candidate_estimates(
            frame, request, traffic, catalog, node_kinds=document.node_kinds))
        print(text_table(candidate_rows_table(estimated, request.target_decode_tpot_ms)))
        if any(record["estimated_tpot_ms"] is not None for record in estimated):
            speeds = node_speeds(request.nodes, catalog, document.node_kinds).values()
            print(f"\nest.: {ESTIMATE_NOTE} "
                  f"{kinds_error_note(load_calibration(), speeds, traffic=traffic)}")
    if not any(record["selected"] for record in records):
        print(f"planner: {terminal_safe(args.fleet)}: NoValidTopology: no candidate shape "
              "fits (see the reasons above)", file=sys.stderr)
        return EXIT_NO_TOPOLOGY
    return EXIT_OK
