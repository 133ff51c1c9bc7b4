"""The package as it is installed: environment.yml installs what pyproject.toml declares,
at the same lowest versions, and a wheel carries everything the package needs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# pyproject's "dask[distributed]" is two packages on conda-forge, and its msgpack is
# conda-forge's msgpack-python.
CONDA_SPLITS = {"dask[distributed]": ("dask", "distributed"), "msgpack": ("msgpack-python",)}
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


def test_the_build_requires_a_setuptools_that_reads_the_license_as_written() -> None:
    # An SPDX expression in project.license (PEP 639) is read from setuptools 77 on; an
    # older one refuses it, and a license table warns on every build from 77 on.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(pyproject["project"]["license"], str)
    assert not any(c.startswith("License ::") for c in pyproject["project"].get(
        "classifiers", ()))
    (setuptools,) = [r for r in pyproject["build-system"]["requires"]
                     if r.startswith("setuptools")]
    floor = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", setuptools)
    assert floor and int(floor.group(1)) >= 77, setuptools


def test_data_ships_inside_the_package() -> None:
    # data/ at the top of the repository is the package's own data folder.
    assert (ROOT / "data").resolve() == ROOT / "planner" / "data"
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["planner.data"]
    shipped = {path for pattern in patterns for path in (ROOT / "planner" / "data").glob(pattern)}
    kept = {path for path in (ROOT / "planner" / "data").rglob("*")
            if path.is_file() and path.suffix in (".toml", ".json")}
    assert kept and kept == shipped


@pytest.mark.slow
def test_the_wheel_installed_in_a_fresh_venv_plans_a_fleet_naming_a_preset(
        tmp_path: Path) -> None:
    # Built as a user would (pip wheel), installed without the checkout on the path; the
    # dependencies come from this environment's site-packages through a .pth entry, which
    # does not run that folder's own .pth files (so the checkout's editable install stays
    # out).
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--verbose", "--no-deps",
                            "-w", str(wheels), str(ROOT)], check=True, capture_output=True,
                           text=True, timeout=600)
    # setuptools says what it will stop accepting (a license table, license classifiers)
    # on every install: the project's metadata gives it nothing to say.
    said = build.stdout + build.stderr
    assert not re.search(r"deprecat", said, re.I), "\n".join(
        line for line in said.splitlines() if re.search(r"deprecat|warn", line, re.I))
    (wheel,) = wheels.glob("planner-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        carried = set(archive.namelist())
    data = ROOT / "planner" / "data"
    needed = {"planner/py.typed", *(path.relative_to(ROOT).as_posix()
                                    for path in data.rglob("*")
                                    if path.is_file() and path.suffix in (".toml", ".json"))}
    assert needed - carried == set(), "the wheel leaves out package data"
    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True)
    python = fresh / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path("
                           "'purelib'))"], check=True, capture_output=True, text=True)
    Path(site.stdout.strip(), "dependencies.pth").write_text(
        sysconfig.get_path("purelib") + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                    "--quiet", "--no-deps", str(wheel)], check=True, capture_output=True,
                   timeout=600)
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "fleet.toml").write_text('[model]\npreset = "llama-3.1-70b"\n'
                                     '[[nodes]]\nid = "gpu"\ncount = 2\nvram = "80 GiB"\n')
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PLANNER_DATA_DIR")}
    where = subprocess.run([str(python), "-c", "import planner; print(planner.__file__)"],
                           cwd=work, env=env, check=True, capture_output=True, text=True)
    assert where.stdout.startswith(str(fresh)), where.stdout
    presets = subprocess.run([str(fresh / "bin" / "planner"), "presets"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=120)
    assert presets.returncode == 0, presets.stderr
    assert "llama-3.1-70b" in presets.stdout
    plan = subprocess.run([str(fresh / "bin" / "planner"), "plan", "fleet.toml", "--json"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0, plan.stderr
    stages = json.loads(plan.stdout)["stages"]
    assert [stage["node_id"] for stage in stages] == ["gpu-00", "gpu-01"]
    assert stages[-1]["layer_end"] == 80
    example = subprocess.run([str(python), "-c", "from planner.fleet import example_fleet, "
                              "load_fleet; print(load_fleet(example_fleet('qwen480b-5x80'))"
                              ".title)"], cwd=work, env=env, capture_output=True, text=True)
    assert example.returncode == 0, example.stderr
    assert example.stdout.strip()
    # The GPU catalog and the checker's saved results load from the installed package (the
    # saved results only when the installed code is the code they were computed by).
    shipped = subprocess.run([str(python), "-c", "from planner.models.gpus import "
                              "load_gpu_catalog; from planner.fence.check import load_report; "
                              "print(len(load_gpu_catalog()), len(load_report().runs))"],
                             cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert shipped.returncode == 0, shipped.stderr
    kinds, results = (int(word) for word in shipped.stdout.split())
    assert kinds >= 10 and results >= 1


def test_the_version_is_written_once_in_pyproject() -> None:
    import planner

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert planner.__version__ == project["version"]
    assert project["version"] not in (ROOT / "planner" / "__init__.py").read_text()
