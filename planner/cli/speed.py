"""``planner speed MODEL --gpu KIND``: the speed estimate of one model on GPUs of one kind."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from planner.cli._common import (
    EXIT_OK,
    UserError,
    add_calibration_argument,
    add_catalog_argument,
    add_command,
    add_file_size_argument,
    fleet_model_in_file,
    model_source,
    option_error,
    option_kind,
    spec_in_file,
    token_count,
)
from planner.fleet import load_fleet
from planner.limits import (
    DEFAULT_BATCH,
    DEFAULT_CACHE_TYPE,
    DEFAULT_UBATCH,
    MAX_LANES,
    MAX_LLAMA_CPP_BUILD,
    MAX_NODES,
    MAX_THREADS,
    MAX_UBATCH,
)
from planner.llamacpp.settings import MemoryModelError, require_flash_attention
from planner.models import ModelSpec, from_gguf, gpu_catalog_with, load_preset
from planner.models.gpus import BACKENDS, GpuModel
from planner.performance import (
    ESTIMATE_NOTE,
    INTRA_HOST_LINK_BYTES_PER_S,
    ModelTraffic,
    PerformanceError,
    PlanEstimate,
    RunSettings,
    check_prompt,
    estimate_plan,
    even_layers,
    load_calibration,
    model_traffic,
    node_speeds,
)
from planner.planning import NodeBudget, PlanningInput
from planner.planning.plan import Plan
from planner.planning.rules import build_stages, layer_bytes, layer_weights
from planner.reports.tables import TextTable, terminal_json, terminal_safe, text_table
from planner.units import format_milliseconds

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
            "GPUs), run as llama-bench's options say (backend, flash attention, "
            "micro-batch, cached tokens, build). An ESTIMATE from the kind's memory "
            "bandwidth and FP16 throughput at figures fitted to published llama.cpp "
            "measurements (validation/speed); the error cross-validated for its backend "
            "and memory type is printed with it."),
        examples=("planner speed llama-3.1-70b --gpu h100-sxm-80gb --gpus 2",
                  "planner speed gpt-oss-120b --gpu rtx-4090 --gpus 4 --context 32k "
                  "--lanes 4 --prompt-tokens 8192 --json",
                  "planner speed gpt-oss-20b --gpu rtx-4090 --file-size 11.27GiB "
                  "--context 32k --prompt-tokens 2048 --depth 30000 --flash-attn on",
                  "planner speed model.gguf --gpu m2-ultra-192gb --kv-cache-type q8_0",
                  "planner speed llama-3.1-8b --gpu my-card --catalog my-cards.toml "
                  "--backend vulkan --ubatch 2048",
                  "planner speed qwen3.5-35b-a3b --gpu my-cpu --catalog my-cpus.toml "
                  "--threads 8"),
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
                             "--context less --depth)")
    parser.add_argument("--depth", metavar="N", default="0",
                        help="tokens already cached before the prompt (llama-bench's -d; "
                             "default 0)")
    parser.add_argument("--backend", choices=BACKENDS,
                        help="llama.cpp backend (default: the kind's own; a CPU kind runs "
                             "cpu only, a GPU kind any other)")
    parser.add_argument("--flash-attn", choices=("on", "off"), default="on",
                        help="flash attention (llama-bench's -fa; default on, as "
                             "llama.cpp chooses it where it can)")
    parser.add_argument("--ubatch", type=int, default=DEFAULT_UBATCH, metavar="N",
                        help=f"micro-batch in tokens (-ub; default {DEFAULT_UBATCH}); the "
                             f"batch (-b) is {DEFAULT_BATCH} or the micro-batch if larger")
    parser.add_argument("--build", type=int, metavar="N",
                        help="llama.cpp build number (b<N>; default: a current build)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="CPU threads (-t; the CPU backend computes on that many of "
                             "the kind's cores; default one a core)")
    parser.add_argument("--kv-cache-type", metavar="T",
                        help="KV cache type of a preset or GGUF model (default "
                             f"{DEFAULT_CACHE_TYPE})")
    add_file_size_argument(parser)
    add_catalog_argument(parser, "where --gpu's kind is looked up")
    add_calibration_argument(parser)
    parser.add_argument("--json", action="store_true",
                        help="print tpot_ms, tokens_per_s, prefill_tokens_per_s, ttft_ms "
                             "and the terms behind them as JSON")


def _count(value: int, option: str, maximum: int) -> int:
    if not 1 <= value <= maximum:
        raise UserError(f"{option}: must be from 1 to {maximum:,} (got {value})")
    return value


class ResolvedModel(NamedTuple):
    """A model as ``planner speed`` reads it: its name, planning fields and traffic, and
    its KV cache type (``None`` for numbers typed by hand, whose cache is bytes)."""

    name: str
    fields: dict[str, Any]
    traffic: ModelTraffic | None
    kv_cache_type: str | None


def resolve_model(source: str, kv_cache_type: str | None = None,
                  file_size: str | None = None) -> ResolvedModel:
    """A preset id, GGUF file or fleet file: its name, planning model fields, traffic and
    KV cache type; a preset stored in ``file_size`` (``--file-size``,
    :func:`file_size_option`) where given, else in the fleet file's ``file_bytes``."""
    kind = model_source(source)
    spec: ModelSpec | None
    if kind == "fleet":
        document = load_fleet(source)
        model = document.model
        if kv_cache_type is not None:
            if model.numbers is not None:
                raise UserError("--kv-cache-type: the fleet file's model is typed as "
                                "numbers; its kv_bytes_per_token is the cache's size")
            model = replace(model, kv_cache_type=kv_cache_type)
        model, spec = fleet_model_in_file(model, file_size, document.base_dir)
        fields = (spec.planning_fields() if spec is not None else
                  dict(model.resolve(document.base_dir)))
        return ResolvedModel(model.label, fields, model_traffic(spec, model.numbers),
                             None if spec is None else spec.kv_cache_type)
    if kind == "gguf":
        spec = from_gguf(Path(source), kv_cache_type or DEFAULT_CACHE_TYPE)
    else:
        spec = load_preset(source, kv_cache_type=kv_cache_type)
    spec = spec_in_file(spec, file_size, kind)
    return ResolvedModel(spec.name, spec.planning_fields(), model_traffic(spec),
                         spec.kv_cache_type)


def _check_cache_runs(kv_cache_type: str | None, settings: RunSettings) -> None:
    """llama.cpp refuses a quantized V cache without flash attention: no estimate of a
    run that cannot start (the rule ``planner memory`` applies)."""
    if kv_cache_type is None:
        return
    try:
        require_flash_attention(kv_cache_type, settings.flash_attn)
    except MemoryModelError as error:
        raise UserError(f"--flash-attn: {error.message} (--kv-cache-type, or the fleet "
                        "file's kv_cache_type)") from None


def estimate_speed(fields: dict[str, Any], traffic: ModelTraffic, gpu: GpuModel, gpus: int,
                   context: int, lanes: int, prompt_tokens: int,
                   settings: RunSettings | None = None) -> tuple[PlanEstimate, list[str]]:
    """The estimate of ``gpus`` GPUs of kind ``gpu`` in one machine, layers split evenly,
    ``lanes`` lanes of ``context`` cached tokens each, a prompt after ``settings.depth``
    cached tokens; notes on what does not fit."""
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
                             prompt_tokens=prompt_tokens, context_fill=False,
                             settings=settings or RunSettings())
    return estimate, notes


def _record(name: str, gpu: GpuModel, gpus: int, context: int, lanes: int,
            estimate: PlanEstimate, notes: list[str]) -> dict[str, Any]:
    ttft = estimate.ttft_ms
    prompt = estimate.prompt_tokens
    return {
        "estimate": True,
        "model": name, "gpu": gpu.kind, "gpus": gpus, "context": context, "lanes": lanes,
        "settings": estimate.settings.to_dict(),
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


def _settings(args: argparse.Namespace, context: int) -> tuple[RunSettings, int]:
    """The run's settings and the prompt's tokens, each checked against the context."""
    ubatch = _count(args.ubatch, "--ubatch", MAX_UBATCH)
    depth = token_count(args.depth, "--depth", minimum=0)
    if args.build is not None:
        _count(args.build, "--build", MAX_LLAMA_CPP_BUILD)
    if args.threads is not None:
        _count(args.threads, "--threads", MAX_THREADS)
    settings = RunSettings(backend=args.backend, flash_attn=args.flash_attn == "on",
                           ubatch=ubatch, batch=max(DEFAULT_BATCH, ubatch), depth=depth,
                           build=args.build, threads=args.threads)
    if depth >= context:
        raise UserError(f"--depth: {depth:,} cached tokens leave no room for a prompt in "
                        f"the {context:,}-token context (--context)")
    prompt = (token_count(args.prompt_tokens, "--prompt-tokens") if args.prompt_tokens
              else context - depth)
    try:
        check_prompt(prompt, settings, context)
    except PerformanceError as error:
        said = error.message.removeprefix("prompt_tokens: ")
        raise UserError(f"--prompt-tokens: {said} (--context is each lane's cache)"
                        ) from None
    return settings, prompt


def run(args: argparse.Namespace) -> int:
    gpus = _count(args.gpus, "--gpus", MAX_NODES)
    lanes = _count(args.lanes, "--lanes", MAX_LANES)
    context = token_count(args.context, "--context")
    settings, prompt = _settings(args, context)
    catalog = gpu_catalog_with(args.catalog)
    gpu = option_kind(catalog, args.gpu)
    if gpu.memory_bandwidth_bytes_per_s is None:
        raise UserError(f"--gpu: {gpu.kind} has no memory_bandwidth_bytes_per_s in the "
                        "catalog; give a catalog that states it")
    # A model that cannot be read is said as `inspect` says it: its code, path and why.
    name, fields, traffic, kv_cache_type = resolve_model(args.model, args.kv_cache_type,
                                                         args.file_size)
    _check_cache_runs(kv_cache_type, settings)
    if traffic is None:
        raise UserError(f"{args.model}: the model's numbers need model_weight_bytes")
    native = fields["native_context_length"]
    if context > native:
        raise UserError(f"--context: {context:,} tokens exceed the model's native context "
                        f"of {native:,}")
    try:
        estimate, notes = estimate_speed(fields, traffic, gpu, gpus, context, lanes, prompt,
                                         settings)
    except PerformanceError as error:
        named = option_error(error, {"backend": "--backend"})
        if named is None:
            raise
        raise named from None
    record = _record(name, gpu, gpus, context, lanes, estimate, notes)
    if args.json:
        print(terminal_json(record))
        return EXIT_OK
    _print(record, name, gpu, gpus, context, lanes, prompt, estimate)
    return EXIT_OK


def _print(record: dict[str, Any], name: str, gpu: GpuModel, gpus: int, context: int,
           lanes: int, prompt: int, estimate: PlanEstimate) -> None:
    settings = estimate.settings
    after = f" after {settings.depth:,} cached" if settings.depth else ""
    print(terminal_safe(f"{name} on {gpus} x {gpu.name} ({gpu.kind}), {lanes} lane(s) of "
                        f"{context:,} cached tokens, flash attention "
                        f"{'on' if settings.flash_attn else 'off'}: ESTIMATE"))
    rows = [("time per output token", format_milliseconds(record["tpot_ms"], estimated=True)),
            ("decode tokens/s (all lanes)", f"{record['tokens_per_s']:,.1f}")]
    if record["ttft_ms"] is not None and math.isfinite(record["ttft_ms"]):
        rows += [(f"time to first token ({prompt:,}-token prompt{after})",
                  format_milliseconds(record["ttft_ms"], estimated=True)),
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
