"""Every notebook runs top to bottom headless, and is committed without outputs."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    with_outputs = [
        index for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert with_outputs == [], f"{path.name}: clear the outputs of cells {with_outputs}"


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path: Path, tmp_path: Path) -> None:
    # Run from a folder of its own, as `make lab` runs its copies from .run/notebooks:
    # a notebook finds the package's data wherever it runs.
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    errors = [
        output
        for cell in notebook.cells if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert errors == []
    assert unreadable_outputs(notebook) == [], path.name
    assert outputs_after_a_widget(notebook) == [], path.name
    # A bare plotly figure is drawn by plotly's own front-end extension, which fails in
    # Voilà ("r.setData is not a function"): notebooks show figures with a Chart.
    bare = [index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"
            for output in cell.get("outputs", [])
            if "application/vnd.plotly.v1+json" in output.get("data", {})]
    assert bare == [], f"{path.name}: cells {bare} show a bare plotly figure; use Chart"


# What a person reads must be words and units: a table's headers are not code names
# (``cost_per_hour``), a missing value says why (not ``<NA>`` or ``NaN``), and a result
# is not shown as a raw Python tuple, list or dict.
CODE_NAME = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
MISSING = re.compile(r"<NA>|&lt;NA&gt;|\bNaN\b|\bnan\b|\bNone\b")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def unreadable_outputs(notebook: nbformat.NotebookNode) -> list[str]:
    """Each output a person would read that is not in words, with its cell's number."""
    problems = []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = output.get("data", {})
            if WIDGET_VIEW in data:  # drawn as the widget, whose text is tested elsewhere
                continue
            html = data.get("text/html", "")
            text = output.get("text", "") if output.get("output_type") == "stream" else (
                "" if html else data.get("text/plain", ""))
            shown = html or text
            if MISSING.search(shown):
                problems.append(f"cell {index}: a missing value shown as "
                                f"{MISSING.search(shown).group()!r}")
            if text.lstrip()[:1] in ("(", "[", "{"):
                problems.append(f"cell {index}: a raw Python value: {text[:80]!r}")
            headers = re.findall(r"<th[^>]*>(.*?)</th>", html, re.S)
            named = [h for h in headers if CODE_NAME.search(re.sub(r"<[^>]+>", "", h))]
            if named:
                problems.append(f"cell {index}: table headers in code names: {named}")
    return problems


def outputs_after_a_widget(notebook: nbformat.NotebookNode) -> list[str]:
    """Cells that show something after a widget. Voilà's page (0.5, progressive rendering)
    draws a cell's outputs in order and, when a widget's model has not reached the page
    yet (a busy machine), defers the widget and drops every output after it: a sweep's
    table shown after its progress bar went missing. A widget is a cell's last output."""
    late = []
    for index, cell in enumerate(notebook.cells):
        outputs = cell.get("outputs", []) if cell.cell_type == "code" else []
        widgets = [n for n, output in enumerate(outputs)
                   if WIDGET_VIEW in output.get("data", {})]
        if widgets and widgets[0] < len(outputs) - 1:
            late.append(f"cell {index}: {len(outputs) - 1 - widgets[0]} outputs after a widget")
    return late
