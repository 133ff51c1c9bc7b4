"""The one place that runs llama.cpp: its binaries as subprocesses, and its log parsed.

Everything else in the package only builds command lines (:mod:`planner.llamacpp.launch`)
or estimates (:mod:`planner.llamacpp.estimate`). This adapter starts ``ggml-rpc-server``
processes, ``llama-completion`` runs and ``llama-server`` until it has reserved its
buffers, and reads back what llama.cpp says it allocated:

- ``load_tensors: <buffer> model buffer size = X MiB`` (weights),
- ``llama_kv_cache: <buffer> KV buffer size = X MiB`` (one line per cache and device),
- ``llama_memory_recurrent: <buffer> RS buffer size = X MiB`` (recurrent state),
- ``sched_reserve: <buffer> compute buffer size = X MiB`` (and, when the context is
  freed, ``~llama_context: <buffer> compute buffer size is X MiB`` with four decimals,
  which is kept),
- ``llama_context: <buffer> output buffer size = X MiB``,
- ``load_tensors: layer N assigned to device RPCk`` (with ``-v``),
- ``eval time = X ms / N runs (Y ms per token, Z tokens per second)``.

Buffers of an RPC device are named ``RPC0[host:port]`` whatever the device's index, so
they are told apart by the address; every other buffer (``CPU``, ``CPU_Mapped``,
``CPU_REPACK``) is host memory. llama.cpp prints sizes in MiB with two decimals, so a
measured figure is known to within 0.005 MiB.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from planner.errors import CodedError

MIB = 1024 * 1024
_BUFFER = re.compile(
    r"(?P<what>\w+):\s+"
    r"(?P<name>\S+)\s+(?P<kind>model|KV|RS|DSV4 \S+ state|compute|output) buffer size =\s+"
    r"(?P<mib>[0-9.]+) MiB")
# llama_context's destructor repeats each compute buffer with four decimals.
_COMPUTE_EXACT = re.compile(r"~llama_context:\s+(?P<name>\S+) compute buffer size is\s+"
                            r"(?P<mib>[0-9.]+) MiB")
_LAYER = re.compile(r"load_tensors: layer\s+(?P<layer>\d+) assigned to device "
                    r"(?P<device>[^,]+), is_swa")
_EVAL = re.compile(r"\seval time =\s+(?P<ms>[0-9.]+) ms /\s+(?P<runs>\d+) runs\s+\(\s*"
                   r"(?P<per_token>[0-9.]+) ms per token,\s+(?P<tps>[0-9.]+) tokens per second")
_RPC_NAME = re.compile(r"^RPC\d+\[(?P<address>[^\]]+)\]$")
_LOAD_START = "llama_model_loader: loaded meta data"
KIND_COMPONENT = {"model": "weights_bytes", "KV": "kv_bytes", "RS": "state_bytes",
                  "compute": "compute_bytes", "output": "output_bytes"}


class LlamaCppRunError(CodedError):
    """llama.cpp could not be run or did not do what was asked. ``code`` is stable:
    ``LlamaCppNotBuilt``, ``LlamaCppFailed``, ``RpcServerNotReady``."""

    codes = ("LlamaCppNotBuilt", "LlamaCppFailed", "RpcServerNotReady")


@dataclass(frozen=True, slots=True)
class Measured:
    """What one llama.cpp run reported."""

    memory: dict[str, dict[str, int]]
    """``{device: {component: bytes}}``; devices are RPC addresses and ``host``."""
    layer_devices: dict[int, str]
    """Layer index -> device name (``RPC0``, ``RPC1``, ``CPU``); layer ``n_layer`` is the
    output layer."""
    eval_ms_per_token: float | None
    eval_tokens_per_second: float | None
    generated_tokens: int
    log: str = field(repr=False)


def binaries_dir(cache: str | Path | None = None) -> Path:
    """Where ``validation/build_llama_cpp.sh`` left the binaries (``$LLAMA_CPP_BIN``
    overrides it)."""
    if os.environ.get("LLAMA_CPP_BIN"):
        return Path(os.environ["LLAMA_CPP_BIN"])
    root = Path(__file__).resolve().parents[2]
    base = Path(cache) if cache is not None else root / ".cache" / "llama.cpp"
    builds = sorted(base.glob("build-*/bin"))
    if not builds:
        raise LlamaCppRunError("LlamaCppNotBuilt",
                               f"no llama.cpp build under {base}; run "
                               f"validation/build_llama_cpp.sh first", path=str(base))
    return builds[-1]


def parse_log(text: str) -> Measured:
    """The allocations, layer assignment and decode speed of one run's log (``-v``)."""
    # A fitting pass (when --fit is on) loads the model once without allocating: keep
    # only the last load.
    start = text.rfind(_LOAD_START)
    body = text[start:] if start >= 0 else text
    memory: dict[str, dict[str, int]] = {}
    for match in _BUFFER.finditer(body):
        name = match["name"]
        rpc = _RPC_NAME.match(name)
        device = rpc["address"] if rpc else "host"
        kind = match["kind"]
        component = "state_bytes" if kind.startswith("DSV4") else KIND_COMPONENT[kind]
        size = round(float(match["mib"]) * MIB)
        entry = memory.setdefault(device, {})
        entry[component] = entry.get(component, 0) + size
    for match in _COMPUTE_EXACT.finditer(body):
        rpc = _RPC_NAME.match(match["name"])
        device = rpc["address"] if rpc else "host"
        if "compute_bytes" in memory.get(device, {}):
            memory[device]["compute_bytes"] = round(float(match["mib"]) * MIB)
    layers = {int(m["layer"]): m["device"].strip() for m in _LAYER.finditer(body)}
    speed = list(_EVAL.finditer(body))
    per_token = float(speed[-1]["per_token"]) if speed else None
    tps = float(speed[-1]["tps"]) if speed else None
    runs = int(speed[-1]["runs"]) if speed else 0
    return Measured(memory, layers, per_token, tps, runs, text)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(address: str, process: subprocess.Popen[bytes],
                    timeout_s: float = 20.0) -> None:
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise LlamaCppRunError("RpcServerNotReady",
                           f"rpc-server at {address} did not start listening",
                           address=address)


@contextmanager
def rpc_servers(commands: Sequence[tuple[str, Sequence[str]]]) -> Iterator[None]:
    """Run ``(address, argv)`` rpc-server commands for the duration of the block."""
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for address, argv in commands:
            process = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
            processes.append(process)
            _wait_listening(address, process)
        yield
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def run(argv: Sequence[str], timeout_s: float = 600.0) -> Measured:
    """Run a llama.cpp command to completion and parse what it reported."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LlamaCppRunError("LlamaCppFailed", f"{argv[0]} could not run: {exc}",
                               argv=list(argv)) from None
    log = done.stdout + done.stderr
    if done.returncode != 0:
        tail = "\n".join(log.strip().splitlines()[-5:])
        raise LlamaCppRunError("LlamaCppFailed",
                               f"{Path(argv[0]).name} exited with {done.returncode}: {tail}",
                               argv=list(argv), returncode=done.returncode)
    return parse_log(log)


# llama_context::sched_reserve logs this last: every buffer of the context is allocated.
RESERVED = "sched_reserve: reserve took"
# llama-server logs this once it serves; stopped from then on, it frees its context, which
# logs each compute buffer again with four decimals.
SERVING = "llama_server: listening on"


def reserve(argv: Sequence[str], log_path: str | Path, timeout_s: float = 300.0) -> Measured:
    """Start a llama.cpp server command (``llama-server``), wait until it serves (its
    context has reserved its buffers), stop it and parse what it reported. The log goes
    to ``log_path``. Nothing is served: a server that exits, or does not reserve within
    ``timeout_s``, is a ``LlamaCppFailed``."""
    path = Path(log_path)
    with path.open("wb") as log:
        try:
            process = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT)
        except OSError as exc:
            raise LlamaCppRunError("LlamaCppFailed", f"{argv[0]} could not run: {exc}",
                                   argv=list(argv)) from None
        deadline = time.monotonic() + timeout_s
        try:
            while SERVING not in path.read_text(errors="replace"):
                if process.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    text = path.read_text(errors="replace")
    if RESERVED not in text:
        tail = "\n".join(text.strip().splitlines()[-5:])
        raise LlamaCppRunError("LlamaCppFailed",
                               f"{Path(argv[0]).name} reserved nothing (exit "
                               f"{process.returncode}): {tail}", argv=list(argv),
                               returncode=process.returncode)
    return parse_log(text)
