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
from pathlib import Path
from typing import Any

from planner._validate import Fail, instance, integer, shown, text
from planner.errors import CodedError
from planner.fleet import (
    SPEED_NUMBER_FIELDS,
    FleetDocument,
    FleetFileError,
    ModelChoice,
    ReliabilityOverride,
)
from planner.limits import MAX_NODE_BYTES, MAX_NODES
from planner.planning import NodeBudget, PlanningInput
from planner.units import (
    UnitError,
    exact_size_text,
    format_bytes,
    parse_bytes,
    parse_context,
    parse_latency_ms,
)
from planner.workspace import EXAMPLE_FLEETS

# The example fleets shipped in the package (the repository's data/fleets in a checkout):
# read, never written (saves go to the workspace, planner.workspace).
DEFAULT_FLEET_DIR = EXAMPLE_FLEETS
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


def _argument(name: str, label: str) -> Fail:
    """The refusal of a state method's argument ``name`` (shown as ``label``)."""
    return lambda problem, value: WorkbenchInputError(name, f"{problem} (got {shown(value)})",
                                                      label=label)


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


def weight_size_text(value: int) -> str:
    """Model weights as the editor shows them, always in one form: two decimals of the
    largest 1000-based unit (``"315.68 GB"``, ``"712.97 GB"``, ``"1.34 TB"``).

    The figure is rounded; :class:`ModelFields` keeps the exact bytes while the text is
    left as shown."""
    return format_bytes(value, decimal=True, trim=False)


def node_size_text(value: int) -> tuple[str, int | None]:
    """A node's memory as the fleet rows show it, and the exact bytes behind the text
    when it is rounded: the shortest exact size in GiB or GB (``"24 GiB"``, ``"1.5
    TiB"``), else GiB to two decimals (a driver's ``81559 MiB`` shows as ``"79.65 GiB"``,
    and the row keeps the exact 81559 MiB while that text is left as shown)."""
    exact = exact_size_text(value)
    if value < 2**30 or exact.endswith(("GiB", "TiB", "PiB", "GB", "TB", "PB")):
        return exact, None
    return format_bytes(value), value


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


def _exact_or_parsed(text: str, exact: int | None, field_name: str, *, label: str,
                     node_id: str | None, optional: bool = False) -> int | None:
    """``exact`` while ``text`` reads as its rounding (:func:`node_size_text`), else the
    size typed."""
    if exact is not None and text.strip() == node_size_text(exact)[0]:
        return exact
    return parse_size(text, field_name, label=label, node_id=node_id, optional=optional)


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
    """One fleet row as typed: sizes as text, blank meaning "not set".

    ``exact_vram_bytes`` and ``exact_max_vram_bytes`` are the exact sizes behind a
    rounded text (:func:`node_size_text`), used while the text still reads as shown;
    rows compare by their text."""

    node_id: str
    vram: str
    max_vram: str = ""
    headroom: str = "0"
    latency_ms: str = ""
    exact_vram_bytes: int | None = field(default=None, compare=False)
    exact_max_vram_bytes: int | None = field(default=None, compare=False)

    @classmethod
    def sized(cls, node_id: str, vram_bytes: int) -> NodeRow:
        """A row of ``vram_bytes`` written as the rows write sizes (:func:`node_size_text`)."""
        text, exact = node_size_text(vram_bytes)
        return cls(node_id, text, exact_vram_bytes=exact)

    def kept_exact(self, before: NodeRow) -> NodeRow:
        """This row with ``before``'s exact sizes where it has none of its own and its
        text still reads as before (a row read back from the editor's text)."""
        return replace(
            self,
            exact_vram_bytes=(before.exact_vram_bytes if self.exact_vram_bytes is None
                              and self.vram == before.vram else self.exact_vram_bytes),
            exact_max_vram_bytes=(before.exact_max_vram_bytes
                                  if self.exact_max_vram_bytes is None
                                  and self.max_vram == before.max_vram
                                  else self.exact_max_vram_bytes))

    def to_budget(self, index: int) -> NodeBudget:
        """The node as the planner sees it. Raises :class:`WorkbenchInputError`."""
        node_id = self.node_id
        where = f"nodes[{index}]"
        if not node_id.strip():
            raise WorkbenchInputError(f"{where}.node_id", "every node needs an id",
                                      label=f"row {index + 1} id")
        label = f"node {node_id!r}"
        detected = _exact_or_parsed(self.vram, self.exact_vram_bytes, f"{where}.vram",
                                    label=f"{label} VRAM", node_id=node_id)
        cap = _exact_or_parsed(self.max_vram, self.exact_max_vram_bytes,
                               f"{where}.max_vram", label=f"{label} max VRAM",
                               node_id=node_id, optional=True)
        headroom = parse_size(self.headroom, f"{where}.headroom",
                              label=f"{label} headroom", node_id=node_id, optional=True)
        latency = parse_latency(self.latency_ms, f"{where}.latency_ms",
                                label=f"{label} latency", node_id=node_id)
        assert detected is not None
        return NodeBudget(node_id, detected, cap, headroom or 0, latency)

    @classmethod
    def from_budget(cls, node: NodeBudget) -> NodeRow:
        vram, exact_vram = node_size_text(node.detected_vram_bytes)
        max_vram, exact_max = (node_size_text(node.max_vram_bytes)
                               if node.max_vram_bytes is not None else ("", None))
        return cls(
            node_id=node.node_id,
            vram=vram,
            max_vram=max_vram,
            exact_vram_bytes=exact_vram,
            exact_max_vram_bytes=exact_max,
            headroom=exact_size_text(node.runtime_headroom_bytes),
            latency_ms=(str(node.stage_transfer_latency_ms)
                        if node.stage_transfer_latency_ms is not None else ""),
        )

    def to_dict(self) -> dict[str, str]:
        return {"node_id": self.node_id, "vram": self.vram, "max_vram": self.max_vram,
                "headroom": self.headroom, "latency_ms": self.latency_ms}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> NodeRow:
        text = {key: str(data.get(key, default)) for key, default in (
            ("node_id", ""), ("vram", ""), ("max_vram", ""), ("headroom", "0"),
            ("latency_ms", ""))}
        return cls(text["node_id"], text["vram"], text["max_vram"], text["headroom"],
                   text["latency_ms"])


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
        weights: int | None
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
    ids: list[str] = []
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
class NodeExtras:
    """What a fleet file says of a node besides its planning fields: its own ``gpu``
    kind and failure figures, its rpc-server ``address`` and its device there. The
    editor does not show them as text; they stay with the node's row through every edit
    and are saved."""

    reliability: ReliabilityOverride | None = None
    address: str | None = None
    rpc_device: int | None = None

    @property
    def gpu(self) -> str | None:
        return self.reliability.gpu if self.reliability is not None else None

    def copied(self) -> NodeExtras:
        """The extras of a copy of the node: the same kind of GPU, at another address."""
        return NodeExtras(self.reliability)


def _model_fields(choice: ModelChoice, base_dir: Path | None) -> ModelFields:
    """The model as the editor shows it; a preset or GGUF file that cannot be read shows
    its name with no numbers (planning it says why)."""
    source: dict[str, Any] = {"name": choice.name, "preset": choice.preset,
                              "gguf": choice.gguf, "kv_cache_type": choice.kv_cache_type}
    try:
        fields = choice.resolve(base_dir)
    except CodedError:
        return ModelFields(layer_count=0, native_context_length=0, model_weight_bytes="",
                           kv_bytes_per_token="", **source)
    return ModelFields.from_planning_fields(fields, **source)


def fleet_shape(document: FleetDocument) -> tuple[Any, ...]:
    """What a fleet's name describes: its model and its nodes' sizes, in order."""
    return (document.model.label, tuple(node.detected_vram_bytes for node in document.nodes))


def describe_nodes(nodes: Sequence[NodeBudget]) -> str:
    """A fleet's nodes in words: ``"5 x 80 GiB"``, ``"2 x 80 GiB + 1 x 24 GiB"``, or
    ``"12 nodes"`` when they come in more than three sizes."""
    if not nodes:
        return "no nodes"
    counts: dict[int, int] = {}
    for node in nodes:
        counts[node.detected_vram_bytes] = counts.get(node.detected_vram_bytes, 0) + 1
    if len(counts) > 3:
        return f"{len(nodes):,} nodes"
    return " + ".join(f"{count:,} x {format_bytes(size)}" for size, count in
                      sorted(counts.items(), key=lambda item: (-item[0], item[1])))


def _text(value: int | float | None) -> str:
    return "" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class WorkbenchState:
    """A fleet document being edited, and the editors' text.

    ``document`` is the :class:`planner.fleet.FleetDocument` the workbench edits: what
    Save writes, what the plan and every panel are made from. ``model``, ``nodes`` and
    ``options`` are what the editors show, as typed (``nodes`` one row per node, in
    order; ``extras`` each row's ``gpu`` kind, failure figures and address). Every edit
    reads the text back into ``document``; text that cannot be read leaves ``document``
    at the last one that could, and :meth:`to_document` raises
    :class:`WorkbenchInputError` naming the field until it is fixed.

    ``memory_model`` is the memory rule the plan uses (``design`` or ``llamacpp``);
    ``loaded`` the document as read from (or last saved to) its file.

    The fleet's name describes the fleet it was given for: a name that came with a file
    (``Qwen 480B on 5 x 80 GiB``) holds while the model and the nodes' sizes are those it
    was read with (``named_shape``), and is dropped, from the title and from what Save
    writes, once they change; ``given_name`` keeps it, so undoing the change brings it
    back. A name typed on the page (``name_typed``) is the person's own and holds through
    every edit.
    """

    document: FleetDocument
    model: ModelFields
    nodes: tuple[NodeRow, ...]
    extras: tuple[NodeExtras, ...]
    options: PlanOptions = field(default_factory=PlanOptions)
    memory_model: str = "design"
    loaded: FleetDocument | None = None
    given_name: str | None = None
    named_shape: tuple[Any, ...] | None = None
    name_typed: bool = False

    # -- building ---------------------------------------------------------------------
    @classmethod
    def design_default(cls) -> WorkbenchState:
        """The design's Qwen3-Coder-480B-A35B on five 80 GiB nodes."""
        document = FleetDocument(
            model=ModelChoice(numbers=_DESIGN_MODEL, name=_DESIGN_MODEL_NAME),
            nodes=tuple(NodeBudget(f"gpu-{i:02d}", 80 * 2**30) for i in range(5)),
            name="Qwen 480B on 5 x 80 GiB")
        return cls.from_document(document, loaded=False)

    @classmethod
    def from_document(cls, document: FleetDocument, *, loaded: bool = True
                      ) -> WorkbenchState:
        """The editors on ``document`` (``loaded``: as read from its file)."""
        instance(document, FleetDocument, _argument("document", "document"), "a FleetDocument")
        extras = tuple(NodeExtras(document.reliability.get(node.node_id),
                                  dict(document.addresses).get(node.node_id),
                                  dict(document.rpc_devices).get(node.node_id))
                       for node in document.nodes)
        options = PlanOptions(
            minimum_nodes=document.minimum_nodes,
            context_length_override=_text(document.context_length_override),
            parallel_lanes_override=_text(document.parallel_lanes_override),
            target_decode_tpot_ms=_text(document.target_decode_tpot_ms),
        )
        return cls(document=document, model=_model_fields(document.model, document.base_dir),
                   nodes=tuple(NodeRow.from_budget(node) for node in document.nodes),
                   extras=extras, options=options, loaded=document if loaded else None,
                   given_name=document.name, named_shape=fleet_shape(document))

    @classmethod
    def from_text(cls, model: ModelFields, nodes: Sequence[NodeRow],
                  options: PlanOptions | None = None, *, name: str | None = None
                  ) -> WorkbenchState:
        """A state holding what was typed (which need not read: planning it says why)."""
        base = cls.design_default()
        state = replace(base, given_name=name, name_typed=name is not None)
        return state.with_model(model).with_nodes(nodes).with_options(
            options or PlanOptions())

    # -- reading ----------------------------------------------------------------------
    @property
    def name(self) -> str | None:
        """The fleet's name (a fleet file's ``name``) while it still describes the fleet
        (see the class's docstring), else ``None``."""
        return self.document.name

    @property
    def source(self) -> str | None:
        """The fleet file the document was read from or saved to."""
        return self.document.source

    @property
    def base_dir(self) -> Path | None:
        """Where relative GGUF paths start: the fleet file's folder."""
        return self.document.base_dir

    @property
    def node_kinds(self) -> dict[str, str]:
        """The catalog kind each row names (``gpu``), by the row's node id."""
        return {row.node_id: extra.gpu for row, extra in zip(self.nodes, self.extras,
                                                             strict=True) if extra.gpu}

    @property
    def title(self) -> str:
        """The fleet's name, else what it is: ``"llama-3.1-70b on 5 x 80 GiB"``."""
        if self.name:
            return self.name
        return f"{self.model.label} on {describe_nodes(self.document.nodes)}"

    @property
    def provenance(self) -> str:
        """Where the fleet on screen comes from: ``"from x.toml"``, ``"edited from
        x.toml"`` once anything differs from the file, or ``"not saved to a file"``."""
        source = self.loaded.source if self.loaded is not None else None
        if source is None or source.startswith("<"):
            return "not saved to a file"
        name = Path(source).name
        return f"edited from {name}" if self.edited else f"from {name}"

    @property
    def edited(self) -> bool:
        """Whether the fleet differs from its file (always, for one never saved)."""
        if self.loaded is None:
            return True
        try:
            return self.to_document() != self.loaded
        except WorkbenchInputError:
            return True

    def cache_type_for(self, offered: Sequence[str]) -> str | None:
        """The KV cache type another model is planned at, of the types it ``offered``:
        the one on screen (a person's choice is kept across models), else the fleet
        file's, else ``None`` (the model's own default)."""
        from_file = self.loaded.model.kv_cache_type if self.loaded is not None else None
        for wanted in (self.model.kv_cache_type, from_file):
            if wanted is not None and wanted in offered:
                return wanted
        return None

    def budgets(self) -> tuple[NodeBudget, ...]:
        """The fleet as the planner sees it. Raises :class:`WorkbenchInputError`."""
        originals = {index: node.node_id for index, node in enumerate(self.document.nodes)}
        budgets = []
        seen: dict[str, int] = {}
        for index, row in enumerate(self.nodes):
            # An id is used as typed only where it is the document's own (fleet files
            # may hold ids with spaces around them); text typed here is trimmed.
            if row.node_id != originals.get(index):
                row = replace(row, node_id=row.node_id.strip())
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

    def _model_choice(self) -> ModelChoice:
        model = self.model
        if model.preset is not None:
            return ModelChoice(preset=model.preset, kv_cache_type=model.kv_cache_type,
                               name=model.name)
        if model.gguf is not None:
            return ModelChoice(gguf=model.gguf, kv_cache_type=model.kv_cache_type,
                               name=model.name)
        numbers = model.planning_fields()
        if numbers["layer_weight_bytes"] is None:
            del numbers["layer_weight_bytes"]
        # What the speed estimate reads has no box on the page: it stays as the file gave
        # it, so a save keeps it.
        kept = self.document.model.numbers or {}
        numbers.update({key: kept[key] for key in SPEED_NUMBER_FIELDS
                        if kept.get(key) is not None})
        try:
            return ModelChoice(numbers=numbers, name=model.name)
        except FleetFileError as error:
            name = (error.field or "model").removeprefix("model.")
            message = error.message
            if name in SPEED_NUMBER_FIELDS:
                message += (f" ({name} comes from the fleet file and has no box here: "
                            "edit it in the file, or undo this edit)")
            raise WorkbenchInputError(name, message, label=name.replace("_", " ")
                                      ) from None

    def to_document(self) -> FleetDocument:
        """The fleet document the editors hold, ready to save and plan. Raises
        :class:`WorkbenchInputError` naming text that cannot be read."""
        budgets = self.budgets()
        reliability = {budget.node_id: extra.reliability
                       for budget, extra in zip(budgets, self.extras, strict=True)
                       if extra.reliability is not None}
        addresses = tuple((budget.node_id, extra.address)
                          for budget, extra in zip(budgets, self.extras, strict=True)
                          if extra.address is not None)
        devices = tuple((budget.node_id, extra.rpc_device)
                        for budget, extra in zip(budgets, self.extras, strict=True)
                        if extra.address is not None and extra.rpc_device is not None)
        try:
            document = replace(self.document, model=self._model_choice(), nodes=budgets,
                               reliability=reliability, addresses=addresses,
                               rpc_devices=devices, name=self.given_name,
                               **self.options.planning_fields())
            if document.name is not None and not self.name_typed and (
                    fleet_shape(document) != self.named_shape):
                document = replace(document, name=None)  # it names another fleet
            return document
        except FleetFileError as error:
            raise WorkbenchInputError(error.field or "document", error.message,
                                      node_id=error.node_id,
                                      label=error.field or "fleet") from None

    def to_request(self) -> PlanningInput:
        """The planning request of :meth:`to_document` under :attr:`memory_model`, as
        ``planner plan --memory-model`` makes it. Raises :class:`WorkbenchInputError`,
        :class:`planner.fleet.FleetFileError` (a model that cannot be read) or
        :class:`~planner.errors.InvalidInput`."""
        return self.to_document().to_request(self.memory_model)

    # -- editing (each returns a new state, its document read from the new text) ------
    def _settled(self) -> WorkbenchState:
        try:
            return replace(self, document=self.to_document())
        except WorkbenchInputError:
            return self

    def with_document(self, document: FleetDocument) -> WorkbenchState:
        """Another document in the editors, planned under the same memory rule."""
        return replace(WorkbenchState.from_document(document, loaded=False),
                       memory_model=self.memory_model, loaded=self.loaded)

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
        return self.with_model(custom)

    def with_model(self, model: ModelFields) -> WorkbenchState:
        """Another model. A name that came with the file is set aside with the model
        it named (see the class's docstring)."""
        return replace(self, model=model)._settled()

    def with_name(self, name: str | None) -> WorkbenchState:
        """The fleet named ``name`` by the person (``None`` or blank: no name); such a
        name holds through every edit."""
        name = name.strip() if name is not None else None
        return replace(self, given_name=name or None, name_typed=bool(name))._settled()

    def with_options(self, options: PlanOptions) -> WorkbenchState:
        return replace(self, options=options)._settled()

    def with_memory_model(self, memory_model: str) -> WorkbenchState:
        return replace(self, memory_model=memory_model)

    def with_node(self, index: int, row: NodeRow) -> WorkbenchState:
        index = self._row_index(index)
        instance(row, NodeRow, _argument("row", "row"), "a NodeRow")
        nodes = list(self.nodes)
        nodes[index] = row.kept_exact(nodes[index])
        return replace(self, nodes=tuple(nodes))._settled()

    def with_nodes(self, rows: Sequence[NodeRow],
                   extras: Sequence[NodeExtras] | None = None) -> WorkbenchState:
        """Rows in place of the fleet's; without ``extras`` a row keeps the extras of the
        row with its id, if there was one."""
        if extras is None:
            by_id = dict(zip((row.node_id for row in self.nodes), self.extras, strict=True))
            extras = [by_id.get(row.node_id, NodeExtras()) for row in rows]
        # Rows read back from the editor's text keep the exact sizes behind it.
        rows = [row.kept_exact(self.nodes[index]) if index < len(self.nodes) else row
                for index, row in enumerate(rows)]
        return replace(self, nodes=tuple(rows), extras=tuple(extras))._settled()

    def _rows(self, rows: list[NodeRow], extras: list[NodeExtras]) -> WorkbenchState:
        return replace(self, nodes=tuple(rows), extras=tuple(extras))._settled()

    def _row_index(self, index: Any) -> int:
        """``index`` as the position of one of the fleet's rows (0 for the first)."""
        return integer(index, _argument("index", f"row index (of {len(self.nodes):,} rows, "
                                        "from 0)"), maximum=len(self.nodes) - 1)

    def _taken(self) -> set[str]:
        return {row.node_id for row in self.nodes}

    def add_node(self) -> WorkbenchState:
        """A new row like the last one (80 GiB when the fleet is empty), with a fresh id:
        the same kind of GPU, without the last one's address."""
        if self.nodes:
            template, extra = self.nodes[-1], self.extras[-1].copied()
        else:
            template, extra = NodeRow("node", "80 GiB"), NodeExtras()
        base = (_numbered(template.node_id) or (template.node_id.strip() or "node", 0))[0]
        new_id = _free_ids(base, self._taken(), 1)[0]
        return self._rows([*self.nodes, replace(template, node_id=new_id)],
                          [*self.extras, extra])

    def duplicate_node(self, index: int) -> WorkbenchState:
        """A copy of row ``index`` right after it, with a fresh id (the same kind of GPU,
        without its address)."""
        index = self._row_index(index)
        row = self.nodes[index]
        base = (_numbered(row.node_id) or (row.node_id.strip() or "node", 0))[0]
        new_id = _free_ids(base, self._taken(), 1)[0]
        rows, extras = list(self.nodes), list(self.extras)
        rows.insert(index + 1, replace(row, node_id=new_id))
        extras.insert(index + 1, extras[index].copied())
        return self._rows(rows, extras)

    def remove_node(self, index: int) -> WorkbenchState:
        index = self._row_index(index)
        rows, extras = list(self.nodes), list(self.extras)
        del rows[index], extras[index]
        return self._rows(rows, extras)

    def add_gpus(self, gpu_name: str, memory_bytes: int, count: int, *,
                 kind: str | None = None) -> WorkbenchState:
        """``count`` nodes of one GPU model, ids numbered on from any already in use;
        ``kind`` is the catalog kind they are (their ``gpu``). The fleet holds at most
        :data:`~planner.limits.MAX_NODES` nodes."""
        text(gpu_name, _argument("gpu_name", "GPU name"))
        integer(memory_bytes, _argument("memory_bytes", "GPU memory_bytes"), minimum=1,
                maximum=MAX_NODE_BYTES)
        count = integer(count, _argument("count", f"number of GPUs to add (the fleet has "
                                         f"{len(self.nodes):,} of the {MAX_NODES:,} nodes a "
                                         "fleet holds)"),
                        minimum=1, maximum=MAX_NODES - len(self.nodes))
        ids = _free_ids(gpu_id_base(kind or gpu_name), self._taken(), count)
        extra = NodeExtras(ReliabilityOverride(gpu=kind) if kind is not None else None)
        return self._rows([*self.nodes, *(NodeRow.sized(i, memory_bytes) for i in ids)],
                          [*self.extras, *([extra] * count)])
