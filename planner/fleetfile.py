"""Fleet files: a model and a fleet of nodes, as a person writes them.

A fleet file is TOML (or JSON in the SPEC's raw field names). The TOML form::

    name = "Qwen3-Coder 480B on five 80 GiB GPUs"   # optional

    [model]                      # exactly one of: preset, gguf, or the numbers
    preset = "qwen3-coder-480b-a35b"
    kv_cache_type = "f16"        # optional, with preset or gguf
    # gguf = "models/model.gguf"  (relative paths start at the fleet file's folder)
    # native_context_length = 262144
    # layer_count = 62
    # model_weight_bytes = "315.68 GB"
    # kv_bytes_per_token = 131072
    # layer_weight_bytes = [...]   (optional, one entry per layer)
    # name = "My model"            (optional display name)

    [planning]                   # every key optional
    minimum_nodes = 2
    context_length_override = 65536
    parallel_lanes_override = 4
    target_decode_tpot_ms = 33

    [[nodes]]
    id = "gpu"
    count = 5                    # optional: five identical nodes gpu-00 .. gpu-04
    vram = "80 GiB"              # detected VRAM
    max_vram = "72 GiB"          # optional cap
    headroom = "2 GiB"           # optional runtime headroom, default 0
    latency_ms = 10              # optional stage-transfer latency: 0.5, "5 ms", "500 us"

Sizes are ``planner.units`` strings with a unit (``"80 GiB"``, ``"24 GB"``,
``"115448725504 B"``); a bare number is refused there (``vram = 24`` could be GiB or
bytes), except for keys whose name says bytes (``model_weight_bytes``,
``kv_bytes_per_token``, ``layer_weight_bytes``) and for ``0``. Latencies are milliseconds
to the microsecond; context lengths are tokens or ``"128k"`` (k = 1024 tokens).

Node count expansion: an entry with ``count = N`` stands for N nodes whose ids are
``{id}-{i}`` for ``i`` in ``0 .. N-1``, with ``i`` zero-padded to
``max(2, digits of N-1)`` digits (``gpu-00``; ``gpu-000`` .. ``gpu-149`` for 150).
Without ``count`` the id is used as written. Every resulting id must be unique across
the file; a collision is refused naming both entries. Saving writes a run of identical
nodes numbered this way back as one ``count`` entry.

The JSON form is a planning request as in SPEC section 1, optionally with
``"model_name"`` and ``"name"`` (the fleet's name). Saving to ``.json`` writes that form,
so a preset or GGUF model is resolved to its numbers there.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import tomli_w

from planner._validate import Fail, integer, known_keys, shown, text
from planner.errors import CodedError, InvalidInput
from planner.planning import NodeBudget, PlanningInput
from planner.planning.inputs import MAX_BYTES, MAX_CONTEXT, MAX_LAYERS
from planner.units import (
    SIZE_FORMS,
    UnitError,
    parse_bytes,
    parse_context,
    parse_latency_ms,
)

MODEL_NUMBER_FIELDS = (
    "native_context_length",
    "layer_count",
    "model_weight_bytes",
    "kv_bytes_per_token",
    "layer_weight_bytes",
)
_REQUIRED_MODEL_NUMBERS = MODEL_NUMBER_FIELDS[:4]
_MODEL_BYTE_FIELDS = ("model_weight_bytes", "kv_bytes_per_token")
_MODEL_KEYS = ("name", "preset", "gguf", "kv_cache_type", *MODEL_NUMBER_FIELDS)
_PLANNING_KEYS = (
    "minimum_nodes",
    "context_length_override",
    "parallel_lanes_override",
    "target_decode_tpot_ms",
)
_NODE_KEYS = ("id", "count", "vram", "max_vram", "headroom", "latency_ms")
_TOP_KEYS = ("name", "model", "planning", "nodes")
_JSON_EXTRA_KEYS = ("model_name", "name")
_MAX_COUNT = 10_000
_MAX_BYTES = MAX_BYTES
# The same bounds the planning request enforces, so a file that reads always plans.
_LIMITS = {
    "native_context_length": MAX_CONTEXT,
    "layer_count": MAX_LAYERS,
    "minimum_nodes": 100_000,
    "context_length_override": MAX_CONTEXT,
    "parallel_lanes_override": 4096,
    "target_decode_tpot_ms": 10**9,
}


class FleetFileError(CodedError):
    """A fleet file (or fleet document) that cannot be read, written or resolved.

    ``path`` is the file, ``line`` the 1-based line when known, ``field`` the dotted
    field (``nodes[2].vram``; the index is the entry in the file) and ``node_id`` the
    node it belongs to.
    """

    codes = (
        "FileNotFound",
        "UnsupportedFormat",
        "InvalidToml",
        "InvalidJson",
        "UnknownField",
        "MissingField",
        "InvalidField",
        "DuplicateNodeId",
        "ModelUnavailable",
        "WriteFailed",
    )

    def __init__(
        self,
        code: str,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(code, message, path=path, line=line, field=field, node_id=node_id)
        self.path = path
        self.line = line
        self.field = field
        self.node_id = node_id

    def _render(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path + (f":{self.line}" if self.line is not None else "") + ": "
        elif self.line is not None:
            where = f"line {self.line}: "
        subject = ""
        if self.field is not None:
            subject = self.field
            if self.node_id is not None:
                subject += f" (node {shown(self.node_id)})"
            subject += ": "
        elif self.node_id is not None:
            subject = f"node {shown(self.node_id)}: "
        return f"{where}{subject}{self.message}"

    def __str__(self) -> str:
        return self._render()

    def located(self, path: str | None = None, line: int | None = None) -> FleetFileError:
        """The same error with the file and line filled in where they were unknown."""
        return FleetFileError(
            self.code,
            self.message,
            path=self.path if self.path is not None else path,
            line=self.line if self.line is not None else line,
            field=self.field,
            node_id=self.node_id,
        )


# -- small validators -------------------------------------------------------------------


def _bad(field_name: str, node_id: str | None = None) -> Fail:
    def fail(problem: str, value: Any) -> FleetFileError:
        got = f" (got {shown(value)})" if value is not None else ""
        return FleetFileError("InvalidField", problem + got, field=field_name, node_id=node_id)
    return fail


def _as_int(value: Any, field_name: str, *, minimum: int = 0, maximum: int = _MAX_BYTES,
            node_id: str | None = None) -> int:
    return integer(value, _bad(field_name, node_id), minimum=minimum, maximum=maximum)


def _as_size(value: Any, field_name: str, *, node_id: str | None = None,
             bare_bytes: bool = False) -> int:
    """A size; a bare number only where the key's name says bytes (``*_bytes``)."""
    if isinstance(value, float):
        raise FleetFileError("InvalidField", f"{SIZE_FORMS} (got {shown(value)})",
                             field=field_name, node_id=node_id)
    try:
        size = parse_bytes(value, bare_bytes=bare_bytes)
    except UnitError as error:
        raise FleetFileError("InvalidField", error.message, field=field_name,
                             node_id=node_id) from None
    if size > _MAX_BYTES:
        raise FleetFileError("InvalidField", f"is larger than {_MAX_BYTES:,} bytes",
                             field=field_name, node_id=node_id)
    return size


def _as_context(value: Any, field_name: str) -> int:
    """A context length: whole tokens or text such as ``"128k"`` (k = 1024)."""
    try:
        tokens = parse_context(value)
    except UnitError as error:
        raise FleetFileError("InvalidField", error.message, field=field_name) from None
    return _as_int(tokens, field_name, maximum=_LIMITS[field_name.rpartition(".")[2]])


def _as_latency(value: Any, field_name: str, node_id: str) -> int | float:
    """A latency in ms: ``5``, ``0.5``, ``"5 ms"``, ``"500 us"`` (to the microsecond)."""
    try:
        return parse_latency_ms(value)
    except UnitError as error:
        raise FleetFileError("InvalidField", error.message, field=field_name,
                             node_id=node_id) from None


def _as_text(value: Any, field_name: str, *, node_id: str | None = None) -> str:
    return text(value, _bad(field_name, node_id))


def _reject_unknown(table: Mapping[str, Any], allowed: Sequence[str], prefix: str,
                    *, node_id: str | None = None) -> None:
    known_keys(table, allowed, lambda key, problem: FleetFileError(
        "UnknownField", problem, field=f"{prefix}{key}", node_id=node_id))


# -- the model --------------------------------------------------------------------------


def _normalise_numbers(numbers: Mapping[str, Any], prefix: str = "model.") -> dict[str, Any]:
    if not isinstance(numbers, Mapping):
        raise FleetFileError("InvalidField", "must be a table of the model's numbers",
                             field=prefix.rstrip("."))
    _reject_unknown(numbers, MODEL_NUMBER_FIELDS, prefix)
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
            result[name] = _as_size(value, f"{prefix}{name}", bare_bytes=True)
        elif name == "native_context_length":
            result[name] = _as_context(value, f"{prefix}{name}")
        else:
            result[name] = _as_int(value, f"{prefix}{name}", maximum=_LIMITS[name])
    weights = numbers.get("layer_weight_bytes")
    if weights is not None:
        if isinstance(weights, (str, bytes, Mapping)) or not isinstance(weights, Sequence):
            raise FleetFileError("InvalidField", "must be a list of sizes, one per layer",
                                 field=f"{prefix}layer_weight_bytes")
        result["layer_weight_bytes"] = tuple(
            _as_size(value, f"{prefix}layer_weight_bytes[{index}]", bare_bytes=True)
            for index, value in enumerate(weights))
        if len(result["layer_weight_bytes"]) != result["layer_count"]:
            raise FleetFileError(
                "InvalidField",
                f"has {len(weights)} entries but layer_count is {result['layer_count']}; "
                "give one weight per layer or leave it out",
                field=f"{prefix}layer_weight_bytes")
    return result


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """Which model to plan: a preset name, a GGUF file, or the model's numbers.

    Exactly one of ``preset``, ``gguf`` and ``numbers`` is set. ``numbers`` holds the
    SPEC model fields (``native_context_length``, ``layer_count``, ``model_weight_bytes``,
    ``kv_bytes_per_token`` and optionally ``layer_weight_bytes``, kept as a tuple).
    ``kv_cache_type`` selects the KV cache type of a preset or GGUF model. ``name`` is an
    optional display name.
    """

    preset: str | None = None
    gguf: str | None = None
    kv_cache_type: str | None = None
    numbers: dict | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        given = [key for key, value in (("preset", self.preset), ("gguf", self.gguf),
                                        ("numbers", self.numbers)) if value is not None]
        if len(given) != 1:
            shown = ", ".join(given) if given else "none"
            raise FleetFileError(
                "InvalidField" if given else "MissingField",
                f"give exactly one of preset, gguf or the model's numbers (got {shown})",
                field="model")
        if self.preset is not None:
            _as_text(self.preset, "model.preset")
        if self.gguf is not None:
            _as_text(self.gguf, "model.gguf")
        if self.kv_cache_type is not None:
            _as_text(self.kv_cache_type, "model.kv_cache_type")
            if self.numbers is not None:
                raise FleetFileError(
                    "InvalidField",
                    "applies to a preset or gguf model; with the numbers, give the "
                    "kv_bytes_per_token of the KV cache type you want",
                    field="model.kv_cache_type")
        if self.name is not None:
            _as_text(self.name, "model.name")
        if self.numbers is not None:
            object.__setattr__(self, "numbers", _normalise_numbers(self.numbers))

    @property
    def label(self) -> str:
        """A short human name for the model."""
        if self.name is not None:
            return self.name
        if self.preset is not None:
            return self.preset
        if self.gguf is not None:
            return Path(self.gguf).name
        return "custom model"

    def resolve(self, base_dir: Path | None = None) -> dict[str, Any]:
        """The five SPEC model fields (``layer_weight_bytes`` ``None`` when unknown)."""
        spec = self.spec(base_dir)
        fields = dict(self.numbers) if spec is None else spec.planning_fields()
        weights = fields.get("layer_weight_bytes")
        return {
            "native_context_length": fields["native_context_length"],
            "layer_count": fields["layer_count"],
            "model_weight_bytes": fields["model_weight_bytes"],
            "kv_bytes_per_token": fields["kv_bytes_per_token"],
            "layer_weight_bytes": tuple(weights) if weights is not None else None,
        }

    def gguf_path(self, base_dir: Path | None = None) -> Path | None:
        """The GGUF file, with a relative path taken from ``base_dir``."""
        if self.gguf is None:
            return None
        path = Path(self.gguf).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        return path

    def spec(self, base_dir: Path | None = None) -> Any:
        """The :class:`planner.models.ModelSpec` of a preset or GGUF model (``None`` for
        numbers); raises :class:`FleetFileError` (``ModelUnavailable``) when it cannot be
        loaded."""
        if self.numbers is not None:
            return None
        # Imported here so reading and writing fleet files never needs the model tooling.
        from planner import models

        try:
            if self.preset is not None:
                return models.load_preset(self.preset, kv_cache_type=self.kv_cache_type)
            path = self.gguf_path(base_dir)
            assert path is not None
            if not path.exists():
                raise FleetFileError("ModelUnavailable", f"GGUF file {str(path)!r} not found",
                                     field="model.gguf")
            if self.kv_cache_type is None:
                return models.from_gguf(path)
            return models.from_gguf(path, kv_cache_type=self.kv_cache_type)
        except models.ModelError as error:
            where = "model.preset" if self.preset is not None else "model.gguf"
            if "KvCacheType" in str(getattr(error, "code", "")):
                where = "model.kv_cache_type"
            raise FleetFileError("ModelUnavailable", str(error), field=where) from None

    def to_dict(self) -> dict[str, Any]:
        numbers = None
        if self.numbers is not None:
            numbers = {key: (list(value) if key == "layer_weight_bytes" else value)
                       for key, value in self.numbers.items()}
        return {
            "name": self.name,
            "preset": self.preset,
            "gguf": self.gguf,
            "kv_cache_type": self.kv_cache_type,
            "numbers": numbers,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelChoice:
        if not isinstance(data, Mapping):
            raise FleetFileError("InvalidField", "must be an object", field="model")
        _reject_unknown(data, ("name", "preset", "gguf", "kv_cache_type", "numbers"),
                        "model.")
        return cls(
            preset=data.get("preset"),
            gguf=data.get("gguf"),
            kv_cache_type=data.get("kv_cache_type"),
            numbers=data.get("numbers"),
            name=data.get("name"),
        )


# -- the document -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FleetDocument:
    """A model, a fleet and the planning options: everything a plan needs.

    ``source`` is the file the document was read from (it does not take part in
    equality); relative GGUF paths are taken from its folder.
    """

    model: ModelChoice
    nodes: tuple[NodeBudget, ...]
    minimum_nodes: int = 1
    context_length_override: int | None = None
    parallel_lanes_override: int | None = None
    target_decode_tpot_ms: int | None = None
    name: str | None = None
    source: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelChoice):
            raise FleetFileError("InvalidField", "must be a ModelChoice", field="model")
        nodes = self.nodes
        if isinstance(nodes, (str, bytes, Mapping)) or not isinstance(nodes, Sequence):
            raise FleetFileError("InvalidField", "must be a list of nodes", field="nodes")
        nodes = tuple(nodes)
        seen: set[str] = set()
        for index, node in enumerate(nodes):
            if not isinstance(node, NodeBudget):
                raise FleetFileError("InvalidField", "must be a NodeBudget",
                                     field=f"nodes[{index}]")
            if node.node_id in seen:
                raise FleetFileError("DuplicateNodeId", "duplicate node id",
                                     field=f"nodes[{index}].node_id", node_id=node.node_id)
            seen.add(node.node_id)
        object.__setattr__(self, "nodes", nodes)
        _as_int(self.minimum_nodes, "planning.minimum_nodes", maximum=_LIMITS["minimum_nodes"])
        for key in ("context_length_override", "parallel_lanes_override",
                    "target_decode_tpot_ms"):
            value = getattr(self, key)
            if value is not None:
                _as_int(value, f"planning.{key}", maximum=_LIMITS[key])
        if self.name is not None:
            _as_text(self.name, "name")

    @property
    def base_dir(self) -> Path | None:
        """The folder relative paths in the document start from."""
        if self.source is None or self.source.startswith("<"):
            return None
        return Path(self.source).parent

    @property
    def title(self) -> str:
        """The fleet's name, else the file's stem, else the model's label."""
        if self.name is not None:
            return self.name
        if self.base_dir is not None and self.source is not None:
            return Path(self.source).stem
        return self.model.label

    def to_request(self) -> PlanningInput:
        """The planning request (SPEC section 1) this document describes.

        Raises :class:`FleetFileError` when the model cannot be resolved and
        :class:`~planner.errors.InvalidInput` for a request the planner refuses as
        malformed.
        """
        try:
            model_fields = self.model.resolve(self.base_dir)
        except FleetFileError as error:
            raise error.located(self.source) from None
        return PlanningInput(
            **model_fields,
            nodes=self.nodes,
            minimum_nodes=self.minimum_nodes,
            context_length_override=self.context_length_override,
            parallel_lanes_override=self.parallel_lanes_override,
            target_decode_tpot_ms=self.target_decode_tpot_ms,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model.to_dict(),
            "minimum_nodes": self.minimum_nodes,
            "context_length_override": self.context_length_override,
            "parallel_lanes_override": self.parallel_lanes_override,
            "target_decode_tpot_ms": self.target_decode_tpot_ms,
            "nodes": [node.to_dict() for node in self.nodes],
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FleetDocument:
        if not isinstance(data, Mapping):
            raise FleetFileError("InvalidField", "must be an object", field="document")
        _reject_unknown(data, ("name", "model", "minimum_nodes", "context_length_override",
                               "parallel_lanes_override", "target_decode_tpot_ms", "nodes",
                               "source"), "")
        if "model" not in data:
            raise FleetFileError("MissingField", "is required", field="model")
        raw_nodes = data.get("nodes", [])
        if isinstance(raw_nodes, (str, bytes, Mapping)) or not isinstance(raw_nodes, Sequence):
            raise FleetFileError("InvalidField", "must be a list of nodes", field="nodes")
        nodes = []
        for index, node in enumerate(raw_nodes):
            try:
                nodes.append(node if isinstance(node, NodeBudget)
                             else NodeBudget.from_dict(node, index))
            except InvalidInput as error:
                raise FleetFileError("InvalidField", error.message.split(": ", 1)[-1],
                                     field=error.field, node_id=error.node_id) from None
        minimum = data.get("minimum_nodes", 1)
        return cls(
            model=ModelChoice.from_dict(data["model"]),
            nodes=tuple(nodes),
            minimum_nodes=1 if minimum is None else minimum,
            context_length_override=data.get("context_length_override"),
            parallel_lanes_override=data.get("parallel_lanes_override"),
            target_decode_tpot_ms=data.get("target_decode_tpot_ms"),
            name=data.get("name"),
            source=data.get("source"),
        )


# -- node count expansion ---------------------------------------------------------------


def expanded_node_ids(base_id: str, count: int) -> list[str]:
    """Ids of ``count`` identical nodes: ``gpu`` x 3 -> ``gpu-00``, ``gpu-01``, ``gpu-02``."""
    width = max(2, len(str(count - 1)))
    return [f"{base_id}-{index:0{width}d}" for index in range(count)]


_NUMBERED = re.compile(r"^(.+)-(\d+)$", re.DOTALL)


def _same_budget(a: NodeBudget, b: NodeBudget) -> bool:
    return (a.detected_vram_bytes, a.max_vram_bytes, a.runtime_headroom_bytes,
            a.stage_transfer_latency_ms) == (b.detected_vram_bytes, b.max_vram_bytes,
                                             b.runtime_headroom_bytes,
                                             b.stage_transfer_latency_ms)


def _group_nodes(nodes: Sequence[NodeBudget]) -> list[tuple[NodeBudget, str, int | None]]:
    """Runs of identical, numbered nodes as ``(first node, base id, count)`` entries.

    A run is grouped only when ``count`` expansion gives back exactly its ids, so that
    writing and reading a file is lossless.
    """
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
                   and _same_budget(nodes[index + run], node)):
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


# -- TOML -------------------------------------------------------------------------------


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
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(error))
        message = re.sub(r"\s*\(at end of document\)", " at the end of the file", message)
        raise FleetFileError("InvalidToml", f"not valid TOML: {message}", path=source,
                             line=_toml_error_line(error)) from None
    lines = _KeyLines(text)
    try:
        document = _document_from_toml(data)
    except FleetFileError as error:
        raise error.located(source, lines.find(error.field)) from None
    return replace(document, source=source)


def _document_from_toml(data: Mapping[str, Any]) -> FleetDocument:
    _reject_unknown(data, _TOP_KEYS, "")
    name = data.get("name")
    if name is not None:
        _as_text(name, "name")
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
    _reject_unknown(planning, _PLANNING_KEYS, "planning.")
    options: dict[str, Any] = {}
    for key in _PLANNING_KEYS:
        if key == "context_length_override" and key in planning:
            options[key] = _as_context(planning[key], f"planning.{key}")
        elif key in planning:
            options[key] = _as_int(planning[key], f"planning.{key}", maximum=_LIMITS[key])
    raw_nodes = data.get("nodes", [])
    if not isinstance(raw_nodes, list):
        raise FleetFileError("InvalidField", "write each node as a [[nodes]] table",
                             field="nodes")
    return FleetDocument(model=model, nodes=_nodes_from_toml(raw_nodes), name=name, **options)


def _model_from_toml(table: Mapping[str, Any]) -> ModelChoice:
    _reject_unknown(table, _MODEL_KEYS, "model.")
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
            _as_text(table[key], f"model.{key}")
    return ModelChoice(
        preset=table.get("preset"),
        gguf=table.get("gguf"),
        kv_cache_type=table.get("kv_cache_type"),
        numbers=_normalise_numbers(numbers) if numbers else None,
        name=table.get("name"),
    )


def _nodes_from_toml(entries: list[Any]) -> tuple[NodeBudget, ...]:
    nodes: list[NodeBudget] = []
    owner: dict[str, tuple[int, str]] = {}
    for index, entry in enumerate(entries):
        prefix = f"nodes[{index}]."
        if not isinstance(entry, Mapping):
            raise FleetFileError("InvalidField", "write each node as a [[nodes]] table",
                                 field=f"nodes[{index}]")
        raw_id = entry.get("id")
        shown_id = raw_id if isinstance(raw_id, str) else None
        _reject_unknown(entry, _NODE_KEYS, prefix, node_id=shown_id)
        if "id" not in entry:
            raise FleetFileError("MissingField", "every node needs an id", field=f"{prefix}id")
        base_id = _as_text(raw_id, f"{prefix}id")
        if "vram" not in entry:
            raise FleetFileError("MissingField", "is required (the node's detected VRAM)",
                                 field=f"{prefix}vram", node_id=base_id)
        detected = _as_size(entry["vram"], f"{prefix}vram", node_id=base_id)
        max_vram = (_as_size(entry["max_vram"], f"{prefix}max_vram", node_id=base_id)
                    if "max_vram" in entry else None)
        headroom = (_as_size(entry["headroom"], f"{prefix}headroom", node_id=base_id)
                    if "headroom" in entry else 0)
        latency = (_as_latency(entry["latency_ms"], f"{prefix}latency_ms", base_id)
                   if "latency_ms" in entry else None)
        if "count" in entry:
            count = _as_int(entry["count"], f"{prefix}count", minimum=1, maximum=_MAX_COUNT,
                            node_id=base_id)
            ids = expanded_node_ids(base_id, count)
            described = f"id = {base_id!r} with count = {count} ({ids[0]} .. {ids[-1]})"
        else:
            ids = [base_id]
            described = f"id = {base_id!r}"
        for node_id in ids:
            if node_id in owner:
                other_index, other = owner[node_id]
                raise FleetFileError(
                    "DuplicateNodeId",
                    f"node id {node_id!r} from {described} is already used by "
                    f"nodes[{other_index}] ({other}); give the nodes distinct ids",
                    field=f"{prefix}id", node_id=node_id)
            owner[node_id] = (index, described)
            nodes.append(NodeBudget(node_id, detected, max_vram, headroom, latency))
    return tuple(nodes)


def _size_text(value: int) -> str:
    """A size as the shortest exact human string, or ``"N B"`` when none reads well."""
    best: str | None = None
    units = (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2),
             ("KiB", 1024), ("PB", 1000**5), ("TB", 1000**4), ("GB", 1000**3),
             ("MB", 1000**2))
    for unit, factor in units:
        if value < factor:
            continue
        number = Decimal(value) / Decimal(factor)
        text = format(number.normalize(), "f")
        decimals = len(text.partition(".")[2])
        if decimals > 3 or len(text.replace(".", "")) > 7:
            continue
        candidate = f"{text} {unit}"
        if best is None or len(candidate) < len(best):
            best = candidate
    if best is None or parse_bytes(best) != value:
        return f"{value} B"
    return best


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
    if model.numbers is not None:
        numbers = model.numbers
        table["native_context_length"] = numbers["native_context_length"]
        table["layer_count"] = numbers["layer_count"]
        table["model_weight_bytes"] = _size_text(numbers["model_weight_bytes"])
        table["kv_bytes_per_token"] = numbers["kv_bytes_per_token"]
        if numbers.get("layer_weight_bytes") is not None:
            table["layer_weight_bytes"] = list(numbers["layer_weight_bytes"])
    return table


def fleet_to_toml(document: FleetDocument) -> str:
    """The TOML text of ``document``; :func:`parse_fleet_toml` reads it back equal."""
    top: dict[str, Any] = {}
    if document.name is not None:
        top["name"] = document.name
    planning: dict[str, Any] = {"minimum_nodes": document.minimum_nodes}
    for key in _PLANNING_KEYS[1:]:
        value = getattr(document, key)
        if value is not None:
            planning[key] = value
    # Each table is written by tomli_w (which handles quoting) under a header written
    # here, so that nodes always come out as [[nodes]] tables, one per entry.
    parts = ["# Fleet file for `planner` (see planner/fleetfile.py for the format).\n"
             "# Sizes: whole bytes or strings such as \"80 GiB\" or \"24 GB\".\n"]
    if top:
        parts.append(tomli_w.dumps(top))
    parts.append("[model]\n" + tomli_w.dumps(_model_to_toml(document.model)))
    parts.append("[planning]\n" + tomli_w.dumps(planning))
    for node, base_id, count in _group_nodes(document.nodes):
        entry: dict[str, Any] = {"id": base_id}
        if count is not None:
            entry["count"] = count
        entry["vram"] = _size_text(node.detected_vram_bytes)
        if node.max_vram_bytes is not None:
            entry["max_vram"] = _size_text(node.max_vram_bytes)
        if node.runtime_headroom_bytes:
            entry["headroom"] = _size_text(node.runtime_headroom_bytes)
        if node.stage_transfer_latency_ms is not None:
            entry["latency_ms"] = node.stage_transfer_latency_ms
        parts.append("[[nodes]]\n" + tomli_w.dumps(entry))
    return "\n".join(parts)


# -- JSON -------------------------------------------------------------------------------


def parse_fleet_json(text: str, source: str = "<string>") -> FleetDocument:
    """Read a JSON planning request (SPEC section 1 names, plus optional ``model_name``
    and ``name``)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise FleetFileError("InvalidJson", f"not valid JSON: {error.msg}", path=source,
                             line=error.lineno) from None
    try:
        return replace(_document_from_json(data), source=source)
    except FleetFileError as error:
        raise error.located(source) from None


def _document_from_json(data: Any) -> FleetDocument:
    if not isinstance(data, Mapping):
        raise FleetFileError("InvalidField", "the file must hold one JSON object "
                             "(a planning request)", field="request")
    extras = {key: data[key] for key in _JSON_EXTRA_KEYS if key in data}
    request_data = {key: value for key, value in data.items() if key not in _JSON_EXTRA_KEYS}
    try:
        request = PlanningInput.from_dict(request_data)
    except InvalidInput as error:
        code = "UnknownField" if "unknown field" in error.message else "InvalidField"
        problem = error.message.split(": ", 1)[-1]
        raise FleetFileError(code, problem, field=error.field, node_id=error.node_id) from None
    numbers = {
        "native_context_length": request.native_context_length,
        "layer_count": request.layer_count,
        "model_weight_bytes": request.model_weight_bytes,
        "kv_bytes_per_token": request.kv_bytes_per_token,
    }
    if request.layer_weight_bytes is not None:
        numbers["layer_weight_bytes"] = request.layer_weight_bytes
    model_name = extras.get("model_name")
    if model_name is not None:
        _as_text(model_name, "model_name")
    name = extras.get("name")
    return FleetDocument(
        model=ModelChoice(numbers=numbers, name=model_name),
        nodes=request.nodes,
        minimum_nodes=request.minimum_nodes,
        context_length_override=request.context_length_override,
        parallel_lanes_override=request.parallel_lanes_override,
        target_decode_tpot_ms=request.target_decode_tpot_ms,
        name=name,
    )


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
    return json.dumps(data, indent=2) + "\n"


# -- files ------------------------------------------------------------------------------


def _format_of(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".toml", ".json"):
        return suffix[1:]
    raise FleetFileError("UnsupportedFormat",
                         f"a fleet file ends in .toml or .json (got {path.suffix or 'none'!r})",
                         path=str(path))


def load_fleet(path: str | Path) -> FleetDocument:
    """Read a ``.toml`` fleet file or a ``.json`` planning request."""
    file_path = Path(path)
    kind = _format_of(file_path)
    try:
        text = file_path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise FleetFileError("FileNotFound", "no such file", path=str(file_path)) from None
    except IsADirectoryError:
        raise FleetFileError("FileNotFound", "is a folder, not a fleet file",
                             path=str(file_path)) from None
    except UnicodeDecodeError:
        raise FleetFileError("InvalidToml" if kind == "toml" else "InvalidJson",
                             "is not UTF-8 text", path=str(file_path)) from None
    except OSError as error:
        raise FleetFileError("FileNotFound", f"cannot be read: {error.strerror}",
                             path=str(file_path)) from None
    if kind == "toml":
        return parse_fleet_toml(text, source=str(file_path))
    return parse_fleet_json(text, source=str(file_path))


def _rebased(document: FleetDocument, destination: Path) -> FleetDocument:
    """Keep a relative GGUF path pointing at the same file from the new folder."""
    gguf = document.model.gguf
    base = document.base_dir
    if gguf is None or base is None or Path(gguf).expanduser().is_absolute():
        return document
    target = (base / gguf).resolve()
    new_base = destination.parent.resolve()
    if base.resolve() == new_base:
        return document
    relative = os.path.relpath(target, new_base)
    return replace(document, model=replace(document.model, gguf=Path(relative).as_posix()))


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` so that readers see the old file or the new, never half.

    The text goes to a temporary file in the same folder (same file system), is flushed
    to disk, then replaces ``path`` in one ``os.replace``.
    """
    destination = Path(path)
    folder = destination.parent
    if not folder.is_dir():
        raise FleetFileError("WriteFailed", f"folder {str(folder)!r} does not exist",
                             path=str(destination))
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".tmp",
                                             dir=folder)
    except OSError as error:
        raise FleetFileError("WriteFailed", f"cannot be written: {error.strerror}",
                             path=str(destination)) from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        # mkstemp creates the file private to its owner; these are ordinary files.
        mode = destination.stat().st_mode & 0o777 if destination.exists() else 0o644
        os.chmod(temporary, mode)
        os.replace(temporary, destination)
    except BaseException as error:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise FleetFileError("WriteFailed", f"cannot be written: {error.strerror}",
                                 path=str(destination)) from None
        raise
    return destination


def save_fleet(document: FleetDocument, path: str | Path) -> Path:
    """Write ``document`` as ``.toml`` or ``.json`` (by extension), atomically.

    An interrupted save leaves either the old file or the new one, never half of one.
    A relative GGUF path is rewritten so it still names the same file from the new folder.
    """
    destination = Path(path)
    kind = _format_of(destination)
    document = _rebased(document, destination)
    text = fleet_to_toml(document) if kind == "toml" else fleet_to_json(document)
    return write_text_atomic(destination, text)


__all__ = [
    "FleetDocument",
    "FleetFileError",
    "ModelChoice",
    "expanded_node_ids",
    "fleet_to_json",
    "fleet_to_toml",
    "load_fleet",
    "parse_fleet_json",
    "parse_fleet_toml",
    "save_fleet",
    "write_text_atomic",
]
