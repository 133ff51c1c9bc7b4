"""Each input cap and shared default is defined once, in planner.limits."""

from __future__ import annotations

import ast
from pathlib import Path

import planner
from planner import limits

PACKAGE = Path(planner.__file__).resolve().parent
NAMES = {name for name in vars(limits) if name.isupper()}


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8")))
            for path in sorted(PACKAGE.rglob("*.py")) if path.name != "limits.py"]


def test_no_module_defines_a_limit_of_its_own() -> None:
    defined = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            for target in targets:
                if isinstance(target, ast.Name) and target.id.lstrip("_") in NAMES:
                    defined.append(f"{path.relative_to(PACKAGE)}: {target.id}")
    assert defined == []


def test_the_default_cache_type_is_written_once() -> None:
    # The cache-type table may name "f16" as a key; no default or fallback may.
    found = []
    for path, tree in _modules():
        keys = {id(key) for node in ast.walk(tree) if isinstance(node, ast.Dict)
                for key in node.keys}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and node.value == limits.DEFAULT_CACHE_TYPE
                    and id(node) not in keys):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []


def test_the_caps_keep_the_search_exact_in_64_bits() -> None:
    assert limits.MAX_LAYERS * limits.MAX_NODE_BYTES < 2**63
    assert limits.MAX_NODE_BYTES <= limits.MAX_BYTES
