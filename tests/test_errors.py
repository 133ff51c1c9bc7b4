"""One error hierarchy: every error is a CodedError, each code belongs to one class,
docs/errors.md's error table lists exactly the codes there are, and the tree drawn in
planner/errors.py's docstring is the tree of classes there is."""

from __future__ import annotations

import ast
import importlib
import pickle
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import planner
import planner.errors
from planner.errors import CodedError, InvalidInput, PlanError

ROOT = Path(__file__).resolve().parents[1]
ERRORS = ROOT / "docs" / "errors.md"


def _all_error_classes() -> list[type[CodedError]]:
    # Import every module so that every subclass is defined, wherever it lives.
    for module in pkgutil.walk_packages(planner.__path__, "planner."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: list[type[CodedError]] = []
    pending = [CodedError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


@dataclass(frozen=True)
class Drawn:
    """One class of the error tree: its parent (None for the root), the module that
    defines it, and whether it is a base without codes of its own."""

    parent: str | None
    module: str
    base: bool


_TREE_LINE = re.compile(r"^    (?P<indent>(?:  )*)\* (?P<name>\w+)(?P<base> \(base\))? +"
                        r"(?P<module>planner[\w.]*)$")


def drawn_tree(docstring: str) -> dict[str, Drawn]:
    """The tree drawn in ``docstring``: the indented block of ``* Name  module`` lines,
    two spaces deeper for each level."""
    lines = docstring.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    * "))
    tree: dict[str, Drawn] = {}
    ancestors: list[str] = []
    for line in lines[start:]:
        if not line.strip():
            break
        match = _TREE_LINE.match(line)
        assert match, f"planner/errors.py: a line of the tree is not `* Name  module`: {line!r}"
        depth = len(match["indent"]) // 2
        assert depth <= len(ancestors), f"planner/errors.py: {line.strip()!r} skips a level"
        del ancestors[depth:]
        name = match["name"]
        assert name not in tree, f"planner/errors.py: {name} is drawn twice"
        tree[name] = Drawn(ancestors[-1] if ancestors else None, match["module"],
                           match["base"] is not None)
        ancestors.append(name)
    return tree


def real_tree() -> dict[str, Drawn]:
    tree: dict[str, Drawn] = {}
    for cls in _all_error_classes():
        parents = [base for base in cls.__bases__ if issubclass(base, CodedError)]
        assert cls is CodedError or len(parents) == 1, f"{cls.__name__} has {parents}"
        assert cls.__name__ not in tree, f"two error classes are named {cls.__name__}"
        tree[cls.__name__] = Drawn(parents[0].__name__ if parents else None, cls.__module__,
                                   not cls.__dict__.get("codes"))
    return tree


def tree_differences(drawn: dict[str, Drawn], real: dict[str, Drawn]) -> list[str]:
    problems = [f"{name} is drawn but no such class exists" for name in drawn
                if name not in real]
    problems += [f"{name} (under {real[name].parent}, in {real[name].module}) is not drawn"
                 for name in real if name not in drawn]
    problems += [f"{name} is drawn as {drawn[name]} but is {real[name]}"
                 for name in drawn.keys() & real.keys() if drawn[name] != real[name]]
    return sorted(problems)


def _readme_codes() -> dict[str, str]:
    text = ERRORS.read_text()
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \|", text, re.M)
    assert rows, "docs/errors.md has no error table"
    return dict(rows)


def test_coded_error_is_exported() -> None:
    assert planner.CodedError is CodedError
    assert "CodedError" in planner.__all__


def test_every_code_belongs_to_one_class_and_is_in_the_readme() -> None:
    owner: dict[str, str] = {}
    for cls in _all_error_classes():
        own = cls.__dict__.get("codes", ())
        for code in own:
            assert code not in owner, f"{code} is a code of {owner[code]} and {cls.__name__}"
            owner[code] = cls.__name__
    assert {"InvalidInput", "InvalidSize", "InvalidField", "CommandLineError",
            "InvalidEditorValue", "InvalidFenceInput"} <= set(owner)
    assert _readme_codes() == owner


def test_no_error_class_redefines_the_shared_parts() -> None:
    for cls in _all_error_classes()[1:]:
        assert issubclass(cls, CodedError)
        for name in ("code", "message", "to_dict"):
            assert name not in cls.__dict__, f"{cls.__name__} redefines {name}"


def test_no_other_exception_classes_in_the_package() -> None:
    """An exception class outside the hierarchy would escape the CLI's handlers."""
    for path in (ROOT / "planner").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.name != "CodedError":
                bases = {ast.unparse(base) for base in node.bases}
                assert not bases & {"Exception", "ValueError", "TypeError", "RuntimeError",
                                    "OSError"}, f"{path}: {node.name} bypasses CodedError"


def test_literal_codes_are_the_classes_own() -> None:
    """Every ``SomeError("Code", ...)`` in the source names a code of that class."""
    classes = {cls.__name__: cls for cls in _all_error_classes()}
    seen = 0
    for path in (ROOT / "planner").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in classes and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and len(classes[node.func.id].codes) > 1):
                assert node.args[0].value in classes[node.func.id].codes, (
                    f"{path}:{node.lineno}: {node.func.id} has no code {node.args[0].value!r}")
                seen += 1
    assert seen > 50


def test_a_code_outside_the_class_is_refused() -> None:
    with pytest.raises(TypeError, match="PlanError has no code 'InvalidInput'"):
        PlanError("InvalidInput", "x")
    with pytest.raises(TypeError):
        CodedError("Anything", "x")


def test_errors_survive_pickling() -> None:
    error = InvalidInput("nodes[1].detected_vram_bytes", "must be at least 0", value=-1,
                         node_id="b")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is InvalidInput
    assert copy.to_dict() == error.to_dict() and str(copy) == str(error)
    assert copy.field == "nodes[1].detected_vram_bytes"


def test_the_drawn_error_tree_is_the_tree_of_classes() -> None:
    assert planner.errors.__doc__
    drawn = drawn_tree(planner.errors.__doc__)
    assert tree_differences(drawn, real_tree()) == [], (
        "redraw the tree in planner/errors.py's docstring")
    assert len(drawn) == len(_all_error_classes()) > 20
    said = re.search(r"carry no code of their own and are there to be caught: (.*?)\(",
                     " ".join(ERRORS.read_text().split()))
    assert said, "docs/errors.md no longer names the classes that carry no code"
    assert set(re.findall(r"`(\w+)`", said[1])) == {
        name for name, drawn_class in drawn.items() if drawn_class.base}


def test_a_tree_drawn_wrong_is_reported() -> None:
    assert planner.errors.__doc__
    text = planner.errors.__doc__
    moved = text.replace("        * InvalidInput           planner.errors",
                         "      * InvalidInput           planner.errors")
    unmarked = text.replace("* FenceError (base)", "* FenceError")
    missing = text.replace("      * UserError                planner.cli._common\n", "")
    invented = text.replace("      * UserError ", "      * UsersError")
    real = real_tree()
    assert tree_differences(drawn_tree(moved), real) == [
        "InvalidInput is drawn as Drawn(parent='CodedError', module='planner.errors', "
        "base=False) but is Drawn(parent='PlanError', module='planner.errors', base=False)"]
    assert tree_differences(drawn_tree(unmarked), real) == [
        "FenceError is drawn as Drawn(parent='CodedError', module='planner.fence.errors', "
        "base=False) but is Drawn(parent='CodedError', module='planner.fence.errors', "
        "base=True)"]
    assert tree_differences(drawn_tree(missing), real) == [
        "UserError (under CodedError, in planner.cli._common) is not drawn"]
    assert tree_differences(drawn_tree(invented), real) == [
        "UserError (under CodedError, in planner.cli._common) is not drawn",
        "UsersError is drawn but no such class exists"]
    with pytest.raises(AssertionError, match="skips a level"):
        drawn_tree(text.replace("      * AvailabilityError", "        * AvailabilityError"))
