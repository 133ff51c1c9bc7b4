"""End to end in JupyterLab: the workbench opened the way `make lab` opens it (already run
in its kernel, on a copy of the notebook), and the fencing stepper run from the page; every
check reads what the charts on the page show.

One JupyterLab server and one workbench page for the whole module.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
import workbench_scenarios as scenarios
from browser_support import (
    PAGE_MS,
    REPO,
    PageWatch,
    fencing_stepper_notebook,
    free_port,
    launched_browser,
    layout_problems,
    page_errors,
    save_screenshot,
    wait_until_all_drawn,
)

from planner.workbench.serve import NOTEBOOKS, WORKBENCH, LabServer, copy_notebooks, planned_lab

pytestmark = pytest.mark.browser

_FENCING_READY = """(path) => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  const kernel = panel && panel.sessionContext && panel.sessionContext.session
    && panel.sessionContext.session.kernel;
  return !!(kernel && panel.context.path === path && kernel.connectionStatus === 'connected'
    && panel.sessionContext.kernelDisplayStatus === 'idle');
}"""


def committed_notebooks() -> tuple[dict[str, bytes], str]:
    """The committed notebooks' bytes, and what ``git status`` says of them."""
    files = {path.name: path.read_bytes() for path in sorted(NOTEBOOKS.glob("*.ipynb"))}
    status = subprocess.run(["git", "status", "--porcelain", "--", "notebooks"], cwd=REPO,
                            capture_output=True, text=True, check=False).stdout
    return files, status


@pytest.fixture(scope="module")
def before() -> tuple[dict[str, bytes], str]:
    return committed_notebooks()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory,
        before: tuple[dict[str, bytes], str]) -> Iterator[LabServer]:
    root = tmp_path_factory.mktemp("lab")
    # The copies `make lab` makes (there in .run/notebooks).
    notebooks = copy_notebooks(root / "notebooks")
    scenarios.place_gguf(notebooks)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        JUPYTER_CONFIG_DIR=str(root / "config"), PLANNER_WORKSPACE=str(root / "workspace"))
    with (root / "lab.log").open("wb") as log, planned_lab(
            notebooks, free_port(), log=log, env=env,
            extra_arguments=["--LabApp.expose_app_in_browser=True",
                             f"--LabApp.workspaces_dir={root / 'workspaces'}"]) as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with launched_browser() as launched:
        yield launched


# Whether the notebook in front has unsaved changes, as its model and its tab say.
_UNSAVED = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  return {model: panel.context.model.dirty,
          tab: document.querySelectorAll('.lm-TabBar-tab.jp-mod-dirty').length};
}"""


def assert_saved(page: Any, what: str) -> None:
    """No unsaved-changes mark on the notebook, now and a moment later (a mark set by
    the page drawing itself comes within that moment)."""
    for _ in range(2):
        assert page.evaluate(_UNSAVED) == {"model": False, "tab": 0}, what
        page.wait_for_timeout(1500)


@pytest.fixture(scope="module")
def workbench(browser: Any, lab: LabServer) -> Iterator[tuple[Any, PageWatch]]:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors = page_errors(page)
    page.goto(lab.url(WORKBENCH), timeout=PAGE_MS, wait_until="domcontentloaded")
    # Nothing is run from the page: the workbench comes up planned.
    page.locator(".wb-summary").get_by_text("5 stages").wait_for(timeout=PAGE_MS)
    scenarios.charts_drawn(page, "as the page opens")
    assert_saved(page, "the workbench right after opening")
    yield page, errors
    page.close()
    assert errors.problems() == []


@pytest.mark.parametrize("check", scenarios.PAGE_CHECKS, ids=scenarios.PAGE_CHECK_IDS)
def test_the_charts_show_what_the_planner_computes(workbench: tuple[Any, PageWatch],
                                                   check: Callable[[Any], None]) -> None:
    page, watch = workbench
    scenarios.run_page_check(page, watch, check, "lab")


def test_fencing_stepper_redraws_on_next(browser: Any, lab: LabServer,
                                         tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors = page_errors(page)
    try:
        notebook = fencing_stepper_notebook(lab.root_dir)
        page.goto(lab.url(notebook, workspace="fencing"), timeout=PAGE_MS,
                  wait_until="domcontentloaded")
        # Run every cell once the notebook's own panel is in front with its kernel ready.
        page.wait_for_function(_FENCING_READY, arg=notebook, timeout=PAGE_MS)
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        scenarios.fencing_stepper(page, "lab")
        scenarios.fencing_folded_scenario(page, "lab")
    finally:
        page.close()
    assert errors.problems() == []


# Every code cell of the notebook in front has run (or the run stopped), and the kernel
# is idle: what its cells' outputs hold.
_RUN_ALL_DONE = """(path) => {
  const panel = window.jupyterapp.shell.currentWidget;
  if (!panel || panel.context.path !== path) { return null; }
  const status = panel.sessionContext.kernelDisplayStatus;
  const cells = [...panel.content.model.cells].filter(c => c.type === 'code');
  if (status !== 'idle' || cells.some(c => c.executionCount === null)) { return null; }
  return cells.map(c => [...c.outputs.toJSON()].map(o => o.output_type === 'error'
    ? 'error: ' + o.ename + ': ' + o.evalue : o.output_type));
}"""


@pytest.mark.parametrize("notebook", ["sizing.ipynb", "availability.ipynb"])
def test_run_all_in_the_copy_make_lab_opens(browser: Any, lab: LabServer,
                                             notebook: str) -> None:
    """Run All on the copy `make lab` works on (in a folder of its own, not the
    repository's notebooks/): every cell runs without an error, finding the package's
    data, every chart is drawn full size, and the notebook opens without unsaved changes."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors = page_errors(page)
    try:
        page.goto(lab.url(notebook, workspace=notebook.removesuffix(".ipynb")),
                  timeout=PAGE_MS, wait_until="domcontentloaded")
        page.wait_for_function(_FENCING_READY, arg=notebook, timeout=PAGE_MS)
        assert_saved(page, f"{notebook} right after opening")
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        outputs = page.wait_for_function(_RUN_ALL_DONE, arg=notebook,
                                         timeout=PAGE_MS * 3).json_value()
        failed = [kinds for kinds in outputs if any(k.startswith("error") for k in kinds)]
        assert failed == [], f"{notebook}: {failed}"
        charts = wait_until_all_drawn(page, f"{notebook} after Run All",
                                      timeout=PAGE_MS / 1000)
        for index in range(len(charts)):
            save_screenshot(page, ".planner-chart >> visible=true",
                            f"lab-{notebook.removesuffix('.ipynb')}-chart-{index}", index)
        # Read as a person sees it (the sizing notebook once broke "llama.cpp" in two).
        for width in scenarios.WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            wait_until_all_drawn(page, f"{notebook} at {width} px")
            problems = layout_problems(page, ".jp-OutputArea-output")
            assert problems == [], f"{notebook} at {width} px: {problems}"
        # No toast asking to fetch news from the internet covers the charts.
        assert page.get_by_text("official Jupyter news").count() == 0
    finally:
        page.close()
    assert errors.problems() == []


def test_committed_notebooks_stay_clean(workbench: tuple[Any, PageWatch], lab: LabServer,
                                        before: tuple[dict[str, bytes], str]) -> None:
    """After the page was run, edited and saved, the outputs are in the copy only."""
    page, _ = workbench
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    copy = nbformat.read(lab.root_dir / WORKBENCH, as_version=4)
    assert any(cell.get("outputs") for cell in copy.cells if cell.cell_type == "code")
    assert committed_notebooks() == before
    for name, data in before[0].items():
        notebook = nbformat.reads(data.decode(), as_version=4)
        assert all(not cell.get("outputs") for cell in notebook.cells
                   if cell.cell_type == "code"), name
