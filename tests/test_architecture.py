"""The code keeps the layout docs/architecture.md's Layout table describes.

Each row of that table names a package or module under ``planner/``, its layer, what it
owns and what it may import: planner modules in backticks, then the libraries beyond
Python's standard library. These tests read the table and the code's imports (every
``import``, including those inside functions) and fail, naming the line to change, when
the two disagree:

- every package and top-level module under ``planner/`` has a row, and every row names
  one that exists;
- a module imports only what its row allows;
- a ``core`` row allows no widget or plotting library and nothing from an ``edge`` row,
  and importing the core loads none of them (nor an engine);
- an engine is touched by its adapter module only: Dask by ``planner/sweep_dask.py``,
  processes (llama.cpp's binaries) by ``planner/llamacpp/runner.py``.

A module inside a package may have a row of its own (an adapter in a core package): its
row, not its package's, then says what it may import.

A module that only its own package imports is internal, and its name says so (``_toml.py``):
people import its names from the package. The modules that keep a public name anyway, being
extension points or places the docs send a reader to, are listed under the table.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "planner"
LAYOUT = ROOT / "docs" / "architecture.md"
WHERE = "docs/architecture.md"  # how messages name the table
LAYERS = ("core", "adapter", "edge")
UI_LIBRARIES = frozenset({"ipywidgets", "plotly", "anywidget", "IPython", "matplotlib",
                          "bokeh", "voila"})
# Programs are started by the llama.cpp adapter and by the launcher of the Jupyter
# servers behind `make lab` / `make app`, nowhere else.
PROGRAM_STARTERS = ("llamacpp/runner.py", "workbench/serve.py")
# engine import name -> the modules (relative to planner/) that may import it
ENGINES: dict[str, tuple[str, ...]] = {
    "dask": ("sweep_dask.py",), "distributed": ("sweep_dask.py",),
    "subprocess": PROGRAM_STARTERS,
    # The adapter, and the one command that asks rpc-servers through it.
    "planner.llamacpp.runner": ("llamacpp/runner.py", "cli/discover.py")}
# os functions that start another program.
PROCESS_STARTERS = frozenset({
    "system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp",
    *(f"spawn{suffix}" for suffix in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")),
    *(f"exec{suffix}" for suffix in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")),
})
# Not a core row, but the JSON and Markdown reports are built from it without plotting.
PURE_EDGE_MODULES = ("planner.reports.content",)


@dataclass(frozen=True)
class Row:
    path: str          # "planner/units.py" or "planner/fleet/"
    layer: str
    owns: str
    units: frozenset[str]      # planner modules it may import, as "fleet", "fence.check"
    libraries: frozenset[str]  # import names of libraries beyond the standard library
    line: int                  # docs/architecture.md line

    @property
    def unit(self) -> str:
        return unit_name(self.path)


@dataclass(frozen=True)
class Import:
    file: str     # relative to planner/, e.g. "fleet/_toml.py"
    line: int
    name: str     # what the code names: "planner.fleet.document", "pandas", "os.system"
    unit: str | None      # the planner unit it lands in ("fleet"), None for a library
    library: str | None   # top-level import name of a non-standard library


def unit_name(path: str) -> str:
    """``planner/__init__.py`` -> ``planner``; ``planner/fence/check/`` -> ``fence.check``."""
    relative = path.removeprefix("planner/")
    if relative == "__init__.py":
        return "planner"
    return relative.removesuffix("/").removesuffix(".py").replace("/", ".")


def layout_line(path: str, layer: str, owns: str, units: set[str] | frozenset[str],
                libraries: set[str] | frozenset[str]) -> str:
    allowed = ", ".join(f"`{unit}`" for unit in sorted(units))
    if libraries:
        allowed += ("; " if allowed else "") + ", ".join(sorted(libraries, key=str.lower))
    return f"| `{path}` | {layer} | {owns} | {allowed or '—'} |"


def layout_rows() -> dict[str, Row]:
    lines = LAYOUT.read_text(encoding="utf-8").splitlines()
    start = lines.index("# Layout")
    rows: dict[str, Row] = {}
    for number, text in enumerate(lines[start + 1:], start=start + 2):
        if text.startswith("## "):
            break
        if not text.startswith("| `planner/"):
            continue
        cells = [cell.strip() for cell in text.strip().strip("|").split("|")]
        assert len(cells) == 4, (
            f"{WHERE}:{number}: a Layout row has four cells (path, layer, owns, may "
            f"import); got {len(cells)}: {text}")
        path, layer, owns, allowed = cells
        path = path.strip("`")
        assert layer in LAYERS, f"{WHERE}:{number}: layer {layer!r} is not one of {LAYERS}"
        units = frozenset(re.findall(r"`([^`]+)`", allowed))
        words = [word for word in re.split(r"[,;\s]+", re.sub(r"`[^`]+`", "", allowed))
                 if word and word not in ("—", "-")]
        for word in words:
            assert word.isidentifier(), (
                f"{WHERE}:{number}: {word!r} in the may-import cell of `{path}` is not a "
                "library's import name (planner modules go in backticks)")
        assert path not in rows, f"{WHERE}:{number}: `{path}` has two rows"
        rows[path] = Row(path, layer, owns, units, frozenset(words), number)
    assert rows, "docs/architecture.md has no Layout table of planner/ rows"
    return rows


def required_paths() -> list[str]:
    """Every package (at any depth) and every top-level module under planner/."""
    paths = ["planner/__init__.py"]
    paths += [f"planner/{path.name}" for path in sorted(PACKAGE.glob("*.py"))
              if path.name != "__init__.py"]
    paths += [f"planner/{init.parent.relative_to(PACKAGE).as_posix()}/"
              for init in sorted(PACKAGE.rglob("*/__init__.py"))]
    return paths


def python_files() -> Iterator[Path]:
    yield from sorted(PACKAGE.rglob("*.py"))


def optional_paths() -> list[str]:
    """Modules inside a package, which may have a row of their own."""
    return [f"planner/{path.relative_to(PACKAGE).as_posix()}"
            for path in sorted(PACKAGE.rglob("*/*.py")) if path.name != "__init__.py"]


def row_of(file: str, rows: dict[str, Row]) -> Row | None:
    """The row a file (relative to planner/) belongs to: its own, or its deepest package's."""
    if file == "__init__.py":
        return rows.get("planner/__init__.py")
    if "/" not in file or f"planner/{file}" in rows:
        return rows.get(f"planner/{file}")
    packages = [path for path in rows if path.endswith("/")
                and file.startswith(path.removeprefix("planner/"))]
    return rows[max(packages, key=len)] if packages else None


@functools.cache
def _planner_file(dotted: str) -> str | None:
    """The file (relative to planner/) a ``planner.…`` name lives in, or None."""
    parts = dotted.split(".")[1:]
    while True:
        relative = "/".join(parts)
        if (PACKAGE / relative / "__init__.py").exists():
            return f"{relative}/__init__.py" if relative else "__init__.py"
        if parts and (PACKAGE / f"{relative}.py").exists():
            return f"{relative}.py"
        if not parts:
            return None
        parts.pop()


def _unit_of_file(target: str, rows: dict[str, Row]) -> str:
    row = row_of(target, rows)
    if row is not None:
        return row.unit
    if target == "__init__.py":
        return "planner"
    return target.split("/")[0].removesuffix(".py")


def imports_of(path: Path, rows: dict[str, Row]) -> list[Import]:
    return imports_in(path.read_text(encoding="utf-8"), path.relative_to(PACKAGE).as_posix(),
                      rows)


def imports_in(source: str, file: str, rows: dict[str, Row]) -> list[Import]:
    """The imports of ``source``, the text of ``planner/<file>``."""
    found: list[Import] = []
    for line, name in _imported_names(source, file):
        top = name.split(".")[0]
        if top == "planner":
            target = _planner_file(name)
            found.append(Import(file, line, name,
                                _unit_of_file(target, rows) if target else None, None))
        elif top == "__future__" or top in sys.stdlib_module_names:
            found.append(Import(file, line, name, None, None))
        else:
            found.append(Import(file, line, name, None, top))
    return found


@functools.cache
def _imported_names(source: str, file: str) -> tuple[tuple[int, str], ...]:
    module = ["planner", *file.removesuffix(".py").split("/")]
    package = module[:-1]  # what a relative import starts from, for __init__ too
    names: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, file)):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[:len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                # ``from planner import models`` imports the module planner.models.
                submodule = base.split(".")[0] == "planner" and _planner_file(
                    candidate) not in (None, _planner_file(base))
                starter = base == "os" and alias.name in PROCESS_STARTERS
                names.append((node.lineno, candidate if submodule or starter else base))
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "os" and node.attr in PROCESS_STARTERS):
            names.append((node.lineno, f"os.{node.attr}"))
    return tuple(names)


def all_imports(rows: dict[str, Row]) -> list[Import]:
    return [found for path in python_files() for found in imports_of(path, rows)]


def _first_sentence(path: Path) -> str:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    return paragraph.split(". ")[0].rstrip(".").replace("|", "/") or "WHAT IT OWNS"


def _needs(relative: str, rows: dict[str, Row], own_unit: str) -> tuple[set[str], set[str]]:
    """What the files of ``relative`` (``x.py`` or a package folder) import."""
    units: set[str] = set()
    libraries: set[str] = set()
    for found in all_imports(rows):
        if not (found.file == relative or found.file.startswith(relative + "/")):
            continue
        if found.unit is not None and found.unit != own_unit:
            units.add(found.unit)
        if found.library is not None:
            libraries.add(found.library)
    return units, libraries


# -- the table lists the code ------------------------------------------------------------


def test_layout_table_lists_every_package_and_module() -> None:
    rows = layout_rows()
    missing = [path for path in required_paths() if path not in rows]
    suggestions = []
    for path in missing:
        relative = path.removeprefix("planner/").removesuffix("/")
        source = PACKAGE / relative
        source = source / "__init__.py" if source.is_dir() else source
        units, libraries = _needs(relative, rows, unit_name(path))
        layer = ("edge" if libraries & UI_LIBRARIES
                 or any(rows[p].layer == "edge" for p in rows if rows[p].unit in units)
                 else "adapter" if any(relative in a for a in ENGINES.values())
                 else "core")
        suggestions.append(layout_line(path, layer, _first_sentence(source),
                                       units, libraries))
    assert not missing, (
        "docs/architecture.md's Layout table has no row for " + ", ".join(missing) + ". Add (and "
        "correct what it owns):\n" + "\n".join(suggestions))
    stale = [f"{WHERE}:{row.line}: `{row.path}`" for row in rows.values()
             if row.path not in required_paths() + optional_paths()]
    assert not stale, ("These Layout rows name no package or module under planner/ "
                       "(remove or rename them):\n" + "\n".join(stale))


def test_may_import_names_only_rows_of_the_table() -> None:
    rows = layout_rows()
    known = {row.unit for row in rows.values()}
    for row in rows.values():
        unknown = sorted(row.units - known)
        assert not unknown, (
            f"{WHERE}:{row.line}: the row of `{row.path}` allows "
            + ", ".join(f"`{unit}`" for unit in unknown)
            + ", which no Layout row names")


def test_each_module_imports_only_what_its_row_allows() -> None:
    rows = layout_rows()
    problems: dict[str, list[Import]] = {}
    for found in all_imports(rows):
        row = row_of(found.file, rows)
        if row is None:
            continue  # reported by test_layout_table_lists_every_package_and_module
        allowed = ((found.unit is None or found.unit == row.unit or found.unit in row.units)
                   and (found.library is None or found.library in row.libraries))
        if not allowed:
            problems.setdefault(row.path, []).append(found)
    messages = []
    for path, found in problems.items():
        row = rows[path]
        units = set(row.units) | {f.unit for f in found if f.unit is not None}
        libraries = set(row.libraries) | {f.library for f in found if f.library is not None}
        where = "; ".join(dict.fromkeys(f"planner/{f.file}:{f.line} imports {f.name}"
                                        for f in found))
        messages.append(f"{where}. {WHERE}:{row.line} does not allow it; if it belongs "
                        f"there, make that line:\n"
                        + layout_line(row.path, row.layer, row.owns, units, libraries))
    assert not messages, "\n".join(messages)


def unused_allowances(rows: dict[str, Row], found: list[Import]) -> list[str]:
    """The may-import entries of each row that no import of its modules uses."""
    used: dict[str, set[str]] = {path: set() for path in rows}
    for each in found:
        row = row_of(each.file, rows)
        if row is not None:
            used[row.path].update(name for name in (each.unit, each.library) if name)
    problems = []
    for row in rows.values():
        idle = sorted((row.units | row.libraries) - used[row.path])
        if idle:
            problems.append(f"{WHERE}:{row.line}: `{row.path}` may import "
                            + ", ".join(idle) + ", which none of its modules imports; "
                            "make that line:\n" + layout_line(
                                row.path, row.layer, row.owns, row.units - set(idle),
                                row.libraries - set(idle)))
    return problems


def test_every_allowance_is_used() -> None:
    """An allowance no import uses is a rule that no longer describes the code."""
    rows = layout_rows()
    problems = unused_allowances(rows, all_imports(rows))
    assert problems == [], "\n".join(problems)


def test_an_unused_allowance_is_reported() -> None:
    rows = layout_rows()
    units = rows["planner/units.py"]
    rows["planner/units.py"] = Row(units.path, units.layer, units.owns,
                                   units.units | {"models"}, units.libraries | {"numpy"},
                                   units.line)
    assert unused_allowances(rows, all_imports(rows)) == [
        f"{WHERE}:{units.line}: `planner/units.py` may import models, numpy, which none of "
        "its modules imports; make that line:\n"
        + layout_line(units.path, units.layer, units.owns, units.units, units.libraries)]


# -- the core stays pure -----------------------------------------------------------------


def test_core_rows_allow_no_widgets_plotting_or_edge_modules() -> None:
    rows = layout_rows()
    edge = {row.unit for row in rows.values() if row.layer == "edge"}
    for row in rows.values():
        if row.layer != "core":
            continue
        wrong = sorted(row.units & edge) + sorted(row.libraries & UI_LIBRARIES)
        assert not wrong, (
            f"{WHERE}:{row.line}: `{row.path}` is core, so it may not import "
            + ", ".join(wrong) + " (move that code to an edge module)")


def test_importing_the_core_loads_no_widgets_plotting_or_engine() -> None:
    rows = layout_rows()
    core = sorted({"planner" if row.unit == "planner" else f"planner.{row.unit}"
                   for row in rows.values() if row.layer == "core"})
    modules = [*core, *PURE_EDGE_MODULES]
    forbidden = sorted(UI_LIBRARIES | {"dask", "distributed"})
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules\n"
        f"                if m.split('.')[0] in {forbidden!r})\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    assert done.stdout.strip() == "", (
        f"importing {', '.join(modules)} loaded {done.stdout.strip()}")


# -- module size --------------------------------------------------------------------------

MAX_MODULE_LINES = 800
"""A module holds one idea; past this many lines it holds more, and is split."""
# Modules still past the limit, each to be split along its seams; none may join them.
OVER_THE_LIMIT: frozenset[str] = frozenset()


def test_no_module_grows_past_the_line_limit() -> None:
    long = sorted(f"planner/{path.relative_to(PACKAGE).as_posix()} ({lines:,} lines)"
                  for path in python_files()
                  if (lines := len(path.read_text(encoding="utf-8").splitlines()))
                  > MAX_MODULE_LINES
                  and path.relative_to(PACKAGE).as_posix() not in OVER_THE_LIMIT)
    assert long == [], (f"split these along their seams into modules of at most "
                        f"{MAX_MODULE_LINES} lines, one idea each: {', '.join(long)}")


def test_every_module_allowed_past_the_limit_is_past_it() -> None:
    """An allowance for a module that was split, or never grew, would let it grow back."""
    lines = {path.relative_to(PACKAGE).as_posix(): len(path.read_text(encoding="utf-8")
                                                      .splitlines())
             for path in python_files()}
    stale = sorted(f"{name} ({lines[name]:,} lines)" if name in lines else f"{name} (gone)"
                   for name in OVER_THE_LIMIT if lines.get(name, 0) <= MAX_MODULE_LINES)
    assert stale == [], "remove from OVER_THE_LIMIT: " + ", ".join(stale)


# -- one adapter per engine --------------------------------------------------------------


def test_each_engine_is_touched_by_its_adapter_only() -> None:
    """Dask only in ``planner/sweep_dask.py``; processes (llama.cpp's binaries) only in
    ``planner/llamacpp/runner.py``, which no other module imports but ``planner
    discover``'s."""
    found = all_imports(layout_rows())
    assert engine_violations(found) == []
    assert {f.file for f in found if f.library in ("dask", "distributed")} == {
        "sweep_dask.py"}
    assert any(f.name == "subprocess" for f in found if f.file == "llamacpp/runner.py")


def engine_violations(found: list[Import]) -> list[str]:
    problems = []
    for engine, adapters in ENGINES.items():
        users = sorted({f"planner/{f.file}:{f.line}" for f in found
                        if (f.name == engine or f.name.startswith(engine + "."))
                        and f.file not in adapters})
        if users:
            problems.append(f"{engine} is touched only by "
                            + ", ".join(f"planner/{a}" for a in adapters) + "; also by "
                            + ", ".join(users))
    starters = sorted({f"planner/{f.file}:{f.line} ({f.name})" for f in found
                       if f.name.startswith("os.") and f.file not in PROGRAM_STARTERS})
    if starters:
        problems.append("only " + " and ".join(f"planner/{a}" for a in PROGRAM_STARTERS)
                        + " start programs; also " + ", ".join(starters))
    return problems


def test_an_engine_outside_its_adapter_is_reported() -> None:
    rows = layout_rows()
    source = "import subprocess\nfrom dask import delayed\nfrom os import execv\n"
    assert engine_violations(imports_in(source, "llamacpp/runner.py", rows)) == [
        "dask is touched only by planner/sweep_dask.py; also by planner/llamacpp/runner.py:2"]
    assert engine_violations(imports_in(source, "fleet/files.py", rows)) == [
        "dask is touched only by planner/sweep_dask.py; also by planner/fleet/files.py:2",
        "subprocess is touched only by planner/llamacpp/runner.py, "
        "planner/workbench/serve.py; also by planner/fleet/files.py:1",
        "only planner/llamacpp/runner.py and planner/workbench/serve.py start programs; "
        "also planner/fleet/files.py:3 (os.execv)",
    ]
    assert engine_violations(imports_in(source, "workbench/serve.py", rows)) == [
        "dask is touched only by planner/sweep_dask.py; also by planner/workbench/serve.py:2"]
    assert engine_violations(imports_in("import planner.llamacpp.runner\n",
                                        "llamacpp/launch.py", rows)) == [
        "planner.llamacpp.runner is touched only by planner/llamacpp/runner.py, "
        "planner/cli/discover.py; also by planner/llamacpp/launch.py:1"]


def test_a_module_row_inside_a_package_is_its_own() -> None:
    """The runner's row, not the llama.cpp package's, says what it may import; the
    package's modules go by the package's row."""
    rows = layout_rows()
    runner, launch = row_of("llamacpp/runner.py", rows), row_of("llamacpp/launch.py", rows)
    assert runner is not None and runner.path == "planner/llamacpp/runner.py"
    assert runner.layer == "adapter"
    assert launch is not None and launch.path == "planner/llamacpp/"


# -- internal modules carry internal names -----------------------------------------------

EXTENSION_POINTS = "## Public modules that are extension points"
# Where code outside planner/ imports the package's modules, or runs them (python -m).
USERS_OUTSIDE = ("tests", "benchmarks", "validation")
RUN_BY_NAME = ("Makefile", "README.md", "pyproject.toml", "docs/*.md")


def extension_points() -> dict[str, int]:
    """The modules and packages docs/architecture.md keeps public though only their own
    package imports them: ``planner/cli/`` -> its line."""
    lines = LAYOUT.read_text(encoding="utf-8").splitlines()
    assert EXTENSION_POINTS in lines, f"{WHERE} has no section {EXTENSION_POINTS!r}"
    listed: dict[str, int] = {}
    for number, text in enumerate(lines[lines.index(EXTENSION_POINTS) + 1:],
                                  start=lines.index(EXTENSION_POINTS) + 2):
        if text.startswith("#"):
            break
        if found := re.match(r"- `(planner/[^`]+)`", text):
            listed[found.group(1)] = number
    assert listed, f"{WHERE}: the section {EXTENSION_POINTS!r} lists no module"
    return listed


def _notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")


def module_users() -> dict[str, set[str]]:
    """Each file under planner/ (relative to it) -> the files that import it (relative to
    the repository: ``planner/fleet/files.py``, ``tests/test_fleetfile.py``), and
    ``python -m`` where a Makefile, README or doc runs it by name."""
    sources = {f"planner/{path.relative_to(PACKAGE).as_posix()}": path.read_text(
        encoding="utf-8") for path in python_files()}
    for folder in USERS_OUTSIDE:
        sources |= {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
                    for path in sorted((ROOT / folder).rglob("*.py"))}
    sources |= {path.relative_to(ROOT).as_posix(): _notebook_code(path)
                for path in sorted((ROOT / "notebooks").glob("*.ipynb"))}
    users: dict[str, set[str]] = {}
    for where, source in sources.items():
        for _, name in _imported_names(source, where.removeprefix("planner/")):
            target = _planner_file(name) if name.split(".")[0] == "planner" else None
            if target is not None:
                users.setdefault(target, set()).add(where)
    for pattern in RUN_BY_NAME:
        for path in sorted(ROOT.glob(pattern)):
            for name in re.findall(r"-m (planner(?:\.\w+)*)", path.read_text(encoding="utf-8")):
                if (target := _planner_file(name)) is not None:
                    users.setdefault(target, set()).add("python -m")
    return users


def internal_modules_with_public_names(modules: list[str], users: dict[str, set[str]],
                                       listed: set[str]) -> list[str]:
    """The modules of ``modules`` (relative to planner/) that no file outside their own
    package imports, whose name is public, that are neither a package's ``__init__`` nor
    in ``listed`` (paths ``planner/…``, a package's ending in ``/``)."""
    found = []
    for module in modules:
        folder, _, name = module.rpartition("/")
        package = f"planner/{folder}/" if folder else "planner/"
        path = f"planner/{module}"
        outside = {user for user in users.get(module, set())
                   if user != path and not user.startswith(package)}
        kept = any(path == entry or (entry.endswith("/") and path.startswith(entry))
                   for entry in listed)
        if not (outside or name.startswith("_") or kept):
            found.append(f"{path} (imported only inside {package})")
    return found


def test_a_module_only_its_package_imports_has_an_internal_name() -> None:
    modules = [path.relative_to(PACKAGE).as_posix() for path in python_files()]
    found = internal_modules_with_public_names(modules, module_users(),
                                               set(extension_points()))
    assert found == [], (
        "Only their own package imports these modules: give each a leading _ (git mv, "
        "then import its names from the package), or, if it is an extension point or a "
        f"place the docs send readers to, list it under {WHERE}'s {EXTENSION_POINTS!r} "
        "with why:\n" + "\n".join(found))


def test_every_extension_point_names_a_module_or_package() -> None:
    stale = [f"{WHERE}:{line}: `{entry}`" for entry, line in extension_points().items()
             if not (ROOT / entry).exists() or entry.endswith("/") != (ROOT / entry).is_dir()]
    assert stale == [], ("These extension points name no module or package under planner/ "
                         "(remove or rename them):\n" + "\n".join(stale))


# -- the checks above can fail -----------------------------------------------------------


def test_the_import_reader_sees_lazy_relative_and_submodule_imports() -> None:
    rows = layout_rows()
    source = ("def f():\n    import plotly\n    from planner import workbench\n"
              "    from . import _toml\n    import os\n    os.system('true')\n"
              "    from planner.planning import NodeBudget\n")
    found = imports_in(source, "fleet/probe.py", rows)
    assert {(f.line, f.name, f.unit, f.library) for f in found} == {
        (2, "plotly", None, "plotly"),
        (3, "planner.workbench", "workbench", None),
        (4, "planner.fleet._toml", "fleet", None),
        (5, "os", None, None),
        (6, "os.system", None, None),
        (7, "planner.planning", "planning", None),
    }
    fleet = rows["planner/fleet/"]
    assert "plotly" not in fleet.libraries and "workbench" not in fleet.units


def test_a_public_module_only_its_package_imports_is_reported() -> None:
    modules = ["fleet/probe.py", "fleet/_probe.py", "fleet/__init__.py", "cli/probe.py",
               "probe.py"]
    users = {"fleet/probe.py": {"planner/fleet/files.py", "planner/fleet/probe.py"},
             "fleet/_probe.py": {"planner/fleet/files.py"},
             "cli/probe.py": {"planner/cli/__init__.py"},
             "probe.py": {"planner/fleet/files.py"}}
    assert internal_modules_with_public_names(modules, users, {"planner/cli/"}) == [
        "planner/fleet/probe.py (imported only inside planner/fleet/)",
        "planner/probe.py (imported only inside planner/)"]
    users["fleet/probe.py"].add("planner/sizing/search.py")
    users["probe.py"].add("tests/test_probe.py")
    assert internal_modules_with_public_names(modules, users, {"planner/cli/"}) == []
    assert internal_modules_with_public_names(modules, users, set()) == [
        "planner/cli/probe.py (imported only inside planner/cli/)"]


def test_the_whole_package_is_type_checked_strictly() -> None:
    """make test's mypy is `mypy --strict planner`: strict for every module, and no
    override of a planner module turns a check off or its errors away."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config.get("strict") is True and config.get("files") == ["planner"]
    loosened = [(module, key) for override in config.get("overrides", [])
                for module in override["module"] if module.split(".")[0] == "planner"
                for key, value in override.items()
                if key != "module" and (value is False or key == "ignore_errors")]
    assert loosened == [], f"planner modules checked less than strictly: {loosened}"
