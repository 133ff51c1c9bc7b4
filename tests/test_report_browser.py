"""The HTML report in a real headless Chromium: it opens offline, draws every chart and
logs no console errors; a hostile node id runs no script.

Chromium comes from $PLANNER_CHROMIUM or ``chromium`` on PATH. Without it the test is
skipped locally and fails on CI (CI=true), where it must run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import launched_browser, layout_problems, read_chart, save_screenshot
from test_fleetfile import NUMBERS

from planner.fleet import FleetDocument, load_fleet, parse_fleet_toml
from planner.reports import write_report
from planner.reports.html import FIGURE_IDS

pytestmark = pytest.mark.browser

FLEETS = Path(__file__).resolve().parent.parent / "data" / "fleets"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with launched_browser() as launched:
        yield launched


def _open(browser: Any, path: Path) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    dialogs: list[str] = []
    page.on("console", lambda message: errors.append(message.text)
            if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("requestfailed", lambda request: errors.append(f"request failed {request.url}"))

    def dismiss(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    page.goto(path.as_uri(), wait_until="load")
    selector = ", ".join(f"#{div_id} .main-svg" for div_id in FIGURE_IDS)
    page.wait_for_function(
        f"document.querySelectorAll({selector!r}).length >= {len(FIGURE_IDS)}", timeout=30_000)
    return page, errors, dialogs


def _drawn(page: Any, div_id: str, selector: str) -> int:
    return int(page.evaluate(
        "([id, sel]) => document.getElementById(id).querySelectorAll(sel).length",
        [div_id, selector]))


def test_report_draws_every_chart_without_console_errors(browser: Any, tmp_path: Path) -> None:
    document = load_fleet(FLEETS / "qwen480b-5x80.toml")
    path = write_report(document, tmp_path / "report.html")
    page, errors, dialogs = _open(browser, path)
    try:
        for div_id in FIGURE_IDS:
            assert _drawn(page, div_id, ".main-svg") >= 1, div_id
        # Five nodes: every memory segment trace draws one bar per node.
        assert _drawn(page, "memory-figure", ".bars .point path") >= len(document.nodes)
        assert _drawn(page, "layers-figure", ".bars .point path") == len(document.nodes)
        assert _drawn(page, "candidates-figure", ".scatterlayer .point") >= 1
        assert page.title() == document.title
    finally:
        page.close()
    assert errors == []
    assert dialogs == []


def _fleet(nodes: list[tuple[str, str]], name: str | None = None) -> FleetDocument:
    """A 40-layer model on ``nodes`` (id, vram), read from TOML; ids may hold any text."""
    # A JSON string is a TOML basic string, quotes and backslashes escaped.
    header = f"name = {json.dumps(name)}\n" if name is not None else ""
    entries = "".join(f"[[nodes]]\nid = {json.dumps(node_id)}\nvram = {json.dumps(vram)}\n"
                      for node_id, vram in nodes)
    return parse_fleet_toml(header + NUMBERS + entries)


def test_hostile_node_id_is_text_in_the_browser(browser: Any, tmp_path: Path) -> None:
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    document = _fleet([(evil, "48 GiB"), ("plain", "24 GiB")], name=evil)
    path = write_report(document, tmp_path / "evil.html")
    page, errors, dialogs = _open(browser, path)
    try:
        first_cell = page.inner_text("#nodes-table tbody tr td")
        assert first_cell == evil
        assert page.inner_text("#title") == evil
        assert page.evaluate("document.querySelectorAll('img').length") == 0
    finally:
        page.close()
    assert dialogs == []
    assert errors == []


def test_markup_in_node_ids_draws_as_text_in_the_charts(browser: Any, tmp_path: Path) -> None:
    link = '<a href="https://evil.example/x">CLICKME</a>'
    style = '<span style="font-size:90px;fill:red">BIG</span>'
    document = _fleet([(link, "48 GiB"), (style, "48 GiB")])
    path = write_report(document, tmp_path / "markup.html")
    page, errors, dialogs = _open(browser, path)
    try:
        for div_id in ("memory-figure", "layers-figure"):
            assert page.evaluate(
                "id => document.getElementById(id).querySelectorAll('svg a').length",
                div_id) == 0, div_id
            ticks = page.evaluate(
                "id => Array.from(document.getElementById(id).querySelectorAll("
                "'.xtick text, .ytick text')).map(t => t.textContent)", div_id)
            joined = " ".join(ticks)
            assert link in joined or style in joined, ticks
        big = page.evaluate("Array.from(document.querySelectorAll('svg tspan, svg text'))"
                            ".filter(t => (t.getAttribute('style') || '').includes('90px'))"
                            ".length")
        assert big == 0
    finally:
        page.close()
    assert errors == []
    assert dialogs == []


def test_candidates_table_fits_its_page_and_names_every_column(
        browser: Any, tmp_path: Path) -> None:
    document = load_fleet(FLEETS / "qwen480b-10x80.toml")
    path = write_report(document, tmp_path / "report.html")
    page, errors, _ = _open(browser, path)
    try:
        widths = page.evaluate(
            "() => { const t = document.getElementById('candidates-table');"
            " return [t.scrollWidth, t.parentElement.clientWidth]; }")
        assert widths[0] <= widths[1], widths
        headers = page.evaluate("Array.from(document.querySelectorAll("
                                "'#candidates-table th')).map(h => h.textContent.trim())")
        assert all(headers) and "selected" in headers, headers
        # The reasons ("why not") are visible whole, not clipped by the scroll box.
        clipped = page.evaluate(
            "() => { const box = document.querySelector('#candidates .scroll')"
            ".getBoundingClientRect(); return Array.from(document.querySelectorAll("
            "'#candidates-table td.prose')).filter(td => td.textContent &&"
            " td.getBoundingClientRect().right > box.right + 1).length; }")
        assert clipped == 0
    finally:
        page.close()
    assert errors == []


# Every run of letters and digits in each cell of ``selector`` that the browser drew on
# more than one line: the word, and the lines it was split over.
_SPLIT_WORDS = """(selector) => {
  const split = [];
  for (const cell of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const match of node.textContent.matchAll(/[A-Za-z0-9]+/g)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (tops.size > 1) { split.push(match[0] + ' in ' + cell.textContent); }
      }
    }
  }
  return split;
}"""


@pytest.mark.parametrize("fleet", ["qwen480b-10x80.toml", "qwen480b-4x70.toml",
                                   "deepseek-v3-mixed-datacenter.toml"])
def test_no_table_breaks_a_word_at_1300_px(browser: Any, tmp_path: Path, fleet: str) -> None:
    """A window 1,300 px wide draws every report table with its words whole (the
    candidates table once read "fi/t/s", "sel/ect/ed", "NoValidTopolog/y")."""
    document = load_fleet(FLEETS / fleet)
    path = write_report(document, tmp_path / "report.html")
    page, errors, _ = _open(browser, path)
    try:
        page.set_viewport_size({"width": 1300, "height": 900})
        assert page.evaluate(_SPLIT_WORDS, "table th, table td") == []
        headers = page.evaluate("Array.from(document.querySelectorAll("
                                "'#candidates-table th')).map(h => h.textContent.trim())")
        assert "fits" in headers and "selected" in headers
        widths = page.evaluate(
            "() => { const t = document.getElementById('candidates-table');"
            " return [t.scrollWidth, t.parentElement.clientWidth]; }")
        assert widths[0] <= widths[1], widths
        # ... and the page itself does not scroll sideways.
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        save_screenshot(page, "#candidates .scroll", f"report-1300px-{fleet.removesuffix('.toml')}")
    finally:
        page.close()
    assert errors == []


@pytest.mark.parametrize("width", [1024, 1440])
def test_the_report_reads_as_the_workbench_does(browser: Any, tmp_path: Path,
                                                 width: int) -> None:
    """The report's candidates chart is coloured by the speed estimate (it was drawn
    uncoloured, "no latencies and no speed estimate: TPOT unknown", beside a TPOT for
    every candidate), and no chart's legend covers its title."""
    document = load_fleet(FLEETS / "qwen480b-5x80.toml")
    path = write_report(document, tmp_path / "report.html")
    page, errors, _ = _open(browser, path)
    try:
        page.set_viewport_size({"width": width, "height": 900})
        chart = read_chart(page, "#candidates")
        assert "coloured by estimated TPOT" in chart["drawn_title"], chart["drawn_title"]
        colours = page.evaluate("() => document.getElementById('candidates-figure')"
                                ".data[0].marker.color")
        assert colours and all(isinstance(value, (int, float)) for value in colours)
        problems = layout_problems(page, "body")
        assert problems == [], problems
        for div_id in FIGURE_IDS:
            save_screenshot(page, f"#{div_id}", f"report-{width}px-{div_id}")
    finally:
        page.close()
    assert errors == []


@pytest.mark.parametrize("width", [812, 1440])
def test_the_sizing_charts_measured_error_reads_whole(browser: Any, tmp_path: Path,
                                                      width: int) -> None:
    """The sizing chart's subtitle states the estimate's measured error of each kind's
    backend and memory type. Sized over kinds of three backends, it ran as one line past
    the chart's right side, cut off mid-word in the workbench at 1,440 px; each group is
    now a line of its own, read here as drawn at two page widths."""
    from planner.models import load_gpu_catalog, load_preset
    from planner.reports.sizing import render_html
    from planner.sizing import SizingTargets, size_fleet

    result = size_fleet(load_preset("llama-3.1-70b"), load_gpu_catalog(), SizingTargets(),
                        top=20)
    assert result.error_note.count(";") >= 2  # three backends and memory types
    path = tmp_path / "sizing.html"
    path.write_text(render_html(result, "sizing", "llama-3.1-70b"))
    page = browser.new_page(viewport={"width": width, "height": 900})
    try:
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_function("document.querySelectorAll('#sizing-figure .main-svg').length",
                               timeout=30_000)
        chart = read_chart(page, "body")
        assert chart["spilling_titles"] == [], chart["spilling_titles"]
        subtitle = page.locator("#sizing-figure .gtitle-subtitle tspan.line")
        lines = [subtitle.nth(i).text_content() for i in range(subtitle.count())]
        assert lines[0].startswith("Median error on published measurements")
        assert " ".join(lines).split() == result.error_note.replace(";", "").split()
    finally:
        page.close()
