"""``planner presets``: the model presets a fleet file can name."""

from __future__ import annotations

import argparse
import json

from planner.cli._common import EXIT_OK, UserError, add_command
from planner.reports.tables import TextTable, text_table

NAME = "presets"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run, help="list the model presets",
        description="List the model presets a fleet file can name in [model] preset = ...",
        examples=("planner presets", "planner presets --json"))
    parser.add_argument("--json", action="store_true", help="print the presets as JSON")


def run(args: argparse.Namespace) -> int:
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
             format_bytes(spec.active_weight_bytes or spec.model_weight_bytes),
             f"{spec.native_context_length:,}",
             f"{spec.kv_cache_type} ({format_bytes(spec.kv_bytes_per_token)}/token)",
             format_bytes(sum(spec.layer_state_bytes_per_sequence or ()))
             if spec.layer_state_bytes_per_sequence else "-")
            for name, spec in specs.items()]
    print(text_table(TextTable(
        ("preset", "model", "layers", "weights", "read per token", "native context",
         "default KV cache", "state per sequence"),
        tuple(rows), tuple("llrrrrlr"))))
    print("\nUse one in a fleet file as [model] preset = \"<preset>\" "
          "(kv_cache_type = \"q8_0\" etc. to change the KV cache).")
    return EXIT_OK
