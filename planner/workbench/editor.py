"""Input widgets: the model, the fleet rows and the planning options.

Plain ipywidgets (no front-end extension needed), so they work in JupyterLab and Voila.
Sizes are ``Text`` inputs read with :func:`planner.units.parse_bytes`; counts are bounded
integer inputs. Text inputs report a value when the person presses Enter or leaves the
field, not on every keystroke, so a half-typed size never replans.

The editors hold no planning logic. Each calls the callback it was given when a person
edits it; the :class:`~planner.workbench.app.Workbench` reads the values back, and sets
them without triggering callbacks while it is itself updating the editors.

Every input carries a stable CSS class (``wb-...``) so a page can be driven from a browser.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from typing import Any

import ipywidgets as widgets

from planner.limits import MAX_CONTEXT, MAX_LAYERS, MAX_MINIMUM_NODES, MAX_NODES
from planner.models import GpuModel, ModelError
from planner.models.presets import preset_id
from planner.units import format_bytes
from planner.workbench.editor_fields import ModelFields, NodeRow, PlanOptions
from planner.workbench.problems import WorkbenchInputError
from planner.workbench.typed_values import parse_context_text, parse_whole

CUSTOM_MODEL = ""
"""Preset dropdown value for numbers typed by hand."""



def _layout(width: str) -> widgets.Layout:
    return widgets.Layout(width=width)


def _shrinkable(width: str) -> widgets.Layout:
    """A width an input gives up (to 60 px) when its row is narrower than it wants."""
    return widgets.Layout(width=width, min_width="60px", flex="0 1 auto")


def fixed_width(width: str) -> widgets.Layout:
    """A width that a narrow row does not squeeze (labels and buttons keep their text;
    the inputs beside them give way)."""
    return widgets.Layout(width=width, min_width=width, flex="0 0 auto")


def _label(html: str, width: str) -> widgets.HTML:
    return widgets.HTML(f"<span style='white-space:nowrap'>{html}</span>",
                        layout=fixed_width(width))


def text_input(value: str, css_class: str, *, width: str, placeholder: str = "",
               description: str = "", tooltip: str = "") -> widgets.Text:
    box = widgets.Text(value=value, placeholder=placeholder, description=description,
                       continuous_update=False, layout=_shrinkable(width), tooltip=tooltip,
                       style={"description_width": "initial"})
    box.add_class(css_class)
    return box


def _preset_choice(name: str | None) -> str | None:
    """The preset list's entry for a model's preset, named by id or display name."""
    if name is None:
        return None
    try:
        return preset_id(name)
    except ModelError:
        return None


def same_preset(name: str | None, choice: str) -> bool:
    """Whether the model's preset (by id or display name) is the list's ``choice``."""
    return _preset_choice(name) == choice


def context_input(css_class: str, *, width: str) -> widgets.Text:
    """A panel's minimum context: blank for the context floor, which the box then shows
    greyed as the number the panel used (:func:`show_context_used`)."""
    return text_input("", css_class, width=width, description="min context",
                      placeholder="the floor",
                      tooltip="blank: the context floor, min(native context, 65,536); "
                              "131072, 131,072 or 128k")


def read_context_input(box: widgets.Text, field_name: str) -> int | None:
    """The minimum context typed (``None``: the floor). Raises
    :class:`~planner.workbench.problems.WorkbenchInputError` naming the box."""
    return parse_context_text(box.value, field_name, label="min context")


def show_context_used(box: widgets.Text, context: int) -> None:
    """Grey the context the panel used into a blank box, so that the box and the figures
    under it say the same."""
    box.placeholder = f"{context:,}"


def whole_input(value: int | None, css_class: str, *, width: str, description: str = "",
                tooltip: str = "", placeholder: str = "") -> widgets.Text:
    """A box for a whole number, typed as text (``"262144"``, ``"262,144"``) and read with
    :func:`read_whole`: a number box would clamp what is out of range without a word, and
    lose the digits of one past 2**53."""
    return text_input("" if value is None else str(value), css_class, width=width,
                      description=description, tooltip=tooltip, placeholder=placeholder)


def read_whole(box: widgets.Text, field_name: str, *, label: str, minimum: int = 0,
               maximum: int, default: int | None = None) -> int:
    """The whole number in ``box`` (``default`` when blank and there is one). Raises
    :class:`~planner.workbench.problems.WorkbenchInputError` naming the box and what was
    typed, out of range as much as unreadable."""
    number = parse_whole(box.value, field_name, label=label, minimum=minimum,
                         maximum=maximum)
    if number is None:
        if default is None:
            raise WorkbenchInputError(field_name, "is required", label=label)
        return default
    return number


def button(label: str, css_class: str, *, tooltip: str = "", width: str = "auto",
           style: str = "") -> widgets.Button:
    widget = widgets.Button(description=label, tooltip=tooltip or label,
                            layout=fixed_width(width) if width != "auto" else _layout(width),
                            button_style=style)
    widget.add_class(css_class)
    return widget


def _observe_value(widget: widgets.Widget, callback: Callable[[], None]) -> None:
    widget.observe(lambda _change: callback(), names="value")


# -- the fleet --------------------------------------------------------------------------

_ROW_COLUMNS = (
    ("node id", "150px"),
    ("VRAM", "110px"),
    ("max VRAM", "110px"),
    ("headroom", "100px"),
    ("latency", "90px"),
)


class NodeRowEditor(widgets.HBox):
    """One node: id, VRAM, max VRAM, headroom, latency, and duplicate/remove buttons."""

    def __init__(self, row: NodeRow, on_edit: Callable[[], None],
                 on_duplicate: Callable[[NodeRowEditor], None],
                 on_remove: Callable[[NodeRowEditor], None]) -> None:
        widths = [width for _, width in _ROW_COLUMNS]
        self.node_id = text_input(row.node_id, "wb-node-id", width=widths[0],
                                  placeholder="node id")
        self.vram = text_input(row.vram, "wb-node-vram", width=widths[1],
                               placeholder="80 GiB", tooltip="detected VRAM")
        self.max_vram = text_input(row.max_vram, "wb-node-max-vram", width=widths[2],
                                   placeholder="no cap", tooltip="--max-vram cap")
        self.headroom = text_input(row.headroom, "wb-node-headroom", width=widths[3],
                                   placeholder="0", tooltip="runtime headroom")
        self.latency = text_input(row.latency_ms, "wb-node-latency", width=widths[4],
                                  placeholder="unknown", tooltip="stage-transfer latency, ms")
        self.duplicate_button = button("copy", "wb-node-duplicate",
                                       tooltip="duplicate this node", width="52px")
        self.remove_button = button("✕", "wb-node-remove", tooltip="remove this node",
                                    width="36px")
        for widget in self.inputs:
            _observe_value(widget, on_edit)
        self.duplicate_button.on_click(lambda _b: on_duplicate(self))
        self.remove_button.on_click(lambda _b: on_remove(self))
        super().__init__([*self.inputs, self.duplicate_button, self.remove_button])
        self.add_class("wb-node-row")

    @property
    def inputs(self) -> tuple[widgets.Text, ...]:
        return (self.node_id, self.vram, self.max_vram, self.headroom, self.latency)

    def row(self) -> NodeRow:
        return NodeRow(self.node_id.value, self.vram.value, self.max_vram.value,
                       self.headroom.value, self.latency.value)

    def set_row(self, row: NodeRow) -> None:
        self.node_id.value = row.node_id
        self.vram.value = row.vram
        self.max_vram.value = row.max_vram
        self.headroom.value = row.headroom
        self.latency.value = row.latency_ms


class FleetEditor(widgets.VBox):
    """The fleet: a row per node, add/duplicate/remove, GPUs from a catalog, fleet files.

    ``on_edit()`` is called when a value in a row changes, ``on_duplicate(index)`` and
    ``on_remove(index)`` for a row's buttons. The add, catalog and file buttons are
    attributes for the owner to wire.
    """

    def __init__(self, rows: Sequence[NodeRow], catalog: Sequence[GpuModel],
                 fleet_files: Sequence[tuple[str, str]], *, on_edit: Callable[[], None],
                 on_duplicate: Callable[[int], None], on_remove: Callable[[int], None]) -> None:
        self._on_edit = on_edit
        self._on_duplicate = on_duplicate
        self._on_remove = on_remove
        self.row_editors: list[NodeRowEditor] = []
        header = widgets.HBox([
            widgets.HTML(f"<b>{escape(label)}</b>", layout=_layout(width))
            for label, width in _ROW_COLUMNS
        ])
        self.rows_box = widgets.VBox(layout=widgets.Layout(max_height="340px",
                                                           overflow="auto"))
        self.rows_box.add_class("wb-node-rows")
        self.count_label = widgets.HTML()
        self.count_label.add_class("wb-node-count")
        self.add_button = button("Add node", "wb-add-node", tooltip="add a node like the last")
        self.gpu_choice = widgets.Dropdown(
            options=[(f"{gpu.name} ({format_bytes(gpu.memory_bytes)})", index)
                     for index, gpu in enumerate(catalog)],
            layout=_layout("300px"))
        self.gpu_choice.add_class("wb-gpu-choice")
        self.gpu_count = whole_input(1, "wb-gpu-count", width="70px",
                                     tooltip=f"how many to add, 1 to {MAX_NODES:,}")
        self.add_gpus_button = button("Add GPUs", "wb-add-gpus",
                                      tooltip="add this many nodes of the chosen GPU")
        self.catalog = tuple(catalog)
        self.file_choice = widgets.Dropdown(options=list(fleet_files),
                                           layout=_shrinkable("280px"))
        self.file_choice.add_class("wb-fleet-file")
        self.load_button = button("Load", "wb-load-fleet", tooltip="load the chosen fleet file",
                                  width="64px")
        # The tooltip names what a click loads, as the kernel has the choice: a page can
        # wait for it, since a choice is sent after the page's previous change is
        # answered but a click at once.
        _observe_value(self.file_choice, self._name_the_file_to_load)
        self._name_the_file_to_load()
        self.save_name = text_input("", "wb-save-name", width="180px",
                                    placeholder="my-fleet.toml")
        self.save_button = button("Save", "wb-save-fleet",
                                  tooltip="save the fleet in the workspace's fleets folder",
                                  width="64px")
        self.fleet_name = text_input("", "wb-fleet-name", width="420px",
                                     tooltip="the fleet's name, saved with it; blank: "
                                     "named by its model and nodes")
        super().__init__([
            widgets.HBox([_label("<b>Fleet file</b>", "80px"),
                          self.file_choice, self.load_button,
                          _label("&nbsp;save as", "64px"),
                          self.save_name, self.save_button]),
            widgets.HBox([_label("<b>Fleet name</b>", "80px"), self.fleet_name]),
            header,
            self.rows_box,
            widgets.HBox([self.add_button, self.count_label]),
            widgets.HBox([_label("<b>From catalog</b>", "100px"),
                          self.gpu_choice, widgets.HTML("&nbsp;×", layout=_layout("20px")),
                          self.gpu_count, self.add_gpus_button]),
        ])
        self.add_class("wb-fleet-editor")
        self.set_rows(rows)

    def _duplicate(self, editor: NodeRowEditor) -> None:
        self._on_duplicate(self.row_editors.index(editor))

    def _remove(self, editor: NodeRowEditor) -> None:
        self._on_remove(self.row_editors.index(editor))

    def rows(self) -> tuple[NodeRow, ...]:
        return tuple(editor.row() for editor in self.row_editors)

    def set_rows(self, rows: Sequence[NodeRow]) -> None:
        """Show ``rows``, reusing the row widgets already on screen."""
        while len(self.row_editors) < len(rows):
            self.row_editors.append(NodeRowEditor(rows[len(self.row_editors)], self._on_edit,
                                                  self._duplicate, self._remove))
        del self.row_editors[len(rows):]
        for editor, row in zip(self.row_editors, rows, strict=True):
            if editor.row() != row:
                editor.set_row(row)
        if tuple(self.rows_box.children) != tuple(self.row_editors):
            self.rows_box.children = tuple(self.row_editors)
        self.count_label.value = (f"&nbsp;{len(rows)} node{'s' if len(rows) != 1 else ''}")

    def _name_the_file_to_load(self) -> None:
        label = self.file_choice.label
        self.load_button.tooltip = f"load {label}" if label else "load the chosen fleet file"

    def set_fleet_files(self, files: Sequence[tuple[str, str]],
                        selected: str | None = None) -> None:
        """List ``files``, each a ``(label, path)``; choose the one at ``selected``."""
        self.file_choice.options = list(files)
        if selected is not None and selected in {path for _label_text, path in files}:
            self.file_choice.value = selected

    def chosen_gpu(self) -> GpuModel | None:
        index = self.gpu_choice.value
        return self.catalog[index] if index is not None else None


# -- the model --------------------------------------------------------------------------


class ModelEditor(widgets.VBox):
    """A preset (or GGUF model) with its KV cache type, or the model's numbers by hand.

    ``on_preset()`` is called when the preset changes, ``on_kv_cache_type()`` when the cache
    type does, ``on_file_size()`` when the size of a preset's file is typed,
    ``on_numbers()`` when a number is typed.
    """

    def __init__(self, presets: Sequence[str], *, on_preset: Callable[[], None],
                 on_kv_cache_type: Callable[[], None], on_file_size: Callable[[], None],
                 on_numbers: Callable[[], None]) -> None:
        self._presets = tuple(presets)
        self.preset = widgets.Dropdown(options=self._preset_options(None),
                                       value=CUSTOM_MODEL, description="Model",
                                       layout=_layout("340px"))
        self.preset.add_class("wb-model-preset")
        self.kv_cache_type = widgets.Dropdown(options=[], description="KV cache",
                                              disabled=True, layout=_layout("200px"))
        self.kv_cache_type.add_class("wb-kv-cache-type")
        self.file_size = text_input(
            "", "wb-file-size", width="230px", description="file size",
            placeholder="the preset's",
            tooltip="the size of the GGUF file the preset is run from (llama-bench's "
                    "size column), where it stores the weights at other precisions than "
                    "the preset's: every part keeps its share; blank: the preset's own")
        self.file_size.disabled = True
        self.layer_count = whole_input(1, "wb-layer-count", width="150px",
                                       description="layers")
        self.native_context_length = whole_input(1, "wb-native-context", width="230px",
                                                 description="native context")
        self.model_weight_bytes = text_input("", "wb-model-weights", width="230px",
                                             description="weights", placeholder="315.68 GB")
        self.kv_bytes_per_token = text_input("", "wb-kv-bytes", width="230px",
                                             description="KV bytes / token",
                                             placeholder="128 KiB")
        self.details = widgets.HTML()
        self.details.add_class("wb-model-details")
        _observe_value(self.preset, on_preset)
        _observe_value(self.kv_cache_type, on_kv_cache_type)
        _observe_value(self.file_size, on_file_size)
        for widget in self.number_inputs:
            _observe_value(widget, on_numbers)
        super().__init__([
            widgets.HBox([self.preset, self.kv_cache_type, self.file_size]),
            widgets.HBox([self.layer_count, self.native_context_length]),
            widgets.HBox([self.model_weight_bytes, self.kv_bytes_per_token]),
            self.details,
        ])
        self.add_class("wb-model-editor")

    @property
    def number_inputs(self) -> tuple[widgets.Widget, ...]:
        return (self.layer_count, self.native_context_length, self.model_weight_bytes,
                self.kv_bytes_per_token)

    def _preset_options(self, gguf: str | None) -> list[tuple[str, str]]:
        options = [("numbers typed by hand", CUSTOM_MODEL)]
        if gguf is not None:
            options.append((f"GGUF: {gguf}", f"gguf:{gguf}"))
        return options + [(name, name) for name in self._presets]

    def numbers(self) -> dict[str, Any]:
        return {
            "layer_count": read_whole(self.layer_count, "layer_count", label="layers",
                                      maximum=MAX_LAYERS),
            "native_context_length": read_whole(
                self.native_context_length, "native_context_length", label="native context",
                maximum=MAX_CONTEXT),
            "model_weight_bytes": self.model_weight_bytes.value,
            "kv_bytes_per_token": self.kv_bytes_per_token.value,
        }

    def set_model(self, model: ModelFields, kv_cache_types: Sequence[str],
                  description: str) -> None:
        self.preset.options = self._preset_options(model.gguf)
        chosen = _preset_choice(model.preset)
        if chosen is not None and chosen in self._presets:
            self.preset.value = chosen
        elif model.gguf is not None:
            self.preset.value = f"gguf:{model.gguf}"
        else:
            self.preset.value = CUSTOM_MODEL
        self.kv_cache_type.options = list(kv_cache_types)
        if model.kv_cache_type in kv_cache_types:
            self.kv_cache_type.value = model.kv_cache_type
        self.kv_cache_type.disabled = len(kv_cache_types) < 2
        # A preset's file may store it at other precisions; a GGUF file's and typed
        # numbers' bytes are their own.
        self.file_size.value = model.file_size if model.preset is not None else ""
        self.file_size.disabled = model.preset is None
        self.layer_count.value = str(model.layer_count)
        self.native_context_length.value = str(model.native_context_length)
        self.model_weight_bytes.value = model.model_weight_bytes
        self.kv_bytes_per_token.value = model.kv_bytes_per_token
        weights = ("exact per-layer weights" if model.layer_weight_bytes is not None
                   else "weights split evenly over the layers")
        body = (f"<details><summary>{escape(model.label)}: {weights}</summary>"
                # Words whole: the front-ends' own style breaks a preformatted line
                # anywhere ("config.js/on").
                f"<pre style='font-size:11px;white-space:pre-wrap;word-break:normal;"
                f"overflow-wrap:break-word'>{escape(description)}"
                "</pre></details>") if description else (
                f"<span style='color:#555'>{escape(model.label)}: {weights}</span>")
        self.details.value = body


# -- the planning options ---------------------------------------------------------------


class OptionsEditor(widgets.HBox):
    """Minimum nodes, context override, lanes override, TPOT target and the latency of
    nodes without their own."""

    def __init__(self, options: PlanOptions, *, on_edit: Callable[[], None]) -> None:
        self.minimum_nodes = whole_input(options.minimum_nodes, "wb-minimum-nodes",
                                         width="150px", description="minimum nodes")
        self.context_length_override = text_input(
            options.context_length_override, "wb-context-override", width="200px",
            description="context", placeholder="auto")
        self.parallel_lanes_override = text_input(
            options.parallel_lanes_override, "wb-lanes-override", width="150px",
            description="lanes", placeholder="auto")
        self.target_decode_tpot_ms = text_input(
            options.target_decode_tpot_ms, "wb-tpot-target", width="200px",
            description="TPOT target (ms)", placeholder="none")
        self.default_latency_ms = text_input(
            options.default_latency_ms, "wb-default-latency", width="230px",
            description="default latency", placeholder="none: 0 ms",
            tooltip="the latency of nodes without their own: milliseconds, or 'measured' "
                    "for the slowest a node has; blank: they count as 0 ms")
        for widget in self.children_inputs:
            _observe_value(widget, on_edit)
        super().__init__(list(self.children_inputs),
                         layout=widgets.Layout(flex_flow="row wrap"))
        self.add_class("wb-options-editor")

    @property
    def children_inputs(self) -> tuple[widgets.Widget, ...]:
        return (self.minimum_nodes, self.context_length_override,
                self.parallel_lanes_override, self.target_decode_tpot_ms,
                self.default_latency_ms)

    def options(self) -> PlanOptions:
        return PlanOptions(
            minimum_nodes=read_whole(self.minimum_nodes, "minimum_nodes",
                                     label="minimum nodes", maximum=MAX_MINIMUM_NODES),
            context_length_override=self.context_length_override.value,
            parallel_lanes_override=self.parallel_lanes_override.value,
            target_decode_tpot_ms=self.target_decode_tpot_ms.value,
            default_latency_ms=self.default_latency_ms.value,
        )

    def set_options(self, options: PlanOptions) -> None:
        self.minimum_nodes.value = str(options.minimum_nodes)
        self.context_length_override.value = options.context_length_override
        self.parallel_lanes_override.value = options.parallel_lanes_override
        self.target_decode_tpot_ms.value = options.target_decode_tpot_ms
        self.default_latency_ms.value = options.default_latency_ms
