"""What a llama.cpp run's log says it allocated and how fast it ran: the one parser of
llama-server's, llama-cli's and llama-completion's logs (pure: text in, plain data out).

The lines it reads (llama.cpp b11434; ``-v`` adds the layer lines):

- ``load_tensors: <buffer> model buffer size = X MiB`` (weights),
- ``llama_kv_cache: <buffer> KV buffer size = X MiB`` (one line per cache and device),
- ``llama_memory_recurrent: <buffer> RS buffer size = X MiB`` (recurrent state),
- ``sched_reserve: <buffer> compute buffer size = X MiB`` (and, when the context is
  freed, ``~llama_context: <buffer> compute buffer size is X MiB`` with four decimals,
  which is kept),
- ``llama_context: <buffer> output buffer size = X MiB``,
- ``load_tensors: layer N assigned to device RPCk`` (with ``-v``),
- ``llama_context: n_ctx = 4096`` and the other settings llama.cpp prints as it builds a
  context (``n_seq_max``, ``n_ctx_seq``, ``n_batch``, ``n_ubatch``, ``flash_attn``,
  ``kv_unified``), and the KV cache's ``K (f16): ..., V (f16): ...`` types,
- ``prompt eval time = X ms / N tokens (...)`` and ``eval time = X ms / N tokens (...)``:
  llama-server prints the pair for each request it served; llama-cli and
  llama-completion print it once, their decode steps counted in ``runs``.

Buffers of an RPC device are named ``RPC<d>[host:port]``, ``d`` the device's index on
that server; they are kept under ``host:port`` (device 0) or ``host:port/d``. Every other
buffer (``CPU``, ``CPU_Mapped``, ``CPU_REPACK``) is host memory, ``host``. llama.cpp
prints sizes in MiB with two decimals, so a measured figure is known to within 0.005 MiB.

A log is text someone else wrote: a line the parser does not know is skipped, a figure
that is not a plain decimal number (``nan``, ``inf``, an exponent, a thousand digits) is
not read, and a log of more than :data:`~planner.limits.MAX_LOG_BYTES` is refused before
it is read (:func:`read_log`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import CodedError
from planner.limits import MAX_LOG_BYTES

MIB = 1024 * 1024
HOST = "host"
# A plain decimal: at most 15 digits before the point (about 10^15 MiB, beyond any
# machine) and 6 after.
_NUMBER = r"[0-9]{1,15}(?:\.[0-9]{1,6})?"
_BUFFER = re.compile(
    r"(?P<what>\w+):\s+"
    r"(?P<name>\S+)\s+(?P<kind>model|KV|RS|DSV4 \S+ state|compute|output) buffer size =\s+"
    rf"(?P<mib>{_NUMBER}) MiB", re.ASCII)
# llama_context's destructor repeats each compute buffer with four decimals.
_COMPUTE_EXACT = re.compile(r"~llama_context:\s+(?P<name>\S+) compute buffer size is\s+"
                            rf"(?P<mib>{_NUMBER}) MiB", re.ASCII)
_LAYER = re.compile(r"load_tensors: layer\s+(?P<layer>\d{1,6}) assigned to device "
                    r"(?P<device>[^,\n]+), is_swa", re.ASCII)
# llama-server: "eval time = X ms / N tokens (...)"; llama-cli, llama-completion:
# "eval time = X ms / N runs (...)". A prompt line is matched whole from its "prompt",
# so its "eval time" is never read as a decode line.
_TIMING = re.compile(rf"(?P<prompt>prompt )?eval time =\s+"
                     rf"(?P<ms>{_NUMBER}) ms /\s+(?P<count>\d{{1,12}}) (?:tokens|runs)\b"
                     rf"(?:\s+\(\s*(?P<per_token>{_NUMBER}) ms per token,\s+"
                     rf"(?P<tps>{_NUMBER}) tokens per second)?", re.ASCII)
_SETTING = re.compile(r"llama_context:\s+(?P<name>n_seq_max|n_ctx|n_ctx_seq|n_batch|n_ubatch|"
                      r"flash_attn|kv_unified)\s+=\s+(?P<value>\S{1,20})\s*$",
                      re.M | re.ASCII)
_KV_TYPES = re.compile(r"llama_kv_cache: size =.*?K \((?P<k>\w{1,10})\):.*?"
                       r"V \((?P<v>\w{1,10})\):", re.ASCII)
_RPC_NAME = re.compile(r"^RPC(?P<device>\d{1,3})\[(?P<address>[^\]]{1,300})\]$", re.ASCII)
_LOAD_START = "llama_model_loader: loaded meta data"
KIND_COMPONENT = {"model": "weights_bytes", "KV": "kv_bytes", "RS": "state_bytes",
                  "compute": "compute_bytes", "output": "output_bytes"}
_INTEGER_SETTINGS = ("n_seq_max", "n_ctx", "n_ctx_seq", "n_batch", "n_ubatch")


class LogError(CodedError):
    """A log that cannot be read. ``code`` is stable: ``UnreadableLog``."""

    codes = ("UnreadableLog",)


@dataclass(frozen=True, slots=True)
class Timing:
    """One pair of timing lines: a request llama-server served, or a llama-cli run."""

    prompt_tokens: int
    prompt_ms: float
    decode_tokens: int
    decode_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "prompt_ms": self.prompt_ms,
                "decode_tokens": self.decode_tokens, "decode_ms": self.decode_ms}


@dataclass(frozen=True, slots=True)
class Measured:
    """What one llama.cpp run reported."""

    memory: dict[str, dict[str, int]]
    """``{device: {component: bytes}}``; devices are RPC addresses (``host:port``, or
    ``host:port/d`` for a server's device ``d`` above 0) and ``host``."""
    layer_devices: dict[int, str]
    """Layer index -> device name (``RPC0``, ``RPC1``, ``CPU``); layer ``n_layer`` is the
    output layer."""
    eval_ms_per_token: float | None
    eval_tokens_per_second: float | None
    generated_tokens: int
    log: str = field(repr=False)
    timings: tuple[Timing, ...] = ()
    """Every prompt-and-decode pair of timing lines, in order."""
    settings: dict[str, Any] = field(default_factory=dict)
    """What llama.cpp printed of its context: ``n_ctx``, ``n_ctx_seq``, ``n_seq_max``,
    ``n_batch``, ``n_ubatch`` (integers), ``flash_attn`` (``enabled``, ``disabled`` or
    ``auto``), ``kv_unified`` (bool), ``cache_type_k``, ``cache_type_v``."""

    @property
    def prompt_tokens(self) -> int:
        return sum(t.prompt_tokens for t in self.timings)

    @property
    def decode_tokens(self) -> int:
        return sum(t.decode_tokens for t in self.timings)

    @property
    def prefill_tokens_per_s(self) -> float | None:
        """Prompt tokens over the time they took, all requests together."""
        elapsed = sum(t.prompt_ms for t in self.timings)
        return self.prompt_tokens * 1000 / elapsed if elapsed > 0 else None

    @property
    def decode_ms_per_token(self) -> float | None:
        """Decode time over the tokens decoded, all requests together."""
        tokens = self.decode_tokens
        return sum(t.decode_ms for t in self.timings) / tokens if tokens else None

    def to_dict(self) -> dict[str, Any]:
        return {"memory": self.memory,
                "layer_devices": {str(k): v for k, v in self.layer_devices.items()},
                "timings": [t.to_dict() for t in self.timings],
                "settings": self.settings}


def rpc_location(device: str) -> tuple[str, int] | None:
    """``(address, device index)`` of a :attr:`Measured.memory` key of an RPC device,
    ``None`` for the host."""
    if device == HOST:
        return None
    address, slash, index = device.partition("/")
    return address, int(index) if slash else 0


def _device_key(name: str) -> str:
    rpc = _RPC_NAME.match(name)
    if rpc is None:
        return HOST
    index = int(rpc["device"])
    return rpc["address"] if index == 0 else f"{rpc['address']}/{index}"


def parse_log(text: str) -> Measured:
    """The allocations, layer assignment, settings and speed of one run's log."""
    # A fitting pass (when --fit is on) loads the model once without allocating: keep
    # only the last load.
    start = text.rfind(_LOAD_START)
    body = text[start:] if start >= 0 else text
    memory: dict[str, dict[str, int]] = {}
    for match in _BUFFER.finditer(body):
        device = _device_key(match["name"])
        kind = match["kind"]
        component = "state_bytes" if kind.startswith("DSV4") else KIND_COMPONENT[kind]
        size = round(float(match["mib"]) * MIB)
        entry = memory.setdefault(device, {})
        entry[component] = entry.get(component, 0) + size
    for match in _COMPUTE_EXACT.finditer(body):
        device = _device_key(match["name"])
        if "compute_bytes" in memory.get(device, {}):
            memory[device]["compute_bytes"] = round(float(match["mib"]) * MIB)
    layers = {int(m["layer"]): m["device"].strip() for m in _LAYER.finditer(body)}
    timings, last = _timings(body)
    per_token = float(last["per_token"]) if last is not None and last["per_token"] else None
    tps = float(last["tps"]) if last is not None and last["tps"] else None
    runs = int(last["count"]) if last is not None else 0
    return Measured(memory, layers, per_token, tps, runs, text, tuple(timings),
                    _settings(body))


def _timings(body: str) -> tuple[list[Timing], re.Match[str] | None]:
    """Each prompt line with the decode line after it (a decode line without a prompt
    line before it counts no prompt), and the last decode line."""
    timings: list[Timing] = []
    prompt: re.Match[str] | None = None
    last = None
    for match in _TIMING.finditer(body):
        if match["prompt"]:
            prompt = match
            continue
        last = match
        timings.append(Timing(int(prompt["count"]) if prompt else 0,
                              float(prompt["ms"]) if prompt else 0.0,
                              int(match["count"]), float(match["ms"])))
        prompt = None
    return timings, last


def _settings(body: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for match in _SETTING.finditer(body):
        name, value = match["name"], match["value"]
        if name in _INTEGER_SETTINGS:
            if value.isascii() and value.isdigit() and len(value) <= 12:
                found[name] = int(value)
        elif name == "kv_unified":
            if value in ("true", "false"):
                found[name] = value == "true"
        elif value in ("enabled", "disabled", "auto"):
            found[name] = value
    types = _KV_TYPES.search(body)
    if types is not None:
        found["cache_type_k"], found["cache_type_v"] = types["k"], types["v"]
    return found


def read_log(path: str | Path) -> Measured:
    """Parse the log file at ``path``; ``UnreadableLog`` names a file that is missing,
    not a regular file, larger than :data:`MAX_LOG_BYTES` or unreadable."""
    file = Path(path)
    try:
        if not file.is_file():
            raise LogError("UnreadableLog", f"{file}: no such log file (or not a file)",
                           path=str(file))
        size = file.stat().st_size
        if size > MAX_LOG_BYTES:
            raise LogError("UnreadableLog", f"{file}: {size:,} bytes, more than the "
                           f"{MAX_LOG_BYTES:,} a log may have", path=str(file))
        with file.open("rb") as handle:
            data = handle.read(MAX_LOG_BYTES + 1)
    except OSError as error:
        raise LogError("UnreadableLog", f"{file}: cannot be read: {error.strerror}",
                       path=str(file)) from None
    if len(data) > MAX_LOG_BYTES:
        raise LogError("UnreadableLog", f"{file}: more than the {MAX_LOG_BYTES:,} bytes a "
                       "log may have", path=str(file))
    return parse_log(data.decode("utf-8", errors="replace"))
