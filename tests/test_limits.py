"""Each input cap and shared default is defined once, in planner.limits."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import planner
from planner import limits
from planner.cli import build_parser

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


def test_no_text_writes_the_default_cache_type_itself() -> None:
    """Help and messages name the default cache type from the constant (docstrings may
    show a file that names it)."""
    found = []
    for path, tree in _modules():
        keys = {id(key) for node in ast.walk(tree) if isinstance(node, ast.Dict)
                for key in node.keys}
        docstrings = {id(node.value) for node in ast.walk(tree)
                      if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in keys and id(node) not in docstrings
                    and re.search(rf"default:?\s*{limits.DEFAULT_CACHE_TYPE}\b", node.value)):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}")
    assert found == []


def test_the_caps_keep_the_search_exact_in_64_bits() -> None:
    assert limits.MAX_LAYERS * limits.MAX_NODE_BYTES < 2**63
    assert limits.MAX_NODE_BYTES <= limits.MAX_BYTES


# Limits kept where they are: the GGUF format's own, as ggml names them; a DNS name's
# length; how much of a bad value a message quotes.
FORMAT_LIMITS = {"models/gguf_file.py": {"MAX_STRING_BYTES", "MAX_ARRAY_ITEMS",
                                         "MAX_TENSOR_DIMS", "MAX_TENSOR_NAME_BYTES"},
                 # llama.cpp's own bounds on the metadata the estimate reads.
                 "models/gguf_metadata.py": {"MAX_COUNT"},
                 "llamacpp/graph/reading.py": {"MAX_RESIDUAL_STREAMS"},
                 "llamacpp/families/qwen4exp.py": {"MAX_PLE_KERNEL"},
                 "fleet/_fields.py": {"_MAX_HOST_NAME"},
                 "_validate.py": {"MAX_SHOWN"},
                 # The fence's and its checker's bounds stay in the modules whose text
                 # fingerprints the saved checker results (planner/data/fence_check.json).
                 "fence/claims.py": {"MAX_FENCE_INT"},
                 "fence/check/configuration.py": {"MAX_STAGES", "MAX_COORDINATORS",
                                                  "MAX_TERM", "MAX_CLOCK_BOUND"}}


def test_every_cap_is_in_limits() -> None:
    found = []
    for path, tree in _modules():
        allowed = FORMAT_LIMITS.get(str(path.relative_to(PACKAGE)), set())
        for node in tree.body:
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            for target in targets:
                if (isinstance(target, ast.Name) and target.id.lstrip("_").startswith("MAX_")
                        and target.id not in allowed):
                    found.append(f"{path.relative_to(PACKAGE)}: {target.id}")
    assert found == []


def _options() -> list[tuple[str, argparse.Action]]:
    parser = build_parser()
    commands = next(action for action in parser._actions
                    if isinstance(action, argparse._SubParsersAction))
    return [(f"planner {name} {action.option_strings[0]}", action)
            for name, command in commands.choices.items() for action in command._actions
            if action.option_strings and action.help]


def test_the_command_line_states_each_default_as_it_is() -> None:
    """A default written in an option's help is the option's default (or the shared
    default it stands for), never a copy that can drift."""
    shared = {name: value for name, value in vars(limits).items() if name.isupper()}
    checked = 0
    for name, action in _options():
        stated = re.search(r"default:? ([0-9][0-9,.e+-]*|[a-z][a-z0-9_]*)\b", action.help)
        if stated is None or action.default is None:
            continue
        text = stated[1].rstrip(".,")
        default = action.default
        if isinstance(default, bool) or not isinstance(default, int | float | str):
            continue
        if isinstance(default, str):
            assert text == default or text not in map(str, shared.values()), name
        else:
            assert float(text.replace(",", "")) == default, f"{name}: help says {text}"
        checked += 1
    assert checked >= 10


def test_the_default_failure_figures_are_written_once() -> None:
    """The failure rate and repair time a node without its own figures gets are stated
    in help, tooltips and messages from planner.availability's constants, never as a
    copy of the number."""
    from planner.availability import DEFAULT_ANNUAL_FAILURE_RATE, DEFAULT_REPAIR_HOURS

    home = PACKAGE / "availability" / "reliability.py"
    written = {f"{DEFAULT_ANNUAL_FAILURE_RATE:g}", f"{DEFAULT_REPAIR_HOURS:g}"}
    found = []
    for path, tree in _modules():
        if path == home:
            continue
        docstrings = {id(node.value) for node in ast.walk(tree)
                      if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or id(node) in docstrings:
                continue
            value = node.value
            copied = (isinstance(value, float) and value == DEFAULT_ANNUAL_FAILURE_RATE) or (
                isinstance(value, str) and any(
                    re.search(rf"(?:else|default:?|defaults?\b.*?)\s*{re.escape(number)}\b",
                              value) for number in written))
            if copied:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {value!r}")
    assert found == []
