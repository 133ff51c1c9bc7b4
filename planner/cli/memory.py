"""``planner memory MODEL.gguf``: what llama.cpp allocates on each device of a split."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from planner.cli._common import EXIT_OK, UserError, add_command, options_named
from planner.limits import DEFAULT_CACHE_TYPE, DEFAULT_UBATCH
from planner.llamacpp import KEYS, MemoryEstimate
from planner.llamacpp.settings import PROGRAMS
from planner.reports.tables import TextTable, size, terminal_safe, text_table
from planner.units import UnitError, layer_range, parse_bytes, parse_context

NAME = "memory"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run, help="show llama.cpp's memory per device for one model",
        description="Estimate what llama.cpp allocates on each device of a layer split of "
                    "a GGUF model (weights, KV cache, compute buffer, output buffer, "
                    "backend overhead) and on the host.\n\n"
                    "llama.cpp refuses a quantized V cache (q8_0, q4_0, ...) without flash "
                    "attention: use --flash-attn on or an f16/bf16/f32 V cache.",
        examples=("planner memory model.gguf --context 32768 --devices 2",
                  "planner memory model.gguf --context 32k --kv-cache-type q8_0 "
                  "--parallel 4 --kv-unified --layers-per-device 10,8 --json",
                  "planner memory model.gguf --context 8192 --devices 0   # the host alone"),
        exit_codes="0 estimated, 2 bad input")
    parser.add_argument("model", metavar="MODEL.gguf", help="GGUF file (first shard)")
    parser.add_argument("--context", required=True, metavar="N",
                        help="context length in tokens (-c), e.g. 32768 or 32k")
    parser.add_argument("--kv-cache-type", metavar="T",
                        help=f"K and V cache type together (default {DEFAULT_CACHE_TYPE})")
    parser.add_argument("--cache-type-k", metavar="T",
                        help="K cache type (-ctk), default --kv-cache-type or "
                             f"{DEFAULT_CACHE_TYPE}")
    parser.add_argument("--cache-type-v", metavar="T",
                        help="V cache type (-ctv), default --kv-cache-type or "
                             f"{DEFAULT_CACHE_TYPE}; a "
                             "quantized V cache needs flash attention")
    parser.add_argument("--parallel", type=int, default=1, metavar="P",
                        help="parallel lanes (-np), default 1")
    parser.add_argument("--kv-unified", action="store_true",
                        help="one KV cache shared by the lanes (-kvu)")
    parser.add_argument("--ubatch", type=int, default=DEFAULT_UBATCH, metavar="U",
                        help=f"physical batch size (-ub), default {DEFAULT_UBATCH}")
    parser.add_argument("--flash-attn", choices=("on", "off"), default="on",
                        help="flash attention (-fa), default on")
    parser.add_argument("--program", choices=PROGRAMS, default=PROGRAMS[0],
                        help="the llama.cpp program: llama-server (as planner launch starts "
                             "it; a prompt's logits for one token per lane) or "
                             "llama-completion (logits for every token of a ubatch, a larger "
                             "compute buffer); default llama-server")
    parser.add_argument("--devices", type=int, metavar="D",
                        help="devices beside the host (GPUs or rpc-servers), layers split "
                             "evenly; 0 is the host alone; default 1")
    parser.add_argument("--layers-per-device", nargs="+", metavar="N",
                        help="layers of each device in order, e.g. 10,8 or 10 8")
    parser.add_argument("--overhead", metavar="SIZE", default="0 B",
                        help="backend overhead per device, e.g. '457 MiB' (default 0; "
                             "data/gpus.toml lists defaults per backend)")
    parser.add_argument("--json", action="store_true",
                        help="print devices, host and totals as JSON")


def _layer_counts(values: list[str]) -> list[int]:
    counts = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                counts.append(int(part))
            except ValueError:
                raise UserError(f"--layers-per-device: {part!r} is not a whole number of "
                                "layers") from None
    if not counts:
        raise UserError("--layers-per-device: give at least one device's layer count")
    return counts


# The options that give each setting's field, so that a refused value is said as the option
# typed (the cache types by either option, below).
_OPTION_OF = {"context_length": "--context", "parallel": "--parallel", "ubatch": "--ubatch",
              "overhead_bytes": "--overhead", "layers_per_device": "--layers-per-device",
              "devices": "--devices", "program": "--program"}


def _options(args: argparse.Namespace) -> dict[str, str]:
    """:data:`_OPTION_OF`, with each cache type's option: its own, else --kv-cache-type."""
    return {**_OPTION_OF,
            "cache_type_k": "--cache-type-k" if args.cache_type_k else "--kv-cache-type",
            "cache_type_v": "--cache-type-v" if args.cache_type_v else "--kv-cache-type"}


def run(args: argparse.Namespace) -> int:
    from planner.llamacpp import LlamaCppSettings, estimate, model_from_gguf, ranges_from_counts

    path = Path(args.model)
    try:
        context = parse_context(args.context)
    except UnitError as error:
        raise UserError(f"--context: {error.message}") from None
    try:
        overhead = parse_bytes(args.overhead)
    except UnitError as error:
        raise UserError(f"--overhead: {error.message}") from None
    both = args.kv_cache_type or DEFAULT_CACHE_TYPE
    with options_named(_options(args)):
        settings = LlamaCppSettings(
            context_length=context, cache_type_k=args.cache_type_k or both,
            cache_type_v=args.cache_type_v or both, parallel=args.parallel,
            kv_unified=args.kv_unified, ubatch=args.ubatch,
            flash_attn=args.flash_attn == "on", overhead_bytes=overhead, program=args.program)
    model = model_from_gguf(path)  # a ModelError names the file
    ranges = None
    if args.layers_per_device is not None:
        counts = _layer_counts(args.layers_per_device)
        if args.devices is not None and args.devices != len(counts):
            raise UserError(f"--devices {args.devices} but --layers-per-device gives "
                            f"{len(counts)} devices")
        with options_named(_options(args)):
            ranges = ranges_from_counts(model.layer_count, counts, field="layers_per_device")
    if args.devices is not None and args.devices < 0:
        raise UserError(f"--devices must be 0 or more (got {args.devices})")
    with options_named(_options(args)):
        result = estimate(model, settings, ranges,
                          devices=1 if args.devices is None else args.devices)
    if args.json:
        data = result.to_dict()
        data["model"] = model.name
        print(json.dumps(data, indent=2))
        return EXIT_OK
    print(terminal_safe(f"{model.name} ({model.architecture}, {model.layer_count} layers): "
                        f"context {context:,} tokens, {settings.parallel} lane"
                        f"{'s' if settings.parallel != 1 else ''}"
                        f"{' (unified KV cache)' if settings.kv_unified else ''}, "
                        f"K {settings.cache_type_k} / V {settings.cache_type_v}, "
                        f"flash attention {args.flash_attn}, {settings.program}"))
    print()
    print(text_table(memory_table(result)))
    for note in result.notes:
        print(terminal_safe(f"note: {note}"))
    return EXIT_OK


def memory_table(result: MemoryEstimate) -> TextTable:
    """One row per device, the host and the totals, each component as a size."""
    frame = result.frame()
    rows = []
    for record in frame.to_dict("records"):
        layers = layer_range(record["layer_start"], record["layer_end"], "-")
        rows.append((record["device"], layers, *(size(int(record[k])) for k in KEYS)))
    totals = result.totals
    rows.append(("total", "", *(size(totals[k]) for k in KEYS)))
    headers = ("device", "layers", "weights", "kv cache", "state", "compute", "output",
               "overhead", "total")
    return TextTable(headers, tuple(rows), ("l", "l", *("r" * len(KEYS))))
