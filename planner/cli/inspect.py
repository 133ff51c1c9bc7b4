"""``planner inspect MODEL.gguf``: the numbers the planner reads from a GGUF file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from planner.cli._common import EXIT_OK, add_command
from planner.limits import DEFAULT_CACHE_TYPE
from planner.reports.tables import terminal_lines

NAME = "inspect"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run, help="show what the planner reads from a GGUF file",
        description="Read a GGUF model file's metadata and print the numbers the planner "
                    "uses: layers, native context, weight bytes, KV bytes per token.",
        examples=("planner inspect models/Qwen3-Coder-480B-A35B-Q4_K_M-00001-of-00006.gguf",
                  "planner inspect model.gguf --kv-cache-type q8_0"),
        exit_codes="0 read, 2 bad input")
    parser.add_argument("model", metavar="MODEL.gguf", help="GGUF file (first shard)")
    parser.add_argument("--kv-cache-type", default=DEFAULT_CACHE_TYPE,
                        help="KV cache type to size the cache for (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the model spec as JSON")


def run(args: argparse.Namespace) -> int:
    from planner import models

    # A missing file, a device or a folder is refused by the reader, by name.
    spec = models.from_gguf(Path(args.model), kv_cache_type=args.kv_cache_type)
    if args.json:
        print(json.dumps(spec.to_dict(), indent=2))
    else:
        print(terminal_lines(models.describe_model(spec)))
    return EXIT_OK
