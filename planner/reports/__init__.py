"""Topology reports: one plan, explained, as self-contained HTML, Markdown or JSON.

:func:`build_report` gathers the content as plain data; :func:`write_report` renders it
in the format the file name asks for (``.html``, ``.md`` or ``.json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from planner.fleet import FleetDocument, FleetFileError, write_text_atomic
from planner.planning import PlanningInput
from planner.reports.content import ReportContent, build_report
from planner.reports.jsonreport import render_json
from planner.reports.markdown import render_markdown
from planner.reports.sizing import write_sizing_report

REPORT_SUFFIXES = (".html", ".htm", ".md", ".json")


def render_html(content: ReportContent) -> str:
    """The report as self-contained HTML (imports plotly only when asked for)."""
    from planner.reports.html import render_html as render

    return render(content)


def render_report(content: ReportContent, fmt: str) -> str:
    """``content`` as text in ``fmt`` (``html``, ``md`` or ``json``)."""
    key = "." + fmt.lower().lstrip(".")
    if key in (".html", ".htm"):
        return render_html(content)
    if key == ".md":
        return render_markdown(content)
    if key == ".json":
        return render_json(content)
    raise FleetFileError("UnsupportedFormat", f"reports are .html, .md or .json (got {fmt!r})")


def write_report(
    document_or_request: FleetDocument | PlanningInput | Mapping[str, Any],
    path: str | Path,
    *,
    title: str | None = None,
    model_name: str | None = None,
    now: datetime | None = None,
    memory_model: str = "design",
    source_edited: bool = False,
) -> Path:
    """Plan, build the report and write it to ``path`` (format by extension), atomically.

    ``memory_model`` and ``source_edited`` are :func:`build_report`'s. Returns the path
    written. A fleet with no valid topology still gives a report that
    says why.
    """
    destination = Path(path)
    suffix = destination.suffix.lower()
    if suffix not in REPORT_SUFFIXES:
        raise FleetFileError(
            "UnsupportedFormat",
            f"a report file ends in .html, .md or .json (got {destination.suffix or 'none'!r})",
            path=str(destination))
    content = build_report(document_or_request, model_name=model_name, title=title, now=now,
                           memory_model=memory_model, source_edited=source_edited)
    write_text_atomic(destination, render_report(content, suffix))
    return destination


__all__ = [
    "REPORT_SUFFIXES",
    "ReportContent",
    "build_report",
    "render_html",
    "render_json",
    "render_markdown",
    "render_report",
    "write_report",
    "write_sizing_report",
]
