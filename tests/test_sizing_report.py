"""The sizing report as HTML, Markdown and JSON: the same fleets as the sizing result,
speeds labelled as estimates, user text neutralised."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from planner.fleet import FleetFileError
from planner.models import load_gpu_catalog, load_preset
from planner.performance import ESTIMATE_NOTE
from planner.reports.sizing import fleet_table, render_sizing, write_sizing_report
from planner.sizing import SizingResult, SizingTargets, size_fleet

EVIL = "<script>alert(1)</script> | *x*"


@pytest.fixture(scope="module")
def result() -> SizingResult:
    catalog = [gpu for gpu in load_gpu_catalog() if gpu.kind in ("h100-sxm-80gb", "l40s")]
    return size_fleet(load_preset("llama-3.1-70b"), catalog,
                      SizingTargets(failures_tolerated=1), top=3)


class _Tables(HTMLParser):
    """The text of every table cell, row by row, by table id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.table: str | None = None
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "table":
            self.table = dict(attrs).get("id")
            self.tables[self.table] = []
        elif tag == "tr" and self.table:
            self.tables[self.table].append([])
        elif tag in ("td", "th") and self.table:
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None and self.table:
            self.tables[self.table][-1].append("".join(self.cell))
            self.cell = None
        elif tag == "table":
            self.table = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def test_json_report_is_the_result(result: SizingResult) -> None:
    data = json.loads(render_sizing(result, "json", model_name="Llama 70B"))
    assert data["fleets"] == json.loads(json.dumps([f.to_dict() for f in result.fleets]))
    assert [f["cost_per_hour"] for f in data["fleets"]] == sorted(
        f["cost_per_hour"] for f in data["fleets"])
    assert data["targets"]["failures_tolerated"] == 1
    assert ESTIMATE_NOTE in data["notes"]


def test_html_report_tables_are_the_fleet_table(result: SizingResult) -> None:
    parser = _Tables()
    parser.feed(render_sizing(result, "html", model_name=EVIL))
    expected = fleet_table(result.fleets)
    rows = parser.tables["fleets-table"]
    assert tuple(rows[0]) == expected.headers
    assert [tuple(r) for r in rows[1:]] == list(expected.rows)
    assert [tuple(r) for r in parser.tables["pareto-table"][1:]] == list(
        fleet_table(result.pareto).rows)
    question = dict(tuple(r) for r in parser.tables["question-table"])
    assert question["model"] == EVIL  # shown as text, not markup


def test_html_report_escapes_user_text(result: SizingResult) -> None:
    text = render_sizing(result, "html", model_name=EVIL, title=EVIL)
    assert "<script>alert(1)</script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "estimate" in text


def test_markdown_report_lists_the_fleets_and_neutralises_text(result: SizingResult) -> None:
    text = render_sizing(result, "md", model_name=EVIL)
    assert "<script>" not in text and "\\| \\*x\\*" in text
    for fleet in result.fleets:
        assert f"| {fleet.label} |" in text.replace("\\_", "_")
    assert f"- {ESTIMATE_NOTE}" in text


def test_write_picks_the_format_by_suffix(result: SizingResult, tmp_path: Path) -> None:
    for suffix in (".html", ".md", ".json"):
        path = write_sizing_report(result, tmp_path / f"sizing{suffix}")
        assert path.read_text() == render_sizing(result, suffix)
    with pytest.raises(FleetFileError) as caught:
        write_sizing_report(result, tmp_path / "sizing.txt")
    assert caught.value.code == "UnsupportedFormat"
    assert not (tmp_path / "sizing.txt").exists()
