"""The TOML form of a fleet file (see :mod:`planner.fleet` for the format)."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import tomli_w

from planner._validate import identifier, look_alike, looks
from planner.fleet._errors import FleetFileError
from planner.fleet._fields import (
    LIMITS,
    MODEL_KEYS,
    MODEL_NUMBER_FIELDS,
    NODE_KEYS,
    PLANNING_KEYS,
    RELIABILITY_KEYS,
    SPEED_NUMBER_FIELDS,
    TOP_KEYS,
    as_address,
    as_context,
    as_default_latency,
    as_int,
    as_latency,
    as_rate,
    as_rpc_device,
    as_size,
    as_text,
    bad,
    nested_too_deeply,
    normalise_numbers,
    refuse_lone_surrogates,
    reject_unknown,
    too_long_number,
)
from planner.fleet.document import (
    FleetDocument,
    ModelChoice,
    ReliabilityOverride,
    expanded_node_ids,
)
from planner.limits import MAX_NODES
from planner.planning import NodeBudget
from planner.planning.inputs import check_node_count
from planner.units import exact_size_text

_NUMBERED = re.compile(r"^(.+)-(\d+)$", re.DOTALL)


def _same_budget(a: NodeBudget, b: NodeBudget) -> bool:
    return (a.detected_vram_bytes, a.max_vram_bytes, a.runtime_headroom_bytes,
            a.stage_transfer_latency_ms) == (b.detected_vram_bytes, b.max_vram_bytes,
                                             b.runtime_headroom_bytes,
                                             b.stage_transfer_latency_ms)


def _group_nodes(nodes: Sequence[NodeBudget],
                 reliability: Mapping[str, ReliabilityOverride] | None = None,
                 single: set[str] | frozenset[str] = frozenset(),
                 ) -> list[tuple[NodeBudget, str, int | None]]:
    """Runs of identical, numbered nodes as ``(first node, base id, count)`` entries.

    A run is grouped only when ``count`` expansion gives back exactly its ids and its
    nodes have the same failure figures, so that writing and reading a file is lossless.
    """
    own = reliability or {}
    groups: list[tuple[NodeBudget, str, int | None]] = []
    index = 0
    while index < len(nodes):
        node = nodes[index]
        match = _NUMBERED.match(node.node_id)
        taken = 0
        if match and int(match.group(2)) == 0 and match.group(1).strip():
            base, width = match.group(1), len(match.group(2))
            run = 0
            while (index + run < len(nodes)
                   and nodes[index + run].node_id == f"{base}-{run:0{width}d}"
                   and _same_budget(nodes[index + run], node)
                   and own.get(nodes[index + run].node_id) == own.get(node.node_id)
                   and nodes[index + run].node_id not in single):
                run += 1
            if width == 2:
                taken = min(run, 100)
            elif run > 10 ** (width - 1):
                taken = min(run, 10**width)
            if taken >= 2 and expanded_node_ids(base, taken) == [
                    n.node_id for n in nodes[index:index + taken]]:
                groups.append((node, base, taken))
                index += taken
                continue
        groups.append((node, node.node_id, None))
        index += 1
    return groups




# Linear-time patterns only: no two adjacent parts may match the same characters, or a
# long line of spaces makes the match cubic. The table name is checked after the match.
_TABLE_HEADER = re.compile(r"^[ \t]*(\[\[?)([^\]\n]*)\]\]?[ \t]*(#.*)?$")
_TABLE_NAME = re.compile(r"[A-Za-z0-9_\-\.\"' ]+")
_KEY_LINE = re.compile(r"^\s*(\"[^\"]*\"|'[^']*'|[A-Za-z0-9_\-]+)\s*=")


class _KeyLines:
    """Best-effort line numbers of tables and keys, for error messages.

    TOML parsers do not report where a value came from; a line scan finds the table
    headers and ``key =`` lines, which covers how fleet files are written.
    """

    def __init__(self, text: str) -> None:
        self.lines: dict[tuple[str, int | None, str | None], int] = {}
        table: tuple[str, int | None] = ("", None)
        counters: dict[str, int] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            header = _TABLE_HEADER.match(raw)
            if header and _TABLE_NAME.fullmatch(header.group(2).strip()):
                name = header.group(2).strip().strip("\"'")
                if header.group(1) == "[[":
                    counters[name] = counters.get(name, -1) + 1
                    table = (name, counters[name])
                else:
                    table = (name, None)
                self.lines.setdefault((*table, None), number)
                continue
            key = _KEY_LINE.match(raw)
            if key:
                self.lines.setdefault((*table, key.group(1).strip("\"'")), number)

    def find(self, field_name: str | None) -> int | None:
        if not field_name:
            return None
        match = re.match(r"^(nodes)\[(\d+)\](?:\.(\w+))?", field_name)
        if match:
            index = int(match.group(2))
            return (self.lines.get(("nodes", index, match.group(3)))
                    or self.lines.get(("nodes", index, None)))
        head, _, rest = field_name.partition(".")
        key = re.sub(r"\[\d+\]$", "", rest) if rest else None
        if head in ("model", "planning"):
            return self.lines.get((head, None, key)) or self.lines.get((head, None, None))
        return self.lines.get(("", None, re.sub(r"\[\d+\]$", "", head)))


def _toml_error_line(error: tomllib.TOMLDecodeError) -> int | None:
    match = re.search(r"line (\d+)", str(error))
    return int(match.group(1)) if match else None


def parse_fleet_toml(text: str, source: str = "<string>") -> FleetDocument:
    """Read a TOML fleet file's text. Errors name ``source``, the line and the field."""
    refuse_lone_surrogates(text, source, "Toml")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(error))
        message = re.sub(r"\s*\(at end of document\)", " at the end of the file", message)
        raise FleetFileError("InvalidToml", f"not valid TOML: {message}", path=source,
                             line=_toml_error_line(error)) from None
    except RecursionError:
        raise nested_too_deeply(source, "Toml") from None
    except ValueError:
        # tomllib reports every syntax error as TOMLDecodeError; a bare ValueError is
        # Python refusing to convert an integer literal of too many digits.
        raise too_long_number(source, "Toml", text) from None
    lines = _KeyLines(text)
    try:
        document = _document_from_toml(data)
    except FleetFileError as error:
        raise error.located(source, lines.find(error.field)) from None
    return replace(document, source=source)


def _document_from_toml(data: Mapping[str, Any]) -> FleetDocument:
    reject_unknown(data, TOP_KEYS, "")
    name = data.get("name")
    if name is not None:
        as_text(name, "name")
    model_table = data.get("model")
    if model_table is None:
        raise FleetFileError("MissingField",
                             "a [model] table is required (a preset, a gguf path or the "
                             "model's numbers)", field="model")
    if not isinstance(model_table, Mapping):
        raise FleetFileError("InvalidField", "must be a table", field="model")
    model = _model_from_toml(model_table)
    planning = data.get("planning", {})
    if not isinstance(planning, Mapping):
        raise FleetFileError("InvalidField", "must be a table", field="planning")
    reject_unknown(planning, PLANNING_KEYS, "planning.")
    options: dict[str, Any] = {}
    for key in PLANNING_KEYS:
        if key == "context_length_override" and key in planning:
            options[key] = as_context(planning[key], f"planning.{key}")
        elif key == "default_latency_ms" and key in planning:
            options[key] = as_default_latency(planning[key], f"planning.{key}")
        elif key in planning:
            options[key] = as_int(planning[key], f"planning.{key}", maximum=LIMITS[key])
    raw_nodes = data.get("nodes", [])
    if not isinstance(raw_nodes, list):
        raise FleetFileError("InvalidField", "write each node as a [[nodes]] table",
                             field="nodes")
    nodes, reliability, addresses, devices = _nodes_from_toml(raw_nodes)
    return FleetDocument(model=model, nodes=nodes, name=name, reliability=reliability,
                         addresses=addresses, rpc_devices=devices, **options)


def _model_from_toml(table: Mapping[str, Any]) -> ModelChoice:
    reject_unknown(table, MODEL_KEYS, "model.")
    numbers = {key: table[key] for key in MODEL_NUMBER_FIELDS if key in table}
    kinds = [kind for kind, present in (("preset", "preset" in table),
                                        ("gguf", "gguf" in table),
                                        ("numbers", bool(numbers))) if present]
    if len(kinds) != 1:
        problem = ("none was given" if not kinds
                   else f"both {' and '.join(kinds)} were given")
        raise FleetFileError(
            "MissingField" if not kinds else "InvalidField",
            f"give exactly one of preset, gguf or the model's numbers; {problem}",
            field="model")
    for key in ("name", "preset", "gguf", "kv_cache_type"):
        if key in table:
            as_text(table[key], f"model.{key}")
    return ModelChoice(
        preset=table.get("preset"),
        gguf=table.get("gguf"),
        kv_cache_type=table.get("kv_cache_type"),
        file_bytes=(as_size(table["file_bytes"], "model.file_bytes", bare_bytes=True,
                            minimum=1) if "file_bytes" in table else None),
        numbers=normalise_numbers(numbers) if numbers else None,
        name=table.get("name"),
    )


def _reliability_from_toml(entry: Mapping[str, Any], prefix: str,
                           node_id: str) -> ReliabilityOverride | None:
    if not any(key in entry for key in RELIABILITY_KEYS):
        return None
    numbers = {key: as_rate(entry[key], f"{prefix}{key}", node_id=node_id)
               for key in ("annual_failure_rate", "repair_hours") if key in entry}
    gpu = as_text(entry["gpu"], f"{prefix}gpu", node_id=node_id) if "gpu" in entry else None
    return ReliabilityOverride(gpu=gpu, **numbers)


def _nodes_from_toml(entries: list[Any]
                     ) -> tuple[tuple[NodeBudget, ...], dict[str, ReliabilityOverride],
                                tuple[tuple[str, str], ...], tuple[tuple[str, int], ...]]:
    nodes: list[NodeBudget] = []
    reliability: dict[str, ReliabilityOverride] = {}
    addresses: list[tuple[str, str]] = []
    devices: list[tuple[str, int]] = []
    owner: dict[str, tuple[int, str, str]] = {}  # by how each id looks
    for index, entry in enumerate(entries):
        prefix = f"nodes[{index}]."
        if not isinstance(entry, Mapping):
            raise FleetFileError("InvalidField", "write each node as a [[nodes]] table",
                                 field=f"nodes[{index}]")
        raw_id = entry.get("id")
        shown_id = raw_id if isinstance(raw_id, str) else None
        reject_unknown(entry, NODE_KEYS, prefix, node_id=shown_id)
        if "id" not in entry:
            raise FleetFileError("MissingField", "every node needs an id", field=f"{prefix}id")
        base_id = identifier(raw_id, bad(f"{prefix}id"))
        if "vram" not in entry:
            raise FleetFileError("MissingField", "is required (the node's detected VRAM)",
                                 field=f"{prefix}vram", node_id=base_id)
        detected = as_size(entry["vram"], f"{prefix}vram", node_id=base_id)
        max_vram = (as_size(entry["max_vram"], f"{prefix}max_vram", node_id=base_id)
                    if "max_vram" in entry else None)
        headroom = (as_size(entry["headroom"], f"{prefix}headroom", node_id=base_id)
                    if "headroom" in entry else 0)
        latency = (as_latency(entry["latency_ms"], f"{prefix}latency_ms", base_id)
                   if "latency_ms" in entry else None)
        own = _reliability_from_toml(entry, prefix, base_id)
        if "count" in entry:
            count = as_int(entry["count"], f"{prefix}count", minimum=1, maximum=MAX_NODES,
                            node_id=base_id)
            # Before expanding: many entries of large counts must not build the nodes first.
            check_node_count(len(nodes) + count,
                             f"the fleet file (counted up to nodes[{index}], id {base_id!r})")
            ids = expanded_node_ids(base_id, count)
            described = f"id = {base_id!r} with count = {count} ({ids[0]} .. {ids[-1]})"
        else:
            ids = [base_id]
            described = f"id = {base_id!r}"
        if "address" in entry:
            if len(ids) > 1:
                raise FleetFileError(
                    "InvalidField", "belongs to one node; write the nodes of a count "
                    "entry one by one to give each its address", field=f"{prefix}address",
                    node_id=base_id)
            addresses.append((ids[0], as_address(entry["address"], f"{prefix}address",
                                                 base_id)))
        if "rpc_device" in entry:
            if "address" not in entry:
                raise FleetFileError(
                    "InvalidField", "is the index of a device on the node's rpc-server; "
                    "give the node its address too", field=f"{prefix}rpc_device",
                    node_id=base_id)
            devices.append((ids[0], as_rpc_device(entry["rpc_device"],
                                                  f"{prefix}rpc_device", base_id)))
        for node_id in ids:
            key = looks(node_id)
            if key in owner:
                other_index, other, other_id = owner[key]
                raise FleetFileError(
                    "DuplicateNodeId",
                    f"node id {node_id!r} from {described} is already used by "
                    f"nodes[{other_index}] ({other}); give the nodes distinct ids"
                    if other_id == node_id else
                    f"{look_alike(node_id, other_id, f'nodes[{other_index}]')} "
                    f"(nodes[{index}]: {described})",
                    field=f"{prefix}id", node_id=node_id)
            owner[key] = (index, described, node_id)
            nodes.append(NodeBudget(node_id, detected, max_vram, headroom, latency))
            if own is not None:
                reliability[node_id] = own
    return tuple(nodes), reliability, tuple(addresses), tuple(devices)


def _model_to_toml(model: ModelChoice) -> dict[str, Any]:
    table: dict[str, Any] = {}
    if model.name is not None:
        table["name"] = model.name
    if model.preset is not None:
        table["preset"] = model.preset
    if model.gguf is not None:
        table["gguf"] = model.gguf
    if model.kv_cache_type is not None:
        table["kv_cache_type"] = model.kv_cache_type
    if model.file_bytes is not None:
        table["file_bytes"] = exact_size_text(model.file_bytes)
    if model.numbers is not None:
        numbers = model.numbers
        table["native_context_length"] = numbers["native_context_length"]
        table["layer_count"] = numbers["layer_count"]
        table["model_weight_bytes"] = exact_size_text(numbers["model_weight_bytes"])
        table["kv_bytes_per_token"] = numbers["kv_bytes_per_token"]
        if numbers.get("layer_weight_bytes") is not None:
            table["layer_weight_bytes"] = list(numbers["layer_weight_bytes"])
        for key in SPEED_NUMBER_FIELDS:
            if numbers.get(key) is not None:
                table[key] = (exact_size_text(numbers[key]) if key.endswith("_bytes")
                              else numbers[key])
    return table


def fleet_to_toml(document: FleetDocument) -> str:
    """The TOML text of ``document``; :func:`parse_fleet_toml` reads it back equal."""
    top: dict[str, Any] = {}
    if document.name is not None:
        top["name"] = document.name
    planning: dict[str, Any] = {"minimum_nodes": document.minimum_nodes}
    for key in PLANNING_KEYS[1:]:
        value = getattr(document, key)
        if value is not None:
            planning[key] = value
    # Each table is written by tomli_w (which handles quoting) under a header written
    # here, so that nodes always come out as [[nodes]] tables, one per entry.
    parts = ["# Fleet file for `planner`; docs/fleet-files.md lists every key.\n"
             "# Sizes: text with a unit such as \"80 GiB\" or \"24 GB\" (a bare number "
             "only in *_bytes keys).\n"]
    if top:
        parts.append(tomli_w.dumps(top))
    parts.append("[model]\n" + tomli_w.dumps(_model_to_toml(document.model)))
    parts.append("[planning]\n" + tomli_w.dumps(planning))
    addresses = dict(document.addresses)
    devices = dict(document.rpc_devices)
    for node, base_id, count in _group_nodes(document.nodes, document.reliability,
                                             set(addresses)):
        entry: dict[str, Any] = {"id": base_id}
        if count is not None:
            entry["count"] = count
        entry["vram"] = exact_size_text(node.detected_vram_bytes)
        if node.max_vram_bytes is not None:
            entry["max_vram"] = exact_size_text(node.max_vram_bytes)
        if node.runtime_headroom_bytes:
            entry["headroom"] = exact_size_text(node.runtime_headroom_bytes)
        if node.stage_transfer_latency_ms is not None:
            entry["latency_ms"] = node.stage_transfer_latency_ms
        own = document.reliability.get(node.node_id)
        if own is not None:
            entry.update(own.to_dict())
        if count is None and node.node_id in addresses:
            entry["address"] = addresses[node.node_id]
            if node.node_id in devices:
                entry["rpc_device"] = devices[node.node_id]
        parts.append("[[nodes]]\n" + tomli_w.dumps(entry))
    return "\n".join(parts)
