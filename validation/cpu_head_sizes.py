"""`make validate`, what one score of flash attention costs on this machine's CPU by head
size: llama.cpp's own small llama model (``test-llama-archs``, as archs.py saves it) made
again with its attention split into heads of 32, 64, 128 and 256 values (the same 256
values a layer, each head its own keys and values, and two grouped-query forms), each run
by ``llama-bench`` decoding 32 tokens on an empty cache and after 1,024 cached ones, with
flash attention, on one thread.

What the cached tokens add to a decoded token, over its layers x query heads x the tokens
it attends to, is the time of one score (a query head times a cached token: its dot
product with the key and its update of the output with the value). ggml-cpu's F16 loops
(``ggml_vec_dot_f16``, ``ggml_vec_mad_f16``) take ``GGML_F16_STEP`` values at a time and
do the rest one by one, so a head shorter than the step runs scalar: the step is 4 F16
vectors, 128 values on a CPU with AVX512-FP16, 64 with AVX-512 without it, 32 with AVX2
(:func:`f16_step`). docs/speed.md ("Attention over the cache on the CPU") reads the
record, and tests/test_speed_cpu.py checks it: the heads shorter than the recorded
machine's step cost more a score than the heads that fill it.

The runs are recorded in validation/results/cpu-head-sizes.csv, one row per machine and
head shape (a machine's earlier rows are replaced, other machines' kept). About 2 minutes.
"""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "validation")]

from archs import MODELS as ARCH_MODELS  # noqa: E402
from archs import save_models  # noqa: E402
from speed_cpu import machine, wait_for_quiet  # noqa: E402

from planner.llamacpp.runner import binaries_dir  # noqa: E402

RECORD = ROOT / "validation" / "results" / "cpu-head-sizes.csv"
SOURCE = "llama-dense.gguf"
FOLDER = ROOT / ".cache" / "head-sizes"
# (query heads, KV heads, head size): 256 values a layer, as the small model's width.
SHAPES = ((8, 8, 32), (4, 4, 64), (4, 1, 64), (2, 2, 128), (2, 1, 128), (1, 1, 256))
GENERATE = 32
DEPTH = 1024
REPETITIONS = 5
COLUMNS = ("cpu", "family", "model", "simd", "f16_step", "build_number", "layers",
           "heads", "kv_heads", "head_size", "depth", "tokens_per_s", "tokens_per_s_at_depth",
           "ns_per_score")
# The keys that give a head's shape and the rotary dimensions that follow it.
_HEAD_KEYS = ("attention.key_length", "attention.value_length", "attention.key_length_swa",
              "attention.value_length_swa", "rope.dimension_count",
              "rope.dimension_count_swa")


def f16_step(flags: set[str]) -> tuple[str, int | None]:
    """The SIMD set ggml-cpu's F16 loops use on a CPU with these ``/proc/cpuinfo`` flags,
    and their ``GGML_F16_STEP`` (ggml-cpu's simd-mappings.h)."""
    if "avx512_fp16" in flags:
        return "AVX512-FP16", 128
    if "avx512f" in flags:
        return "AVX-512", 64
    if "avx2" in flags and "f16c" in flags:
        return "AVX2", 32
    return "other", None


def cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    return set()


def reshaped(source: Path, target: Path, heads: int, kv_heads: int, head_size: int) -> int:
    """The llama model ``source`` with its attention as ``heads`` query heads and
    ``kv_heads`` key and value heads of ``head_size`` values (its tensors' values are not
    read by a speed run); its layer count."""
    reader = GGUFReader(source)
    arch = str(reader.fields["general.architecture"].contents())
    writer = GGUFWriter(target, arch)
    for key, item in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = item.contents()
        if key == f"{arch}.attention.head_count":
            value = heads
        elif key == f"{arch}.attention.head_count_kv":
            value = kv_heads
        elif key.removeprefix(f"{arch}.") in _HEAD_KEYS:
            value = head_size
        kind = item.types[0]
        if kind == GGUFValueType.ARRAY:
            if not value:
                continue
            writer.add_key_value(key, value, kind, sub_type=item.types[1])
        else:
            writer.add_key_value(key, value, kind)
    hidden = int(reader.fields[f"{arch}.embedding_length"].contents())
    for tensor in reader.tensors:
        shape = [int(n) for n in tensor.shape]
        name = tensor.name
        if name.endswith(("attn_k.weight", "attn_v.weight")):
            shape = [hidden, kv_heads * head_size]
        elif name.endswith(("attn_k.bias", "attn_v.bias")):
            shape = [kv_heads * head_size]
        elif name.endswith("attn_q.weight"):
            shape = [hidden, heads * head_size]
        elif name.endswith("attn_q.bias"):
            shape = [heads * head_size]
        elif name.endswith("attn_output.weight"):
            shape = [heads * head_size, hidden]
        elif name == "rope_freqs.weight":
            shape = [head_size // 2]
        writer.add_tensor(name, np.zeros(list(reversed(shape)), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return int(reader.fields[f"{arch}.block_count"].contents())


def bench(bins: Path, model: Path) -> tuple[float, float, int]:
    """The fastest repetition's tokens/s decoding on an empty cache and after DEPTH
    cached tokens, on one thread with flash attention, and the build."""
    wait_for_quiet(1)
    argv = [str(bins / "llama-bench"), "-m", str(model), "-t", "1", "-p", "0",
            "-n", str(GENERATE), "-d", f"0,{DEPTH}", "-fa", "on", "-r", str(REPETITIONS),
            "--repack", "0", "-o", "json"]
    rows = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True,
                                     timeout=600).stdout)
    fastest = {int(row.get("n_depth") or 0): max(float(v) for v in row["samples_ts"])
               for row in rows}
    return fastest[0], fastest[DEPTH], int(rows[0]["build_number"])


def main() -> int:
    bins = binaries_dir()
    source = ARCH_MODELS / SOURCE
    if not source.exists():
        save_models(bins)
    FOLDER.mkdir(parents=True, exist_ok=True)
    about = machine()
    simd, step = f16_step(cpu_flags())
    rows: list[dict[str, Any]] = []
    for heads, kv_heads, head_size in SHAPES:
        model = FOLDER / f"llama-{heads}x{head_size}-kv{kv_heads}.gguf"
        layers = reshaped(source, model, heads, kv_heads, head_size)
        empty, deep, build = bench(bins, model)
        # Each decoded token attends to the cache and the tokens decoded before it.
        attended = DEPTH + GENERATE / 2
        added_ns = 1e9 / deep - 1e9 / empty
        rows.append({"cpu": about["cpu"], "family": about["family"], "model": about["model"],
                     "simd": simd, "f16_step": step or "", "build_number": build,
                     "layers": layers, "heads": heads, "kv_heads": kv_heads,
                     "head_size": head_size, "depth": DEPTH,
                     "tokens_per_s": round(empty, 2), "tokens_per_s_at_depth": round(deep, 2),
                     "ns_per_score": round(added_ns / (layers * heads * attended), 2)})
        print(f"{heads} x {head_size} (KV heads {kv_heads}): {rows[-1]['ns_per_score']} ns "
              "a score", flush=True)
    mine = (str(about["cpu"]), str(about["family"]), str(about["model"]))
    kept: list[dict[str, Any]] = []
    if RECORD.exists():
        with RECORD.open(newline="") as handle:
            kept = [row for row in csv.DictReader(handle)
                    if (row["cpu"], row["family"], row["model"]) != mine]
    with RECORD.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(kept + rows)
    filled = [r["ns_per_score"] for r in rows if step and r["head_size"] >= step]
    print(f"{simd} (F16 step {step}): heads filling the step a median "
          f"{statistics.median(filled) if filled else float('nan'):.1f} ns a score")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
