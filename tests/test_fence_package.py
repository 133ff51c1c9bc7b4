"""What ``import planner.fence`` gives and what it costs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import planner.fence

HEAVY = ("pandas", "planner.fence.simulator", "planner.fence.scenarios",
         "planner.fence.coordinator", "planner.fence.checker", "planner.fence.check")


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
    # SPEC sections 8 and 9; the simulator, scenarios and checker are submodules.
    assert set(planner.fence.__all__) == {
        "ClaimDecision", "ClaimFence", "ClaimKey", "CoordinatorClaim", "GenerationRef",
        "LoadClaimRef", "LoadDecision", "decide_claim", "decide_load", "quorum_requirement",
        "same_claim_epoch", "StageRuntime", "StageWork", "StopDecision", "StopRequest",
        "decide_stop", "FenceError", "InvalidFenceInput",
    }
    for name in planner.fence.__all__:
        assert getattr(planner.fence, name) is not None
