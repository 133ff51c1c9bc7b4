"""``planner speed MODEL --gpu KIND``: the speed estimate of one model on GPUs of one kind."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from planner.cli._common import EXIT_OK, UserError, add_calibration_argument, add_command
from planner.fleet import load_fleet
from planner.limits import DEFAULT_CACHE_TYPE, MAX_CONTEXT, MAX_LANES, MAX_NODES
from planner.models import ModelError, ModelSpec, from_gguf, load_gpu_catalog, load_preset
from planner.models.gpus import GpuModel
from planner.performance import (
    ESTIMATE_NOTE,
    INTRA_HOST_LINK_BYTES_PER_S,
    ModelTraffic,
    PlanEstimate,
    estimate_plan,
    even_layers,
    format_duration_ms,
    load_calibration,
    model_traffic,
    node_speeds,
)
from planner.planning import NodeBudget, PlanningInput
from planner.planning.plan import Plan
from planner.planning.rules import build_stages, layer_bytes, layer_weights
from planner.reports.tables import TextTable, terminal_safe, text_table
from planner.units import UnitError, parse_context

NAME = "speed"
DEFAULT_CONTEXT = 4096


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run,
        help="estimate decode and prefill speed of a model on GPUs of one kind",
        description=(
            "Estimate time per output token, tokens per second (all lanes together), "
            "prefill speed and time to first token of one model on N GPUs of one catalog "
            "kind in one machine, layers split evenly (llama.cpp's -sm layer on equal "
            "GPUs). An ESTIMATE from the kind's memory bandwidth and FP16 throughput at "
            "efficiencies fitted to published llama.cpp measurements (validation/speed); "
            "its measured error is printed with it."),
        examples=("planner speed llama-3.1-70b --gpu h100-sxm-80gb --gpus 2",
                  "planner speed gpt-oss-120b --gpu rtx-4090 --gpus 4 --context 32k "
                  "--lanes 4 --prompt-tokens 8192 --json",
                  "planner speed model.gguf --gpu m2-ultra-192gb --kv-cache-type q8_0",
                  "planner speed data/fleets/qwen480b-5x80.toml --gpu h200-141gb --gpus 4"),
        exit_codes="0 estimated, 2 bad input")
    parser.add_argument("model", metavar="MODEL",
                        help="a preset id, a GGUF file or a fleet file (its [model])")
    parser.add_argument("--gpu", required=True, metavar="KIND",
                        help="catalog kind (id or name) of every GPU")
    parser.add_argument("--gpus", type=int, default=1, metavar="N",
                        help="how many GPUs, layers split evenly (default 1)")
    parser.add_argument("--context", metavar="N", default=str(DEFAULT_CONTEXT),
                        help="tokens in each lane's cache while decoding, e.g. 32768 or "
                             f"32k (default {DEFAULT_CONTEXT})")
    parser.add_argument("--lanes", type=int, default=1, metavar="N",
                        help="sequences decoded together (default 1)")
    parser.add_argument("--prompt-tokens", metavar="P",
                        help="prompt whose time to first token to estimate (default: "
                             "--context)")
    parser.add_argument("--kv-cache-type", metavar="T",
                        help="KV cache type of a preset or GGUF model (default "
                             f"{DEFAULT_CACHE_TYPE})")
    parser.add_argument("--catalog", metavar="FILE",
                        help="GPU catalog in the format of data/gpus.toml (default: that)")
    add_calibration_argument(parser)
    parser.add_argument("--json", action="store_true",
                        help="print tpot_ms, tokens_per_s, prefill_tokens_per_s, ttft_ms "
                             "and the terms behind them as JSON")


def _tokens(value: str, option: str) -> int:
    try:
        tokens = parse_context(value)
    except UnitError as error:
        raise UserError(f"{option}: {error.message}") from None
    if not 1 <= tokens <= MAX_CONTEXT:
        raise UserError(f"{option}: must be from 1 to {MAX_CONTEXT:,} tokens (got {tokens:,})")
    return tokens


def _count(value: int, option: str, maximum: int) -> int:
    if not 1 <= value <= maximum:
        raise UserError(f"{option}: must be from 1 to {maximum:,} (got {value})")
    return value


def resolve_model(source: str, kv_cache_type: str | None = None
                  ) -> tuple[str, dict[str, Any], ModelTraffic | None]:
    """A preset id, GGUF file or fleet file: its name, planning model fields and traffic."""
    path = Path(source)
    spec: ModelSpec | None
    if path.suffix.lower() in (".toml", ".json"):
        document = load_fleet(source)
        model = document.model
        if kv_cache_type is not None:
            if model.numbers is not None:
                raise UserError("--kv-cache-type: the fleet file's model is typed as "
                                "numbers; its kv_bytes_per_token is the cache's size")
            model = replace(model, kv_cache_type=kv_cache_type)
        spec = model.spec(document.base_dir)
        fields = (spec.planning_fields() if spec is not None else
                  dict(model.resolve(document.base_dir)))
        return model.label, fields, model_traffic(spec, model.numbers)
    if path.suffix.lower() == ".gguf":
        spec = from_gguf(path, kv_cache_type or DEFAULT_CACHE_TYPE)
    else:
        spec = load_preset(source, kv_cache_type=kv_cache_type)
    return spec.name, spec.planning_fields(), model_traffic(spec)


def _kind(catalog: list[GpuModel], wanted: str) -> GpuModel:
    folded = wanted.strip().casefold()
    for gpu in catalog:
        if folded in (gpu.kind.casefold(), gpu.name.casefold()):
            return gpu
    known = ", ".join(gpu.kind for gpu in catalog)
    raise UserError(f"--gpu: {wanted!r} is not a catalog kind; known: {known}")


def estimate_speed(fields: dict[str, Any], traffic: ModelTraffic, gpu: GpuModel, gpus: int,
                   context: int, lanes: int, prompt_tokens: int
                   ) -> tuple[PlanEstimate, list[str]]:
    """The estimate of ``gpus`` GPUs of kind ``gpu`` in one machine, layers split evenly,
    ``lanes`` lanes of ``context`` cached tokens each; notes on what does not fit."""
    layers = fields["layer_count"]
    if gpus > layers:
        raise UserError(f"--gpus: {gpus} GPUs for {layers} layers: at most one GPU a layer")
    nodes = tuple(NodeBudget(f"{gpu.kind}-{index:02d}", gpu.memory_bytes, None, 0, 0)
                  for index in range(gpus))
    # The hops: GPUs of one machine, no network latency (the calibrated hop time stays).
    request = PlanningInput.from_dict({
        **fields, "layer_weight_bytes": (None if fields.get("layer_weight_bytes") is None
                                         else list(fields["layer_weight_bytes"])),
        "nodes": [node.to_dict() for node in nodes]})
    cells = context * lanes
    spans = even_layers(layers, gpus)
    plan = Plan(cells, lanes, build_stages(nodes, spans, layer_weights(request)), None, None)
    notes = []
    costs = layer_bytes(request, cells)
    for stage in plan.stages:
        need = sum(costs[stage.layer_start:stage.layer_end])
        if need > gpu.usable_bytes:
            notes.append(f"{stage.node_id} would hold {need:,} bytes of weights and cache, "
                         f"more than its {gpu.usable_bytes:,}: the split does not fit")
    estimate = estimate_plan(request, plan, traffic, node_speeds(nodes, [gpu]),
                             calibration=load_calibration(),
                             link_bandwidth_bytes_per_s=INTRA_HOST_LINK_BYTES_PER_S,
                             prompt_tokens=prompt_tokens)
    return estimate, notes


def _record(name: str, gpu: GpuModel, gpus: int, context: int, lanes: int,
            estimate: PlanEstimate, notes: list[str]) -> dict[str, Any]:
    ttft = estimate.ttft_ms
    prompt = estimate.prompt_tokens
    return {
        "estimate": True,
        "model": name, "gpu": gpu.kind, "gpus": gpus, "context": context, "lanes": lanes,
        "tpot_ms": estimate.estimated_tpot_ms,
        "tokens_per_s": estimate.tokens_per_s,
        "prompt_tokens": prompt,
        "ttft_ms": ttft,
        "prefill_tokens_per_s": (None if ttft is None or not prompt else
                                 prompt * 1000 / ttft),
        "cost_per_hour_usd": estimate.cost_per_hour_usd,
        "cost_per_million_tokens_usd": estimate.cost_per_million_tokens_usd,
        "terms": {"stages": [stage.to_dict() for stage in estimate.stages],
                  "link_bandwidth_bytes_per_s": estimate.link_bandwidth_bytes_per_s},
        "notes": [ESTIMATE_NOTE, estimate.error_note, *notes, *estimate.notes],
    }


def run(args: argparse.Namespace) -> int:
    gpus = _count(args.gpus, "--gpus", MAX_NODES)
    lanes = _count(args.lanes, "--lanes", MAX_LANES)
    context = _tokens(args.context, "--context")
    prompt = _tokens(args.prompt_tokens, "--prompt-tokens") if args.prompt_tokens else context
    catalog = load_gpu_catalog(args.catalog)
    gpu = _kind(catalog, args.gpu)
    if gpu.memory_bandwidth_bytes_per_s is None:
        raise UserError(f"--gpu: {gpu.kind} has no memory_bandwidth_bytes_per_s in the "
                        "catalog; give a catalog that states it")
    try:
        name, fields, traffic = resolve_model(args.model, args.kv_cache_type)
    except ModelError as error:
        raise UserError(f"{args.model}: {error.message}") from None
    if traffic is None:
        raise UserError(f"{args.model}: the model's numbers need model_weight_bytes")
    estimate, notes = estimate_speed(fields, traffic, gpu, gpus, context, lanes, prompt)
    record = _record(name, gpu, gpus, context, lanes, estimate, notes)
    if args.json:
        print(json.dumps(record, indent=2, ensure_ascii=False))
        return EXIT_OK
    print(terminal_safe(f"{name} on {gpus} x {gpu.name} ({gpu.kind}), {lanes} lane(s) of "
                        f"{context:,} cached tokens: ESTIMATE"))
    rows = [("time per output token", f"{record['tpot_ms']:,.2f} ms"),
            ("decode tokens/s (all lanes)", f"{record['tokens_per_s']:,.1f}")]
    if record["ttft_ms"] is not None:
        rows += [(f"time to first token ({prompt:,}-token prompt)",
                  format_duration_ms(record["ttft_ms"])),
                 ("prefill tokens/s", f"{record['prefill_tokens_per_s']:,.0f}")]
    else:
        rows.append(("time to first token", "not estimated (see notes)"))
    if record["cost_per_million_tokens_usd"] is not None:
        rows.append(("cost per million output tokens",
                     f"USD {record['cost_per_million_tokens_usd']:,.2f}"))
    print(text_table(TextTable(("estimate", "value"), tuple(rows), ("l", "r"))))
    stage_rows = [(s.stage_id, f"{s.weight_read_bytes:,}", f"{s.kv_read_bytes:,}",
                   f"{s.stage_read_ms:,.2f}", f"{s.compute_ms:,.2f}", f"{s.fixed_ms:,.2f}",
                   f"{s.hop_ms:,.3f}") for s in estimate.stages]
    print()
    print(text_table(TextTable(("stage", "weights read B", "cache read B", "read ms",
                                "compute ms", "fixed ms", "hop ms"), tuple(stage_rows),
                               ("l", "r", "r", "r", "r", "r", "r"))))
    print()
    for note in record["notes"]:
        if note:
            print(terminal_safe(f"- {note}"))
    return EXIT_OK
