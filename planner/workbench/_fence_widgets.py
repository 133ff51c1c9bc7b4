"""What the claim fence's explorers share: their style, how a verdict and a branch of a
flowchart read, their input boxes, and a widget holding one chart."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from html import escape

import ipywidgets as widgets
import plotly.graph_objects as go

from planner.fence.claims import MAX_FENCE_INT
from planner.workbench.chart import Chart
from planner.workbench.problems import WorkbenchInputError
from planner.workbench.typed_values import parse_whole

STYLE = """
<style>
.fx-root { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; }
.fx-verdict { font-size: 15px; font-weight: 600; padding: 6px 10px; }
.fx-accepted { background: #e8f5ee; border-left: 4px solid #2e8b57; }
.fx-rejected { background: #fdecea; border-left: 4px solid #c44e52; }
.fx-note { color: #495057; padding: 2px 10px; }
.fx-event { font-family: ui-monospace, monospace; font-size: 12px; padding: 4px 10px;
  background: #f8f9fa; border-left: 4px solid #4c72b0; white-space: pre-wrap;
  word-break: normal; overflow-wrap: break-word; }
.fx-table { border-collapse: collapse; font-size: 12px; }
.fx-table th, .fx-table td { padding: 2px 8px; border-bottom: 1px solid #ddd; text-align: left; }
.fx-table th { background: #f4f4f4; }
</style>
"""

_WIDE = {"description_width": "150px"}
_FIELD = widgets.Layout(width="380px")
LEAST_FENCE_INT = -MAX_FENCE_INT - 1
"""The lowest a time in milliseconds may be typed (a clock may read before the epoch)."""


def text_box(description: str, value: str) -> widgets.Text:
    return widgets.Text(value=value, description=description, continuous_update=False,
                        layout=_FIELD, style=_WIDE)


def integer_box(description: str, value: int) -> widgets.Text:
    """A box for a term or a time in milliseconds, typed as text and read with
    :func:`read_integer`: a number box holds a JavaScript number, which loses the digits
    of one past 2**53, and clamps what is out of its range without a word."""
    return text_box(description, str(value))


def read_integer(box: widgets.Text, name: str, *, minimum: int = LEAST_FENCE_INT) -> int:
    """The whole number in ``box``, up to what the fence stores. Raises
    :class:`~planner.workbench.problems.WorkbenchInputError` naming ``name`` and what was
    typed."""
    number = parse_whole(box.value, name, label=name, minimum=minimum,
                         maximum=MAX_FENCE_INT)
    if number is None:
        raise WorkbenchInputError(name, "is required", label=name)
    return number


def path_text(
    path: Sequence[str],
    nodes: Sequence[tuple[str, str, float, float]],
    edges: Sequence[tuple[str, str, str]],
) -> str:
    """``Shape valid? --ok--> Existing claim? --no--> Accept claim``."""
    labels = {node: label.replace("<br>", " ") for node, label, _, _ in nodes}
    answers = {(start, end): label for start, end, label in edges}
    parts = [labels[path[0]]] if path else []
    for start, end in itertools.pairwise(path):
        answer = answers.get((start, end), "")
        parts.append(f"--{answer}--> {labels[end]}" if answer else f"--> {labels[end]}")
    return " ".join(parts)


def verdict_html(accepted: bool, headline: str, notes: Sequence[str] = ()) -> str:
    css = "fx-accepted" if accepted else "fx-rejected"
    body = "".join(f"<div class='fx-note'>{escape(note)}</div>" for note in notes)
    return f"<div class='fx-verdict {css}'>{escape(headline)}</div>{body}"


class ChartHolder:
    """A widget with one :class:`Chart`; ``figure`` is the figure it shows."""

    chart: Chart

    @property
    def figure(self) -> go.Figure:
        return self.chart.figure

