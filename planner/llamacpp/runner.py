"""The one place that touches llama.cpp: its binaries as subprocesses and its rpc-servers
over their sockets.

Everything else in the package only builds command lines (:mod:`planner.llamacpp.launch`),
estimates (:mod:`planner.llamacpp.estimate`) or speaks the RPC protocol's bytes
(:mod:`planner.llamacpp.rpc`). This adapter connects to ``rpc-server``s to ask for their
devices (:func:`query_rpc_servers`, only to the addresses it is given), starts
``ggml-rpc-server`` processes, ``llama-completion`` runs and ``llama-server`` until it has
reserved its buffers, and reads back what llama.cpp says it allocated through the one log
parser, :mod:`planner.llamacpp.log`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from planner.errors import CodedError
from planner.limits import DEFAULT_RPC_TIMEOUT_S
from planner.llamacpp.log import Measured, parse_log
from planner.llamacpp.rpc import (
    RpcDiscoveryError,
    RpcServerReport,
    Step,
    Transcript,
    check_resolved,
    converse,
    device_memory_conversation,
    named_endpoint,
    refuse_duplicates,
)


class LlamaCppRunError(CodedError):
    """llama.cpp could not be run or did not do what was asked. ``code`` is stable:
    ``LlamaCppNotBuilt``, ``LlamaCppFailed``, ``RpcServerNotReady``."""

    codes = ("LlamaCppNotBuilt", "LlamaCppFailed", "RpcServerNotReady")


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
            stop(process)


def stop(process: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """Stop a process this module started: asked to end, then killed after ``grace_s``
    seconds (a process that has ended already is left as it is)."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
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
            stop(process)
    text = path.read_text(errors="replace")
    if RESERVED not in text:
        tail = "\n".join(text.strip().splitlines()[-5:])
        raise LlamaCppRunError("LlamaCppFailed",
                               f"{Path(argv[0]).name} reserved nothing (exit "
                               f"{process.returncode}): {tail}", argv=list(argv),
                               returncode=process.returncode)
    return parse_log(text)


# -- rpc-servers over their sockets ---------------------------------------------------------

BUSY_HINT = ("either an rpc-server busy with another client (it serves one at a time, and "
             "a llama-server using it holds it) or no rpc-server at all")


def query_rpc_servers(addresses: Sequence[str], *, timeout_s: float = DEFAULT_RPC_TIMEOUT_S,
                      transcripts: dict[str, Transcript] | None = None,
                      ) -> list[RpcServerReport]:
    """Ask each rpc-server at ``addresses`` (``host:port``, as the user named them) for
    its devices' free and total memory, over llama.cpp's RPC protocol
    (:mod:`planner.llamacpp.rpc`).

    Each name is resolved once to an IPv4 address, as llama.cpp resolves it, and only
    those addresses and ports are connected to, one server at a time; each gets
    ``timeout_s`` seconds for its name, its connection and every reply together. With
    ``transcripts``, the bytes sent and received are kept there by address.
    """
    endpoints = [(address, named_endpoint(address)) for address in addresses]
    resolved = [(address, (_resolve(address, host, timeout_s), port))
                for address, (host, port) in endpoints]
    refuse_duplicates(resolved)
    allowed = frozenset(endpoint for _, endpoint in resolved)
    reports = []
    for address, endpoint in resolved:
        transcript = Transcript()
        if transcripts is not None:
            transcripts[address] = transcript
        reports.append(_query(address, endpoint, allowed, timeout_s, transcript))
    return reports


def _resolve(address: str, host: str, timeout_s: float) -> str:
    """``host``'s first IPv4 address (llama.cpp's ``gethostbyname``), within
    ``timeout_s``: the resolver runs in a thread the caller does not wait for beyond it."""
    result: dict[str, str | OSError] = {}

    def resolve() -> None:
        try:
            result["ip"] = socket.gethostbyname(host)
        except (OSError, UnicodeError) as error:
            result["error"] = OSError(str(error))

    worker = threading.Thread(target=resolve, daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise RpcDiscoveryError("RpcTimeout", f"the name {host!r} did not resolve within "
                                f"{timeout_s:g} s", address=address)
    found = result.get("ip")
    if not isinstance(found, str):
        raise RpcDiscoveryError("RpcUnreachable", f"the name {host!r} does not resolve to "
                                f"an IPv4 address ({result.get('error')})", address=address)
    check_resolved(address, found)
    return found


def _query(address: str, endpoint: tuple[str, int], allowed: frozenset[tuple[str, int]],
           timeout_s: float, transcript: Transcript) -> RpcServerReport:
    if endpoint not in allowed:
        # Only what the user named (resolved once) is ever connected to.
        raise RpcDiscoveryError(
            "AddressNotNamed", f"{endpoint[0]}:{endpoint[1]} is not an address the user "
            "named; nothing else is connected to", address=address)
    deadline = time.monotonic() + timeout_s
    round_trips: list[float] = []
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            try:
                sock.connect(endpoint)
            except TimeoutError:
                raise RpcDiscoveryError(
                    "RpcTimeout", f"did not accept a connection within {timeout_s:g} s",
                    address=address) from None

            def exchange(step: Step) -> bytes:
                started = time.monotonic()
                if step.request:
                    _settimeout(sock, deadline, address, step, timeout_s)
                    sock.sendall(step.request)
                    transcript.sent.extend(step.request)
                data = _read_exactly(sock, step, deadline, address, timeout_s)
                transcript.received.extend(data)
                if step.request and len(data) == step.read:
                    round_trips.append((time.monotonic() - started) * 1000)
                return data

            report = converse(device_memory_conversation(address), exchange)
    except ConnectionRefusedError:
        raise RpcDiscoveryError(
            "RpcUnreachable", f"refused the connection: nothing listens on port "
            f"{endpoint[1]} of {endpoint[0]}", address=address) from None
    except TimeoutError:
        raise _late(address, "everything asked", timeout_s) from None
    except RpcDiscoveryError:
        raise
    except OSError as error:
        raise RpcDiscoveryError("RpcUnreachable", f"cannot be reached: "
                                f"{error.strerror or error}", address=address) from None
    return replace(report, connected_to=f"{endpoint[0]}:{endpoint[1]}",
                   round_trip_ms=round(min(round_trips), 3) if round_trips else None)


def _late(address: str, what: str, timeout_s: float) -> RpcDiscoveryError:
    return RpcDiscoveryError("RpcTimeout", f"did not answer {what} within {timeout_s:g} s: "
                             f"{BUSY_HINT}", address=address, timeout_s=timeout_s)


def _settimeout(sock: socket.socket, deadline: float, address: str, step: Step,
                timeout_s: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _late(address, step.what, timeout_s)
    sock.settimeout(left)


def _read_exactly(sock: socket.socket, step: Step, deadline: float, address: str,
                  timeout_s: float) -> bytes:
    """Exactly ``step.read`` bytes, or fewer when the server closed the connection; never
    more than asked, never past the deadline."""
    data = bytearray()
    while len(data) < step.read:
        _settimeout(sock, deadline, address, step, timeout_s)
        try:
            chunk = sock.recv(step.read - len(data))
        except TimeoutError:
            raise _late(address, step.what, timeout_s) from None
        except ConnectionResetError:
            break
        if not chunk:
            break
        data.extend(chunk)
    return bytes(data)
