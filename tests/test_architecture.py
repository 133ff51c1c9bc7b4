"""The core stays pure: importing it loads no widget or plotting library."""

from __future__ import annotations

import subprocess
import sys

CORE = ["planner", "planner.planning", "planner.fence", "planner.models", "planner.units",
        "planner.fleet", "planner.reports.content", "planner.availability",
        "planner.simulation", "planner.sweep", "planner.performance", "planner.sizing"]


def test_core_imports_no_widgets_or_plotting() -> None:
    script = (
        "import importlib, sys\n"
        f"for name in {CORE!r}: importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules\n"
        "                if m.split('.')[0] in {'ipywidgets', 'plotly', 'anywidget', 'IPython'})\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == ""


def test_dask_is_touched_by_its_adapter_only() -> None:
    """``planner/sweep_dask.py`` is the one module that imports Dask; importing the
    sweep core does not load it."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "planner"
    importers = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0] in {"dask", "distributed"} for name in names):
                importers.append(path.relative_to(package).as_posix())
    assert sorted(set(importers)) == ["sweep_dask.py"]
    script = ("import sys, planner.sweep\n"
              "print(','.join(m for m in sys.modules if m.split('.')[0] in "
              "{'dask', 'distributed'}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == ""
