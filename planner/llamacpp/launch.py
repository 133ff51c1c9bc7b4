"""The llama.cpp commands that run a plan: one ``rpc-server`` per stage, one
``llama-server`` that drives them.

Layer placement: ``-ts`` (``--tensor-split``) with whole numbers reproduces a plan's
layer ranges exactly, for the weights and the KV cache alike. llama.cpp puts layer ``il``
on the first device whose cumulative split exceeds ``il / (n_layer + 1)``
(``llama_model::load_tensors``): the output layer counts as one more unit, so the
splits are the stages' layer counts with one added to the last stage, and with every
layer offloaded (``-ngl n_layer + 1``) the output head lands on the last stage.
``-ot``/``--override-tensor`` was not used: it moves a layer's weights but not its KV
cache (which follows the layer split), llama.cpp keeps only the last of several ``-ot``
flags, and any override turns pipeline parallelism off. ``make validate`` checks the
placement on a real build.

The lanes share one unified KV cache (``-kvu``), which is what the planner assumes;
``--fit off`` keeps llama.cpp from changing the context or the layers to make them fit.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from planner._validate import Fail, instance, integer, shown, text
from planner.errors import CodedError
from planner.fleet import FleetDocument
from planner.fleet._fields import address_problem
from planner.limits import DEFAULT_CACHE_TYPE, DEFAULT_UBATCH, MAX_LAYERS
from planner.llamacpp.settings import LlamaCppSettings
from planner.planning import Plan
from planner.units import layer_range

DEFAULT_RPC_PORT = 50052
# llama.cpp's rpc-server binds only an IPv4 address (``inet_addr`` in
# ``ggml-rpc/transport.cpp``: "Invalid host address" otherwise); a node reached by host
# name listens on every IPv4 interface.
ANY_IPV4 = "0.0.0.0"
RPC_SERVER = "ggml-rpc-server"
LLAMA_SERVER = "llama-server"


@dataclass(frozen=True, slots=True)
class LaunchStage:
    node_id: str
    address: str
    layer_start: int
    layer_end: int


@dataclass(frozen=True, slots=True)
class RpcServer:
    node_id: str
    address: str
    argv: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Launch:
    """The commands for one plan (``planner launch``'s JSON keys)."""

    stages: tuple[LaunchStage, ...]
    rpc_servers: tuple[RpcServer, ...]
    llama_server: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "stages": [asdict(stage) for stage in self.stages],
            "rpc_servers": [{"node_id": s.node_id, "address": s.address,
                             "argv": list(s.argv)} for s in self.rpc_servers],
            "llama_server": {"argv": list(self.llama_server)},
        }

    def shell(self) -> str:
        """The commands as bash lines, each argument quoted (:func:`shell_quote`), each
        preceded by a comment saying where it runs."""
        lines = [BASH_NOTE]
        for server in self.rpc_servers:
            stage = _stage(self, server.node_id)
            everywhere = (", listening on every IPv4 interface"
                          if server.argv[server.argv.index("--host") + 1] == ANY_IPV4 else "")
            layers = "layer" if stage.layer_end - stage.layer_start == 1 else "layers"
            lines.append(f"# on {_comment(server.node_id)} ({layers} "
                         f"{layer_range(stage.layer_start, stage.layer_end, '-')}){everywhere}")
            lines.append(shell_join(server.argv))
        lines.append("# on the host that serves requests")
        lines.append(shell_join(self.llama_server))
        return "\n".join(lines) + "\n"


BASH_NOTE = "# bash commands (an argument written $'...' needs bash), one per host"


def _comment(text: str) -> str:
    # A line break in a node id would end the comment and start a command.
    return "".join("?" if not ch.isprintable() else ch for ch in text)


_SAFE_ASCII = frozenset(chr(code) for code in range(0x20, 0x7F)) - {"\\", "'"}


def shell_quote(argument: str) -> str:
    """``argument`` as one bash word. Printable text is single-quoted as
    :func:`shlex.quote` does (bash passes its bytes unchanged). Other text (a control
    character, a bidirectional override, bytes that are not UTF-8, carried as
    surrogate escapes) is written ``$'...'`` with every byte outside printable ASCII as
    ``\\xHH``: bash turns those into the same bytes in every locale, and the printed
    command shows no raw control character."""
    instance(argument, str, _bad_argument("argument"), "text")
    if argument.isprintable():
        return shlex.quote(argument)
    escaped = []
    for byte in os.fsencode(argument):
        ch = chr(byte)
        escaped.append(ch if ch in _SAFE_ASCII else f"\\x{byte:02x}")
    return "$'" + "".join(escaped) + "'"


def shell_join(argv: Sequence[str]) -> str:
    """``argv`` as one bash line, each argument quoted by :func:`shell_quote`."""
    return " ".join(shell_quote(argument) for argument in _texts(argv, "argv"))


def _bad_argument(name: str) -> Fail:
    return lambda problem, value: LaunchError(
        "InvalidLaunchSettings", f"{name} {problem} (got {shown(value)})", field=name,
        value=shown(value))


def _texts(values: Any, name: str) -> list[str]:
    """``values`` as a list of strings: a list or tuple of text, not one string."""
    fail = _bad_argument(name)
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise fail("must be a list of text arguments", values)
    for value in values:
        instance(value, str, fail, "a list of text arguments")
    return list(values)


def _ranges(ranges: Any, layer_count: Any = None) -> list[tuple[int, int]]:
    """``ranges`` checked: one ``(start, end)`` pair of whole numbers per device, in
    order, each at least one layer (but a last device after another, which may hold the
    output layer alone), together the layers ``0..layer_count`` when that is given
    (itself from 1 to :data:`~planner.limits.MAX_LAYERS`)."""
    fail = _bad_argument("ranges")
    if layer_count is not None:
        layer_count = integer(layer_count, _bad_argument("layer_count"), minimum=1,
                              maximum=MAX_LAYERS)
    if isinstance(ranges, str | bytes) or not isinstance(ranges, Sequence) or not ranges:
        raise fail("must be a non-empty list of (start, end) layer ranges", ranges)
    checked: list[tuple[int, int]] = []
    for pair in ranges:
        if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise fail("must be a list of (start, end) layer ranges", pair)
        start = integer(pair[0], fail, minimum=checked[-1][1] if checked else 0,
                        maximum=MAX_LAYERS)
        end = integer(pair[1], fail, minimum=start, maximum=MAX_LAYERS)
        if checked and start != checked[-1][1]:
            raise fail("must follow each other without a gap", pair)
        checked.append((start, end))
    if any(start == end for start, end in checked[:-1]) or checked[0][0] == checked[0][1]:
        raise fail("must each hold at least one layer (only a last device after another "
                   "may hold the output layer alone)", ranges)
    if layer_count is not None and (checked[0][0], checked[-1][1]) != (0, layer_count):
        raise fail(f"must cover layers 0 to {layer_count} (the layer count)", ranges)
    return checked


def _stage(launch: Launch, node_id: str) -> LaunchStage:
    return next(stage for stage in launch.stages if stage.node_id == node_id)


def tensor_split(ranges: Sequence[tuple[int, int]]) -> list[int]:
    """``-ts`` weights that put exactly ``ranges`` on the devices (the output layer is one
    more unit on the last device)."""
    counts = [end - start for start, end in _ranges(ranges)]
    counts[-1] += 1
    return counts


def layer_devices(ranges: Sequence[tuple[int, int]], layer_count: int) -> list[int]:
    """The device llama.cpp gives each layer (and the output layer, last) for the
    ``-ts`` of :func:`tensor_split`, computed the way llama.cpp does, in float32."""
    import numpy as np

    layer_count = integer(layer_count, _bad_argument("layer_count"), minimum=1,
                          maximum=MAX_LAYERS)
    splits = np.array(tensor_split(_ranges(ranges, layer_count)), dtype=np.float32)
    cumulative = np.cumsum(splits, dtype=np.float32)
    cumulative = cumulative / np.float32(cumulative[-1])
    total = layer_count + 1
    devices = []
    for layer in range(total):
        point = np.float32(layer) / np.float32(total)
        devices.append(int(np.searchsorted(cumulative, point, side="right")))
    return devices


def split_address(address: str) -> tuple[str, int]:
    """An rpc-server address's host and port (``host:port``, checked)."""
    problem = address_problem(address) if isinstance(address, str) else "must be text"
    if problem is not None:
        raise LaunchError("InvalidLaunchSettings", f"the address {problem} (got "
                          f"{shown(address)})", field="address", value=shown(address))
    host, _, port = address.rpartition(":")
    return host, int(port)


def _is_ipv4(host: str) -> bool:
    return all(ch in "0123456789." for ch in host)


def build_launch(stages: Sequence[Any], model_path: str, settings: LlamaCppSettings,
                 layer_count: int, addresses: Mapping[str, str] | None = None, *,
                 rpc_server: str = RPC_SERVER, llama_server: str = LLAMA_SERVER,
                 extra_server_args: Sequence[str] = ()) -> Launch:
    """Commands for ``stages`` (objects with ``node_id``, ``layer_start``,
    ``layer_end``, in order). A node without an address is reached as
    ``{node_id}:50052``. An rpc-server reached by host name listens on every IPv4
    interface (``--host 0.0.0.0``): llama.cpp's rpc-server binds IPv4 addresses only."""
    model_path = text(model_path, _bad_argument("model_path"))
    layer_count = integer(layer_count, _bad_argument("layer_count"), minimum=1,
                          maximum=MAX_LAYERS)
    instance(settings, LlamaCppSettings, _bad_argument("settings"), "a LlamaCppSettings")
    rpc_server = text(rpc_server, _bad_argument("rpc_server"))
    llama_server = text(llama_server, _bad_argument("llama_server"))
    extra_server_args = _texts(extra_server_args, "extra_server_args")
    if addresses is not None and not isinstance(addresses, Mapping):
        raise _bad_argument("addresses")("must be a mapping of node id to address",
                                         addresses)
    if isinstance(stages, str | bytes) or not isinstance(stages, Sequence) or not stages:
        raise _bad_argument("stages")("must be a non-empty list of stages", stages)
    for stage in stages:
        if not all(hasattr(stage, name) for name in ("node_id", "layer_start", "layer_end")):
            raise _bad_argument("stages")("must be stages with node_id, layer_start and "
                                          "layer_end", stage)
        instance(stage.node_id, str, _bad_argument("stages"), "stages with text node ids")
    _ranges([(stage.layer_start, stage.layer_end) for stage in stages], layer_count)
    addresses = dict(addresses or {})
    placed = []
    servers = []
    for stage in stages:
        if stage.node_id in addresses:
            address = addresses[stage.node_id]
            problem = address_problem(address)
            if problem is not None:
                raise LaunchError("InvalidLaunchSettings",
                                  f"node {shown(stage.node_id)}: the address {problem} "
                                  f"(got {shown(address)})", field="address",
                                  node_id=stage.node_id, value=address)
        else:
            address = f"{stage.node_id}:{DEFAULT_RPC_PORT}"
            if address_problem(address) is not None:
                raise LaunchError(
                    "NoAddress",
                    f"node {shown(stage.node_id)} has no rpc-server address and its id is "
                    "not a host name or an IPv4 address; give it one (address = "
                    "\"host:port\" in the fleet file)", field="address", node_id=stage.node_id)
        host, port = split_address(address)
        placed.append(LaunchStage(stage.node_id, address, stage.layer_start, stage.layer_end))
        servers.append(RpcServer(stage.node_id, address,
                                 (rpc_server, "--host", host if _is_ipv4(host) else ANY_IPV4,
                                  "--port", str(port))))
    ranges = [(stage.layer_start, stage.layer_end) for stage in placed]
    argv = [
        llama_server, "--model", model_path,
        "--rpc", ",".join(stage.address for stage in placed),
        "--device", ",".join(f"RPC{index}" for index in range(len(placed))),
        "--n-gpu-layers", str(layer_count + 1),
        "--split-mode", "layer",
        "--tensor-split", ",".join(str(n) for n in tensor_split(ranges)),
        "--ctx-size", str(settings.context_length),
        "--parallel", str(settings.parallel),
        "--cache-type-k", settings.cache_type_k,
        "--cache-type-v", settings.cache_type_v,
        "--flash-attn", "on" if settings.flash_attn else "off",
        "--ubatch-size", str(settings.ubatch),
        "--batch-size", str(settings.batch),
        *(["--kv-unified"] if settings.kv_unified else []),
        "--fit", "off",
        *extra_server_args,
    ]
    return Launch(tuple(placed), tuple(servers), tuple(argv))


class LaunchError(CodedError):
    """A plan's launch commands cannot be written. ``code`` is stable: ``NoModelFile``,
    ``NoAddress``, ``InvalidLaunchSettings``."""

    codes = ("NoModelFile", "NoAddress", "InvalidLaunchSettings")


def launch_for_plan(document: FleetDocument, plan: Plan, *, model_path: str | None = None,
                    flash_attn: bool = True, ubatch: int = DEFAULT_UBATCH) -> Launch:
    """The commands that run ``plan`` (planned from ``document``) with llama.cpp: the
    plan's context and lanes, the model's KV cache type for K and V, and the rpc-server
    addresses the fleet file gives. ``model_path`` is the GGUF file as the serving host
    sees it (default: the fleet file's ``gguf``, resolved from the file's folder)."""
    instance(document, FleetDocument, _bad_argument("document"), "a FleetDocument")
    instance(plan, Plan, _bad_argument("plan"), "a Plan")
    if model_path is not None:
        model_path = text(model_path, _bad_argument("model_path"))
    if model_path is None:
        found = document.model.gguf_path(document.base_dir)
        if found is None:
            raise LaunchError(
                "NoModelFile",
                f"llama.cpp runs a GGUF file, and the fleet's model is {document.model.label}; "
                "give the file ([model] gguf = \"...\" in the fleet file, or --model PATH)",
                field="model.gguf")
        model_path = str(found)
    cache_type = document.model.kv_cache_type or DEFAULT_CACHE_TYPE
    settings = LlamaCppSettings(
        context_length=plan.context_length, cache_type_k=cache_type, cache_type_v=cache_type,
        parallel=plan.parallel_lanes, kv_unified=True, ubatch=ubatch, flash_attn=flash_attn)
    layer_count = max(stage.layer_end for stage in plan.stages)
    return build_launch(plan.stages, model_path, settings, layer_count,
                        dict(document.addresses))
