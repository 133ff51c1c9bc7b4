"""One error hierarchy: every error is a CodedError, each code belongs to one class, and
docs/errors.md's error table lists exactly the codes there are."""

from __future__ import annotations

import ast
import importlib
import pickle
import pkgutil
import re
from pathlib import Path

import pytest

import planner
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
