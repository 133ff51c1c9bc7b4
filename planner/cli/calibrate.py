"""``planner calibrate BENCH ... --gpu KIND --model MODEL -o calibration.toml``: the speed
estimate fitted on the user's own llama-bench runs."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from planner.cli._common import (
    EXIT_OK,
    UserError,
    add_catalog_argument,
    add_command,
    file_size_option,
    model_source,
    option_kind,
    options_named,
)
from planner.fleet import FleetFileError, write_text_atomic
from planner.limits import DEFAULT_CACHE_TYPE, MAX_BENCH_BYTES
from planner.llamacpp.bench import (
    BenchFit,
    calibration_text,
    fit_calibration,
    runs_cache_type,
)
from planner.llamacpp.bench_output import BenchRun, parse_bench
from planner.models import ModelError, from_gguf, gpu_catalog_with, load_preset
from planner.models.spec import ModelSpec
from planner.performance import load_calibration, read_calibration
from planner.reports.tables import TextTable, terminal_safe, text_table

NAME = "calibrate"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands, NAME, run,
        help="fit the speed estimate to your own llama-bench runs",
        description=(
            "Read llama-bench's output (its JSON, JSON lines, CSV or markdown: -o json, "
            "jsonl, csv, md) of runs of one model on one GPU kind of yours, and fit that "
            "kind's memory type and backend on top of the shipped calibration (or --base): "
            "the read efficiencies on the decode runs (tgN), the compute efficiencies on "
            "the prefill runs (ppN). Each phase needs two runs or more (llama-bench "
            "-p 128,512 -n 32,128 gives two of each): its error is measured by leaving "
            "each run out in turn, and the calibration states it. Write it with -o and give "
            "it to speed, plan, size, verify (--calibration FILE) or the workbench "
            "(PLANNER_CALIBRATION=FILE make lab): the estimate then says it uses your own "
            "measurements, with their error. Several kinds: calibrate one, then the next "
            "with --base the first's file."),
        examples=("planner calibrate bench.json --gpu rtx-4090 --model model.gguf "
                  "-o calibration.toml",
                  "planner calibrate a.md b.csv --gpu my-cpu --catalog mine.toml "
                  "--model model.gguf -o calibration.toml --json",
                  "planner calibrate bench-h100.json --gpu h100-sxm-80gb --model model.gguf "
                  "--base calibration.toml -o calibration.toml --force",
                  "planner calibrate bench.md --gpu rtx-3090 --model llama-3.1-8b "
                  "--file-size 4.58GiB -o calibration.toml   # the preset in a Q4_K_M file"),
        exit_codes="0 calibrated, 2 bad input or nothing to calibrate")
    parser.add_argument("bench", metavar="BENCH", nargs="+",
                        help="llama-bench output of the kind (JSON, JSON lines, CSV or "
                             "markdown)")
    parser.add_argument("--gpu", required=True, metavar="KIND",
                        help="the catalog kind the runs ran on")
    parser.add_argument("--model", required=True, metavar="MODEL",
                        help="the model benched: its GGUF file or preset id")
    parser.add_argument("--file-size", metavar="SIZE",
                        help="the benched file's size (llama-bench's size column, e.g. "
                             "4.58GiB) where a preset's weights were stored otherwise: its "
                             "parts keep their shares")
    parser.add_argument("--kv-cache-type", metavar="T",
                        help="the KV cache type of the runs (default: the one they state, "
                             "llama-bench's type_k and type_v, else the model's: "
                             f"{DEFAULT_CACHE_TYPE} for a GGUF file); runs of another are "
                             "left out")
    add_catalog_argument(parser, "where --gpu's kind is looked up")
    parser.add_argument("--base", metavar="FILE",
                        help="a calibration to fit on top of (default: the shipped one)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the calibration here (TOML)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite the output file if it exists")
    parser.add_argument("--json", action="store_true",
                        help="print the fit: each run measured and estimated, the errors")


def run(args: argparse.Namespace) -> int:
    if args.output is not None and not args.force and os.path.lexists(args.output):
        raise FleetFileError("WouldOverwrite", "already exists, and is not overwritten "
                             "unless asked (--force)", path=args.output)
    runs: list[BenchRun] = []
    for path in args.bench:
        runs.extend(parse_bench(_read(path), path))
    kind = option_kind(gpu_catalog_with(args.catalog), args.gpu)
    source = model_source(args.model, "--model", "a preset id or a GGUF file (.gguf)")
    size = None if args.file_size is None else file_size_option(args.file_size, source)
    try:
        # The runs' own cache, where they state one and --kv-cache-type does not.
        spec = _spec(args.model, args.kv_cache_type or runs_cache_type(runs))
    except ModelError as error:
        raise UserError(error.message) from None
    base = read_calibration(args.base) if args.base is not None else load_calibration()
    with options_named({"file_bytes": "--file-size"}):
        fit = fit_calibration(runs, spec, kind, base,
                              source=args.output or "calibration (not written)",
                              file_bytes=size)
    written = None
    if args.output is not None:
        written = str(write_text_atomic(args.output, calibration_text(fit, args.bench),
                                        overwrite=args.force))
    if args.json:
        print(json.dumps({**fit.to_dict(), "calibration_file": written}, indent=2))
        return EXIT_OK
    _print(fit, written)
    return EXIT_OK


def _read(path: str) -> str:
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_BENCH_BYTES + 1)
    except OSError as error:
        raise UserError(f"{path}: cannot be read: {error.strerror}") from None
    return data.decode("utf-8", errors="replace")


def _spec(model: str, kv_cache_type: str | None) -> ModelSpec:
    kind = model_source(model, "--model", "a preset id or a GGUF file (.gguf)")
    if kind == "fleet":
        raise UserError(f"--model: {model!r} is a fleet file; --model is a preset id or a "
                        "GGUF file (.gguf)")
    if kind == "gguf":
        return from_gguf(model, kv_cache_type or DEFAULT_CACHE_TYPE)
    return load_preset(model, kv_cache_type=kv_cache_type)


def _print(fit: BenchFit, written: str | None) -> None:
    rows = tuple((run.run.source, run.run.test, f"{run.measured_tokens_per_s:,.2f}",
                  "—" if run.base_tokens_per_s is None else f"{run.base_tokens_per_s:,.2f}",
                  "—" if run.fitted_tokens_per_s is None else f"{run.fitted_tokens_per_s:,.2f}",
                  "—" if run.left_out_error is None else f"{run.left_out_error:+.1%}")
                 for run in fit.runs)
    print(terminal_safe(f"{fit.kind} ({fit.backend}): efficiencies scaled by "
                        + ", ".join(f"{scale:g} ({phase})"
                                    for phase, scale in fit.scales.items())))
    print(text_table(TextTable(("run", "test", "measured t/s", "shipped t/s", "fitted t/s",
                                "left out"), rows, ("l", "l", "r", "r", "r", "r"))))
    for phase in fit.scales:
        found = fit.own.error(phase)
        if found is not None:
            print(f"{phase}: median error {found[0]:.1%} over {found[1]} runs, each left "
                  "out in turn")
    for source, why in fit.skipped:
        print(terminal_safe(f"left out {source}: {why}"))
    for note in fit.notes:
        print(terminal_safe(f"- {note}"))
    if written is not None:
        print(terminal_safe(f"wrote {written}; give it with --calibration {written}"))
