"""Where a person's own files go: saved fleets and exported reports.

The package's folder holds the shipped example fleets and the notebooks folder holds the
committed notebooks; neither is a place for a person's work, which would then be lost to
(or clobber) the next update. Saves and reports go to one workspace folder instead:

- ``PLANNER_WORKSPACE`` when it is set (``make lab`` and ``make app`` set it to
  ``workspace/`` in the project folder, which git ignores);
- otherwise ``$XDG_DATA_HOME/planner``, ``~/.local/share/planner`` when that is unset.

Fleets are saved in its ``fleets/`` folder and reports written to its ``reports/``.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

WORKSPACE_VARIABLE = "PLANNER_WORKSPACE"
"""The environment variable naming the workspace folder."""

EXAMPLE_FLEETS = Path(str(files("planner.data"))) / "fleets"
"""The example fleet files shipped in the package: read, never written."""

PACKAGE_FOLDER = Path(str(files("planner")))
"""The package's own folder: nothing is saved inside it."""


def workspace_dir() -> Path:
    """The workspace folder (see the module's docstring); it need not exist yet."""
    named = os.environ.get(WORKSPACE_VARIABLE, "").strip()
    if named:
        return Path(named).expanduser().absolute()
    data_home = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(data_home) if data_home else Path.home() / ".local" / "share"
    return (base / "planner").absolute()


def saved_fleets_dir() -> Path:
    """Where fleets are saved: the workspace's ``fleets/``."""
    return workspace_dir() / "fleets"


def reports_dir() -> Path:
    """Where reports are written by default: the workspace's ``reports/``."""
    return workspace_dir() / "reports"


def inside_package(path: str | Path) -> bool:
    """Whether ``path`` (resolved, links followed) lies inside the installed package."""
    return Path(path).resolve().is_relative_to(PACKAGE_FOLDER.resolve())
