"""The keys a fleet file may hold, their bounds, and the checks of their values.

Every check raises :class:`~planner.fleet._errors.FleetFileError` naming the field
(and the node), so the TOML form, the JSON form and the document types report a bad
value the same way.
"""

from __future__ import annotations

import ipaddress
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from planner._validate import Fail, integer, known_keys, number, shown, text
from planner.fleet._errors import FleetFileError
from planner.limits import (
    MAX_BYTES,
    MAX_CONTEXT,
    MAX_EXPERTS,
    MAX_HIDDEN_SIZE,
    MAX_LANES,
    MAX_LATENCY_MS,
    MAX_LAYERS,
    MAX_MINIMUM_NODES,
    MAX_RPC_DEVICES,
)
from planner.models.spec import ATTENTION_FIELDS
from planner.units import SIZE_FORMS, UnitError, parse_bytes, parse_context, parse_latency_ms

# A node's own failure figures (planner.availability): failures per node-year, mean hours
# to repair, and the catalog kind (id or name) whose figures it takes.
RELIABILITY_KEYS = ("annual_failure_rate", "repair_hours", "gpu")
# A model given by its numbers may add what the speed estimate reads (each optional):
# activations' width, weight bytes one token reads, parameters, the routed experts and
# their bytes and parameters, the token embeddings' bytes, the output head's parameters,
# attention's query heads and head size (their product is its width) and KV heads, the
# layers over a sliding window, and latent attention's ranks
# (planner.performance.model_traffic reads them).
SPEED_NUMBER_FIELDS = ("hidden_size", "active_weight_bytes", "parameter_count",
                       "expert_count", "experts_used", "routed_expert_bytes",
                       "routed_expert_parameters", "token_embedding_bytes",
                       "output_head_parameters",
                       "attention_heads", "head_size", "kv_heads",
                       "sliding_window", "sliding_window_layers", "kv_lora_rank",
                       "rope_head_size")
# Of those, the sizes (a bare number is bytes) and each count's bound.
_SPEED_SIZES = ("active_weight_bytes", "routed_expert_bytes", "token_embedding_bytes")
_SPEED_BOUNDS = {"hidden_size": MAX_HIDDEN_SIZE, "parameter_count": MAX_BYTES * 8,
                 "routed_expert_parameters": MAX_BYTES * 8,
                 "output_head_parameters": MAX_BYTES * 8,
                 "expert_count": MAX_EXPERTS, "experts_used": MAX_EXPERTS,
                 **ATTENTION_FIELDS}
MODEL_NUMBER_FIELDS = (
    "native_context_length",
    "layer_count",
    "model_weight_bytes",
    "kv_bytes_per_token",
    "layer_weight_bytes",
    *SPEED_NUMBER_FIELDS,
)
_REQUIRED_MODEL_NUMBERS = MODEL_NUMBER_FIELDS[:4]
_MODEL_BYTE_FIELDS = ("model_weight_bytes", "kv_bytes_per_token")
MODEL_KEYS = ("name", "preset", "gguf", "kv_cache_type", "file_bytes", *MODEL_NUMBER_FIELDS)
PLANNING_KEYS = (
    "minimum_nodes",
    "context_length_override",
    "parallel_lanes_override",
    "target_decode_tpot_ms",
    "default_latency_ms",
)
MEASURED_LATENCY = "measured"
"""``default_latency_ms = "measured"``: nodes without a latency take the slowest one
measured on another node."""
NODE_KEYS = ("id", "count", "vram", "max_vram", "headroom", "latency_ms",
             *RELIABILITY_KEYS, "address", "rpc_device")
TOP_KEYS = ("name", "model", "planning", "nodes")
# Beside the planning request: names, the numbers the speed estimate reads, and the preset
# or GGUF file the request's model numbers come from, with its KV cache type (and a
# preset's file size).
JSON_MODEL_SOURCE_KEYS = ("preset", "gguf", "kv_cache_type", "file_bytes")
JSON_EXTRA_KEYS = ("model_name", "name", *SPEED_NUMBER_FIELDS, *JSON_MODEL_SOURCE_KEYS,
                   "default_latency_ms")
# Beside a node's planning request fields: its failure figures, its rpc-server's address
# and its device there.
JSON_NODE_EXTRA_KEYS = (*RELIABILITY_KEYS, "address", "rpc_device")
# A host name's labels (RFC 1123, and "_" as resolvers allow it): ASCII letters, digits,
# "-" and "_", never starting or ending with "-" (so no label reads as a command option).
_HOST_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_PORT = re.compile(r"[0-9]{1,5}")
_MAX_HOST_NAME = 253
# The same bounds the planning request enforces, so a file that reads always plans.
LIMITS = {
    "native_context_length": MAX_CONTEXT,
    "layer_count": MAX_LAYERS,
    "minimum_nodes": MAX_MINIMUM_NODES,
    "context_length_override": MAX_CONTEXT,
    "parallel_lanes_override": MAX_LANES,
    "target_decode_tpot_ms": MAX_LATENCY_MS,
}


# -- text no parser should be handed ------------------------------------------------------


def _max_digits() -> int:
    """Python refuses to convert integer literals longer than this (4,300 by default)."""
    return sys.get_int_max_str_digits() or 4300


def too_long_number(source: str, form: str, text: str) -> FleetFileError:
    """The error for an integer literal of more digits than Python converts."""
    limit = _max_digits()
    line = None
    match = re.search(rf"[0-9_]{{{limit + 1},}}", text)
    if match is not None:
        line = text.count("\n", 0, match.start()) + 1
    return FleetFileError(f"Invalid{form}",
                          f"a number has more than {limit:,} digits; no field takes one "
                          "that large", path=source, line=line)


def nested_too_deeply(source: str, form: str) -> FleetFileError:
    return FleetFileError(f"Invalid{form}", "values are nested too deeply to read",
                          path=source)


def refuse_lone_surrogates(text: str, source: str, form: str) -> None:
    """Refuse text holding half of a UTF-16 surrogate pair: it is not Unicode text, and
    every report, file or terminal the value would reach fails to encode it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise FleetFileError(
            f"Invalid{form}",
            f"holds a lone surrogate (U+{ord(text[error.start]):04X}), which is not "
            "Unicode text", path=source,
            line=text.count("\n", 0, error.start) + 1) from None


def lone_surrogate_field(data: Any) -> str | None:
    """The dotted field of the first string (key or value) in ``data`` that holds a lone
    surrogate, walked without recursion (the data may nest deeply)."""
    pending: list[tuple[str, Any]] = [("", data)]
    while pending:
        where, value = pending.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return where or "(whole)"
        elif isinstance(value, Mapping):
            for key, item in reversed(list(value.items())):
                if isinstance(key, str) and lone_surrogate_field(key) is not None:
                    return f"{where}.(a key)" if where else "(a key)"
                pending.append((f"{where}.{key}" if where else str(key), item))
        elif isinstance(value, list):
            pending.extend((f"{where}[{index}]", item)
                           for index, item in reversed(list(enumerate(value))))
    return None


# -- small validators -------------------------------------------------------------------


def bad(field_name: str, node_id: str | None = None) -> Fail:
    def fail(problem: str, value: Any) -> FleetFileError:
        got = f" (got {shown(value)})" if value is not None else ""
        return FleetFileError("InvalidField", problem + got, field=field_name, node_id=node_id)
    return fail


def as_int(value: Any, field_name: str, *, minimum: int = 0, maximum: int = MAX_BYTES,
            node_id: str | None = None) -> int:
    return integer(value, bad(field_name, node_id), minimum=minimum, maximum=maximum)


def as_size(value: Any, field_name: str, *, node_id: str | None = None,
             bare_bytes: bool = False, minimum: int = 0) -> int:
    """A size of at least ``minimum`` bytes; a bare number only where the key's name says
    bytes (``*_bytes``)."""
    if isinstance(value, float):
        raise FleetFileError("InvalidField", f"{SIZE_FORMS} (got {shown(value)})",
                             field=field_name, node_id=node_id)
    try:
        size = parse_bytes(value, bare_bytes=bare_bytes)
    except UnitError as error:
        raise FleetFileError("InvalidField", error.message, field=field_name,
                             node_id=node_id) from None
    if size > MAX_BYTES:
        raise FleetFileError("InvalidField", f"is larger than {MAX_BYTES:,} bytes",
                             field=field_name, node_id=node_id)
    if size < minimum:
        raise FleetFileError("InvalidField", f"must be at least {minimum:,} "
                             f"byte{'s' if minimum != 1 else ''} (got {size:,})",
                             field=field_name, node_id=node_id)
    return size


def as_context(value: Any, field_name: str) -> int:
    """A context length: whole tokens or text such as ``"128k"`` (k = 1024)."""
    try:
        tokens = parse_context(value)
    except UnitError as error:
        raise FleetFileError("InvalidField", error.message, field=field_name) from None
    return as_int(tokens, field_name, maximum=LIMITS[field_name.rpartition(".")[2]])


def as_latency(value: Any, field_name: str, node_id: str) -> int | float:
    """A latency in ms: ``5``, ``0.5``, ``"5 ms"``, ``"500 us"`` (to the microsecond)."""
    try:
        return parse_latency_ms(value)
    except UnitError as error:
        raise FleetFileError("InvalidField", error.message, field=field_name,
                             node_id=node_id) from None


def as_default_latency(value: Any, field_name: str) -> int | float | str:
    """A fleet's latency for nodes without their own: a latency in ms (as a node's), or
    ``"measured"`` (:data:`MEASURED_LATENCY`, any case)."""
    if isinstance(value, str) and value.strip().lower() == MEASURED_LATENCY:
        return MEASURED_LATENCY
    try:
        return parse_latency_ms(value)
    except UnitError as error:
        raise FleetFileError("InvalidField", f"{error.message}; or \"{MEASURED_LATENCY}\" "
                             "for the slowest latency measured on another node",
                             field=field_name) from None


def as_rate(value: Any, field_name: str, *, node_id: str | None = None) -> float:
    """A failure rate or repair time: a finite number of at least 0."""
    return float(number(value, bad(field_name, node_id)))


def as_text(value: Any, field_name: str, *, node_id: str | None = None) -> str:
    return text(value, bad(field_name, node_id))


def address_problem(value: Any) -> str | None:
    """Why ``value`` is not an rpc-server address ``host:port``, or ``None`` when it is.

    llama.cpp's RPC backend is IPv4 only (``socket(AF_INET, ...)`` and ``gethostbyname``
    in ``ggml-rpc/transport.cpp``) and splits an endpoint at its first ``:``
    (``parse_endpoint`` in ``ggml-rpc.cpp``), so the host is a host name or an IPv4
    address, never an IPv6 literal; the port is 1 to 65535 in ASCII digits.
    """
    if not isinstance(value, str):
        return "must be host:port text"
    host, colon, port = value.rpartition(":")
    if not colon or not host:
        return "must be host:port"
    if _PORT.fullmatch(port) is None or not 0 < int(port) < 65536:
        return "must end in a port from 1 to 65535 (ASCII digits)"
    if host.startswith("[") or ":" in host:
        return ("has an IPv6 address (or brackets), and llama.cpp's RPC connects over IPv4 "
                "only; give a host name or an IPv4 address")
    return host_problem(host)


def host_problem(host: str) -> str | None:
    """Why ``host`` is neither a host name nor an IPv4 address, or ``None``."""
    if any(ch in "0123456789" for ch in host) and all(ch in "0123456789." for ch in host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return "has a host of digits and dots that is not an IPv4 address"
        return None
    labels = host.split(".")
    if (len(host) > _MAX_HOST_NAME
            or not all(_HOST_LABEL.fullmatch(label) for label in labels)
            or labels[-1].isdigit()):
        return ("must start with a host name (letters, digits, '-' and '_' in dot-separated "
                "labels, none starting or ending with '-') or an IPv4 address")
    return None


def is_address(value: Any) -> TypeGuard[str]:
    """Whether ``value`` is an rpc-server address ``host:port`` (:func:`address_problem`)."""
    return address_problem(value) is None


def as_address(value: Any, field_name: str, node_id: str | None) -> str:
    """An rpc-server address ``host:port`` (:func:`address_problem`)."""
    if is_address(value):
        return value
    raise FleetFileError("InvalidField", f"{address_problem(value)} (got {shown(value)})",
                         field=field_name, node_id=node_id)


def as_rpc_device(value: Any, field_name: str, node_id: str | None) -> int:
    """The index of a node's device on its rpc-server: 0 to ``MAX_RPC_DEVICES - 1``."""
    return as_int(value, field_name, maximum=MAX_RPC_DEVICES - 1, node_id=node_id)


def reject_unknown(table: Mapping[str, Any], allowed: Sequence[str], prefix: str,
                    *, node_id: str | None = None) -> None:
    known_keys(table, allowed, lambda key, problem: FleetFileError(
        "UnknownField", problem, field=f"{prefix}{key}", node_id=node_id))


def normalise_numbers(numbers: Mapping[str, Any], prefix: str = "model.") -> dict[str, Any]:
    if not isinstance(numbers, Mapping):
        raise FleetFileError("InvalidField", "must be a table of the model's numbers",
                             field=prefix.rstrip("."))
    reject_unknown(numbers, MODEL_NUMBER_FIELDS, prefix)
    result: dict[str, Any] = {}
    for name in _REQUIRED_MODEL_NUMBERS:
        if name not in numbers or numbers[name] is None:
            missing = ", ".join(n for n in _REQUIRED_MODEL_NUMBERS
                                if n not in numbers or numbers[n] is None)
            raise FleetFileError(
                "MissingField",
                f"is required with the model's numbers (missing: {missing}); "
                "or give a preset or a gguf path instead",
                field=f"{prefix}{name}")
        value = numbers[name]
        if name in _MODEL_BYTE_FIELDS:
            result[name] = as_size(value, f"{prefix}{name}", bare_bytes=True)
        elif name == "native_context_length":
            result[name] = as_context(value, f"{prefix}{name}")
        else:
            result[name] = as_int(value, f"{prefix}{name}", maximum=LIMITS[name])
    weights = numbers.get("layer_weight_bytes")
    if weights is not None:
        if isinstance(weights, (str, bytes, Mapping)) or not isinstance(weights, Sequence):
            raise FleetFileError("InvalidField", "must be a list of sizes, one per layer",
                                 field=f"{prefix}layer_weight_bytes")
        result["layer_weight_bytes"] = tuple(
            as_size(value, f"{prefix}layer_weight_bytes[{index}]", bare_bytes=True)
            for index, value in enumerate(weights))
        if len(result["layer_weight_bytes"]) != result["layer_count"]:
            raise FleetFileError(
                "InvalidField",
                f"has {len(weights)} entries but layer_count is {result['layer_count']}; "
                "give one weight per layer or leave it out",
                field=f"{prefix}layer_weight_bytes")
    _speed_numbers(numbers, result, prefix)
    return result


def _speed_numbers(numbers: Mapping[str, Any], result: dict[str, Any], prefix: str) -> None:
    for name in SPEED_NUMBER_FIELDS:
        value = numbers.get(name)
        if value is None:
            continue
        if name in _SPEED_SIZES:
            result[name] = as_size(value, f"{prefix}{name}", bare_bytes=True)
            if not 0 < result[name] <= result["model_weight_bytes"]:
                raise FleetFileError("InvalidField", "must be above 0 and at most "
                                     "model_weight_bytes", field=f"{prefix}{name}")
        else:
            result[name] = as_int(value, f"{prefix}{name}", minimum=1,
                                  maximum=_SPEED_BOUNDS[name])
    if ("expert_count" in result) != ("experts_used" in result):
        raise FleetFileError("MissingField", "expert_count and experts_used go together",
                             field=f"{prefix}experts_used")
    routed = result.get("routed_expert_parameters")
    if routed is not None and routed > result.get("parameter_count", routed):
        raise FleetFileError("InvalidField", "exceeds parameter_count",
                             field=f"{prefix}routed_expert_parameters")
    head = result.get("output_head_parameters")
    if head is not None:
        if "parameter_count" not in result:
            raise FleetFileError("MissingField", "output_head_parameters goes with "
                                 "parameter_count (the head is among the parameters a "
                                 "token computes with)", field=f"{prefix}parameter_count")
        if head + (routed or 0) > result["parameter_count"]:
            raise FleetFileError("InvalidField", "with routed_expert_parameters, exceeds "
                                 "parameter_count", field=f"{prefix}output_head_parameters")
    if result.get("experts_used", 0) > result.get("expert_count", 0):
        raise FleetFileError("InvalidField", "exceeds expert_count",
                             field=f"{prefix}experts_used")
    for name, needs in (("head_size", "attention_heads"), ("kv_heads", "head_size"),
                        ("sliding_window_layers", "sliding_window"),
                        ("rope_head_size", "kv_lora_rank"),
                        ("kv_lora_rank", "attention_heads")):
        if name in result and needs not in result:
            raise FleetFileError("MissingField", f"goes with {needs}",
                                 field=f"{prefix}{needs}")
    if result.get("sliding_window_layers", 0) > result["layer_count"]:
        raise FleetFileError("InvalidField", "exceeds layer_count",
                             field=f"{prefix}sliding_window_layers")
    if result.get("kv_heads", 0) > result.get("attention_heads", 0):
        raise FleetFileError("InvalidField", "exceeds attention_heads",
                             field=f"{prefix}kv_heads")
