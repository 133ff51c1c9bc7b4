"""The JSON form of a fleet file: a docs/rules.md §1 planning request, plus optional
``model_name`` and ``name``, the numbers the speed estimate reads, the ``preset`` or
``gguf`` file the model's numbers come from (with its ``kv_cache_type``), and a node's
own failure figures (``annual_failure_rate``, ``repair_hours``, ``gpu``), rpc-server
``address`` and ``rpc_device`` beside its planning request fields.

Saving a fleet as JSON and reading it back gives the same fleet document: a model named
by its preset or GGUF file stays one (its numbers are written too, so that the file is a
planning request any reader can plan, and they must agree with what it resolves to)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from planner._validate import shown
from planner.errors import InvalidInput
from planner.fleet._errors import FleetFileError
from planner.fleet._fields import (
    JSON_EXTRA_KEYS,
    JSON_MODEL_SOURCE_KEYS,
    JSON_NODE_EXTRA_KEYS,
    SPEED_NUMBER_FIELDS,
    as_address,
    as_rate,
    as_rpc_device,
    as_text,
    lone_surrogate_field,
    nested_too_deeply,
    refuse_lone_surrogates,
    too_long_number,
)
from planner.fleet.document import FleetDocument, ModelChoice, ReliabilityOverride
from planner.planning import PlanningInput


def parse_fleet_json(text: str, source: str = "<string>") -> FleetDocument:
    """Read a JSON planning request (docs/rules.md §1 names, plus optional ``model_name``
    and ``name``)."""
    refuse_lone_surrogates(text, source, "Json")

    def whole_number(digits: str) -> int:
        if len(digits.lstrip("-")) > sys.get_int_max_str_digits() > 0:
            raise too_long_number(source, "Json", text)
        return int(digits)

    try:
        data = json.loads(text, parse_int=whole_number)
    except json.JSONDecodeError as error:
        raise FleetFileError("InvalidJson", f"not valid JSON: {error.msg}", path=source,
                             line=error.lineno) from None
    except RecursionError:
        raise nested_too_deeply(source, "Json") from None
    where = lone_surrogate_field(data)
    if where is not None:
        # "\ud800" escapes decode to text no report, file or terminal can encode.
        raise FleetFileError("InvalidJson", "holds a lone surrogate (an unpaired \\uD800-"
                             "\\uDFFF escape), which is not Unicode text", path=source,
                             field=where)
    try:
        document = replace(_document_from_json(data), source=source)
        _checked_model_numbers(document, data)
        return document
    except FleetFileError as error:
        raise _named_as_in_json(error).located(source) from None


# The JSON form states the model's source and name beside the request, not in a model
# table: an error of one names the key the file has.
_JSON_MODEL_FIELDS = {**{f"model.{key}": key for key in JSON_MODEL_SOURCE_KEYS},
                      "model.name": "model_name"}


def _named_as_in_json(error: FleetFileError) -> FleetFileError:
    field = _JSON_MODEL_FIELDS.get(error.field or "")
    if field is None:
        return error
    return FleetFileError(error.code, error.message, path=error.path, line=error.line,
                          field=field, node_id=error.node_id)


def _document_from_json(data: Any) -> FleetDocument:
    if not isinstance(data, Mapping):
        raise FleetFileError("InvalidField", "the file must hold one JSON object "
                             "(a planning request)", field="request")
    extras = {key: data[key] for key in JSON_EXTRA_KEYS if key in data}
    request_data = {key: value for key, value in data.items() if key not in JSON_EXTRA_KEYS}
    reliability: dict[str, ReliabilityOverride] = {}
    addresses: list[tuple[str, str]] = []
    devices: list[tuple[str, int]] = []
    if isinstance(request_data.get("nodes"), list):
        nodes = []
        for index, node in enumerate(request_data["nodes"]):
            if isinstance(node, Mapping) and any(key in node for key in JSON_NODE_EXTRA_KEYS):
                own = _reliability_from_json(node, index)
                address = _address_from_json(node, index)
                device = _device_from_json(node, index, address)
                node = {key: value for key, value in node.items()
                        if key not in JSON_NODE_EXTRA_KEYS}
                if own is not None:
                    reliability[node["node_id"]] = own
                if address is not None:
                    addresses.append((node["node_id"], address))
                if device is not None:
                    devices.append((node["node_id"], device))
            nodes.append(node)
        request_data["nodes"] = nodes
    try:
        request = PlanningInput.from_dict(request_data)
    except InvalidInput as error:
        code = "UnknownField" if "unknown field" in error.message else "InvalidField"
        problem = error.message.split(": ", 1)[-1]
        raise FleetFileError(code, problem, field=error.field, node_id=error.node_id) from None
    numbers: dict[str, Any] = {
        "native_context_length": request.native_context_length,
        "layer_count": request.layer_count,
        "model_weight_bytes": request.model_weight_bytes,
        "kv_bytes_per_token": request.kv_bytes_per_token,
    }
    if request.layer_weight_bytes is not None:
        numbers["layer_weight_bytes"] = request.layer_weight_bytes
    model_name = extras.get("model_name")
    if model_name is not None:
        as_text(model_name, "model_name")
    source = {key: extras[key] for key in JSON_MODEL_SOURCE_KEYS if key in extras}
    if source:
        speed = [key for key in SPEED_NUMBER_FIELDS if key in extras]
        if speed:
            raise FleetFileError("InvalidField", "a preset or GGUF model states its own "
                                 "speed figures; give them only with the model's numbers "
                                 "(no preset or gguf)", field=speed[0])
        # JSON's null is "not given", as a missing key is.
        model = ModelChoice(**{key: value for key, value in source.items()
                               if value is not None}, name=model_name)
    else:
        numbers.update({key: extras[key] for key in SPEED_NUMBER_FIELDS if key in extras})
        model = ModelChoice(numbers=numbers, name=model_name)
    return FleetDocument(
        model=model,
        nodes=request.nodes,
        minimum_nodes=request.minimum_nodes,
        context_length_override=request.context_length_override,
        parallel_lanes_override=request.parallel_lanes_override,
        target_decode_tpot_ms=request.target_decode_tpot_ms,
        name=extras.get("name"),
        reliability=reliability,
        addresses=tuple(addresses),
        rpc_devices=tuple(devices),
        default_latency_ms=extras.get("default_latency_ms"),
    )


def _checked_model_numbers(document: FleetDocument, request: Mapping[str, Any]) -> None:
    """Refuse a preset or GGUF model whose numbers in the file differ from what it
    resolves to: which of the two to plan would be a guess."""
    if document.model.numbers is not None:
        return
    resolved = document.model.resolve(document.base_dir)
    for key, value in resolved.items():
        stated = request.get(key)
        if value is None and stated is None:
            continue
        if stated is None or (list(value) if isinstance(value, tuple) else value) != stated:
            raise FleetFileError(
                "InvalidField", f"is {shown(stated)}, but {document.model.label} "
                f"resolves to {shown(value)}; drop preset/gguf to plan these numbers, or "
                "write the model's own", field=key)


def _address_from_json(node: Mapping[str, Any], index: int) -> str | None:
    if node.get("address") is None:
        return None
    node_id = node.get("node_id")
    return as_address(node["address"], f"nodes[{index}].address",
                      node_id if isinstance(node_id, str) else None)


def _device_from_json(node: Mapping[str, Any], index: int,
                      address: str | None) -> int | None:
    if node.get("rpc_device") is None:
        return None
    node_id = node.get("node_id")
    shown_id = node_id if isinstance(node_id, str) else None
    if address is None:
        raise FleetFileError("InvalidField", "is the index of a device on the node's "
                             "rpc-server; give the node its address too",
                             field=f"nodes[{index}].rpc_device", node_id=shown_id)
    return as_rpc_device(node["rpc_device"], f"nodes[{index}].rpc_device", shown_id)


def _reliability_from_json(node: Mapping[str, Any], index: int) -> ReliabilityOverride | None:
    node_id = node.get("node_id")
    shown_id = node_id if isinstance(node_id, str) else None
    prefix = f"nodes[{index}]."
    numbers = {key: as_rate(node[key], f"{prefix}{key}", node_id=shown_id)
               for key in ("annual_failure_rate", "repair_hours") if node.get(key) is not None}
    gpu = node.get("gpu")
    if gpu is not None:
        as_text(gpu, f"{prefix}gpu", node_id=shown_id)
    # A node without a usable id is refused by the request check that follows.
    if shown_id is None or (not numbers and gpu is None):
        return None
    return ReliabilityOverride(gpu=gpu, **numbers)


def fleet_to_json(document: FleetDocument) -> str:
    """The JSON form: the resolved planning request plus the keys of the module's
    docstring; :func:`parse_fleet_json` reads it back as ``document``."""
    data: dict[str, Any] = {}
    if document.name is not None:
        data["name"] = document.name
    if document.model.name is not None:
        data["model_name"] = document.model.name
    model = document.model
    data.update({key: getattr(model, key) for key in JSON_MODEL_SOURCE_KEYS
                 if getattr(model, key) is not None})
    data.update(document.to_request().to_dict())
    # Each node with its own latency only: the others take the fleet's default, saved
    # as such.
    data["nodes"] = [node.to_dict() for node in document.nodes]
    if document.default_latency_ms is not None:
        data["default_latency_ms"] = document.default_latency_ms
    numbers = model.numbers or {}
    data.update({key: numbers[key] for key in SPEED_NUMBER_FIELDS
                 if numbers.get(key) is not None})
    addresses = dict(document.addresses)
    devices = dict(document.rpc_devices)
    for node in data["nodes"]:
        own = document.reliability.get(node["node_id"])
        if own is not None:
            node.update(own.to_dict())
        if node["node_id"] in addresses:
            node["address"] = addresses[node["node_id"]]
        if node["node_id"] in devices:
            node["rpc_device"] = devices[node["node_id"]]
    return json.dumps(data, indent=2) + "\n"
