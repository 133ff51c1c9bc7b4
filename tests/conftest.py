from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import settings

TESTS = Path(__file__).resolve().parent
DATA = TESTS / "data"
sys.path.insert(0, str(TESTS))

# Hypothesis's 200 ms deadline flags work that takes too long per example; on the
# 2-core machines that run the suite, under load, a fast example can take a few seconds,
# so the deadline is 5 s: loose enough not to flake, tight enough to catch a slow path.
# A test whose examples are legitimately longer sets its own deadline.
DEADLINE = timedelta(seconds=5)
settings.register_profile("default", deadline=DEADLINE)
settings.register_profile("ci", deadline=DEADLINE, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "default")


@pytest.fixture(autouse=True)
def workspace(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
               ) -> Path:
    """Every test saves fleets and reports in a workspace of its own, never in the
    person's (planner.workspace reads PLANNER_WORKSPACE)."""
    folder = tmp_path_factory.mktemp("workspace")
    monkeypatch.setenv("PLANNER_WORKSPACE", str(folder))
    return folder
