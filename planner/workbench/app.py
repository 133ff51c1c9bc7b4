"""The workbench: edit a model and a fleet, and watch the plan change.

:class:`Workbench` is an ipywidgets ``VBox``: display it in JupyterLab or serve its
notebook with Voila. Every edit makes one new :class:`~planner.workbench.state.WorkbenchState`,
evaluates it once and redraws. Problems (bad sizes, duplicate ids, no valid topology, a
fleet file that cannot be read) are shown as messages, never as tracebacks.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from html import escape
from pathlib import Path
from typing import Any, ParamSpec

import ipywidgets as widgets

from planner.errors import PlanError
from planner.fleet import FleetFileError, load_fleet, save_fleet
from planner.fleet.files import comments_lost_by_save
from planner.limits import MAX_NODES
from planner.models import GpuModel, ModelError
from planner.performance import PerformanceError, read_calibration, set_calibration
from planner.workbench.availability_panel import AvailabilityPanel
from planner.workbench.catalog import (
    ModelSource,
    gguf_source,
    gpu_catalog,
    model_source,
    preset_names,
    preset_source,
)
from planner.workbench.editor import (
    CUSTOM_MODEL,
    FleetEditor,
    ModelEditor,
    OptionsEditor,
    button,
    read_whole,
    same_preset,
    text_input,
)
from planner.workbench.evaluation import Evaluation, evaluate
from planner.workbench.llamacpp_panel import LlamaCppPanel
from planner.workbench.problems import Problem, WorkbenchInputError
from planner.workbench.sections import LazySections
from planner.workbench.sizing_panel import SizingPanel
from planner.workbench.state import DEFAULT_FLEET_DIR, DEFAULT_FLEET_FILE, WorkbenchState
from planner.workbench.view import STYLE, PlanView
from planner.workspace import inside_package, reports_dir, saved_fleets_dir

FLEET_SUFFIXES = (".toml", ".json")

# Errors a person can cause from the workbench; each is shown as a message.
_USER_ERRORS = (WorkbenchInputError, PlanError, FleetFileError, ModelError, OSError)

P = ParamSpec("P")

PanelFactory = Callable[["Workbench"], widgets.Widget]

# The panels under the plan, in order: a title and what makes the panel from the
# workbench. A panel is made the first time it is opened, so the page appears as fast
# without them.
PANELS: tuple[tuple[str, PanelFactory], ...] = (
    ("Availability", AvailabilityPanel),
    ("Size a fleet", lambda workbench: SizingPanel(workbench)),
    ("llama.cpp: memory and launch commands", LlamaCppPanel),
)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "fleet"


@dataclass(frozen=True)
class _PendingOverwrite:
    """A save or export refused because its file exists: what the Overwrite button
    writes, as long as the fleet on screen is still ``state``."""

    path: Path
    state: WorkbenchState
    what: str  # "fleet" or "report"


CALIBRATION_VARIABLE = "PLANNER_CALIBRATION"
"""The environment variable naming the speed calibration the workbench uses."""


class Workbench(widgets.VBox):
    """Model, fleet and options editors over a live plan, figures and tables.

    ``fleet_dir`` is where fleets are saved and listed (the workspace's ``fleets/``,
    :mod:`planner.workspace`), ``example_dir`` where the shipped example fleets are
    listed from (read, never written); ``report_dir`` where "Export report" writes a
    name without a folder (the workspace's ``reports/``).

    A save or an export never replaces a file without asking: a file that exists (other
    than the one the fleet on screen was loaded from or last saved to, unchanged since)
    is named in a message, with an Overwrite button that replaces it, keeping its
    comments where the layout allows (the message says which it would drop). Nothing is
    ever written inside the installed package.
    """

    def __init__(self, state: WorkbenchState | None = None, *,
                 fleet_dir: str | Path | None = None,
                 report_dir: str | Path | None = None,
                 example_dir: str | Path | None = DEFAULT_FLEET_DIR,
                 calibration: str | Path | None = None) -> None:
        self._quiet = 0
        self._watchers: list[Callable[[], None]] = []
        self.evaluations = 0
        """How many times the workbench has planned (one per edit)."""
        self._state = state if state is not None else WorkbenchState.design_default()
        self._evaluation: Evaluation | None = None
        self._pending: _PendingOverwrite | None = None
        self._file_stamp: tuple[Path, tuple[int, int, int]] | None = None
        """The fleet file loaded or last saved, and its stamp then (a save over it,
        unchanged since, asks nothing)."""
        self.fleet_dir = Path(fleet_dir) if fleet_dir is not None else saved_fleets_dir()
        self.example_dir = Path(example_dir) if example_dir is not None else None
        self.report_dir = Path(report_dir) if report_dir is not None else reports_dir()
        startup: list[str] = []
        # The speed estimate's calibration: the user's own (planner calibrate's file, here
        # or in $PLANNER_CALIBRATION), for every estimate this kernel makes.
        calibration = calibration or os.environ.get(CALIBRATION_VARIABLE) or None
        if calibration:
            try:
                set_calibration(read_calibration(calibration))
            except PerformanceError as error:
                startup.append(f"The speed calibration could not be read: {error}; the "
                               "shipped one is used.")
        presets = self._optional(preset_names, startup, "model presets")
        catalog: tuple[GpuModel, ...] = self._optional(gpu_catalog, startup, "GPU catalog")

        self.title = widgets.HTML()
        self.title.add_class("wb-title")
        self.model_editor = ModelEditor(
            presets, on_preset=self._guard(self._preset_changed),
            on_kv_cache_type=self._guard(self._kv_cache_type_changed),
            on_file_size=self._guard(self._file_size_changed),
            on_numbers=self._guard(self._numbers_changed))
        self.fleet_editor = FleetEditor(
            self._state.nodes, catalog, self._fleet_files(),
            on_edit=self._guard(self._edited), on_duplicate=self._guard(self.duplicate_node),
            on_remove=self._guard(self.remove_node))
        self.fleet_editor.add_button.on_click(self._guard(lambda _b: self.add_node()))
        self.fleet_editor.add_gpus_button.on_click(self._guard(lambda _b: self._add_gpus()))
        self.fleet_editor.load_button.on_click(self._guard(lambda _b: self._load_chosen()))
        self.fleet_editor.save_button.on_click(self._guard(
            lambda _b: self.save_fleet(self.fleet_editor.save_name.value)))
        self.fleet_editor.fleet_name.observe(
            lambda _change: self._guard(self._fleet_name_typed)(), names="value")
        self.fleet_editor.save_name.observe(lambda _change: self._drop_pending(),
                                            names="value")
        self.options_editor = OptionsEditor(self._state.options,
                                            on_edit=self._guard(self._edited))
        self.report_path = text_input("", "wb-report-path", width="320px",
                                      placeholder="name.html, .md or .json",
                                      description="report file")
        self.report_where = widgets.HTML(
            # A sentence, not a label: a deep folder wraps it.
            f"<div class='wb-hint'>a name without a folder is written in "
            f"{escape(str(self.report_dir.resolve()))}</div>")
        self.report_where.add_class("wb-report-where")
        self.export_button = button("Export report", "wb-export-report",
                                    tooltip="write a report of this plan")
        self.export_button.on_click(self._guard(
            lambda _b: self.export_report(self.report_path.value or None)))
        self.report_path.observe(lambda _change: self._drop_pending(), names="value")
        self.message = widgets.HTML()
        self.message.add_class("wb-message")
        self.overwrite_button = button(
            "Overwrite", "wb-overwrite", style="warning",
            tooltip="replace the file named above with what is on screen")
        self.overwrite_button.layout.display = "none"
        self.overwrite_button.on_click(self._guard(lambda _b: self.confirm_overwrite()))
        self.view = PlanView()
        self.panels = LazySections(guard=self._guard)
        self.panels.add_class("wb-panels")

        left = widgets.VBox([
            widgets.HTML("<h3>Model</h3>"), self.model_editor,
            widgets.HTML("<h3>Planning</h3>"), self.options_editor,
            widgets.HBox([self.report_path, self.export_button]), self.report_where,
        ], layout=widgets.Layout(min_width="560px", flex="1 1 560px"))
        self.fleet_where = widgets.HTML(
            f"<span class='wb-hint'>fleets are saved in "
            f"{escape(str(self.fleet_dir.resolve()))}</span>")
        self.fleet_where.add_class("wb-fleet-where")
        right = widgets.VBox([widgets.HTML("<h3>Fleet</h3>"), self.fleet_editor,
                              self.fleet_where],
                             layout=widgets.Layout(min_width="560px", flex="1 1 640px"))
        super().__init__([
            widgets.HTML(STYLE), self.title,
            widgets.HBox([left, right], layout=widgets.Layout(flex_flow="row wrap")),
            widgets.HBox([self.message, self.overwrite_button],
                         layout=widgets.Layout(align_items="center")),
            self.view, self.panels,
        ])
        self.add_class("wb-root")
        for title, factory in PANELS:
            self.add_panel(title, factory)
        self._load_editors()
        if startup:
            self._say(" ".join(startup), error=True)
        self.refresh()

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_fleet(cls, path: str | Path, **options: Any) -> Workbench:
        """A workbench on the fleet file at ``path``."""
        stamp = _stamp(Path(path))
        document = load_fleet(path)
        workbench = cls(WorkbenchState.from_document(document), **options)
        workbench._remember_file(Path(path), stamp)
        return workbench

    @classmethod
    def default(cls, **options: Any) -> Workbench:
        """The design's Qwen3-Coder-480B on 5 x 80 GiB (``data/fleets/qwen480b-5x80.toml``)."""
        try:
            return cls.from_fleet(DEFAULT_FLEET_FILE, **options)
        except (FleetFileError, ModelError, PlanError) as error:
            workbench = cls(WorkbenchState.design_default(), **options)
            workbench._say(f"Default fleet file not loaded ({error}); using the design's "
                           "numbers.", error=True)
            return workbench

    @staticmethod
    def _optional(load: Callable[[], Any], notes: list[str], what: str) -> Any:
        try:
            return load()
        except ModelError as error:
            notes.append(f"The {what} could not be read: {error}.")
            return ()

    # -- plumbing -----------------------------------------------------------------------
    @contextmanager
    def _quietly(self) -> Iterator[None]:
        """Set widget values without treating them as edits."""
        self._quiet += 1
        try:
            yield
        finally:
            self._quiet -= 1

    def _guard(self, handler: Callable[P, object]) -> Callable[P, None]:
        """Ignore callbacks while quiet; show any error as a message, not a traceback."""

        @functools.wraps(handler)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
            if self._quiet:
                return
            try:
                handler(*args, **kwargs)
            except _USER_ERRORS as error:
                self._say(Problem.from_exception(error), error=True)
            except Exception as error:  # a bug must still not put a traceback on the page
                self._say(f"Unexpected error: {type(error).__name__}: {error}", error=True)

        return guarded

    def _say(self, text: str | Problem, *, error: bool = False) -> None:
        if isinstance(text, Problem):
            text = f"{text.code}: {text.message}"
        css = "wb-error-box" if error else "wb-message-box"
        self.message.value = f"<div class='{css}'>{escape(text)}</div>"

    def _fleet_files(self) -> list[tuple[str, str]]:
        """The fleets to load, as ``(label, path)``: the saved ones, then the examples."""
        listed: list[tuple[str, str]] = []
        seen: set[Path] = set()
        for folder, kind in ((self.fleet_dir, "saved"), (self.example_dir, "example")):
            if folder is None or not folder.is_dir() or folder.resolve() in seen:
                continue
            seen.add(folder.resolve())
            listed.extend((f"{path.name} ({kind})", str(path))
                          for path in sorted(folder.iterdir())
                          if path.suffix in FLEET_SUFFIXES and path.is_file())
        return listed

    # -- panels ---------------------------------------------------------------------------
    def add_panel(self, title: str, factory: PanelFactory) -> None:
        """Add a closed panel titled ``title``; ``factory(self)`` makes it when opened."""
        self.panels.add(title, lambda: factory(self), css_class="wb-panel")

    def panel(self, title: str) -> widgets.Widget:
        """The panel titled ``title``, opened (and made, the first time)."""
        try:
            index = list(self.panels.titles).index(title)
        except ValueError:
            raise KeyError(f"no panel {title!r}; panels: {list(self.panels.titles)}") from None
        return self.panels.open_section(index)

    # -- state ----------------------------------------------------------------------------
    @property
    def state(self) -> WorkbenchState:
        return self._state

    @property
    def evaluation(self) -> Evaluation:
        assert self._evaluation is not None
        return self._evaluation

    def set_state(self, state: WorkbenchState) -> None:
        """Show ``state`` in every editor and plan it."""
        self._state = state
        self._load_editors()
        self.refresh()

    def refresh(self) -> None:
        """Plan the current state once and redraw."""
        self._evaluation = evaluate(self._state)
        self.evaluations += 1
        self._drop_pending()  # a question about overwriting was about the fleet before
        self.title.value = (f"<h2 style='margin:4px 0 0 0'>{escape(self._state.title)}</h2>"
                            f"<div class='wb-hint wb-provenance'>"
                            f"{escape(self._state.provenance)}</div>")
        # A note on the last action ("Saved ...", "Loaded ...") is stale once the plan
        # changes; errors stay until they are fixed or replaced.
        if "wb-message-box" in self.message.value:
            self.message.value = ""
        self.view.show(self._evaluation)
        for watcher in self._watchers:
            watcher()

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after every re-plan (a panel that shows the fleet keeps up
        with it, or says it is out of date); errors it raises are shown as messages."""
        self._watchers.append(self._guard(callback))

    def _load_editors(self) -> None:
        state = self._state
        with self._quietly():
            self._load_model_editor()
            self.fleet_editor.set_rows(state.nodes)
            self.options_editor.set_options(state.options)
            self._show_fleet_name()
            source = Path(state.source) if state.source is not None else None
            if source is not None and not source.name.startswith("<"):
                self.fleet_editor.set_fleet_files(self._fleet_files(), str(source))
                # Save offers the file's name: its own file for a saved fleet, a new one
                # in the workspace for an example.
                self.fleet_editor.save_name.value = source.name

    def _show_fleet_name(self) -> None:
        editor, state = self.fleet_editor.fleet_name, self._state
        editor.value = state.name or ""
        editor.placeholder = state.title if not state.name else ""

    def _fleet_name_typed(self) -> None:
        if self._quiet:
            return
        name = self.fleet_editor.fleet_name.value
        if name.strip() == (self._state.name or ""):
            return
        self._state = self._state.with_name(name)
        self.refresh()

    def _load_model_editor(self, source: ModelSource | None = None) -> None:
        model = self._state.model
        if source is None:
            try:
                source = model_source(model, self._base_dir())
            except ModelError as error:
                self._say(Problem.from_exception(error), error=True)
        with self._quietly():
            self.model_editor.set_model(model, source.kv_cache_types if source else (),
                                        source.description if source else "")

    def _base_dir(self) -> Path | None:
        return self._state.base_dir

    # -- edits ----------------------------------------------------------------------------
    def _edited(self) -> None:
        rows = self.fleet_editor.rows()
        state = self._state
        if rows != state.nodes:
            state = state.with_nodes(rows, state.extras)
        self._state = state.with_options(self.options_editor.options())
        self.refresh()

    def _numbers_changed(self) -> None:
        before = self._state.model
        self._state = self._state.with_model_numbers(**self.model_editor.numbers())
        if (before.preset, before.gguf) != (self._state.model.preset, self._state.model.gguf):
            self._load_model_editor()
        self.refresh()

    def _preset_changed(self) -> None:
        choice = self.model_editor.preset.value
        model = self._state.model
        try:
            if choice == CUSTOM_MODEL:
                self._state = self._state.with_model(
                    replace(model, preset=None, gguf=None, kv_cache_type=None, file_size="",
                            file_bytes=None,
                            name=model.label))
                source = None
            elif choice.startswith("gguf:"):
                path = choice[len("gguf:"):]
                source = gguf_source(path, self._base_dir())
                kept = self._state.cache_type_for(source.kv_cache_types)
                if kept is not None:
                    source = gguf_source(path, self._base_dir(), kept)
                self._state = self._state.with_model(source.fields)
            elif same_preset(model.preset, choice) and model.gguf is None:
                return  # the preset on screen, named by its id: nothing changed
            else:
                # The fleet file's preset, chosen again, keeps the file's spelling (its id
                # or display name): choosing the model the file names is no edit.
                loaded = self._state.loaded
                file_preset = loaded.model.preset if loaded is not None else None
                again = file_preset is not None and same_preset(file_preset, choice)
                named = file_preset if again and file_preset is not None else choice
                # The file's size is the file's preset's: another preset is its own.
                stored = loaded.model.file_bytes if again and loaded is not None else None
                source = preset_source(named, None, stored)
                kept = self._state.cache_type_for(source.kv_cache_types)
                if kept is not None:
                    source = preset_source(named, kept, stored)
                if again and loaded is not None:
                    source = replace(source, fields=replace(source.fields,
                                                            name=loaded.model.name))
                self._state = self._state.with_model(source.fields)
        except ModelError:
            self._load_model_editor()
            raise
        self._load_model_editor(source)
        self.refresh()

    def use_gguf(self, path: str) -> None:
        """Plan the GGUF file at ``path`` (relative paths start at the fleet file's folder)
        in place of the model on screen, at the KV cache type of
        :meth:`WorkbenchState.cache_type_for`. Raises :class:`~planner.models.ModelError`
        for a file that cannot be read."""
        path = path.strip()
        if not path:
            raise WorkbenchInputError("model.gguf", "give the GGUF file's path",
                                      label="GGUF file")
        source = gguf_source(path, self._base_dir())
        kept = self._state.cache_type_for(source.kv_cache_types)
        if kept is not None:
            source = gguf_source(path, self._base_dir(), kept)
        self._state = self._state.with_model(source.fields)
        self._load_model_editor(source)
        self.refresh()

    def gguf_folders(self) -> list[Path]:
        """Where GGUF files are looked for: beside the fleet files and the fleet on
        screen, and in ``models/`` folders there and in the working folder."""
        folders = [self.fleet_dir, self.fleet_dir / "models", Path.cwd() / "models"]
        base = self._base_dir()
        if base is not None:
            folders[1:1] = [base, base / "models"]
        return list(dict.fromkeys(folders))

    def _kv_cache_type_changed(self) -> None:
        model = self._state.model
        kv_cache_type = self.model_editor.kv_cache_type.value
        if kv_cache_type is None or kv_cache_type == model.kv_cache_type:
            return
        if model.preset is not None:
            source = preset_source(model.preset, kv_cache_type, model.stored_file_bytes())
        elif model.gguf is not None:
            source = gguf_source(model.gguf, self._base_dir(), kv_cache_type, model.name)
        else:
            return
        self._state = self._state.with_model(replace(source.fields, name=model.name))
        self._load_model_editor(source)
        self.refresh()

    def _file_size_changed(self) -> None:
        """The size of the file the preset is run from, typed: the preset stored in it
        (blank: in its own weights). Text that cannot be read, or a size that cannot hold
        the preset, is kept as typed and said by the plan's check."""
        model = self._state.model
        typed = self.model_editor.file_size.value
        if model.preset is None or typed == model.file_size:
            return
        typed_model = replace(model, file_size=typed, file_bytes=None)
        try:
            source = preset_source(model.preset, model.kv_cache_type,
                                   typed_model.stored_file_bytes())
        except (WorkbenchInputError, ModelError):
            self._state = self._state.with_model(typed_model)
            self.refresh()
            return
        self._state = self._state.with_model(replace(source.fields, name=model.name,
                                                     file_size=typed))
        self._load_model_editor(source)
        self.refresh()

    def _restructure(self, state: WorkbenchState) -> None:
        self._state = state
        with self._quietly():
            self.fleet_editor.set_rows(state.nodes)
        self.refresh()

    def add_node(self) -> None:
        """Add a node like the last one."""
        self._restructure(self._state.add_node())

    def duplicate_node(self, index: int) -> None:
        self._restructure(self._state.duplicate_node(index))

    def remove_node(self, index: int) -> None:
        self._restructure(self._state.remove_node(index))

    def add_gpus(self, gpu: GpuModel, count: int) -> None:
        """Add ``count`` nodes of a catalog GPU."""
        self._restructure(self._state.add_gpus(gpu.name, gpu.memory_bytes, count,
                                               kind=gpu.kind))

    def _add_gpus(self) -> None:
        gpu = self.fleet_editor.chosen_gpu()
        if gpu is None:
            self._say("The GPU catalog is empty.", error=True)
            return
        self.add_gpus(gpu, read_whole(self.fleet_editor.gpu_count, "count",
                                      label="number of GPUs to add", minimum=1,
                                      maximum=MAX_NODES))

    # -- files ----------------------------------------------------------------------------
    def _load_chosen(self) -> None:
        chosen = self.fleet_editor.file_choice.value
        if not chosen:
            self._say(f"No fleet files in {self.fleet_dir}.", error=True)
            return
        self.load_fleet(chosen)

    def load_fleet(self, path: str | Path) -> None:
        """Replace the model, fleet and options with those of a fleet file."""
        path = Path(path)
        stamp = _stamp(path)
        state = WorkbenchState.from_document(load_fleet(path))
        self._remember_file(path, stamp)
        self.set_state(state.with_memory_model(self._state.memory_model))
        self._say(f"Loaded {path}.")

    def _fleet_path(self, name: str) -> Path:
        name = name.strip()
        if not name:
            raise WorkbenchInputError("file name", "give a name such as my-fleet.toml",
                                      label="fleet file name")
        if "/" in name or "\\" in name or name.startswith("."):
            raise WorkbenchInputError(
                "file name", f"give a plain file name; fleets are saved in {self.fleet_dir}",
                value=name, label="fleet file name")
        path = self.fleet_dir / name
        if path.suffix == "":
            path = path.with_suffix(".toml")
        if path.suffix not in FLEET_SUFFIXES:
            raise WorkbenchInputError("file name", "must end in .toml or .json", value=name,
                                      label="fleet file name")
        return path

    def save_fleet(self, name: str, *, overwrite: bool = False) -> Path:
        """Save the model, fleet and options as ``name`` in :attr:`fleet_dir`.

        A file that exists is replaced only with ``overwrite`` (the Overwrite button),
        unless it is the one the fleet was loaded from or last saved to, unchanged since,
        and the save keeps all its comments; otherwise ``WouldOverwrite`` names it and
        nothing is written. Raises ``WriteFailed`` for a folder inside the package."""
        path = self._fleet_path(name)
        document = self._state.to_document()
        _refuse_package_folder(path)
        if not overwrite:
            question = self._save_question(path, document)
            if question is not None:
                self._ask_overwrite(path, "fleet")
                raise FleetFileError("WouldOverwrite", question, path=str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        written = save_fleet(document, path, drop_comments=overwrite)
        self._remember_file(written, _stamp(written))
        # What the file now holds (a relative GGUF path rebased to its folder) is what the
        # editors show and what is edited next.
        self.set_state(WorkbenchState.from_document(load_fleet(written)).with_memory_model(
            self._state.memory_model))
        self._say(f"Saved {written}.")
        return written

    def _remember_file(self, path: Path, stamp: tuple[int, int, int] | None) -> None:
        """The fleet on screen is the file at ``path``, as it was at ``stamp``."""
        self._file_stamp = (path.resolve(), stamp) if stamp is not None else None

    def _save_question(self, path: Path, document: Any) -> str | None:
        """Why saving ``document`` at ``path`` must be asked first, or ``None``."""
        if not path.exists() and not path.is_symlink():
            return None
        lost = comments_lost_by_save(document, path)
        own = self._file_stamp is not None and self._file_stamp == (path.resolve(),
                                                                    _stamp(path))
        if own and not lost:
            return None
        what = "the file this fleet was loaded from" if own else _described(path)
        text = f"already exists ({what}); Overwrite replaces it with the fleet on screen"
        if lost:
            text += (f" and drops {len(lost):,} of its comments, whose layout cannot be "
                     f"edited in place (the first: {lost[0]!r})")
        else:
            text += ", keeping its comments"
        return text + "; or save under another name"

    def _ask_overwrite(self, path: Path, what: str) -> None:
        self._pending = _PendingOverwrite(path, self._state, what)
        self.overwrite_button.tooltip = f"replace {path} with what is on screen"
        self.overwrite_button.layout.display = None

    def _drop_pending(self) -> None:
        self._pending = None
        self.overwrite_button.layout.display = "none"

    def confirm_overwrite(self) -> Path | None:
        """Write what a refused save or export asked to (the Overwrite button)."""
        pending, self._pending = self._pending, None
        self.overwrite_button.layout.display = "none"
        if pending is None or pending.state is not self._state:
            self._say("Nothing to overwrite: the fleet changed since; press Save or Export "
                      "again.", error=True)
            return None
        if pending.what == "fleet":
            return self.save_fleet(pending.path.name, overwrite=True)
        return self.export_report(pending.path, overwrite=True)

    def report_destination(self, name: str | Path | None = None) -> Path:
        """Where a report named ``name`` is written: an absolute path as given, a relative
        one inside the report folder (not the notebook's folder, which depends on how the
        page was started), ``<fleet name>.html`` there when no name is given."""
        text = str(name).strip() if name is not None else ""
        if not text:
            return (self.report_dir / f"{_slug(self._state.title)}.html").resolve()
        path = Path(text).expanduser()
        if not path.is_absolute():
            path = self.report_dir / path
        return path.resolve()

    def export_report(self, path: str | Path | None = None, *,
                      overwrite: bool = False) -> Path | None:
        """Write a report of the current plan to :meth:`report_destination` of ``path``;
        a file there is replaced only with ``overwrite`` (``WouldOverwrite`` names it)."""
        try:
            from planner.reports import write_report
        except ImportError as error:
            self._say(f"Reports are not available: {error}.", error=True)
            return None
        destination = self.report_destination(path)
        _refuse_package_folder(destination)
        if not overwrite and (destination.exists() or destination.is_symlink()):
            self._ask_overwrite(destination, "report")
            raise FleetFileError("WouldOverwrite", f"already exists ({_described(destination)})"
                                 "; Overwrite replaces it with this plan's report, or give "
                                 "another name", path=str(destination))
        if destination.is_relative_to(self.report_dir.resolve()):
            destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            subject: Any = self._state.to_document()
        except (FleetFileError, ModelError):
            subject = self._state.to_request()
        state = self._state
        written = write_report(subject, destination, title=state.title,
                               memory_model=state.memory_model, source_edited=state.edited)
        self._say(f"Report written to {written}.")
        return written


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a file changed on disk: its inode, size and modification time."""
    try:
        status = path.stat()
    except OSError:
        return None
    return (status.st_ino, status.st_size, status.st_mtime_ns)


def _described(path: Path) -> str:
    """A file that exists, for a question about replacing it: when it was changed."""
    try:
        changed = time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime))
    except OSError:
        return "a link to nothing" if path.is_symlink() else "it cannot be read"
    return f"last changed {changed}"


def _refuse_package_folder(path: Path) -> None:
    if inside_package(path):
        raise FleetFileError(
            "WriteFailed", "is inside the installed package, whose example fleets are "
            "read-only; save in the workspace (planner.workspace) or another folder",
            path=str(path))
