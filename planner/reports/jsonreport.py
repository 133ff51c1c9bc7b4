"""The report as JSON: the content's plain data, unchanged."""

from __future__ import annotations

import json

from planner.reports.content import ReportContent


def render_json(content: ReportContent) -> str:
    """The whole report as indented JSON (``plan`` is exactly docs/rules.md §7)."""
    return json.dumps(content.to_dict(), indent=2, ensure_ascii=False) + "\n"
