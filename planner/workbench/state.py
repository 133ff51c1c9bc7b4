"""The workbench's editable state, without widgets.

:class:`WorkbenchState` holds what the editor shows, as a person typed it (sizes as text
such as ``"80 GiB"``, optional numbers as blank or text), turns it into a planning request
or a fleet document, and makes every edit the editor offers as a pure function returning
a new state. Values that cannot be read raise
:class:`~planner.workbench.problems.WorkbenchInputError`, naming the field and node. What
the editors hold is in :mod:`planner.workbench.editor_fields`, how typed text is read in
:mod:`planner.workbench.typed_values`.
"""

from __future__ import annotations

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
from planner.units import format_bytes
from planner.workbench.editor_fields import (
    ModelFields,
    NodeExtras,
    NodeRow,
    PlanOptions,
    file_size_text,
)
from planner.workbench.node_ids import free_ids, gpu_id_base, numbered
from planner.workbench.problems import WorkbenchInputError
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


def _model_fields(choice: ModelChoice, base_dir: Path | None) -> ModelFields:
    """The model as the editor shows it; a preset or GGUF file that cannot be read shows
    its name with no numbers (planning it says why)."""
    source: dict[str, Any] = {"name": choice.name, "preset": choice.preset,
                              "gguf": choice.gguf, "kv_cache_type": choice.kv_cache_type,
                              "file_bytes": choice.file_bytes,
                              "file_size": file_size_text(choice.file_bytes)}
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


def _text(value: int | float | str | None) -> str:
    return "" if value is None else str(value)



def _argument(name: str, label: str) -> Fail:
    """The refusal of a state method's argument ``name`` (shown as ``label``)."""
    return lambda problem, value: WorkbenchInputError(name, f"{problem} (got {shown(value)})",
                                                      label=label)

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
            default_latency_ms=_text(document.default_latency_ms),
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

    def model_choice(self) -> ModelChoice:
        """The model the editors hold, as the fleet document gives it (the speed numbers
        the page has no box for kept as the file gave them). Raises
        :class:`WorkbenchInputError` naming a number that cannot be read."""
        model = self.model
        if model.preset is not None:
            try:
                return ModelChoice(preset=model.preset, kv_cache_type=model.kv_cache_type,
                                   name=model.name, file_bytes=model.stored_file_bytes())
            except FleetFileError as error:
                raise WorkbenchInputError("model.file_bytes", error.message,
                                          label="file size") from None
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
            document = replace(self.document, model=self.model_choice(), nodes=budgets,
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
        custom = replace(model, preset=None, gguf=None, kv_cache_type=None, file_size="",
                         file_bytes=None,
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
        base = (numbered(template.node_id) or (template.node_id.strip() or "node", 0))[0]
        new_id = free_ids(base, self._taken(), 1)[0]
        return self._rows([*self.nodes, replace(template, node_id=new_id)],
                          [*self.extras, extra])

    def duplicate_node(self, index: int) -> WorkbenchState:
        """A copy of row ``index`` right after it, with a fresh id (the same kind of GPU,
        without its address)."""
        index = self._row_index(index)
        row = self.nodes[index]
        base = (numbered(row.node_id) or (row.node_id.strip() or "node", 0))[0]
        new_id = free_ids(base, self._taken(), 1)[0]
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
        ids = free_ids(gpu_id_base(kind or gpu_name), self._taken(), count)
        extra = NodeExtras(ReliabilityOverride(gpu=kind) if kind is not None else None)
        return self._rows([*self.nodes, *(NodeRow.sized(i, memory_bytes) for i in ids)],
                          [*self.extras, *([extra] * count)])
