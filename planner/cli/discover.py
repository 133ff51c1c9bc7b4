"""``planner discover HOST:PORT ...``: ask llama.cpp rpc-servers for their devices and
write the fleet file they make."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from planner.cli._common import (
    EXIT_OK,
    UserError,
    add_catalog_argument,
    add_command,
    add_file_size_argument,
    fleet_model_in_file,
    option_kind,
)
from planner.fleet import FleetFileError, ModelChoice, save_fleet
from planner.limits import DEFAULT_CACHE_TYPE, DEFAULT_RPC_TIMEOUT_S, MAX_RPC_TIMEOUT_S
from planner.llamacpp.discovery import devices_table, discovered_fleet, discovery_warnings
from planner.llamacpp.runner import query_rpc_servers
from planner.models import ModelError, gpu_catalog_with, load_preset
from planner.reports.tables import TextTable, terminal_safe, text_table
from planner.units import format_bytes, format_milliseconds

NAME = "discover"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run, help="ask rpc-servers for their devices and write a fleet file",
        description=(
            "Ask each llama.cpp rpc-server named (HOST:PORT, llama.cpp b11434's RPC "
            "protocol 7.0) for its devices' total and free memory, and print them. With "
            "-o, write the fleet file they make: one node per device, vram its total, "
            "max_vram its free memory, latency_ms the shortest round trip to its server "
            "(measured from here: run discover on the host that will run llama-server), "
            "and its server's address (and rpc_device on a server of several devices) for "
            "planner launch. Only the addresses named are connected to, each name resolved "
            "once; nothing is started or stopped. An existing file is not overwritten "
            "unless --force.\n\n"
            "An rpc-server serves one client at a time: one that a llama-server is using "
            "does not answer until it is done (RpcTimeout)."),
        examples=("planner discover 10.0.0.7:50052 10.0.0.8:50052",
                  "planner discover gpu-a:50052 gpu-b:50052 --model models/model.gguf "
                  "-o fleet.toml",
                  "planner discover 127.0.0.1:50052 --model qwen3-coder-480b-a35b "
                  "--gpu rtx-4090 -o fleet.toml --force",
                  "planner discover 10.0.0.7:50052 --json"),
        exit_codes="0 every server answered, 2 an address, a server or its reply is "
                   "refused (nothing is written)")
    parser.add_argument("servers", metavar="HOST:PORT", nargs="+",
                        help="an rpc-server's address: a host name or IPv4 address and port")
    parser.add_argument("--model", metavar="MODEL",
                        help="the model the fleet file plans: a GGUF file or a preset id "
                             "(required with -o)")
    parser.add_argument("--kv-cache-type", metavar="T",
                        help="the KV cache type of the model (default "
                             f"{DEFAULT_CACHE_TYPE})")
    add_file_size_argument(parser)
    parser.add_argument("-o", "--output", metavar="FLEET",
                        help="write the fleet file here (.toml or .json)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite the output file if it exists")
    parser.add_argument("--gpu", metavar="KIND",
                        help="the catalog GPU kind of every device (for the speed estimate "
                             "and llama.cpp's overhead; mixed fleets: edit the file)")
    add_catalog_argument(parser, "where --gpu's kind is looked up")
    parser.add_argument("--name", help="the fleet's name in the file")
    parser.add_argument("--no-latency", action="store_true",
                        help="leave latency_ms out (discover does not run where "
                             "llama-server will)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_RPC_TIMEOUT_S, metavar="S",
                        help="seconds each server has for its name, connection and replies "
                             f"(default {DEFAULT_RPC_TIMEOUT_S:g})")
    parser.add_argument("--json", action="store_true",
                        help="print servers, devices, warnings and the file written as JSON")


def run(args: argparse.Namespace) -> int:
    if not 0 < args.timeout <= MAX_RPC_TIMEOUT_S:
        raise UserError(f"--timeout must be above 0 and at most {MAX_RPC_TIMEOUT_S:g} s "
                        f"(got {args.timeout:g})")
    if args.output is not None and args.model is None:
        raise UserError("a fleet file names its model: give --model (a GGUF file or a "
                        "preset id) with -o")
    if args.gpu is not None:
        option_kind(gpu_catalog_with(args.catalog), args.gpu)
    if args.output is not None and not args.force and os.path.lexists(args.output):
        # Refused before any server is asked; the save refuses a file that appears later.
        raise FleetFileError("WouldOverwrite", "already exists, and is not overwritten unless "
                             "asked (--force)", path=args.output)
    model = _model_choice(args) if args.model is not None else None
    reports = query_rpc_servers(args.servers, timeout_s=args.timeout)
    warnings = discovery_warnings(reports)
    written = None
    if args.output is not None and model is not None:
        document = discovered_fleet(reports, model, name=args.name, gpu=args.gpu,
                                    latency=not args.no_latency)
        written = str(save_fleet(document, args.output, overwrite=args.force,
                                 drop_comments=args.force))
    rows = devices_table(reports)
    if args.json:
        print(json.dumps({"servers": [report.to_dict() for report in reports],
                          "devices": rows, "warnings": warnings, "fleet_file": written},
                         indent=2))
    else:
        print(text_table(_table(rows)))
        if written is not None:
            print()
            print(terminal_safe(f"wrote {written}: {len(rows)} node(s); next: planner "
                                f"plan {written}, planner launch {written}"))
    for warning in warnings:
        print(terminal_safe(f"warning: {warning}"), file=sys.stderr)
    return EXIT_OK


def _table(rows: list[dict[str, object]]) -> TextTable:
    def cells(row: dict[str, object]) -> tuple[str, ...]:
        trip = row["round_trip_ms"]
        return (str(row["node_id"]), str(row["connected_to"]), str(row["rpc_device"]),
                format_bytes(int(str(row["total_bytes"]))),
                format_bytes(int(str(row["free_bytes"]))),
                format_milliseconds(trip) if isinstance(trip, int | float) else "—",
                str(row["protocol_version"]))
    return TextTable(("node", "connected to", "device", "total", "free", "round trip",
                      "protocol"), tuple(cells(row) for row in rows),
                     ("l", "l", "r", "r", "r", "r", "l"))


def _model_choice(args: argparse.Namespace) -> ModelChoice:
    """The model as the fleet file will name it: a GGUF path relative to the file's
    folder (or absolute), or a preset id; checked before any server is asked."""
    given = Path(args.model).expanduser()
    if given.suffix.lower() == ".gguf" or given.exists():
        if not given.is_file():
            raise UserError(f"--model: no GGUF file {str(given)!r}")
        # Paths as given, links not followed: the file keeps the name the person chose.
        gguf = os.path.abspath(given)
        base = None
        if args.output is not None:
            base = Path(os.path.abspath(args.output)).parent
            gguf = Path(os.path.relpath(gguf, base)).as_posix()
        choice = ModelChoice(gguf=gguf, kv_cache_type=args.kv_cache_type)
    else:
        try:
            load_preset(args.model, kv_cache_type=args.kv_cache_type)
        except ModelError as error:
            raise UserError(f"--model: {error.message} (give a GGUF file or a preset id)"
                            ) from None
        choice = ModelChoice(preset=args.model, kv_cache_type=args.kv_cache_type)
        base = None
    try:
        choice, _ = fleet_model_in_file(choice, args.file_size, base)
    except FleetFileError as error:
        raise UserError(f"--model: {error.message}") from None
    return choice
