"""environment.yml installs what pyproject.toml declares, at the same lowest versions."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# pyproject's "dask[distributed]" is two packages on conda-forge.
CONDA_SPLITS = {"dask[distributed]": ("dask", "distributed")}
REQUIREMENT = re.compile(r"^([A-Za-z0-9_.\[\]-]+)\s*(.*)$")


def _requirements(lines: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in lines:
        match = REQUIREMENT.match(line.strip())
        assert match, f"unreadable requirement {line!r}"
        name, bound = match.group(1).lower().replace("_", "-"), match.group(2).strip()
        for part in CONDA_SPLITS.get(name, (name,)):
            found[part] = bound
    return found


def test_environment_yml_matches_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _requirements(project["dependencies"]
                             + project["optional-dependencies"]["test"])
    text = (ROOT / "environment.yml").read_text()
    listed = [line.strip()[2:] for line in text.split("\ndependencies:", 1)[1].splitlines()
              if line.strip().startswith("- ")]
    environment = _requirements([item for item in listed
                                 if item not in ("pip", "pip:", "-e .")
                                 and not item.startswith("python")])
    assert environment == declared
