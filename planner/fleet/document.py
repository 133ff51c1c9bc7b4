"""The fleet document: which model to plan, the fleet's nodes and the planning options.

:class:`FleetDocument` is what a fleet file holds, whatever its format; the TOML and
JSON modules read and write it, :mod:`planner.fleet.files` loads and saves it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from planner._validate import look_alike, looks
from planner.errors import InvalidInput
from planner.fleet._errors import FleetFileError
from planner.fleet._fields import (
    LIMITS,
    MEASURED_LATENCY,
    RELIABILITY_KEYS,
    as_address,
    as_default_latency,
    as_int,
    as_rate,
    as_rpc_device,
    as_text,
    normalise_numbers,
    reject_unknown,
)
from planner.limits import DEFAULT_CACHE_TYPE, DEFAULT_PARALLEL_LANES
from planner.planning import NodeBudget, PlanningInput
from planner.planning.memory_rule import DESIGN_RULE, MEMORY_MODELS
from planner.units import format_milliseconds

OWN_BYTES = {
    "gguf": "a GGUF file's tensors state their own bytes",
    "numbers": "with the numbers, model_weight_bytes is the file's size",
}
"""Why a model's own bytes leave a file size (``file_bytes``, ``--file-size``) nothing to
give, by where its figures come from (:attr:`ModelChoice.kind`)."""


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """Which model to plan: a preset name, a GGUF file, or the model's numbers.

    Exactly one of ``preset``, ``gguf`` and ``numbers`` is set. ``numbers`` holds the
    model fields of the request (``native_context_length``, ``layer_count``, ``model_weight_bytes``,
    ``kv_bytes_per_token`` and optionally ``layer_weight_bytes``, kept as a tuple).
    ``kv_cache_type`` selects the KV cache type of a preset or GGUF model. ``file_bytes``
    is the size of the file a preset is run from, where it stores the weights at other
    precisions than the preset's (:meth:`planner.models.ModelSpec.stored_in`); a GGUF
    file's and the numbers' bytes are their own. ``name`` is an optional display name.
    """

    preset: str | None = None
    gguf: str | None = None
    kv_cache_type: str | None = None
    numbers: dict[str, Any] | None = None
    name: str | None = None
    file_bytes: int | None = None

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
            as_text(self.preset, "model.preset")
        if self.gguf is not None:
            as_text(self.gguf, "model.gguf")
        if self.kv_cache_type is not None:
            as_text(self.kv_cache_type, "model.kv_cache_type")
            if self.numbers is not None:
                raise FleetFileError(
                    "InvalidField",
                    "applies to a preset or gguf model; with the numbers, give the "
                    "kv_bytes_per_token of the KV cache type you want",
                    field="model.kv_cache_type")
        if self.name is not None:
            as_text(self.name, "model.name")
        if self.file_bytes is not None:
            if self.preset is None:
                raise FleetFileError("InvalidField", f"applies to a preset: "
                                     f"{OWN_BYTES[self.kind]}", field="model.file_bytes")
            object.__setattr__(self, "file_bytes", as_int(self.file_bytes, "model.file_bytes",
                                                          minimum=1))
        if self.numbers is not None:
            object.__setattr__(self, "numbers", normalise_numbers(self.numbers))

    @property
    def kind(self) -> str:
        """Where the model's figures come from: ``"preset"``, ``"gguf"`` or
        ``"numbers"``."""
        return ("preset" if self.preset is not None else
                "gguf" if self.gguf is not None else "numbers")

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
        """The model fields of the request: the five of docs/rules.md §1
        (``layer_weight_bytes`` ``None`` when unknown) and, for a model whose layers differ,
        each layer's KV bytes per token and fixed state per sequence (else ``None``)."""
        spec = self.spec(base_dir)
        # Exactly one of preset, gguf and numbers is set: no spec means the numbers.
        fields = dict(self.numbers or {}) if spec is None else spec.planning_fields()
        per_layer = ("layer_weight_bytes", "layer_kv_bytes_per_token",
                     "layer_state_bytes_per_sequence")
        return {
            "native_context_length": fields["native_context_length"],
            "layer_count": fields["layer_count"],
            "model_weight_bytes": fields["model_weight_bytes"],
            "kv_bytes_per_token": fields["kv_bytes_per_token"],
            **{name: tuple(fields[name]) if fields.get(name) is not None else None
               for name in per_layer},
        }

    def gguf_path(self, base_dir: Path | None = None) -> Path | None:
        """The GGUF file, with a relative path taken from ``base_dir``."""
        if self.gguf is None:
            return None
        path = Path(self.gguf)
        # "~user" for a user with no home is a name, not a home.
        with contextlib.suppress(RuntimeError):
            path = path.expanduser()
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
                spec = models.load_preset(self.preset, kv_cache_type=self.kv_cache_type)
                return spec if self.file_bytes is None else spec.stored_in(self.file_bytes)
            path = self.gguf_path(base_dir)
            assert path is not None
            try:
                # Anything there but a regular file (a device, a FIFO, a folder) is named
                # as such by the reader, which never opens it for reading.
                found = path.exists()
            except (OSError, ValueError):  # a name no file system takes (a NUL byte)
                found = False
            if not found:
                raise FleetFileError("ModelUnavailable", f"GGUF file {str(path)!r} not found",
                                     field="model.gguf")
            if self.kv_cache_type is None:
                return models.from_gguf(path)
            return models.from_gguf(path, kv_cache_type=self.kv_cache_type)
        except models.ModelError as error:
            where = "model.preset" if self.preset is not None else "model.gguf"
            if error.details.get("field") == "file_bytes":
                # The file's size is what cannot hold the preset.
                raise FleetFileError("InvalidField", error.message.removeprefix(
                    "file_bytes: "), field="model.file_bytes") from None
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
            "file_bytes": self.file_bytes,
            "numbers": numbers,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelChoice:
        if not isinstance(data, Mapping):
            raise FleetFileError("InvalidField", "must be an object", field="model")
        reject_unknown(data, ("name", "preset", "gguf", "kv_cache_type", "file_bytes",
                              "numbers"), "model.")
        return cls(
            preset=data.get("preset"),
            gguf=data.get("gguf"),
            kv_cache_type=data.get("kv_cache_type"),
            file_bytes=data.get("file_bytes"),
            numbers=data.get("numbers"),
            name=data.get("name"),
        )


@dataclass(frozen=True, slots=True)
class ReliabilityOverride:
    """A node's own failure figures (its fleet-file entry): ``annual_failure_rate``
    (failures per node-year), ``repair_hours`` (mean hours to repair) and ``gpu``, the
    catalog kind (id or name) whose figures it takes. ``None`` keeps the fleet-wide or
    catalog value (:func:`planner.availability.fleet_reliability`)."""

    annual_failure_rate: float | None = None
    repair_hours: float | None = None
    gpu: str | None = None

    def __post_init__(self) -> None:
        for key in ("annual_failure_rate", "repair_hours"):
            value = getattr(self, key)
            if value is not None:
                object.__setattr__(self, key, as_rate(value, key))
        if self.gpu is not None:
            as_text(self.gpu, "gpu")

    def to_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in RELIABILITY_KEYS
                if getattr(self, key) is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReliabilityOverride:
        if not isinstance(data, Mapping):
            raise FleetFileError("InvalidField", "must be an object", field="reliability")
        reject_unknown(data, RELIABILITY_KEYS, "")
        return cls(**{key: data.get(key) for key in RELIABILITY_KEYS})


# -- the document -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FleetDocument:
    """A model, a fleet and the planning options: everything a plan needs.

    ``reliability`` holds the nodes' own failure figures by node id (nodes without
    their own are left out; an id no node has is ignored). ``source`` is the file the
    document was read from (it does not take part in equality); relative GGUF paths are
    taken from its folder.
    """

    model: ModelChoice
    nodes: tuple[NodeBudget, ...]
    minimum_nodes: int = 1
    context_length_override: int | None = None
    parallel_lanes_override: int | None = None
    target_decode_tpot_ms: int | None = None
    name: str | None = None
    reliability: Mapping[str, ReliabilityOverride] = field(default_factory=dict)
    source: str | None = field(default=None, compare=False)
    addresses: tuple[tuple[str, str], ...] = ()
    """``(node_id, "host:port")`` of the nodes whose llama.cpp rpc-server address is
    known (``planner launch``)."""
    rpc_devices: tuple[tuple[str, int], ...] = ()
    """``(node_id, index)``: the node is device ``index`` of its rpc-server (a server with
    several devices; a node without an entry is device 0). Every such node has an
    address."""
    default_latency_ms: int | float | str | None = None
    """The stage-transfer latency of the nodes without their own: milliseconds, or
    ``"measured"``, the slowest latency a node of the fleet has (:meth:`planned_nodes`).
    ``None``: they have none, and count as 0 ms beside nodes that have one
    (docs/rules.md §6)."""

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelChoice):
            raise FleetFileError("InvalidField", "must be a ModelChoice", field="model")
        nodes = self.nodes
        if isinstance(nodes, (str, bytes, Mapping)) or not isinstance(nodes, Sequence):
            raise FleetFileError("InvalidField", "must be a list of nodes", field="nodes")
        nodes = tuple(nodes)
        seen: set[str] = set()
        looked: dict[str, int] = {}  # by how each id looks
        for index, node in enumerate(nodes):
            if not isinstance(node, NodeBudget):
                raise FleetFileError("InvalidField", "must be a NodeBudget",
                                     field=f"nodes[{index}]")
            other = looked.setdefault(looks(node.node_id), index)
            if other != index:
                other_id = nodes[other].node_id
                raise FleetFileError("DuplicateNodeId", "duplicate node id"
                                     if other_id == node.node_id else
                                     look_alike(node.node_id, other_id, f"nodes[{other}]"),
                                     field=f"nodes[{index}].node_id", node_id=node.node_id)
            seen.add(node.node_id)
        object.__setattr__(self, "nodes", nodes)
        addresses = dict(self.addresses.items() if isinstance(self.addresses, Mapping)
                         else self.addresses)
        for node_id, address in addresses.items():
            if node_id not in seen:
                raise FleetFileError("InvalidField", "names a node the fleet does not have",
                                     field="addresses", node_id=node_id)
            as_address(address, f"addresses.{node_id}", node_id)
        object.__setattr__(self, "addresses", tuple(sorted(addresses.items())))
        devices = dict(self.rpc_devices.items() if isinstance(self.rpc_devices, Mapping)
                       else self.rpc_devices)
        for node_id, device in devices.items():
            if node_id not in addresses:
                raise FleetFileError("InvalidField", "is the device of an rpc-server, and "
                                     "the node has no address; give it one",
                                     field=f"rpc_devices.{node_id}", node_id=node_id)
            devices[node_id] = as_rpc_device(device, f"rpc_devices.{node_id}", node_id)
        object.__setattr__(self, "rpc_devices",
                           tuple(sorted(devices.items())))
        object.__setattr__(self, "minimum_nodes", as_int(
            self.minimum_nodes, "planning.minimum_nodes", maximum=LIMITS["minimum_nodes"]))
        for key in ("context_length_override", "parallel_lanes_override",
                    "target_decode_tpot_ms"):
            value = getattr(self, key)
            if value is not None:
                object.__setattr__(self, key, as_int(value, f"planning.{key}",
                                                     maximum=LIMITS[key]))
        if self.default_latency_ms is not None:
            object.__setattr__(self, "default_latency_ms", as_default_latency(
                self.default_latency_ms, "planning.default_latency_ms"))
        if self.name is not None:
            as_text(self.name, "name")
        if not isinstance(self.reliability, Mapping):
            raise FleetFileError("InvalidField", "must map node ids to their failure figures",
                                 field="reliability")
        for node_id, own in self.reliability.items():
            if not isinstance(own, ReliabilityOverride):
                raise FleetFileError("InvalidField", "must be a ReliabilityOverride",
                                     field=f"reliability.{node_id}", node_id=str(node_id))
        object.__setattr__(self, "reliability", dict(self.reliability))

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

    @property
    def node_kinds(self) -> dict[str, str]:
        """The catalog kinds the nodes name (``gpu``), by node id."""
        return {node_id: own.gpu for node_id, own in self.reliability.items() if own.gpu}

    def planned_nodes(self) -> tuple[NodeBudget, ...]:
        """The nodes as they are planned: those without their own latency given
        :attr:`default_latency_ms` (``"measured"``: the slowest latency another node has;
        none has one: left unknown). The planning rules are the same either way; only
        the latency these nodes carry differs."""
        given = self.default_latency_ms
        latency = (max((node.stage_transfer_latency_ms for node in self.nodes
                        if node.stage_transfer_latency_ms is not None), default=None)
                   if isinstance(given, str) else given)
        if latency is None:
            return self.nodes
        return tuple(node if node.stage_transfer_latency_ms is not None
                     else replace(node, stage_transfer_latency_ms=latency)
                     for node in self.nodes)

    def latency_note(self) -> str:
        """Which latency the nodes without their own are planned at, in words; empty when
        every node has its own or none has one (latency-aware planning is then off)."""
        without = [node for node in self.nodes if node.stage_transfer_latency_ms is None]
        if not without or len(without) == len(self.nodes):
            return ""
        count = f"{len(without)} node{'s' if len(without) != 1 else ''}"
        planned = {node.node_id: node for node in self.planned_nodes()}
        latency = planned[without[0].node_id].stage_transfer_latency_ms
        if latency is None:
            return (f"{count} without a latency count as 0 ms beside those measured "
                    "(docs/rules.md §6), so the plan prefers them: give them a latency, or "
                    "the fleet a default latency (milliseconds, or \"measured\" for the "
                    "slowest measured)")
        why = ("the slowest measured" if self.default_latency_ms == MEASURED_LATENCY
               else "the fleet's default latency")
        return (f"{count} without their own latency are planned at "
                f"{format_milliseconds(latency)}, {why}")

    def to_request(self, memory_model: str = "design") -> PlanningInput:
        """The planning request (docs/rules.md §1) this document describes.

        ``memory_model="llamacpp"`` plans with what llama.cpp allocates (read from the
        model's GGUF file, with each node's backend overhead from its catalog kind).
        Raises :class:`FleetFileError` when the model cannot be resolved and
        :class:`~planner.errors.InvalidInput` for a request the planner refuses as
        malformed.
        """
        try:
            model_fields = self.model.resolve(self.base_dir)
        except FleetFileError as error:
            raise error.located(self.source) from None
        if memory_model not in MEMORY_MODELS:
            raise InvalidInput("memory_model", f"must be one of {', '.join(MEMORY_MODELS)}",
                               value=memory_model)
        rule = self._llamacpp_costs() if memory_model == "llamacpp" else DESIGN_RULE
        return PlanningInput(
            **model_fields,
            nodes=self.planned_nodes(),
            minimum_nodes=self.minimum_nodes,
            context_length_override=self.context_length_override,
            parallel_lanes_override=self.parallel_lanes_override,
            target_decode_tpot_ms=self.target_decode_tpot_ms,
            memory_rule=rule,
        )

    def _llamacpp_costs(self) -> Any:
        from planner.llamacpp import costs_from_gguf
        from planner.models import ModelError

        path = self.model.gguf_path(self.base_dir)
        if path is None:
            raise FleetFileError(
                "InvalidField", "memory_model llamacpp reads llama.cpp's layout from a GGUF "
                f"file, and the model is {self.model.label}; give model.gguf",
                field="model.gguf").located(self.source)
        lanes = self.parallel_lanes_override or DEFAULT_PARALLEL_LANES
        try:
            cache_type = self.model.kv_cache_type or DEFAULT_CACHE_TYPE
            return costs_from_gguf(path, kv_cache_type=cache_type,
                                   nodes=self.nodes, node_kinds=self.node_kinds, lanes=lanes)
        except ModelError as error:
            raise FleetFileError("InvalidField", str(error),
                                 field="model.gguf").located(self.source) from None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model.to_dict(),
            "minimum_nodes": self.minimum_nodes,
            "context_length_override": self.context_length_override,
            "parallel_lanes_override": self.parallel_lanes_override,
            "target_decode_tpot_ms": self.target_decode_tpot_ms,
            "nodes": [node.to_dict() for node in self.nodes],
            "reliability": {node_id: own.to_dict()
                            for node_id, own in self.reliability.items()},
            "addresses": dict(self.addresses),
            "rpc_devices": dict(self.rpc_devices),
            "default_latency_ms": self.default_latency_ms,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FleetDocument:
        if not isinstance(data, Mapping):
            raise FleetFileError("InvalidField", "must be an object", field="document")
        reject_unknown(data, ("name", "model", "minimum_nodes", "context_length_override",
                               "parallel_lanes_override", "target_decode_tpot_ms", "nodes",
                               "reliability", "addresses", "rpc_devices",
                               "default_latency_ms", "source"), "")
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
        raw_reliability = data.get("reliability") or {}
        if not isinstance(raw_reliability, Mapping):
            raise FleetFileError("InvalidField", "must map node ids to their failure figures",
                                 field="reliability")
        return cls(
            model=ModelChoice.from_dict(data["model"]),
            nodes=tuple(nodes),
            minimum_nodes=1 if minimum is None else minimum,
            context_length_override=data.get("context_length_override"),
            parallel_lanes_override=data.get("parallel_lanes_override"),
            target_decode_tpot_ms=data.get("target_decode_tpot_ms"),
            name=data.get("name"),
            reliability={node_id: ReliabilityOverride.from_dict(own)
                         for node_id, own in raw_reliability.items()},
            source=data.get("source"),
            addresses=tuple((data.get("addresses") or {}).items()),
            rpc_devices=tuple((data.get("rpc_devices") or {}).items()),
            default_latency_ms=data.get("default_latency_ms"),
        )


# -- node count expansion ---------------------------------------------------------------


def expanded_node_ids(base_id: str, count: int) -> list[str]:
    """Ids of ``count`` identical nodes: ``gpu`` x 3 -> ``gpu-00``, ``gpu-01``, ``gpu-02``."""
    width = max(2, len(str(count - 1)))
    return [f"{base_id}-{index:0{width}d}" for index in range(count)]
