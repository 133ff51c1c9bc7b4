"""The workbench's editable state, without widgets.

:class:`WorkbenchState` holds what the editor shows, as a person typed it (sizes as text
such as ``"80 GiB"``, optional numbers as blank or text), turns it into a planning request
or a fleet document, and makes every edit the editor offers as a pure function returning
a new state. Values that cannot be read raise :class:`WorkbenchInputError`, naming the
field and node; :class:`Problem` is how any error is shown.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from importlib.resources import files
from pathlib import Path
from typing import Any

from planner._validate import shown
from planner.errors import CodedError
from planner.planning import NodeBudget, PlanningInput
from planner.units import (
    UnitError,
    exact_size_text,
    parse_bytes,
    parse_context,
    parse_latency_ms,
)

# The example fleets shipped in the package (the repository's data/fleets in a checkout).
DEFAULT_FLEET_DIR = Path(str(files("planner.data"))) / "fleets"
DEFAULT_FLEET_FILE = DEFAULT_FLEET_DIR / "qwen480b-5x80.toml"

# The design's Qwen3-Coder-480B-A35B on five 80 GiB GPUs, used when the default fleet
# file cannot be read (for example outside a checkout of the repository).
_DESIGN_MODEL_NAME = "Qwen3-Coder-480B-A35B"
_DESIGN_MODEL = {
    "native_context_length": 262_144,
    "layer_count": 62,
    "model_weight_bytes": 315_680_000_000,
    "kv_bytes_per_token": 131_072,
}


class WorkbenchInputError(CodedError):
    """A value in the editor that cannot be read.

    ``field`` names the request field (``nodes[2].vram``, ``model_weight_bytes``),
    ``node_id`` the node the value belongs to and ``value`` what was typed.
    """

    codes = ("InvalidEditorValue",)

    def __init__(self, field_name: str, problem: str, *, value: str | None = None,
                 node_id: str | None = None, label: str | None = None) -> None:
        where = label or field_name
        got = f" (got {shown(value)})" if value is not None else ""
        super().__init__("InvalidEditorValue", f"{where}: {problem}{got}", field=field_name,
                         node_id=node_id, value=value)
        self.field = field_name
        self.node_id = node_id
        self.value = value


@dataclass(frozen=True, slots=True)
class Problem:
    """An error shown in the workbench instead of a plan: a stable code and a message."""

    code: str
    message: str
    field: str | None = None
    node_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "field": self.field,
                "node_id": self.node_id}

    @classmethod
    def from_exception(cls, error: Exception) -> Problem:
        """The problem behind any error the planner, the fleet files or the models raise."""
        code = str(getattr(error, "code", type(error).__name__))
        message = str(getattr(error, "message", None) or error)
        field_name = getattr(error, "field", None)
        node_id = getattr(error, "node_id", None)
        if hasattr(error, "path") and getattr(error, "path", None):
            message = str(error)
        return cls(code, message, field_name if isinstance(field_name, str) else None,
                   node_id if isinstance(node_id, str) else None)


# -- reading what was typed ------------------------------------------------------------


_DECIMAL_UNITS = (("PB", 1000**5), ("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2))


def weight_size_text(value: int) -> str:
    """Model weights as the editor shows them, always in one form: two decimals of the
    largest 1000-based unit (``"315.68 GB"``, ``"712.97 GB"``, ``"1.34 TB"``).

    The figure is rounded; :class:`ModelFields` keeps the exact bytes while the text is
    left as shown."""
    for unit, factor in _DECIMAL_UNITS:
        if value >= factor:
            return f"{value / factor:.2f} {unit}"
    return f"{value} B"


def parse_size(text: str, field_name: str, *, label: str, node_id: str | None = None,
               optional: bool = False, bare_bytes: bool = False) -> int | None:
    """A size typed as ``"80 GiB"``, ``"24 GB"`` or ``"1024 B"``; blank is ``None`` when
    ``optional``. A bare number is bytes only with ``bare_bytes`` (a box labelled in
    bytes); elsewhere it is refused with the units it could mean."""
    stripped = text.strip()
    if not stripped:
        if optional:
            return None
        raise WorkbenchInputError(field_name, "is required; write e.g. '80 GiB'",
                                  node_id=node_id, label=label)
    if stripped.startswith("-"):
        raise WorkbenchInputError(field_name, "cannot be negative", value=text,
                                  node_id=node_id, label=label)
    try:
        return parse_bytes(stripped, bare_bytes=bare_bytes)
    except UnitError as error:
        raise WorkbenchInputError(field_name, error.message, node_id=node_id,
                                  label=label) from None


def parse_latency(text: str, field_name: str, *, label: str,
                  node_id: str | None = None) -> int | float | None:
    """An optional latency (blank is ``None``) read as fleet files read it: ``5``,
    ``0.5``, ``"5 ms"``, ``"500 us"``."""
    if not text.strip():
        return None
    try:
        return parse_latency_ms(text.strip())
    except UnitError as error:
        raise WorkbenchInputError(field_name, error.message, node_id=node_id,
                                  label=label) from None


def parse_context_text(text: str, field_name: str, *, label: str) -> int | None:
    """An optional context length (blank is ``None``): ``131072``, ``"131,072"`` or
    ``"128k"`` (k = 1024 tokens)."""
    if not text.strip():
        return None
    try:
        return parse_context(text.strip())
    except UnitError as error:
        raise WorkbenchInputError(field_name, error.message, label=label) from None


_WHOLE = re.compile(r"^\s*(-?[0-9][0-9_,]*)\s*([a-zA-Z]*)\s*$")


def parse_whole(text: str, field_name: str, *, label: str, unit: str = "",
                node_id: str | None = None, minimum: int = 0) -> int | None:
    """An optional whole number (blank is ``None``), with an optional unit such as ``ms``."""
    stripped = text.strip()
    if not stripped:
        return None
    match = _WHOLE.match(stripped)
    if match is None or (match.group(2) and match.group(2).lower() != unit):
        suffix = f", optionally followed by {unit!r}" if unit else ""
        raise WorkbenchInputError(field_name, f"must be a whole number{suffix}",
                                  value=text, node_id=node_id, label=label)
    digits = match.group(1).replace("_", "").replace(",", "")
    if len(digits.lstrip("-0")) > 18:
        raise WorkbenchInputError(field_name, "has too many digits", value=text,
                                  node_id=node_id, label=label)
    number = int(digits)
    if number < minimum:
        problem = "cannot be negative" if minimum == 0 else f"must be at least {minimum}"
        raise WorkbenchInputError(field_name, problem, value=text, node_id=node_id,
                                  label=label)
    return number


# -- the editable state -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One fleet row as typed: sizes as text, blank meaning "not set"."""

    node_id: str
    vram: str
    max_vram: str = ""
    headroom: str = "0"
    latency_ms: str = ""

    def to_budget(self, index: int) -> NodeBudget:
        """The node as the planner sees it. Raises :class:`WorkbenchInputError`."""
        node_id = self.node_id.strip()
        where = f"nodes[{index}]"
        if not node_id:
            raise WorkbenchInputError(f"{where}.node_id", "every node needs an id",
                                      label=f"row {index + 1} id")
        label = f"node {node_id!r}"
        detected = parse_size(self.vram, f"{where}.vram", label=f"{label} VRAM",
                              node_id=node_id)
        cap = parse_size(self.max_vram, f"{where}.max_vram", label=f"{label} max VRAM",
                         node_id=node_id, optional=True)
        headroom = parse_size(self.headroom, f"{where}.headroom",
                              label=f"{label} headroom", node_id=node_id, optional=True)
        latency = parse_latency(self.latency_ms, f"{where}.latency_ms",
                                label=f"{label} latency", node_id=node_id)
        assert detected is not None
        return NodeBudget(node_id, detected, cap, headroom or 0, latency)

    @classmethod
    def from_budget(cls, node: NodeBudget) -> NodeRow:
        return cls(
            node_id=node.node_id,
            vram=exact_size_text(node.detected_vram_bytes),
            max_vram=(exact_size_text(node.max_vram_bytes)
                      if node.max_vram_bytes is not None else ""),
            headroom=exact_size_text(node.runtime_headroom_bytes),
            latency_ms=(str(node.stage_transfer_latency_ms)
                        if node.stage_transfer_latency_ms is not None else ""),
        )

    def to_dict(self) -> dict[str, str]:
        return {"node_id": self.node_id, "vram": self.vram, "max_vram": self.max_vram,
                "headroom": self.headroom, "latency_ms": self.latency_ms}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> NodeRow:
        return cls(**{key: str(data.get(key, default)) for key, default in (
            ("node_id", ""), ("vram", ""), ("max_vram", ""), ("headroom", "0"),
            ("latency_ms", ""))})


@dataclass(frozen=True, slots=True)
class ModelFields:
    """The model as the editor holds it.

    ``preset`` or ``gguf`` says where the numbers came from; both are ``None`` for numbers
    typed by hand. ``kv_cache_type`` applies to a preset or GGUF model.
    ``layer_weight_bytes`` are exact per-layer weights (kept only while they match
    ``layer_count`` and ``model_weight_bytes``). ``model_weight_bytes`` is shown rounded
    (:func:`weight_size_text`); ``exact_weight_bytes`` is the exact figure behind it, used
    as long as the text still reads as that rounding.
    """

    layer_count: int
    native_context_length: int
    model_weight_bytes: str
    kv_bytes_per_token: str
    layer_weight_bytes: tuple[int, ...] | None = None
    name: str | None = None
    preset: str | None = None
    gguf: str | None = None
    kv_cache_type: str | None = None
    exact_weight_bytes: int | None = None

    @property
    def label(self) -> str:
        return self.name or self.preset or (Path(self.gguf).name if self.gguf else "custom model")

    def planning_fields(self) -> dict[str, Any]:
        """The five model fields of the request (docs/rules.md §1). Raises
        :class:`WorkbenchInputError`."""
        exact = self.exact_weight_bytes
        if exact is not None and self.model_weight_bytes.strip() == weight_size_text(exact):
            weights = exact
        else:
            weights = parse_size(self.model_weight_bytes, "model_weight_bytes",
                                 label="model weight bytes", bare_bytes=True)
        kv = parse_size(self.kv_bytes_per_token, "kv_bytes_per_token",
                        label="KV bytes per token", bare_bytes=True)
        return {
            "native_context_length": self.native_context_length,
            "layer_count": self.layer_count,
            "model_weight_bytes": weights,
            "kv_bytes_per_token": kv,
            "layer_weight_bytes": self.layer_weight_bytes,
        }

    @classmethod
    def from_planning_fields(cls, fields: dict[str, Any], **source: Any) -> ModelFields:
        weights = fields.get("layer_weight_bytes")
        return cls(
            layer_count=int(fields["layer_count"]),
            native_context_length=int(fields["native_context_length"]),
            model_weight_bytes=weight_size_text(int(fields["model_weight_bytes"])),
            exact_weight_bytes=int(fields["model_weight_bytes"]),
            # KV sizes are quoted in plain bytes per token ("131,072"), so shown that way.
            kv_bytes_per_token=str(int(fields["kv_bytes_per_token"])),
            layer_weight_bytes=tuple(weights) if weights is not None else None,
            **source,
        )


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """Planning options as typed; blank means "not set"."""

    minimum_nodes: int = 1
    context_length_override: str = ""
    parallel_lanes_override: str = ""
    target_decode_tpot_ms: str = ""

    def planning_fields(self) -> dict[str, Any]:
        """The request's option fields (docs/rules.md §1). Raises :class:`WorkbenchInputError`."""
        if self.minimum_nodes < 0:
            raise WorkbenchInputError("minimum_nodes", "cannot be negative",
                                      value=str(self.minimum_nodes), label="minimum nodes")
        return {
            "minimum_nodes": self.minimum_nodes,
            "context_length_override": parse_context_text(
                self.context_length_override, "context_length_override",
                label="context override"),
            "parallel_lanes_override": parse_whole(
                self.parallel_lanes_override, "parallel_lanes_override",
                label="lanes override"),
            "target_decode_tpot_ms": parse_whole(
                self.target_decode_tpot_ms, "target_decode_tpot_ms",
                label="TPOT target", unit="ms"),
        }


def _numbered(node_id: str) -> tuple[str, int] | None:
    match = re.match(r"^(.*\S)-(\d+)$", node_id)
    return (match.group(1), int(match.group(2))) if match else None


def _free_ids(base: str, taken: set[str], count: int) -> list[str]:
    """``count`` ids ``base-NN`` not in ``taken``, numbering on from the highest in use."""
    used = [n for nid in taken if (p := _numbered(nid)) and p[0] == base for n in [p[1]]]
    start = max(used) + 1 if used else 0
    width = max(2, len(str(start + count - 1)))
    ids = []
    number = start
    while len(ids) < count:
        candidate = f"{base}-{number:0{width}d}"
        if candidate not in taken:
            ids.append(candidate)
        number += 1
    return ids


def gpu_id_base(name: str) -> str:
    """A node id prefix from a GPU's name: ``"NVIDIA H100 80GB"`` -> ``"h100-80gb"``."""
    words = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-").split("-")
    vendors = {"nvidia", "amd", "apple", "intel", "geforce", "radeon"}
    kept = [w for w in words if w and w not in vendors] or words
    return "-".join(kept)[:24].strip("-") or "gpu"


@dataclass(frozen=True, slots=True)
class WorkbenchState:
    """Everything the workbench edits: the model, the fleet rows and the options.

    ``source`` is the fleet file the state was loaded from (relative GGUF paths start at
    its folder); ``name`` the fleet's display name; ``memory_model`` the memory rule
    the plan uses (``design`` or ``llamacpp``).
    """

    model: ModelFields
    nodes: tuple[NodeRow, ...]
    options: PlanOptions = field(default_factory=PlanOptions)
    name: str | None = None
    source: str | None = None
    memory_model: str = "design"
    addresses: tuple[tuple[str, str], ...] = ()
    """The fleet file's rpc-server ``address`` per node id (``planner launch``)."""

    # -- building ---------------------------------------------------------------------
    @classmethod
    def design_default(cls) -> WorkbenchState:
        """The design's Qwen3-Coder-480B-A35B on five 80 GiB nodes."""
        model = ModelFields.from_planning_fields(_DESIGN_MODEL, name=_DESIGN_MODEL_NAME)
        nodes = tuple(NodeRow(f"gpu-{i:02d}", "80 GiB") for i in range(5))
        return cls(model=model, nodes=nodes, name="Qwen 480B on 5 x 80 GiB")

    @classmethod
    def from_document(cls, document: Any) -> WorkbenchState:
        """A state from a :class:`planner.fleet.FleetDocument` (resolving its model)."""
        choice = document.model
        fields = choice.resolve(document.base_dir)
        model = ModelFields.from_planning_fields(
            fields, name=choice.name, preset=choice.preset, gguf=choice.gguf,
            kv_cache_type=choice.kv_cache_type)

        def text(value: int | None) -> str:
            return "" if value is None else str(value)

        options = PlanOptions(
            minimum_nodes=document.minimum_nodes,
            context_length_override=text(document.context_length_override),
            parallel_lanes_override=text(document.parallel_lanes_override),
            target_decode_tpot_ms=text(document.target_decode_tpot_ms),
        )
        return cls(model=model, nodes=tuple(NodeRow.from_budget(n) for n in document.nodes),
                   options=options, name=document.name, source=document.source,
                   addresses=tuple(document.addresses))

    # -- reading ----------------------------------------------------------------------
    def budgets(self) -> tuple[NodeBudget, ...]:
        """The fleet as the planner sees it. Raises :class:`WorkbenchInputError`."""
        budgets = []
        seen: dict[str, int] = {}
        for index, row in enumerate(self.nodes):
            budget = row.to_budget(index)
            if budget.node_id in seen:
                raise WorkbenchInputError(
                    f"nodes[{index}].node_id",
                    f"rows {seen[budget.node_id] + 1} and {index + 1} both use this id; "
                    "give every node its own id",
                    node_id=budget.node_id, label=f"node id {budget.node_id!r}")
            seen[budget.node_id] = index
            budgets.append(budget)
        return tuple(budgets)

    def to_request(self) -> PlanningInput:
        """The planning request. Raises :class:`WorkbenchInputError` or
        :class:`~planner.errors.InvalidInput`."""
        if self.memory_model != "design":
            from planner.fleet import FleetFileError

            try:
                return self.to_document().to_request(self.memory_model)
            except FleetFileError as error:
                raise WorkbenchInputError(error.field or "model", error.message,
                                          label="memory model llamacpp") from None
        return PlanningInput(**self.model.planning_fields(), nodes=self.budgets(),
                             **self.options.planning_fields())

    def to_document(self) -> Any:
        """The state as a :class:`planner.fleet.FleetDocument`, ready to save."""
        from planner.fleet import FleetDocument, ModelChoice

        model = self.model
        if model.preset is not None:
            choice = ModelChoice(preset=model.preset, kv_cache_type=model.kv_cache_type,
                                 name=model.name)
        elif model.gguf is not None:
            choice = ModelChoice(gguf=model.gguf, kv_cache_type=model.kv_cache_type,
                                 name=model.name)
        else:
            numbers = model.planning_fields()
            if numbers["layer_weight_bytes"] is None:
                del numbers["layer_weight_bytes"]
            choice = ModelChoice(numbers=numbers, name=model.name)
        options = self.options.planning_fields()
        budgets = self.budgets()
        # Addresses of nodes still in the fleet (rows can be renamed or removed).
        ids = {budget.node_id for budget in budgets}
        addresses = tuple((node, where) for node, where in self.addresses if node in ids)
        return FleetDocument(model=choice, nodes=budgets, name=self.name,
                             source=self.source, addresses=addresses, **options)

    # -- editing (each returns a new state) -------------------------------------------
    def with_model_numbers(self, **changes: Any) -> WorkbenchState:
        """Model numbers typed by hand: the model is no longer a preset or GGUF file, and
        exact per-layer weights are dropped once layers or weights change."""
        model = replace(self.model, **changes)
        if model == self.model:
            return self
        weights = model.layer_weight_bytes
        retyped = model.model_weight_bytes.strip() != self.model.model_weight_bytes.strip()
        if weights is not None and (model.layer_count != self.model.layer_count or retyped):
            weights = None
        custom = replace(model, preset=None, gguf=None, kv_cache_type=None,
                         layer_weight_bytes=weights,
                         exact_weight_bytes=None if retyped else model.exact_weight_bytes,
                         name=None if (self.model.preset or self.model.gguf) else model.name)
        return replace(self, model=custom)

    def with_model(self, model: ModelFields) -> WorkbenchState:
        return replace(self, model=model)

    def with_node(self, index: int, row: NodeRow) -> WorkbenchState:
        nodes = list(self.nodes)
        nodes[index] = row
        return replace(self, nodes=tuple(nodes))

    def with_nodes(self, rows: Sequence[NodeRow]) -> WorkbenchState:
        return replace(self, nodes=tuple(rows))

    def add_node(self) -> WorkbenchState:
        """A new row like the last one (80 GiB when the fleet is empty), with a fresh id."""
        template = self.nodes[-1] if self.nodes else NodeRow("node", "80 GiB")
        base = (_numbered(template.node_id) or (template.node_id.strip() or "node", 0))[0]
        new_id = _free_ids(base, {row.node_id for row in self.nodes}, 1)[0]
        return replace(self, nodes=(*self.nodes, replace(template, node_id=new_id)))

    def duplicate_node(self, index: int) -> WorkbenchState:
        """A copy of row ``index`` right after it, with a fresh id."""
        row = self.nodes[index]
        base = (_numbered(row.node_id) or (row.node_id.strip() or "node", 0))[0]
        new_id = _free_ids(base, {r.node_id for r in self.nodes}, 1)[0]
        nodes = list(self.nodes)
        nodes.insert(index + 1, replace(row, node_id=new_id))
        return replace(self, nodes=tuple(nodes))

    def remove_node(self, index: int) -> WorkbenchState:
        nodes = list(self.nodes)
        del nodes[index]
        return replace(self, nodes=tuple(nodes))

    def add_gpus(self, gpu_name: str, memory_bytes: int, count: int) -> WorkbenchState:
        """``count`` nodes of one GPU model, ids numbered on from any already in use."""
        if count < 1:
            raise WorkbenchInputError("count", "must be at least 1", value=str(count),
                                      label="number of GPUs to add")
        ids = _free_ids(gpu_id_base(gpu_name), {row.node_id for row in self.nodes}, count)
        vram = exact_size_text(memory_bytes)
        return replace(self, nodes=(*self.nodes, *(NodeRow(i, vram) for i in ids)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": {
                "layer_count": self.model.layer_count,
                "native_context_length": self.model.native_context_length,
                "model_weight_bytes": self.model.model_weight_bytes,
                "kv_bytes_per_token": self.model.kv_bytes_per_token,
                "layer_weight_bytes": (list(self.model.layer_weight_bytes)
                                       if self.model.layer_weight_bytes is not None else None),
                "name": self.model.name,
                "preset": self.model.preset,
                "gguf": self.model.gguf,
                "kv_cache_type": self.model.kv_cache_type,
                "exact_weight_bytes": self.model.exact_weight_bytes,
            },
            "nodes": [row.to_dict() for row in self.nodes],
            "options": {
                "minimum_nodes": self.options.minimum_nodes,
                "context_length_override": self.options.context_length_override,
                "parallel_lanes_override": self.options.parallel_lanes_override,
                "target_decode_tpot_ms": self.options.target_decode_tpot_ms,
            },
            "name": self.name,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkbenchState:
        model = dict(data["model"])
        if model.get("layer_weight_bytes") is not None:
            model["layer_weight_bytes"] = tuple(model["layer_weight_bytes"])
        return cls(
            model=ModelFields(**model),
            nodes=tuple(NodeRow.from_dict(row) for row in data["nodes"]),
            options=PlanOptions(**data.get("options", {})),
            name=data.get("name"),
            source=data.get("source"),
        )
