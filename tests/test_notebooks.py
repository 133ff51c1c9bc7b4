"""Every notebook runs top to bottom headless, and is committed without outputs."""

from __future__ import annotations

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
    # A bare plotly figure is drawn by plotly's own front-end extension, which fails in
    # Voilà ("r.setData is not a function"): notebooks show figures with a Chart.
    bare = [index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"
            for output in cell.get("outputs", [])
            if "application/vnd.plotly.v1+json" in output.get("data", {})]
    assert bare == [], f"{path.name}: cells {bare} show a bare plotly figure; use Chart"
