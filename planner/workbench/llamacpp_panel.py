"""The "llama.cpp" panel: which memory rule the workbench plans with, what llama.cpp
allocates on each stage, and the commands that run the plan on screen.

The memory model toggle re-plans the workbench (``design``: the design rule of docs/rules.md §3;
``llamacpp``: what llama.cpp allocates, read from the model's GGUF file). llama.cpp's rule
needs a GGUF file: **Use GGUF** plans the one typed (or chosen from those found beside the
fleet files and in ``models/`` folders) in place of a preset. **Show launch commands**
writes the ``rpc-server`` and ``llama-server`` commands of the current plan, as
``planner launch`` prints them. The panel follows every edit of the workbench: its toggle
shows the rule the plan uses and its memory table is the plan's on screen.
"""

from __future__ import annotations

from html import escape
from typing import Any

import ipywidgets as widgets
import pandas as pd

from planner.errors import CodedError
from planner.llamacpp.launch import launch_for_plan
from planner.reports.content import memory_section
from planner.reports.tables import PLAN_CHARGES_NOTE, plan_charges
from planner.units import format_bytes, layer_range
from planner.workbench.catalog import gguf_files
from planner.workbench.editor import button
from planner.workbench.view import STYLE, table_html

FLASH_ATTENTION_NOTE = (
    "A quantized V cache (q8_0, q4_0, ...) needs flash attention: llama.cpp refuses to "
    "start without it. The commands turn flash attention on; turn it off only with an "
    "f16, bf16 or f32 KV cache.")
_COMPONENTS = (("weights_bytes", "weights"), ("kv_bytes", "KV cache"),
               ("compute_bytes", "compute"), ("output_bytes", "output"),
               ("overhead_bytes", "overhead"), ("total_bytes", "total"))


def memory_html(rows: list[dict[str, Any]], stages: pd.DataFrame | None = None) -> str:
    """Each stage's (and the host's) llama.cpp memory, as an HTML table; with the plan's
    ``stages`` (:func:`planner.stage_usage`), what the plan charged each stage beside it."""
    charged = plan_charges(stages.to_dict("records")) if stages is not None else None
    labels = ("stage", "node", "layers", *(name for _, name in _COMPONENTS),
              *(("plan charges",) if charged is not None else ()))
    body: list[tuple[str, list[str]]] = []
    for row in rows:
        layers = ("—" if row["layer_start"] == row["layer_end"]
                  else layer_range(row["layer_start"], row["layer_end"]))
        cells = [row["stage_id"], row["node_id"], layers,
                 *(format_bytes(row[key]) for key, _ in _COMPONENTS)]
        if charged is not None:
            planned = charged.get(row["stage_id"])
            cells.append("—" if planned is None else format_bytes(planned))
        body.append(("", [f"<td>{escape(str(cell))}</td>" for cell in cells]))
    note = (f"<p class='wb-hint wb-plan-charges-note'>{escape(PLAN_CHARGES_NOTE)}</p>"
            if charged is not None else "")
    return table_html([(label, False) for label in labels], body,
                      "wb-llamacpp-memory") + note


class LlamaCppPanel(widgets.VBox):
    """The panel over a :class:`~planner.workbench.app.Workbench`."""

    def __init__(self, workbench: Any) -> None:
        self.workbench = workbench
        self.memory_model = widgets.ToggleButtons(
            options=[("design rule", "design"), ("llama.cpp", "llamacpp")],
            value=workbench.state.memory_model, description="memory model",
            tooltips=["weights + ceil(kv / L) x context per layer (the design rule)",
                      "what llama.cpp allocates per device, from the GGUF file"],
            style={"description_width": "initial"})
        self.memory_model.add_class("wb-memory-model")
        self.memory_model.observe(lambda _change: self._memory_model_changed(),
                                  names="value")
        self.note = widgets.HTML(f"<p class='wb-hint'>{escape(FLASH_ATTENTION_NOTE)}</p>")
        self.note.add_class("wb-flash-attention-note")
        self.flash_attn = widgets.Checkbox(value=True, description="flash attention",
                                           indent=False)
        self.flash_attn.add_class("wb-flash-attn")
        self.model_path = widgets.Text(
            value="", placeholder="the GGUF file as the serving host sees it (optional)",
            description="model path", style={"description_width": "initial"},
            layout=widgets.Layout(width="520px"))
        self.model_path.add_class("wb-launch-model")
        self.launch_button = button("Show launch commands", "wb-launch",
                                    tooltip="the llama.cpp commands that run this plan")
        self.launch_button.on_click(lambda _b: self.show_commands())
        self.commands = widgets.Textarea(
            value="", layout=widgets.Layout(width="100%", height="180px"))
        self.commands.add_class("wb-launch-commands")
        self.message = widgets.HTML()
        self.message.add_class("wb-llamacpp-message")
        self.memory = widgets.HTML()
        self.memory.add_class("wb-llamacpp-memory-box")
        found = gguf_files(workbench.gguf_folders())
        self.gguf_choice = widgets.Dropdown(
            options=[("GGUF files found…" if found else "no GGUF files found", "")]
            + [(str(path), str(path)) for path in found],
            layout=widgets.Layout(width="360px"))
        self.gguf_choice.add_class("wb-gguf-choice")
        self.gguf_choice.observe(lambda change: self._gguf_chosen(change["new"]),
                                 names="value")
        self.gguf_path = widgets.Text(
            value="", placeholder="/models/model.gguf, or a path from the fleet file's folder",
            description="GGUF file", style={"description_width": "initial"},
            continuous_update=False, layout=widgets.Layout(width="440px"))
        self.gguf_path.add_class("wb-gguf-path")
        self.gguf_button = button("Use GGUF", "wb-use-gguf",
                                  tooltip="plan this GGUF file's model (llama.cpp's rule "
                                          "reads its layout)")
        self.gguf_button.on_click(lambda _b: self.use_gguf(self.gguf_path.value))
        self.gguf_box = widgets.VBox([
            widgets.HTML("<p class='wb-hint'>llama.cpp's rule reads the model's layout "
                         "from its GGUF file: choose one to plan it.</p>"),
            widgets.HBox([self.gguf_path, self.gguf_button], layout=widgets.Layout(
                flex_flow="row wrap")),
            self.gguf_choice])
        self.gguf_box.add_class("wb-gguf-box")
        super().__init__([
            widgets.HTML(STYLE), self.memory_model, self.gguf_box, self.memory, self.note,
            widgets.HBox([self.flash_attn, self.model_path]), self.launch_button,
            self.commands, self.message,
        ])
        self.add_class("wb-llamacpp-panel")
        workbench.on_change(self.follow)
        self.follow()

    def follow(self) -> None:
        """Show the workbench as it is now: the rule the plan uses, the GGUF chooser while
        the model has no GGUF file, the plan's memory per stage."""
        state = self.workbench.state
        if self.memory_model.value != state.memory_model:
            self._following = True
            try:
                self.memory_model.value = state.memory_model
            finally:
                self._following = False
        self.gguf_box.layout.display = None if state.model.gguf is None else "none"
        self.show_memory()

    _following = False

    def _memory_model_changed(self) -> None:
        if self._following:
            return
        workbench = self.workbench
        if workbench.state.memory_model != self.memory_model.value:
            workbench.set_state(workbench.state.with_memory_model(self.memory_model.value))
        self.commands.value = ""

    def _gguf_chosen(self, path: str) -> None:
        if path:
            self.gguf_path.value = path
            self.use_gguf(path)

    def use_gguf(self, path: str) -> None:
        """Plan the GGUF file at ``path`` (relative paths start at the fleet file's
        folder) in place of the model on screen; a file that cannot be read is said."""
        try:
            self.workbench.use_gguf(path)
        except (CodedError, OSError) as error:
            self.message.value = f"<p class='wb-error'>{escape(str(error))}</p>"
        else:
            self.message.value = ""

    def show_memory(self) -> None:
        """The plan's memory per stage under llama.cpp's rule, or why there is none."""
        evaluation = self.workbench.evaluation
        if evaluation.plan is None or evaluation.request is None:
            problem = evaluation.problem
            self.memory.value = ("<p class='wb-hint'>no plan"
                                 f"{': ' + escape(str(problem.message)) if problem else ''}"
                                 "</p>")
            return
        if evaluation.request.memory_model != "llamacpp":
            self.memory.value = ("<p class='wb-hint'>planned with the design rule; choose "
                                 "llama.cpp to plan with what llama.cpp allocates</p>")
            return
        rows = memory_section(evaluation.request, evaluation.plan)["stages"]
        self.memory.value = ("<p>what llama.cpp allocates on each stage's node (and the "
                             "host):</p>" + memory_html(rows, evaluation.stages))

    def show_commands(self) -> None:
        """Write the launch commands of the plan on screen (or say why there are none)."""
        evaluation = self.workbench.evaluation
        self.commands.value = ""
        self.show_memory()
        if evaluation.plan is None:
            self.message.value = "<p class='wb-error'>no plan to launch</p>"
            return
        try:
            document = self.workbench.state.to_document()
            launch = launch_for_plan(document, evaluation.plan,
                                     model_path=self.model_path.value.strip() or None,
                                     flash_attn=self.flash_attn.value)
        except CodedError as error:
            self.message.value = f"<p class='wb-error'>{escape(str(error))}</p>"
            return
        self.commands.value = launch.shell()
        self.message.value = ("<p class='wb-hint'>run each rpc-server on its node, then "
                              "llama-server on the host that serves requests</p>")
