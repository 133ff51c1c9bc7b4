"""The documents in docs/ are the ones the code cites, and they agree with the code.

Every ``docs/rules.md §N`` or ``docs/sources.md §N`` written anywhere in the project names
a section that exists; no citation points outside the repository; every relative link of
the documents resolves; the constants tables of ``docs/sources.md`` hold the values the
code computes with, and its GPU table is the shipped catalog's.

``python tests/test_docs.py`` prints the GPU table of ``docs/sources.md`` for the catalog
as it is now.
"""

from __future__ import annotations

import ast
import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CITED = ("rules.md", "sources.md")
# Where citations live: the package, its tests, benchmarks and validation, the notebooks,
# the README and the documents themselves.
SEARCHED = ("planner", "tests", "benchmarks", "validation", "notebooks", "docs")
SUFFIXES = {".py", ".md", ".ipynb", ".toml", ".json", ".sh", ".cfg", ".txt", ".yml"}
# One citation: the document, then one or more sections ("§4", "§5.2", "§1-§7", "§8 and §9").
CITATION = re.compile(r"(?:docs/)?(rules|sources)\.md\)?((?:(?:,|-|–| and| or)? ?§\d+(?:\.\d+)?)+)")
SECTION = re.compile(r"§(\d+(?:\.\d+)?)")
HEADING = re.compile(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", re.M)
# Documents that are not in the repository must not be cited.
OUTSIDE = re.compile(r"\bSPEC\b|REFERENCES\.md")
GPU_START, GPU_END = "<!-- gpu-catalog:start -->", "<!-- gpu-catalog:end -->"


def _sections(name: str) -> set[str]:
    return set(HEADING.findall((DOCS / name).read_text(encoding="utf-8")))


def _project_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in SEARCHED:
        files += [path for path in sorted((ROOT / folder).rglob("*"))
                  if path.is_file() and path.suffix in SUFFIXES
                  and ".run" not in path.parts and "__pycache__" not in path.parts]
    return [path for path in files if path != Path(__file__).resolve()]


def citations(text: str) -> list[tuple[str, str]]:
    """(document, section) for every section each citation in ``text`` names."""
    return [(f"{document}.md", section)
            for document, sections in ((m.group(1), m.group(2)) for m in CITATION.finditer(text))
            for section in SECTION.findall(sections)]


def test_the_cited_documents_have_numbered_sections() -> None:
    assert {"1", "2", "3", "4", "5", "6", "7", "8", "9", "8.1", "8.2"} <= _sections("rules.md")
    assert {"1", "2", "3", "4"} <= _sections("sources.md")


def test_the_citation_pattern_reads_each_form() -> None:
    text = ("docs/rules.md §4; docs/rules.md §1-§7; docs/rules.md §8 and §9; "
            "docs/sources.md §2; [rules.md](rules.md) §8.1; docs/rules.md §5, §6")
    assert citations(text) == [
        ("rules.md", "4"), ("rules.md", "1"), ("rules.md", "7"), ("rules.md", "8"),
        ("rules.md", "9"), ("sources.md", "2"), ("rules.md", "8.1"), ("rules.md", "5"),
        ("rules.md", "6")]


def test_every_citation_names_a_section_that_exists() -> None:
    sections = {name: _sections(name) for name in CITED}
    found, broken = 0, []
    for path in _project_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for document, section in citations(text):
            found += 1
            if section not in sections[document]:
                broken.append(f"{path.relative_to(ROOT)}: docs/{document} §{section}")
    assert broken == [], "citations of sections that do not exist:\n" + "\n".join(broken)
    assert found >= 50, f"only {found} citations found: is the pattern still right?"


def test_a_document_s_own_section_references_exist() -> None:
    for name in CITED:
        text = CITATION.sub("", (DOCS / name).read_text(encoding="utf-8"))
        missing = sorted(set(SECTION.findall(text)) - _sections(name))
        assert missing == [], f"docs/{name} refers to its own sections {missing}, which it lacks"


def test_nothing_cites_a_document_outside_the_repository() -> None:
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in _project_files()
             for number, line in enumerate(
                 path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if OUTSIDE.search(line)]
    assert found == [], "cite docs/rules.md or docs/sources.md instead:\n" + "\n".join(found)


def _anchors(path: Path) -> set[str]:
    """The anchors a Markdown renderer gives the headings of ``path``."""
    headings = re.findall(r"^#{1,6} (.+)$", path.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in headings}


def test_every_relative_link_of_the_documents_resolves() -> None:
    broken = []
    for path in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = path.parent / file if file else path
            if not linked.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == [], "links to files or headings that do not exist:\n" + "\n".join(broken)


def _constant_rows() -> list[tuple[str, str]]:
    """(dotted name, value literal) of every constants-table row of docs/sources.md."""
    text = (DOCS / "sources.md").read_text(encoding="utf-8")
    return re.findall(r"^\| `(planner\.[\w.]+)` \| `([^`]+)` \|", text, re.M)


def test_the_sources_page_lists_constants() -> None:
    names = [name for name, _ in _constant_rows()]
    assert len(names) >= 10 and len(set(names)) == len(names)


@pytest.mark.parametrize(("name", "literal"), _constant_rows())
def test_each_constant_on_the_sources_page_is_the_code_s(name: str, literal: str) -> None:
    module, _, attribute = name.rpartition(".")
    value = getattr(importlib.import_module(module), attribute)
    assert value == ast.literal_eval(literal), (
        f"docs/sources.md says {name} is {literal}, the code has {value!r}: update the row "
        "and its source")


def _number(value: float | int | None, digits: int | None = None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}" if digits is not None else f"{value:g}"


def catalog_table() -> str:
    """The GPU table of docs/sources.md §1, from the shipped catalog."""
    from planner.models.gpus import load_gpu_catalog

    lines = ["| kind | memory_bytes | bandwidth (bytes/s) | bandwidth source | $/h | "
             "price source | price date | failures/yr | repair h |",
             "|---|---:|---:|---|---:|---|---|---:|---:|"]
    for gpu in load_gpu_catalog():
        cells = [f"`{gpu.kind}`", _number(gpu.memory_bytes),
                 _number(gpu.memory_bandwidth_bytes_per_s), gpu.memory_bandwidth_source or "-",
                 _number(gpu.price_per_hour, 2), gpu.price_source or "-",
                 str(gpu.price_date or "-"), _number(gpu.annual_failure_rate),
                 _number(gpu.repair_hours)]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def test_the_gpu_table_is_the_shipped_catalog() -> None:
    text = (DOCS / "sources.md").read_text(encoding="utf-8")
    shown = text.split(GPU_START)[1].split(GPU_END)[0].strip()
    assert shown == catalog_table(), (
        "docs/sources.md §1's GPU table differs from planner/data/gpus.toml; replace it with "
        "the output of `python tests/test_docs.py`")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(catalog_table())


# -- the examples -----------------------------------------------------------------------------
# Every Python example in the README and docs/ runs, and every command-line example runs
# and succeeds, unless the line before its block says why it cannot run here:
# <!-- not run: needs a Dask scheduler -->. A block whose last statement is an expression
# followed by a comment holding a Python literal (# (262144, 4)) must give that value.

BLOCK = re.compile(r"(?:<!-- not run: (?P<reason>[^>]+?) -->\n)?```(?P<lang>\w+)\n(?P<code>.*?)```",
                   re.S)
PLANNER_PATH = re.compile(r"\bplanner(?:\.[A-Za-z_]\w*)+")


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def _blocks(language: str) -> list[tuple[str, int, str, str | None]]:
    """(document, line, code, reason not run) of every ``language`` block."""
    found = []
    for path in _documents():
        text = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            if match.group("lang") == language:
                line = text.count("\n", 0, match.start("code")) + 1
                found.append((path.relative_to(ROOT).as_posix(), line, match.group("code"),
                              match.group("reason")))
    return found


def _units() -> set[str]:
    """The modules an example may name: the package and every Layout row's module."""
    from tests.test_architecture import layout_rows

    return {"planner", *(f"planner.{row.unit}" for row in layout_rows().values()
                         if row.unit != "planner")}


def _module_and_names(dotted: str) -> tuple[str, list[str]]:
    """``planner.sweep.grid_from_axes`` -> (``planner.sweep``, [``grid_from_axes``])."""
    parts = dotted.split(".")
    module = parts[0]
    for index, part in enumerate(parts[1:], 1):
        try:
            importlib.import_module(f"{module}.{part}")
        except ModuleNotFoundError:
            return module, parts[index:]
        module = f"{module}.{part}"
    return module, []


def test_every_planner_name_the_documents_use_exists() -> None:
    """Each ``planner.x.y`` in a document's code names something that exists; in the README
    and the guides (not rules.md and sources.md, which say where in the code each rule and
    figure lives) it is a public name: one level below the package or a Layout unit."""
    units = _units()
    problems = []
    for path in _documents():
        public = path.name not in CITED
        text = path.read_text(encoding="utf-8")
        spans = re.findall(r"```\w*\n.*?```|`[^`\n]+`", text, re.S)
        for dotted in sorted({m for span in spans for m in PLANNER_PATH.findall(span)}):
            module, names = _module_and_names(dotted)
            if public and module not in units:
                problems.append(f"{path.name}: {dotted} names module {module}, which is not "
                                "public (export the name from its package)")
                continue
            value: object = importlib.import_module(module)
            for name in names:
                if not hasattr(value, name):
                    problems.append(f"{path.name}: {dotted}: {module} has no {'.'.join(names)}")
                    break
                value = getattr(value, name)
    assert problems == [], "\n".join(problems)


def _expected(code: str) -> tuple[str, object] | None:
    """The code before a trailing "# (value)" comment, and that value."""
    body, _, comment = code.rstrip().partition("\n# (")
    if not comment:
        return None
    return body, ast.literal_eval("(" + comment.replace("\n#", "\n"))


@pytest.mark.parametrize(("document", "line", "code", "reason"), _blocks("python"),
                         ids=[f"{d}:{n}" for d, n, _, _ in _blocks("python")])
def test_each_python_example_runs(document: str, line: int, code: str, reason: str | None,
                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if reason is not None:
        pytest.skip(f"{document}:{line}: {reason}")
    # Examples name the shipped files as data/...; their output files land in tmp_path.
    (tmp_path / "data").symlink_to(ROOT / "data")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "example"}
    expected = _expected(code)
    if expected is None:
        exec(compile(code, f"{document}:{line}", "exec"), namespace)
        return
    tree = ast.parse(expected[0])
    last = tree.body.pop()
    assert isinstance(last, ast.Expr), (
        f"{document}:{line}: the commented value follows no expression")
    exec(compile(tree, f"{document}:{line}", "exec"), namespace)
    value = eval(compile(ast.Expression(last.value), f"{document}:{line}", "eval"), namespace)
    assert value == expected[1], f"{document}:{line}: the example gives {value!r}"


def _commands() -> list[tuple[str, int, str, str | None]]:
    """Each ``planner ...`` line of the bash blocks (continuations joined)."""
    found = []
    for document, line, code, reason in _blocks("bash"):
        joined = code.replace("\\\n", " ")
        for offset, text in enumerate(joined.splitlines()):
            command = text.split("  #")[0].split(" # ")[0].strip()
            command = command.removeprefix(".venv/bin/")
            if command.startswith("planner "):
                found.append((document, line + offset, command, reason))
    return found


@pytest.mark.slow
@pytest.mark.parametrize(("document", "line", "command", "reason"), _commands(),
                         ids=[f"{d}:{n}" for d, n, _, _ in _commands()])
def test_each_command_line_example_succeeds(document: str, line: int, command: str,
                                            reason: str | None, tmp_path: Path) -> None:
    if reason is not None:
        pytest.skip(f"{document}:{line}: {reason}")
    (tmp_path / "data").symlink_to(ROOT / "data")
    (tmp_path / "validation").symlink_to(ROOT / "validation")  # the measured GPU kinds
    argv = [str(Path(sys.executable).with_name("planner")), *shlex.split(command)[1:]]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{document}:{line}: {command}\n{done.stderr}"


def test_the_command_line_page_lists_every_command() -> None:
    from planner.cli import COMMANDS

    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `planner (\w+)", text, re.M))
    assert listed == {command.NAME for command in COMMANDS}
