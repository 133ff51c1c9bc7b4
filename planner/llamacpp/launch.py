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

An rpc-server may serve several devices (a node each, told apart by ``rpc_device``).
llama.cpp numbers the devices of the servers in ``--rpc`` one after another, each
server's in its own order (``ggml_backend_rpc_add_server``: ``RPC0``, ``RPC1``, ... across
servers), so ``--rpc`` lists each server once and ``--device`` names each stage's device
by that number; a server's devices are counted from the fleet's nodes at its address,
which must be its devices 0, 1, ... without a gap. One rpc-server command is printed per
server.
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
from planner.limits import DEFAULT_CACHE_TYPE, DEFAULT_UBATCH, MAX_LAYERS, MAX_RPC_DEVICES
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
    rpc_device: int = 0
    """The device's index on its rpc-server."""


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
        multi = any(stage.rpc_device for stage in self.stages)

        def stage_dict(stage: LaunchStage) -> dict[str, Any]:
            data = asdict(stage)
            if not multi:
                del data["rpc_device"]  # every device is its server's first
            return data

        return {
            "stages": [stage_dict(stage) for stage in self.stages],
            "rpc_servers": [{"node_id": s.node_id, "address": s.address,
                             "argv": list(s.argv)} for s in self.rpc_servers],
            "llama_server": {"argv": list(self.llama_server)},
        }

    def shell(self) -> str:
        """The commands as bash lines, each argument quoted (:func:`shell_quote`), each
        preceded by a comment saying where it runs."""
        lines = [BASH_NOTE]
        for server in self.rpc_servers:
            served = [stage for stage in self.stages if stage.address == server.address]
            everywhere = (", listening on every IPv4 interface"
                          if server.argv[server.argv.index("--host") + 1] == ANY_IPV4 else "")
            if len(served) == 1 and not served[0].rpc_device:
                lines.append(f"# on {_comment(server.node_id)} ({_layers(served[0])})"
                             f"{everywhere}")
            else:
                held = "; ".join(f"{_comment(stage.node_id)}: device {stage.rpc_device}, "
                                 f"{_layers(stage)}" for stage in served)
                lines.append(f"# on the host of {_comment(server.address)}, serving its "
                             f"devices ({held}){everywhere}")
            lines.append(shell_join(server.argv))
        lines.append("# on the host that serves requests")
        lines.append(shell_join(self.llama_server))
        return "\n".join(lines) + "\n"


def _layers(stage: LaunchStage) -> str:
    layers = "layer" if stage.layer_end - stage.layer_start == 1 else "layers"
    return f"{layers} {layer_range(stage.layer_start, stage.layer_end, '-')}"


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
                 extra_server_args: Sequence[str] = (),
                 rpc_devices: Mapping[str, int] | None = None,
                 server_devices: Mapping[str, int] | None = None) -> Launch:
    """Commands for ``stages`` (objects with ``node_id``, ``layer_start``,
    ``layer_end``, in order). A node without an address is reached as
    ``{node_id}:50052``. An rpc-server reached by host name listens on every IPv4
    interface (``--host 0.0.0.0``): llama.cpp's rpc-server binds IPv4 addresses only.

    ``rpc_devices`` gives a node's device on its server (default 0) and
    ``server_devices`` how many devices a server has (default: one more than the
    highest device a stage uses there); llama.cpp numbers the devices of every server
    in ``--rpc`` one after another."""
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
    devices = _device_map(rpc_devices, "rpc_devices")
    counts = _device_map(server_devices, "server_devices")
    placed: list[LaunchStage] = []
    servers: list[RpcServer] = []
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
        device = devices.get(stage.node_id, 0)
        for other in placed:
            if other.address == address and other.rpc_device == device:
                raise LaunchError(
                    "InconsistentRpcDevices",
                    f"nodes {shown(other.node_id)} and {shown(stage.node_id)} are both "
                    f"device {device} of the rpc-server at {address}; give each its own "
                    "rpc_device", field="rpc_device", node_id=stage.node_id)
        placed.append(LaunchStage(stage.node_id, address, stage.layer_start, stage.layer_end,
                                  device))
        if all(server.address != address for server in servers):
            servers.append(RpcServer(
                stage.node_id, address,
                (rpc_server, "--host", host if _is_ipv4(host) else ANY_IPV4,
                 "--port", str(port))))
    ranges = [(stage.layer_start, stage.layer_end) for stage in placed]
    argv = [
        llama_server, "--model", model_path,
        "--rpc", ",".join(server.address for server in servers),
        "--device", ",".join(f"RPC{index}" for index in _device_numbers(placed, servers,
                                                                         counts)),
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


def _device_map(values: Mapping[str, int] | None, name: str) -> dict[str, int]:
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise _bad_argument(name)("must be a mapping", values)
    return {key: integer(value, _bad_argument(name), minimum=0 if name == "rpc_devices"
                         else 1, maximum=MAX_RPC_DEVICES)
            for key, value in values.items()}


def _device_numbers(placed: Sequence[LaunchStage], servers: Sequence[RpcServer],
                    counts: Mapping[str, int]) -> list[int]:
    """The number llama.cpp gives each stage's device: the devices of the servers before
    its own in ``--rpc``, plus its index on its own."""
    first: dict[str, int] = {}
    number = 0
    for server in servers:
        used = max(stage.rpc_device for stage in placed if stage.address == server.address)
        count = counts.get(server.address, used + 1)
        if count <= used:
            raise LaunchError(
                "InconsistentRpcDevices",
                f"the rpc-server at {server.address} has {count} device(s), and a stage "
                f"uses its device {used}", field="rpc_device", address=server.address)
        first[server.address] = number
        number += count
    return [first[stage.address] + stage.rpc_device for stage in placed]


def server_device_counts(document: FleetDocument) -> dict[str, int]:
    """How many devices each rpc-server of ``document`` has: its nodes at that address,
    which must be its devices 0, 1, ... (``InconsistentRpcDevices`` otherwise: llama.cpp
    numbers every device of a server, used or not)."""
    devices = dict(document.rpc_devices)
    at: dict[str, list[tuple[int, str]]] = {}
    for node_id, address in document.addresses:
        at.setdefault(address, []).append((devices.get(node_id, 0), node_id))
    counts = {}
    for address, held in at.items():
        indices = sorted(index for index, _ in held)
        if indices != list(range(len(indices))):
            taken: dict[int, str] = {}
            for index, node_id in sorted(held):
                if index in taken:
                    problem = (f"nodes {shown(taken[index])} and {shown(node_id)} are both "
                               f"its device {index}")
                    break
                taken[index] = node_id
            else:
                missing = sorted(set(range(indices[-1] + 1)) - set(indices))
                problem = (f"the fleet has no node for its device {missing[0]}; llama.cpp "
                           "numbers every device of a server, so keep a node for each (one "
                           "you do not want used can have max_vram = \"0 B\")")
            raise LaunchError("InconsistentRpcDevices",
                              f"the rpc-server at {address}: {problem}", field="rpc_device",
                              address=address)
        counts[address] = len(indices)
    return counts


class LaunchError(CodedError):
    """A plan's launch commands cannot be written. ``code`` is stable: ``NoModelFile``,
    ``NoAddress``, ``InvalidLaunchSettings``, ``InconsistentRpcDevices``."""

    codes = ("NoModelFile", "NoAddress", "InvalidLaunchSettings", "InconsistentRpcDevices")


def launch_settings(document: FleetDocument, plan: Plan, *, flash_attn: bool = True,
                    ubatch: int = DEFAULT_UBATCH) -> LlamaCppSettings:
    """The llama-server settings that run ``plan``: its context and lanes with one
    unified KV cache, K and V caches of the model's ``kv_cache_type``, ``flash_attn``
    and ``ubatch``, and llama-server's one output per lane."""
    instance(document, FleetDocument, _bad_argument("document"), "a FleetDocument")
    instance(plan, Plan, _bad_argument("plan"), "a Plan")
    cache_type = document.model.kv_cache_type or DEFAULT_CACHE_TYPE
    return LlamaCppSettings(
        context_length=plan.context_length, cache_type_k=cache_type, cache_type_v=cache_type,
        parallel=plan.parallel_lanes, kv_unified=True, ubatch=ubatch, flash_attn=flash_attn)


def launch_for_plan(document: FleetDocument, plan: Plan, *, model_path: str | None = None,
                    flash_attn: bool = True, ubatch: int = DEFAULT_UBATCH) -> Launch:
    """The commands that run ``plan`` (planned from ``document``) with llama.cpp
    (:func:`launch_settings`) and the rpc-server addresses the fleet file gives.
    ``model_path`` is the GGUF file as the serving host sees it (default: the fleet
    file's ``gguf``, resolved from the file's folder)."""
    settings = launch_settings(document, plan, flash_attn=flash_attn, ubatch=ubatch)
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
    layer_count = max(stage.layer_end for stage in plan.stages)
    return build_launch(plan.stages, model_path, settings, layer_count,
                        dict(document.addresses), rpc_devices=dict(document.rpc_devices),
                        server_devices=server_device_counts(document))
