"""No test asserts how long something took: speed and memory targets are for the
benchmarks (``make bench``), where the machine's load is stated beside the numbers. A clock
may still bound a wait (a deadline for a server to start), as long as no assert reads it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CLOCKS = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
          "process_time", "process_time_ns", "thread_time", "default_timer"}


def _reads_a_clock(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            name = (func.attr if isinstance(func, ast.Attribute)
                    else func.id if isinstance(func, ast.Name) else "")
            if name in CLOCKS:
                return True
    return False


def _names(node: ast.AST) -> set[str]:
    return {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}


def _targets(node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {name for target in targets for name in _names(target)}


def timed_asserts(source: str) -> list[int]:
    """Lines of asserts that read a clock, directly or through names assigned from one
    (``start = perf_counter()``, ``elapsed = perf_counter() - start``), per function."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        assigns = [node for node in ast.walk(function)
                   if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
                   and node.value is not None]
        timed: set[str] = set()
        while True:
            grown = timed | {name for node in assigns
                             if node.value is not None and (
                                 _reads_a_clock(node.value) or _names(node.value) & timed)
                             for name in _targets(node)}
            if grown == timed:
                break
            timed = grown
        found += [node.lineno for node in ast.walk(function) if isinstance(node, ast.Assert)
                  and (_reads_a_clock(node) or _names(node) & timed)]
    return sorted(found)


def test_no_test_asserts_a_duration() -> None:
    offenders = [f"{path.name}:{line}" for path in sorted(TESTS.glob("*.py"))
                 for line in timed_asserts(path.read_text(encoding="utf-8"))]
    assert offenders == [], "timed asserts belong in benchmarks/: " + ", ".join(offenders)


@pytest.mark.parametrize("source", [
    "import time\ndef test_x():\n    start = time.perf_counter()\n    run()\n"
    "    elapsed = time.perf_counter() - start\n    assert elapsed < 1.0\n",
    "from time import monotonic\ndef test_x():\n    t0 = monotonic()\n    run()\n"
    "    assert monotonic() - t0 < 2\n",
    "import timeit\ndef test_x():\n    seconds: float = timeit.default_timer()\n"
    "    took = seconds\n    took += 1\n    assert took < 5\n",
])
def test_a_timed_assert_is_found(source: str) -> None:
    assert timed_asserts(source) != []


def test_a_deadline_that_no_assert_reads_is_allowed() -> None:
    source = ("import time\ndef test_x():\n    deadline = time.monotonic() + 60\n"
              "    while busy() and time.monotonic() < deadline:\n        time.sleep(0.1)\n"
              "    assert not busy()\n")
    assert timed_asserts(source) == []
