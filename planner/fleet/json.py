"""The JSON form of a fleet file: a docs/rules.md §1 planning request, plus optional
``model_name`` and ``name``, and a node's own failure figures (``annual_failure_rate``,
``repair_hours``, ``gpu``) beside its planning request fields."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from planner.errors import InvalidInput
from planner.fleet._fields import (
    JSON_EXTRA_KEYS,
    RELIABILITY_KEYS,
    SPEED_NUMBER_FIELDS,
    as_rate,
    as_text,
    lone_surrogate_field,
    nested_too_deeply,
    refuse_lone_surrogates,
    too_long_number,
)
from planner.fleet.document import FleetDocument, ModelChoice, ReliabilityOverride
from planner.fleet.errors import FleetFileError
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
        return replace(_document_from_json(data), source=source)
    except FleetFileError as error:
        raise error.located(source) from None


def _document_from_json(data: Any) -> FleetDocument:
    if not isinstance(data, Mapping):
        raise FleetFileError("InvalidField", "the file must hold one JSON object "
                             "(a planning request)", field="request")
    extras = {key: data[key] for key in JSON_EXTRA_KEYS if key in data}
    request_data = {key: value for key, value in data.items() if key not in JSON_EXTRA_KEYS}
    reliability: dict[str, ReliabilityOverride] = {}
    if isinstance(request_data.get("nodes"), list):
        nodes = []
        for index, node in enumerate(request_data["nodes"]):
            if isinstance(node, Mapping) and any(key in node for key in RELIABILITY_KEYS):
                own = _reliability_from_json(node, index)
                node = {key: value for key, value in node.items()
                        if key not in RELIABILITY_KEYS}
                if own is not None:
                    reliability[node["node_id"]] = own
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
    numbers.update({key: extras[key] for key in SPEED_NUMBER_FIELDS if key in extras})
    model_name = extras.get("model_name")
    if model_name is not None:
        as_text(model_name, "model_name")
    name = extras.get("name")
    return FleetDocument(
        model=ModelChoice(numbers=numbers, name=model_name),
        nodes=request.nodes,
        minimum_nodes=request.minimum_nodes,
        context_length_override=request.context_length_override,
        parallel_lanes_override=request.parallel_lanes_override,
        target_decode_tpot_ms=request.target_decode_tpot_ms,
        name=name,
        reliability=reliability,
    )


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
    """The JSON form: the resolved planning request plus ``model_name`` and ``name``."""
    data: dict[str, Any] = {}
    if document.name is not None:
        data["name"] = document.name
    if document.model.name is not None:
        data["model_name"] = document.model.name
    elif document.model.numbers is None:
        data["model_name"] = document.model.label
    data.update(document.to_request().to_dict())
    numbers = document.model.numbers or {}
    data.update({key: numbers[key] for key in SPEED_NUMBER_FIELDS
                 if numbers.get(key) is not None})
    for node in data["nodes"]:
        own = document.reliability.get(node["node_id"])
        if own is not None:
            node.update(own.to_dict())
    return json.dumps(data, indent=2) + "\n"
