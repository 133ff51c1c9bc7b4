"""The planning request: docs/rules.md §1 field names, validated on construction.

Malformed input (wrong types, negative numbers, duplicate or empty node ids, unknown
fields, per-layer weights of the wrong length) raises :class:`~planner.errors.InvalidInput`
naming the field and node. The planner's own refusals (``MissingLayers`` and the rest,
docs/rules.md §2) are raised by the planner, not here, because they are well-formed
requests it cannot plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from planner._validate import Fail, integer, known_keys, optional_integer, text
from planner.errors import InvalidInput, PlanError
from planner.limits import (
    MAX_BYTES,
    MAX_CONTEXT,
    MAX_LANES,
    MAX_LATENCY_MS,
    MAX_LAYERS,
    MAX_MINIMUM_NODES,
    MAX_NODE_BYTES,
    MAX_NODES,
)
from planner.planning.memory_rule import DESIGN_RULE, MemoryRule
from planner.units import LatencyError, latency_microseconds, parse_latency_ms

_INT_LIMITS = {
    "native_context_length": MAX_CONTEXT,
    "layer_count": MAX_LAYERS,
    "model_weight_bytes": MAX_BYTES,
    "kv_bytes_per_token": MAX_BYTES,
    "minimum_nodes": MAX_MINIMUM_NODES,
}
_OPTIONAL_INT_LIMITS = {
    "context_length_override": MAX_CONTEXT,
    "parallel_lanes_override": MAX_LANES,
    "target_decode_tpot_ms": MAX_LATENCY_MS,
}


def _bad(field_name: str, node_id: str | None = None) -> Fail:
    return lambda problem, value: InvalidInput(field_name, problem, value=value,
                                               node_id=node_id)


def _unknown(where: str, node_id: str | None = None) -> Callable[[str, str], InvalidInput]:
    return lambda key, problem: InvalidInput(f"{where}{key}", problem, node_id=node_id)


def check_node_count(count: int, where: str = "the fleet") -> None:
    """Refuse more than :data:`MAX_NODES` nodes with ``TooManyNodes``."""
    if count > MAX_NODES:
        raise PlanError("TooManyNodes",
                        f"{where} has {count:,} nodes; at most {MAX_NODES:,} are planned "
                        "(write identical nodes once with a count, and split larger fleets)",
                        node_count=count, maximum=MAX_NODES)


@dataclass(frozen=True, slots=True)
class NodeBudget:
    """One node of the fleet (docs/rules.md §1 ``nodes[]``)."""

    node_id: str
    detected_vram_bytes: int
    max_vram_bytes: int | None = None
    runtime_headroom_bytes: int = 0
    stage_transfer_latency_ms: int | float | None = None
    """Milliseconds, to the microsecond: an ``int`` when whole (``5.0`` becomes ``5``),
    else a ``float`` with at most three decimals (``0.25``)."""

    def __post_init__(self) -> None:
        values = _node_fields(self.node_id, self.detected_vram_bytes, self.max_vram_bytes,
                              self.runtime_headroom_bytes, self.stage_transfer_latency_ms, "")
        for name, value in zip(_NODE_FIELDS, values, strict=True):
            object.__setattr__(self, name, value)

    @property
    def latency_us(self) -> int | None:
        """The stage-transfer latency in whole microseconds (exact), or None."""
        latency = self.stage_transfer_latency_ms
        return None if latency is None else latency_microseconds(latency)

    @property
    def capped_vram_bytes(self) -> int:
        """Detected VRAM after the ``max_vram_bytes`` cap."""
        if self.max_vram_bytes is None:
            return self.detected_vram_bytes
        return min(self.detected_vram_bytes, self.max_vram_bytes)

    @property
    def usable_bytes(self) -> int:
        """``max(0, min(detected, max_vram if set) - headroom)`` (docs/rules.md §3)."""
        return max(0, self.capped_vram_bytes - self.runtime_headroom_bytes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], index: int | None = None) -> NodeBudget:
        where = f"nodes[{index}]." if index is not None else ""
        if not isinstance(data, Mapping):
            raise InvalidInput(where.rstrip(".") or "node", "must be an object", value=data)
        node_id = data.get("node_id")
        shown_id = node_id if isinstance(node_id, str) else None
        known_keys(data, _NODE_FIELDS, _unknown(where, shown_id))
        if "node_id" not in data:
            raise InvalidInput(f"{where}node_id", "is required")
        if "detected_vram_bytes" not in data:
            raise InvalidInput(f"{where}detected_vram_bytes", "is required", node_id=shown_id)
        fields = {name: data.get(name) for name in _NODE_FIELDS}
        if fields["runtime_headroom_bytes"] is None:
            fields["runtime_headroom_bytes"] = 0
        return cls(*_node_fields(fields["node_id"], fields["detected_vram_bytes"],
                                 fields["max_vram_bytes"], fields["runtime_headroom_bytes"],
                                 fields["stage_transfer_latency_ms"], where))


def _node_fields(node_id: Any, detected: Any, max_vram: Any, headroom: Any, latency: Any,
                 where: str) -> tuple[str, int, int | None, int, int | float | None]:
    text(node_id, _bad(f"{where}node_id"))
    return (
        node_id,
        integer(detected, _bad(f"{where}detected_vram_bytes", node_id),
                maximum=MAX_NODE_BYTES),
        optional_integer(max_vram, _bad(f"{where}max_vram_bytes", node_id),
                         maximum=MAX_NODE_BYTES),
        integer(headroom, _bad(f"{where}runtime_headroom_bytes", node_id), maximum=MAX_BYTES),
        _latency(latency, f"{where}stage_transfer_latency_ms", node_id),
    )


def _latency(value: Any, field_name: str, node_id: str) -> int | float | None:
    """A latency is a number of milliseconds (any integral type or a float, not text or
    bool), to three decimals: docs/rules.md §1 extended to sub-millisecond links. Whole
    values plan exactly as whole milliseconds do (``5.0`` is ``5``)."""
    if value is None:
        return None
    fail = _bad(field_name, node_id)
    if isinstance(value, (str, bytes, bool)):
        raise fail("must be a number of milliseconds", value)
    if not isinstance(value, float):
        return optional_integer(value, fail, maximum=MAX_LATENCY_MS)
    if value < 0:
        raise fail("must be at least 0", value)
    try:
        return parse_latency_ms(value)
    except LatencyError as error:
        raise InvalidInput(field_name, error.message, node_id=node_id) from None


_NODE_FIELDS = (
    "node_id",
    "detected_vram_bytes",
    "max_vram_bytes",
    "runtime_headroom_bytes",
    "stage_transfer_latency_ms",
)


@dataclass(frozen=True, slots=True)
class PlanningInput:
    """A planning request (docs/rules.md §1).

    ``minimum_nodes`` 0 is treated as 1. Optional fields default to ``None``.
    """

    native_context_length: int
    layer_count: int
    model_weight_bytes: int
    kv_bytes_per_token: int
    nodes: tuple[NodeBudget, ...]
    minimum_nodes: int = 1
    layer_weight_bytes: tuple[int, ...] | None = None
    context_length_override: int | None = None
    parallel_lanes_override: int | None = None
    target_decode_tpot_ms: int | None = None
    layer_kv_bytes_per_token: tuple[int, ...] | None = None
    """Each layer's KV bytes per token for the selected cache type (0 for a layer with no
    KV cache); when given it replaces ``ceil(kv_bytes_per_token / layer_count)`` per
    layer and adds up to ``kv_bytes_per_token`` (docs/rules.md §3)."""
    layer_state_bytes_per_sequence: tuple[int, ...] | None = None
    """Each layer's fixed bytes per sequence (e.g. llama.cpp's recurrent R and S state),
    held once per parallel lane; ``None`` is 0 for every layer (docs/rules.md §3)."""
    memory_rule: MemoryRule = DESIGN_RULE
    """What each layer and node costs (:mod:`planner.planning.memory_rule`): the design
    rule of docs/rules.md §3 unless another is given (llama.cpp's:
    :class:`planner.llamacpp.LlamaCppCosts`, docs/rules.md §12)."""

    def __post_init__(self) -> None:
        for name, maximum in _INT_LIMITS.items():
            object.__setattr__(self, name, integer(getattr(self, name), _bad(name),
                                                   maximum=maximum))
        for name, maximum in _OPTIONAL_INT_LIMITS.items():
            object.__setattr__(self, name, optional_integer(getattr(self, name), _bad(name),
                                                            maximum=maximum))
        nodes = self.nodes
        if isinstance(nodes, (str, bytes, Mapping)) or not isinstance(nodes, Sequence):
            raise InvalidInput("nodes", "must be a list of nodes", value=type(nodes).__name__)
        check_node_count(len(nodes))
        if not isinstance(nodes, tuple):
            object.__setattr__(self, "nodes", tuple(nodes))
        seen: dict[str, int] = {}
        for index, node in enumerate(self.nodes):
            if not isinstance(node, NodeBudget):
                raise InvalidInput(f"nodes[{index}]", "must be a NodeBudget", value=node)
            if node.node_id in seen:
                raise InvalidInput(
                    f"nodes[{index}].node_id",
                    f"duplicate node id (also nodes[{seen[node.node_id]}])",
                    node_id=node.node_id,
                )
            seen[node.node_id] = index
        for name in _PER_LAYER_FIELDS:
            object.__setattr__(self, name, _per_layer(getattr(self, name), name,
                                                      self.layer_count))
        per_token = self.layer_kv_bytes_per_token
        if (per_token is not None and self.layer_count > 0
                and sum(per_token) != self.kv_bytes_per_token):
            raise InvalidInput(
                "layer_kv_bytes_per_token",
                f"adds up to {sum(per_token):,} but kv_bytes_per_token is "
                f"{self.kv_bytes_per_token:,}; give each layer's share of that figure")
        if not isinstance(self.memory_rule, MemoryRule):
            raise InvalidInput(
                "memory_rule", "must be a memory rule: planner.planning.memory_rule."
                "DesignRule() or llama.cpp's (a planner.llamacpp.LlamaCppCosts, e.g. "
                "costs_from_gguf(path); from JSON, LlamaCppCosts.from_dict)",
                value=type(self.memory_rule).__name__)
        self.memory_rule.check(self)

    @property
    def memory_model(self) -> str:
        """The memory rule's name: ``"design"`` or ``"llamacpp"``."""
        return self.memory_rule.name

    @property
    def usable_bytes(self) -> dict[str, int]:
        """Usable bytes per node id."""
        return {node.node_id: node.usable_bytes for node in self.nodes}

    @property
    def has_latency(self) -> bool:
        """Latency-aware planning is on when any node has a stage-transfer latency."""
        return any(node.stage_transfer_latency_ms is not None for node in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "native_context_length": self.native_context_length,
            "layer_count": self.layer_count,
            "model_weight_bytes": self.model_weight_bytes,
            "layer_weight_bytes": (
                list(self.layer_weight_bytes) if self.layer_weight_bytes is not None else None
            ),
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "minimum_nodes": self.minimum_nodes,
            "nodes": [node.to_dict() for node in self.nodes],
            "context_length_override": self.context_length_override,
            "parallel_lanes_override": self.parallel_lanes_override,
            "target_decode_tpot_ms": self.target_decode_tpot_ms,
            # The fields of docs/rules.md §1 only, unless a model costs its layers one by
            # one or another rule costs the memory.
            **{name: list(getattr(self, name)) for name in _PER_LAYER_FIELDS[1:]
               if getattr(self, name) is not None},
            **({} if self.memory_rule == DESIGN_RULE else {
                "memory_rule": self.memory_rule.to_dict()}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanningInput:
        """Build a request from plain data with the field names of docs/rules.md §1 (nodes as
        dicts)."""
        if isinstance(data, PlanningInput):
            return data
        if not isinstance(data, Mapping):
            raise InvalidInput("request", "must be an object with the planning request's fields",
                               value=type(data).__name__)
        known_keys(data, _REQUEST_FIELDS, _unknown(""))
        for name in ("native_context_length", "layer_count", "model_weight_bytes",
                     "kv_bytes_per_token", "nodes"):
            if name not in data:
                raise InvalidInput(name, "is required")
        raw_nodes = data["nodes"]
        if isinstance(raw_nodes, (str, bytes, Mapping)) or not isinstance(raw_nodes, Sequence):
            raise InvalidInput("nodes", "must be a list of nodes", value=raw_nodes)
        check_node_count(len(raw_nodes))
        nodes = tuple(
            node if isinstance(node, NodeBudget) else NodeBudget.from_dict(node, index)
            for index, node in enumerate(raw_nodes)
        )
        minimum = data.get("minimum_nodes", 1)
        return cls(
            native_context_length=data["native_context_length"],
            layer_count=data["layer_count"],
            model_weight_bytes=data["model_weight_bytes"],
            kv_bytes_per_token=data["kv_bytes_per_token"],
            nodes=nodes,
            minimum_nodes=1 if minimum is None else minimum,
            layer_weight_bytes=data.get("layer_weight_bytes"),
            context_length_override=data.get("context_length_override"),
            parallel_lanes_override=data.get("parallel_lanes_override"),
            target_decode_tpot_ms=data.get("target_decode_tpot_ms"),
            layer_kv_bytes_per_token=data.get("layer_kv_bytes_per_token"),
            layer_state_bytes_per_sequence=data.get("layer_state_bytes_per_sequence"),
            memory_rule=data.get("memory_rule", DESIGN_RULE),
        )


_REQUEST_FIELDS = (
    "native_context_length",
    "layer_count",
    "model_weight_bytes",
    "layer_weight_bytes",
    "kv_bytes_per_token",
    "minimum_nodes",
    "nodes",
    "context_length_override",
    "parallel_lanes_override",
    "target_decode_tpot_ms",
    "layer_kv_bytes_per_token",
    "layer_state_bytes_per_sequence",
    "memory_rule",
)
# Lists of one integer per layer; the first is docs/rules.md §1's, the others extend it.
_PER_LAYER_FIELDS = ("layer_weight_bytes", "layer_kv_bytes_per_token",
                     "layer_state_bytes_per_sequence")


def _per_layer(values: Any, name: str, layer_count: int) -> tuple[int, ...] | None:
    """One integer of at most :data:`MAX_BYTES` per layer, or ``None``."""
    if values is None:
        return None
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
        raise InvalidInput(name, "must be a list of integers or null", value=values)
    checked = tuple(integer(value, _bad(f"{name}[{index}]"), maximum=MAX_BYTES)
                    for index, value in enumerate(values))
    if layer_count > 0 and len(checked) != layer_count:
        raise InvalidInput(name, f"has {len(checked)} entries but layer_count is "
                           f"{layer_count}; give one entry per layer or null")
    return checked


def as_planning_input(request: PlanningInput | Mapping[str, Any]) -> PlanningInput:
    """Accept a :class:`PlanningInput` or a plain dict with the field names of docs/rules.md §1."""
    if isinstance(request, PlanningInput):
        return request
    return PlanningInput.from_dict(request)
