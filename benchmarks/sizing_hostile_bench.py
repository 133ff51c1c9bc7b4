"""Sizing, availability and the speed estimate on hostile questions within the input caps:
each finishes in < 30 s and < 2 GB, or is refused at once by name.

Each case runs the command as a user would (``planner size ...``, ``planner
availability ...``) in a fresh process, so its peak memory (the process's maximum
resident size, imports included) is its own. The table gives the seconds, the peak
memory, the exit code and, for a refusal, the error code the command printed.
``python benchmarks/sizing_hostile_bench.py`` prints the table; ``make bench`` includes it.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FLEETS = ROOT / "planner" / "data" / "fleets"
TARGET_SECONDS = 30.0
TARGET_MB = 2048.0
# A case still running at this many seconds is stopped and counted as a miss.
KILL_SECONDS = 90.0
GIB = 2**30


def _catalog(entries: list[dict[str, Any]]) -> str:
    lines = []
    for entry in entries:
        lines.append("[[gpu]]")
        for key, value in entry.items():
            lines.append(f"{key} = {json.dumps(value)}")
        lines.append("")
    return "\n".join(lines)


def _kinds(count: int, seed: int, **extra: Any) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    return [{"name": f"Card {i:05d}", "memory_bytes": rnd.randint(8, 192) * GIB,
             "price_per_hour": round(rnd.uniform(0.2, 8.0), 4),
             "memory_bandwidth_bytes_per_s": rnd.randint(300, 5000) * 10**9, **extra}
            for i in range(count)]


def _fleet(model: str, nodes: list[dict[str, Any]]) -> str:
    lines = [model, ""]
    for node in nodes:
        lines.append("[[nodes]]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in node.items()]
        lines.append("")
    return "\n".join(lines)


# A cheap, slow card of little memory, as a user's own catalog may add.
CHEAP_16 = {"name": "Cheap 16", "memory": "16 GiB", "memory_type": "gddr", "backend": "cuda",
            "price_per_hour": 0.25, "memory_bandwidth_bytes_per_s": 716_800_000_000,
            "fp16_tflops": 194.9}
QWEN = '[model]\npreset = "qwen3-coder-480b-a35b"\nkv_cache_type = "q8_0"'
# A dense 70B model typed as numbers, with the speed fields, and one whose native context
# is the cap (2**31 tokens).
NUMBERS_SPEED = ('[model]\nnative_context_length = 131072\nlayer_count = 80\n'
                 'model_weight_bytes = "140 GB"\nkv_bytes_per_token = 327680\n'
                 'hidden_size = 8192\nparameter_count = 70000000000\n'
                 '[[nodes]]\nid = "x"\nvram = "80 GiB"\n')
HUGE_CONTEXT = NUMBERS_SPEED.replace("131072", "2147483648")
NUMBERS = ('[model]\nnative_context_length = 131072\nlayer_count = 80\n'
           'model_weight_bytes = "140 GB"\nkv_bytes_per_token = 327680\n'
           '[planning]\ntarget_decode_tpot_ms = 60')


def writer(folder: Path) -> Callable[[str, str], str]:
    """``write(name, text)``: writes a file into ``folder`` and gives its path."""
    def write(name: str, text: str) -> str:
        path = folder / name
        path.write_text(text)
        return str(path)

    return write


def _setup(folder: Path) -> dict[str, list[str]]:
    """name -> the command's arguments (files written to ``folder``)."""
    write = writer(folder)

    latency = _kinds(12, 1, stage_transfer_latency_ms=5)
    cheap16 = write("cheap16.toml", (ROOT / "planner" / "data" / "gpus.toml").read_text()
                    + "\n" + _catalog([CHEAP_16]))
    rnd = random.Random(7)
    return {
        "size llama-3.1-70b --tpot 30 (no fleet meets it)":
            ["size", "llama-3.1-70b", "--tpot", "30"],
        "size llama-3.1-70b --tpot 10": ["size", "llama-3.1-70b", "--tpot", "10"],
        "size llama-3.1-70b --tpot 90 (a lone MI300X meets it)":
            ["size", "llama-3.1-70b", "--tpot", "90"],
        # TPOT targets between the fastest any fleet does and the cheapest fleet's: a
        # fleet of more memory plans a longer context and misses them (each ended in
        # SizingTooLarge after 3,000 plans); the hardest of a ladder over the presets
        # (deepseek-v3.2 at 54 ms: its plans' hops count in the floor).
        "size llama-3.1-70b --tpot 84": ["size", "llama-3.1-70b", "--tpot", "84"],
        "size glm-4.6 --tpot 87": ["size", "glm-4.6", "--tpot", "87", "--json"],
        "size glm-4.6 --tpot 87, table output with the Pareto front":
            ["size", "glm-4.6", "--tpot", "87"],
        "size deepseek-v3.2 --tpot 54": ["size", "deepseek-v3.2", "--tpot", "54", "--json"],
        "size llama-4-maverick --tpot 22": ["size", "llama-4-maverick", "--tpot", "22"],
        "size llama-4-maverick --tpot 27 --tolerate 1 (no fleet meets it)":
            ["size", "llama-4-maverick", "--tpot", "27", "--tolerate", "1", "--json"],
        "size glm-4.5 --tpot 72 --tolerate 1":
            ["size", "glm-4.5", "--tpot", "72", "--tolerate", "1", "--json"],
        "size llama-3.1-70b --ttft-ms 10 --prompt-tokens 32768 (no fleet meets it)":
            ["size", "llama-3.1-70b", "--ttft-ms", "10", "--prompt-tokens", "32768"],
        # A TTFT below the fastest read of the weights a ubatch routes to (each used to
        # end in SizingTooLarge after 3,000 plans, when only compute was counted), and
        # one a mixture of the shipped kinds reaches.
        "size deepseek-v3 --ttft-ms 116 --prompt-tokens 1024 (no fleet meets it)":
            ["size", "deepseek-v3", "--ttft-ms", "116", "--prompt-tokens", "1024"],
        # Below what passing two ubatches through the stages allows (ended in
        # SizingTooLarge after 3,000 plans when the pipeline was not counted).
        "size deepseek-v3 --ttft-ms 340 --prompt-tokens 1024 (no fleet meets it)":
            ["size", "deepseek-v3", "--ttft-ms", "340", "--prompt-tokens", "1024"],
        # Fleets that hold the model on too few stages for the pipeline a prompt of
        # four ubatches a batch needs (ended in SizingTooLarge after 3,000 plans).
        "size deepseek-v3 --ttft-ms 1800 --prompt-tokens 8192 (no fleet meets it)":
            ["size", "deepseek-v3", "--ttft-ms", "1800", "--prompt-tokens", "8192"],
        "size glm-4.5 --ttft-ms 500 --prompt-tokens 8192 (no fleet meets it)":
            ["size", "glm-4.5", "--ttft-ms", "500", "--prompt-tokens", "8192"],
        "size deepseek-v3 --ttft-ms 400 --prompt-tokens 1024":
            ["size", "deepseek-v3", "--ttft-ms", "400", "--prompt-tokens", "1024", "--json"],
        "size the TPOT-33 example fleet (model typed as numbers)":
            ["size", str(FLEETS / "qwen480b-4x80-latency10-tpot33.toml")],
        "size a model typed as numbers with a TPOT target":
            ["size", write("numbers.toml", NUMBERS + '\n[[nodes]]\nid = "x"\nvram = "1 GiB"\n')],
        # The shipped catalog and one cheap, slow 16 GiB kind: fleets of a few MI300X and
        # small cards hold DeepSeek-V3.2 at its native context on many slow stages
        # (ended in SizingTooLarge after 3,000 plans when only the layers each card
        # surely takes from any start layer told that they do).
        "size deepseek-v3.2 --tpot 54, shipped catalog and a cheap 16 GiB kind":
            ["size", "deepseek-v3.2", "--tpot", "54", "--json", "--catalog", cheap16],
        # With a spare, fleets of one large node and dozens of small cards (ended in
        # SizingTooLarge with 500,000 partial fleets queued); the hardest of a ladder.
        "size llama-4-maverick --tpot 40 --tolerate 1, shipped catalog and a cheap 16 GiB "
        "kind": ["size", "llama-4-maverick", "--tpot", "40", "--tolerate", "1", "--json",
                 "--catalog", cheap16],
        "size, table output, shipped catalog with latencies":
            ["size", "qwen3-coder-480b-a35b", "--catalog", write("latency.toml", (
                ROOT / "planner" / "data" / "gpus.toml").read_text().replace(
                    "\nbackend = ", "\nstage_transfer_latency_ms = 5\nbackend = "))],
        "size, table output, random catalog with latencies":
            ["size", "llama-3.1-70b", "--catalog", write("latency12.toml", _catalog(latency))],
        "size, a price of 1e-300 (refused)":
            ["size", "llama-3.1-70b", "--catalog", write("tiny.toml", _catalog(
                [{**_kinds(1, 2)[0], "price_per_hour": 1e-300}]))],
        "size, 1,000 kinds": ["size", "llama-3.1-70b", "--json", "--catalog",
                              write("k1000.toml", _catalog(_kinds(1000, 3)))],
        "size, 10,000 kinds": ["size", "llama-3.1-70b", "--json", "--catalog",
                               write("k10000.toml", _catalog(_kinds(10_000, 4)))],
        "size, 12 kinds with max_count 10,000": [
            "size", "llama-3.1-70b", "--json", "--tolerate", "2", "--catalog",
            write("k12.toml", _catalog(_kinds(12, 5, max_count=10_000)))],
        # The speed estimate's bombs: a prompt of 2**31 tokens (it used to allocate an array
        # per micro-batch and end in MemoryError after 40 s at 5 GB), prompts longer than
        # the context or the native context, and figures past their physical bounds.
        "speed, a 2**31-token prompt on 80 GPUs (model typed as numbers)":
            ["speed", write("huge.toml", HUGE_CONTEXT), "--gpu", "h100-sxm-80gb", "--gpus",
             "80", "--context", "2147483648", "--prompt-tokens", "2147483648", "--json"],
        "speed, a 2**31-token prompt, micro-batches of 1 token":
            ["speed", write("huge1.toml", HUGE_CONTEXT), "--gpu", "h100-sxm-80gb",
             "--gpus", "8", "--context", "2147483648", "--ubatch", "1", "--json"],
        "speed, an MoE preset at its native context, 8 lanes":
            ["speed", "deepseek-v3", "--gpu", "h200-141gb", "--gpus", "8", "--context",
             "160k", "--lanes", "8", "--json"],
        "speed, a 2,000,000-token prompt in a 4,096-token context (refused)":
            ["speed", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--prompt-tokens",
             "2000000"],
        "speed, a context past the native one (refused)":
            ["speed", "llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--context", "2147483648"],
        "speed, fp16_tflops of 1e-300 in a catalog (refused)":
            ["speed", "llama-3.1-70b", "--gpu", "tiny", "--catalog", write("tiny16.toml", (
                '[[gpu]]\nid = "tiny"\nname = "Tiny"\nmemory = "80 GiB"\n'
                'memory_bandwidth_bytes_per_s = 1000000000000\nfp16_tflops = 1e-300\n'))],
        "speed, a memory bandwidth of 1 B/s in a catalog (refused)":
            ["speed", "llama-3.1-70b", "--gpu", "slow", "--catalog", write("slow.toml", (
                '[[gpu]]\nid = "slow"\nname = "Slow"\nmemory = "80 GiB"\n'
                'memory_bandwidth_bytes_per_s = 1\n'))],
        "speed, hidden_size 2**53 (refused)":
            ["speed", write("wide.toml", NUMBERS_SPEED.replace("hidden_size = 8192",
                                                               "hidden_size = 9007199254740992")),
             "--gpu", "h100-sxm-80gb"],
        "size, a 200,000-token TTFT prompt past the native context (refused)":
            ["size", "llama-3.1-70b", "--ttft-ms", "100000", "--prompt-tokens", "200000"],
        "availability, 10,000 identical nodes": ["availability", write(
            "same.toml", _fleet(QWEN, [{"id": "n", "count": 10_000, "vram": "80 GiB"}]))],
        "availability, 100 kinds x 100 nodes": ["availability", write(
            "hundreds.toml", _fleet(QWEN, [{"id": f"k{k:03d}", "count": 100,
                                           "vram": f"{40 + k} GiB"} for k in range(100)]))],
        "availability, 10,000 distinct nodes": ["availability", write(
            "distinct.toml", _fleet(QWEN, [{"id": f"d{i:05d}",
                                            "vram": f"{40 * GIB + i * 2**20} B"}
                                           for i in range(10_000)]))],
        "availability, 600 distinct unreliable nodes": ["availability", "--afr", "20",
            "--repair-hours", "500", write("flaky.toml", _fleet(QWEN, [
                {"id": f"f{i:03d}", "vram": f"{rnd.randint(20, 120) * GIB + i} B"}
                for i in range(600)]))],
    }


def _one(args: list[str]) -> dict[str, Any]:
    from planner.cli import main

    sink, errors = io.StringIO(), io.StringIO()
    started, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(errors):
        code = main(args)
    seconds = time.perf_counter() - started
    said = errors.getvalue().strip().splitlines()
    return {"seconds": seconds, "cpu_seconds": time.process_time() - cpu, "exit_code": code,
            "output_bytes": len(sink.getvalue().encode()),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "said": said[-1] if said else ""}


def run(chosen: Callable[[str], bool] = lambda name: True,
        setup: Callable[[Path], dict[str, list[str]]] | None = None,
        script: str = __file__, kill_seconds: float = KILL_SECONDS) -> list[dict[str, Any]]:
    """Each case of ``setup`` (by default this module's) run by ``script --one`` in a
    fresh process, stopped after ``kill_seconds``."""
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, args in (setup or _setup)(Path(folder)).items():
            if not chosen(name):
                continue
            try:
                done = subprocess.run([sys.executable, script, "--one", json.dumps(args)],
                                      capture_output=True, text=True, timeout=kill_seconds,
                                      check=False)
            except subprocess.TimeoutExpired:
                row = {"seconds": kill_seconds, "cpu_seconds": float("nan"),
                       "exit_code": None, "peak_mb": float("nan"), "output_bytes": 0,
                       "said": "stopped: still running"}
            else:
                if done.returncode == 0:
                    row = json.loads(done.stdout)
                else:
                    last = (done.stderr.strip().splitlines() or ["?"])[-1]
                    row = {"seconds": float("nan"), "cpu_seconds": float("nan"),
                           "exit_code": None, "peak_mb": float("nan"), "output_bytes": 0,
                           "said": f"crashed: {last}"}
            rows.append({"case": name, **row})
    return rows


def _met(row: dict[str, Any]) -> bool:
    return (row["exit_code"] is not None and row["seconds"] < TARGET_SECONDS
            and row["peak_mb"] < TARGET_MB)


def print_table(rows: list[dict[str, Any]] | None = None) -> bool:
    """Print the table; whether every case met the targets."""
    rows = run() if rows is None else rows
    print(f"| hostile case | seconds (< {TARGET_SECONDS:g}) | peak MB (< {TARGET_MB:g}) "
          "| exit | what it said last | result |")
    print("|---|---:|---:|---:|---|---|")
    for row in rows:
        said = row["said"].replace("|", "/")[:110]
        print(f"| {row['case']} | {row['seconds']:.1f} | {row['peak_mb']:.0f} | "
              f"{row['exit_code']} | {said} | {'ok' if _met(row) else 'MISSED'} |",
              flush=True)
    return all(_met(row) for row in rows)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(_one(json.loads(sys.argv[2]))))
        sys.exit(0)
    wanted = sys.argv[1:]
    sys.exit(0 if print_table(run(lambda name: not wanted or any(w in name for w in wanted)))
             else 1)
