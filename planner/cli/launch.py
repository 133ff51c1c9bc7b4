"""``planner launch FLEET``: the llama.cpp commands that run the fleet's plan."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from planner.cli._common import (
    EXIT_OK,
    add_command,
    add_fleet_argument,
    add_memory_model_argument,
    load_request,
    options_named,
    plan_or_exit_code,
)
from planner.limits import DEFAULT_UBATCH
from planner.llamacpp.launch import launch_for_plan

NAME = "launch"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run, help="print the llama.cpp commands that run a fleet's plan",
        description="Plan a fleet file and print the commands that run the plan with "
                    "llama.cpp: one rpc-server per stage node (at the node's address = "
                    "\"host:port\", else NODE_ID:50052) and the llama-server command with "
                    "--rpc, a --tensor-split that puts exactly the plan's layers on each "
                    "node, the plan's context and lanes and the model's KV cache type. "
                    "The commands are for bash (an argument with control characters is "
                    "written $'...' with \\xHH bytes).\n\n"
                    "llama.cpp refuses a quantized V cache without flash attention, so "
                    "--flash-attn off works only with an f16/bf16/f32 KV cache.",
        examples=("planner launch fleet.toml", "planner launch fleet.toml --json",
                  "planner launch fleet.toml --model /models/model.gguf"),
        exit_codes="0 commands printed, 1 no valid topology, 2 bad input")
    add_fleet_argument(parser)
    parser.add_argument("--model", metavar="PATH",
                        help="the GGUF file as the serving host sees it (default: the "
                             "fleet file's gguf); a file here is the model planned, "
                             "else the fleet's model is")
    parser.add_argument("--flash-attn", choices=("on", "off"), default="on",
                        help="flash attention (-fa), default on")
    parser.add_argument("--ubatch", type=int, default=DEFAULT_UBATCH, metavar="U",
                        help=f"physical batch size (-ub), default {DEFAULT_UBATCH}")
    add_memory_model_argument(parser)
    parser.add_argument("--json", action="store_true",
                        help="print stages, rpc_servers and llama_server as JSON")


def run(args: argparse.Namespace) -> int:
    # A --model that is a file here is the model launched, so it is the one planned (as
    # planner verify plans it); a path only the serving host has leaves the fleet's.
    here = args.model is not None and Path(args.model).is_file()
    document, request = load_request(args.fleet, args.memory_model,
                                     gguf=args.model if here else None)
    plan = plan_or_exit_code(args.fleet, request, args.json)
    if isinstance(plan, int):
        return plan
    with options_named({"ubatch": "--ubatch"}):
        launch = launch_for_plan(document, plan, model_path=args.model,
                                 flash_attn=args.flash_attn == "on", ubatch=args.ubatch)
    if args.json:
        print(json.dumps(launch.to_dict(), indent=2))
    else:
        # shell() writes control characters as escapes: the text is safe to print.
        print(launch.shell(), end="")
    return EXIT_OK
