"""End to end in the Notebook front-end (Notebook 7, ``jupyter notebook``): the workbench
opened already run in its kernel, on a copy of the notebook, and every kind of edit
checked against what the charts on the page show — the same steps as in JupyterLab and
Voilà.

One Notebook server and one workbench page for the whole module.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import workbench_scenarios as scenarios
from browser_support import (
    PAGE_MS,
    REPO,
    PageWatch,
    free_port,
    launched_browser,
    page_errors,
)

from planner.workbench.serve import WORKBENCH, LabServer, copy_notebooks, planned_lab

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def notebook_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    root = tmp_path_factory.mktemp("notebook")
    notebooks = copy_notebooks(root / "notebooks")
    scenarios.place_gguf(notebooks)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        JUPYTER_CONFIG_DIR=str(root / "config"), PLANNER_WORKSPACE=str(root / "workspace"))
    with (root / "notebook.log").open("wb") as log, planned_lab(
            notebooks, free_port(), log=log, env=env, app="notebook") as server:
        yield server


@pytest.fixture(scope="module")
def workbench(notebook_server: LabServer) -> Iterator[tuple[Any, PageWatch]]:
    with launched_browser() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors = page_errors(page)
        page.goto(notebook_server.url(WORKBENCH), timeout=PAGE_MS,
                  wait_until="domcontentloaded")
        assert "/notebooks/" in page.url
        page.locator(".wb-summary").get_by_text("5 stages").wait_for(timeout=PAGE_MS)
        yield page, errors
        page.close()
        assert errors.problems() == []


@pytest.mark.parametrize("check", scenarios.PAGE_CHECKS, ids=scenarios.PAGE_CHECK_IDS)
def test_the_charts_show_what_the_planner_computes(workbench: tuple[Any, PageWatch],
                                                   check: Callable[[Any], None]) -> None:
    page, watch = workbench
    scenarios.run_page_check(page, watch, check, "notebook")
