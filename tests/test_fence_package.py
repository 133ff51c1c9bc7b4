"""What ``import planner.fence`` gives and what it costs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import planner.fence

HEAVY = ("pandas", "planner.fence.simulator", "planner.fence.scenarios",
         "planner.fence.coordinator", "planner.fence.check")


def test_importing_the_fence_loads_neither_pandas_nor_the_simulator() -> None:
    # ``planner`` itself is imported first: what the fence adds to it is what counts.
    script = (
        "import sys\n"
        "import planner.errors\n"
        "before = set(sys.modules)\n"
        "import planner.fence\n"
        "added = set(sys.modules) - before\n"
        f"heavy = {HEAVY!r}\n"
        "print(';'.join(sorted(m for m in added if m.startswith('planner.'))))\n"
        "print(';'.join(sorted(m for m in sys.modules\n"
        "                      if any(m == h or m.startswith(h + '.') for h in heavy[1:]))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    fence_modules, heavy = done.stdout.split("\n")[:2]
    assert heavy == ""
    assert set(fence_modules.split(";")) <= {
        "planner.fence", "planner.fence.claims", "planner.fence.errors",
        "planner.fence.runtime", "planner._validate"}
    for name in fence_modules.split(";"):
        source = Path(importlib.util.find_spec(name).origin).read_text()
        assert "import pandas" not in source and "import numpy" not in source, name


def test_the_top_level_is_the_fence_and_the_stage_runtime() -> None:
    # docs/rules.md §8 and §9; the simulator, scenarios and checker are submodules.
    assert set(planner.fence.__all__) == {
        "ClaimDecision", "ClaimFence", "ClaimKey", "CoordinatorClaim", "GenerationRef",
        "LoadClaimRef", "LoadDecision", "decide_claim", "decide_load", "quorum_requirement",
        "same_claim_epoch", "StageRuntime", "StageWork", "StopDecision", "StopRequest",
        "decide_stop", "FenceError", "InvalidFenceInput",
    }
    for name in planner.fence.__all__:
        assert getattr(planner.fence, name) is not None


CHECK_LAYERS = ("configuration", "model", "_properties", "report", "exploration", "__main__")


def test_the_checker_package_imports_in_one_direction() -> None:
    # Each module of planner.fence.check may import only the modules listed before it, so
    # the configuration and the model never depend on how results are searched or saved.
    import ast

    package = Path(planner.fence.__file__).parent / "check"
    assert sorted(p.stem for p in package.glob("*.py")) == sorted((*CHECK_LAYERS, "__init__"))
    for position, name in enumerate(CHECK_LAYERS):
        tree = ast.parse((package / f"{name}.py").read_text())
        imported = {node.module.rsplit(".", 1)[1] for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module
                    and node.module.startswith("planner.fence.check.")}
        assert imported <= set(CHECK_LAYERS[:position]), (name, imported)


def test_the_checker_loads_no_widget_or_plotting_library() -> None:
    script = ("import sys, planner.fence.check, planner.fence.check.__main__\n"
              "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in\n"
              "    {'ipywidgets', 'plotly', 'anywidget', 'IPython', 'matplotlib'})))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == ""
