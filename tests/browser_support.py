"""What the browser tests share: Chromium, a Jupyter server per module, and reading what a
chart on the page shows.

Chromium comes from $PLANNER_CHROMIUM or ``chromium`` on PATH. Without it, or without
playwright, a browser test is skipped locally and fails under CI=true, where it must run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import nbformat
import pytest

from planner.workbench.serve import stop, voila_environment

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]
STARTUP_SECONDS = 120
PAGE_MS = 120_000
EDIT_SECONDS = 45.0


def _missing(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def chromium_path() -> str:
    """Chromium's path; fails under CI=true and skips elsewhere when there is none."""
    path = os.environ.get("PLANNER_CHROMIUM") or shutil.which("chromium")
    if not path or not Path(path).exists():
        _missing("no Chromium: install Debian's chromium package or set PLANNER_CHROMIUM")
    assert path is not None
    return path


def sync_playwright() -> Any:
    try:
        from playwright.sync_api import sync_playwright as start
    except ImportError as error:
        _missing(f"playwright is not installed: {error}")
    return start()


@contextmanager
def launched_browser() -> Iterator[Any]:
    executable = chromium_path()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS,
                                             headless=True)
        try:
            yield browser
        finally:
            browser.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fencing_stepper_notebook(directory: Path) -> str:
    """The fencing notebook's imports and its first two scenarios (the first open, the
    second made when opened), written to ``directory``; its name. (The whole notebook runs
    in the Voilà test; this keeps the run shorter.)"""
    notebook = nbformat.read(NOTEBOOKS / "fencing.ipynb", as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    wanted = {"ScenarioSection(1, opened=True)", "ScenarioSection(2)"}
    scenarios = [cell for cell in code if cell.source.strip() in wanted]
    if len(scenarios) != len(wanted):
        raise AssertionError(f"fencing.ipynb has no cells {sorted(wanted)}")
    notebook.cells = [code[0], *scenarios]
    path = directory / "fencing-stepper.ipynb"
    nbformat.write(notebook, path)
    return path.name


def notebook_dir(directory: Path) -> Path:
    """A folder with copies of the committed notebooks, so that a front-end saving outputs
    never touches them."""
    directory.mkdir(parents=True, exist_ok=True)
    for notebook in NOTEBOOKS.glob("*.ipynb"):
        shutil.copy(notebook, directory / notebook.name)
    return directory


@contextmanager
def jupyter_server(command: Sequence[str], port: int, log_path: Path,
                   cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run a Jupyter server (Voilà or JupyterLab) until the block ends."""
    env = voila_environment(dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])))
    env["JUPYTER_CONFIG_DIR"] = str(log_path.parent / "jupyter-config")
    env["PLANNER_WORKSPACE"] = str(log_path.parent / "workspace")
    env["JUPYTER_RUNTIME_DIR"] = str(log_path.parent / "jupyter-runtime")
    with log_path.open("wb") as log:
        process = subprocess.Popen(list(command), cwd=cwd, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"{command[0]} exited with {process.returncode}:\n"
                            f"{log_path.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{command[0]} did not listen on {port}:\n"
                                f"{log_path.read_text()}")
                time.sleep(0.3)
        yield process
    finally:
        stop(process)


def jupyter_bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


# -- reading charts ----------------------------------------------------------------------

# What the plotly graph div inside the element matching ``selector`` (the first, or the
# ``index``-th) holds and
# shows: its traces, its title as data and as drawn text, and how many graph divs there
# are (a stale one must not linger).
_READ_CHART = """([selector, index]) => {
  const root = document.querySelectorAll(selector)[index];
  const plots = root ? [...root.querySelectorAll('.js-plotly-plot')] : [];
  const visible = plots.filter(p => p.isConnected && p._fullLayout);
  if (visible.length === 0) { return {count: plots.length}; }
  const plot = visible[visible.length - 1];
  const traces = (plot.data || []).map(t => ({
    name: t.name, type: t.type, x: t.x, y: t.y, base: t.base, text: t.text,
    symbol: t.marker ? t.marker.symbol : undefined,
  }));
  const title = plot.layout && plot.layout.title
    ? (typeof plot.layout.title === 'string' ? plot.layout.title : plot.layout.title.text)
    : '';
  const drawn = plot.querySelector('.gtitle');
  const ticks = sel => [...plot.querySelectorAll(sel)].map(t => t.textContent);
  const box = plot.getBoundingClientRect();
  const svg = plot.querySelector('svg.main-svg');
  // Title and subtitle lines drawn past the chart's sides: cut off where a person reads.
  const spilling = [...plot.querySelectorAll('.infolayer .gtitle, .infolayer .gtitle-subtitle')]
    .flatMap(t => { const lines = t.querySelectorAll('tspan.line');
                    return lines.length ? [...lines] : [t]; })
    .filter(t => { const r = t.getBoundingClientRect();
                   return r.width > 0 && (r.right > box.right + 1 || r.left < box.left - 1); })
    .map(t => t.textContent);
  return {
    count: plots.length, traces: traces, title: title,
    drawn_title: drawn ? drawn.textContent : '',
    x_ticks: ticks('.xtick text'), y_ticks: ticks('.ytick text'),
    legend: ticks('.legendtext'),
    width: box.width, height: box.height,
    box_height: root.getBoundingClientRect().height,
    svg_width: svg ? Number(svg.getAttribute('width')) : 0,
    svg_height: svg ? Number(svg.getAttribute('height')) : 0,
    layout_height: (plot.layout && plot.layout.height) || 0,
    spilling_titles: spilling,
  };
}"""

# Narrower than this, a chart is a sliver: its bars and ticks cannot be read.
MIN_CHART_WIDTH = 360
# A chart's box may be this much higher than the chart (its padding): more is blank space
# on the page (a box stretched to a taller neighbour's height).
BOX_SLACK = 40


def drawn_problems(chart: dict[str, Any], min_width: float = MIN_CHART_WIDTH) -> list[str]:
    """What is wrong with how a chart is drawn (empty when it reads): its size on the
    page and the figure it drew, title lines that run past its sides, and tick labels
    with text on both axes."""
    problems = []
    if chart.get("count") != 1 or "traces" not in chart:
        return [f"{chart.get('count', 0)} charts drawn, not 1"]
    if chart["width"] < min_width or chart["svg_width"] < min_width:
        problems.append(f"drawn {chart['width']:.0f} px wide (figure {chart['svg_width']:.0f} "
                        f"px), below {min_width} px")
    if chart["layout_height"] and abs(chart["svg_height"] - chart["layout_height"]) > 1:
        problems.append(f"drawn {chart['svg_height']:.0f} px high, not its "
                        f"{chart['layout_height']} px")
    if chart["box_height"] > chart["height"] + BOX_SLACK:
        problems.append(f"its box is {chart['box_height']:.0f} px high for a chart drawn "
                        f"{chart['height']:.0f} px high: blank below it")
    for line in chart.get("spilling_titles", []):
        problems.append(f"title line cut off at the chart's side: {line[:80]!r}")
    for axis in ("x_ticks", "y_ticks"):
        if not [label for label in chart[axis] if label.strip()]:
            problems.append(f"no {axis.replace('_', ' ')} labels")
    return problems


def wait_until_drawn(page: Any, selector: str, what: str, timeout: float = EDIT_SECONDS,
                     min_width: float = MIN_CHART_WIDTH) -> dict[str, Any]:
    """Poll the chart in ``selector`` until it is drawn full size with labelled axes;
    fail saying how it is drawn."""
    deadline = time.monotonic() + timeout
    chart: dict[str, Any] = {}
    problems: list[str] = ["not read yet"]
    while time.monotonic() < deadline:
        chart = read_chart(page, selector)
        problems = drawn_problems(chart, min_width)
        if not problems:
            return chart
        time.sleep(0.1)
    pytest.fail(f"{selector} {what}: {'; '.join(problems)}")


def read_chart(page: Any, selector: str, index: int = 0) -> dict[str, Any]:
    return json.loads(json.dumps(page.evaluate(_READ_CHART, [selector, index])))


def wait_until_all_drawn(page: Any, what: str, selector: str = ".planner-chart",
                         at_least: int = 1, timeout: float = EDIT_SECONDS,
                         min_width: float = MIN_CHART_WIDTH) -> list[dict[str, Any]]:
    """Poll until at least ``at_least`` charts match ``selector`` and every one of them on
    show is drawn full size with labelled axes; what each shows."""
    deadline = time.monotonic() + timeout
    problems: list[str] = ["not read yet"]
    while time.monotonic() < deadline:
        shown = page.locator(selector)
        visible = [index for index in range(shown.count()) if shown.nth(index).is_visible()]
        charts = [read_chart(page, selector, index) for index in visible]
        problems = [f"chart {index}: {problem}" for index, chart in zip(visible, charts,
                                                                       strict=True)
                    for problem in drawn_problems(chart, min_width)]
        if len(visible) < at_least:
            problems.append(f"{len(visible)} charts on show, not {at_least}")
        if not problems:
            return charts
        time.sleep(0.2)
    pytest.fail(f"{what}: {'; '.join(problems)}")


def wait_for_chart(page: Any, selector: str, ready: Callable[[dict[str, Any]], bool],
                   what: str, timeout: float = EDIT_SECONDS) -> dict[str, Any]:
    """Poll the chart in ``selector`` until ``ready(chart)``; fail saying what it showed."""
    deadline = time.monotonic() + timeout
    chart: dict[str, Any] = {}
    while time.monotonic() < deadline:
        chart = read_chart(page, selector)
        if chart.get("count") == 1 and "traces" in chart:
            try:
                if ready(chart):
                    return chart
            except (KeyError, IndexError, TypeError):
                pass
        time.sleep(0.1)
    shown = {key: chart.get(key) for key in ("count", "title", "drawn_title", "x_ticks",
                                             "y_ticks")}
    traces = [{k: t.get(k) for k in ("name", "x", "y")} for t in chart.get("traces", [])]
    pytest.fail(f"{selector}: {what} not shown within {timeout:.0f} s; the chart shows "
                f"{shown} with traces {traces}")


def trace(chart: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in chart["traces"] if t.get("name") == name)


LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost"})


SHARED_MODULE_MISMATCH = re.compile(r"Unsatisfied version|No satisfying version")
"""A front-end extension built against another JupyterLab than the page's: it runs on its
own copies of JupyterLab's modules (webpack warns, the page goes on)."""


class PageWatch:
    """What went wrong on a page while it was open: uncaught script errors, console
    errors, extensions whose shared modules disagree with the page's, and requests to any
    host but this machine (a page must work offline: every asset is served locally)."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        self.foreign: list[str] = []
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))
        page.on("console", self._console)
        page.on("request", self._request)

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text}")
        elif message.type == "warning" and SHARED_MODULE_MISMATCH.search(message.text):
            self.errors.append(f"console warning: {message.text}")

    def _request(self, request: Any) -> None:
        url = urlsplit(request.url)
        if url.scheme in ("http", "https", "ws", "wss") and url.hostname not in LOCAL_HOSTS:
            self.foreign.append(request.url)

    def problems(self) -> list[str]:
        return [*self.errors, *(f"request to another host: {url}" for url in self.foreign)]


def page_errors(page: Any) -> PageWatch:
    """Start watching ``page``; :meth:`PageWatch.problems` lists what went wrong."""
    return PageWatch(page)


# -- screenshots kept as test artifacts ------------------------------------------------------

ARTIFACTS = Path(os.environ.get("PLANNER_TEST_ARTIFACTS") or REPO / ".artifacts" / "browser")
"""Where the browser tests keep a screenshot of each chart after each edit
($PLANNER_TEST_ARTIFACTS, default .artifacts/browser in the repository)."""


def save_screenshot(page: Any, selector: str, name: str, index: int = 0) -> Path:
    """A screenshot of the first (or ``index``-th) element matching ``selector``, kept as
    ``ARTIFACTS/<name>.png``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', name)}.png"
    page.locator(selector).nth(index).screenshot(path=str(path))
    return path


# -- what a person sees of the page's layout -----------------------------------------------

# Everything wrong with how the elements under ``root`` are laid out, as a person would
# see it: a chart's legend over its title (or subtitle), a title wider than its chart,
# inputs that overlap or are squashed below a readable height, a label cut short, a
# table column or a note past its box's visible edge (behind a horizontal scroll), and a
# word broken over two lines (a line may break after a hyphen, as in any text).
_LAYOUT_PROBLEMS = """(root) => {
  const problems = [];
  const roots = [...document.querySelectorAll(root)].filter(r => r.offsetParent);
  const box = e => e.getBoundingClientRect();
  const shown = e => { const b = box(e); return e.offsetParent !== null && b.width > 0
                                                 && b.height > 0; };
  const meet = (a, b) => a.left < b.right - 1 && b.left < a.right - 1
                         && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  // What of an element a person can see: its box cut to every box around it that clips
  // (a row scrolled out of a scrolling list is not on the page); null when nothing is.
  const seen = e => {
    let b = box(e);
    let r = {left: b.left, top: b.top, right: b.right, bottom: b.bottom};
    for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
      const style = getComputedStyle(p);
      if (style.overflowX === 'visible' && style.overflowY === 'visible') continue;
      const c = box(p);
      r = {left: Math.max(r.left, c.left), top: Math.max(r.top, c.top),
           right: Math.min(r.right, c.right), bottom: Math.min(r.bottom, c.bottom)};
    }
    return r.right - r.left > 1 && r.bottom - r.top > 1 ? r : null;
  };
  const name = e => (e.getAttribute('placeholder') || e.value || e.textContent || e.tagName)
                    .trim().slice(0, 40);
  for (const top of roots) {
    for (const plot of top.querySelectorAll('.js-plotly-plot')) {
      if (!shown(plot)) continue;
      const title = plot.querySelector('.gtitle');
      const what = title ? title.textContent.slice(0, 60) : 'a chart';
      const legend = plot.querySelector('.legend');
      for (const heading of [title, plot.querySelector('.gtitle-subtitle')]) {
        if (heading && legend && meet(box(legend), box(heading))) {
          problems.push('legend covers the title of ' + what);
        }
      }
      if (title && box(title).right > box(plot).right + 1) {
        problems.push('title wider than its chart: ' + what);
      }
    }
    const inputs = [...top.querySelectorAll('input, select, textarea, button')]
      .filter(e => shown(e) && seen(e));
    for (const input of inputs) {
      if (input.type !== 'checkbox' && box(input).height < 20) {
        problems.push('input squashed to ' + Math.round(box(input).height) + ' px: '
                      + name(input));
      }
    }
    for (let i = 0; i < inputs.length; i++) {
      for (let j = i + 1; j < inputs.length; j++) {
        if (meet(seen(inputs[i]), seen(inputs[j]))) {
          problems.push('inputs overlap: ' + name(inputs[i]) + ' / ' + name(inputs[j]));
        }
      }
    }
    for (const label of top.querySelectorAll('.widget-html-content > span, label, '
                                             + '.widget-label, .widget-label-basic')) {
      if (shown(label) && label.scrollWidth > label.clientWidth + 1
          && getComputedStyle(label).overflow !== 'visible') {
        problems.push('label cut short: ' + label.textContent.trim().slice(0, 60));
      }
    }
    for (const table of top.querySelectorAll('table')) {
      if (!shown(table)) continue;
      let scroller = table.parentElement;
      while (scroller && scroller !== top && getComputedStyle(scroller).overflowX === 'visible') {
        scroller = scroller.parentElement;
      }
      const edge = box(scroller || top).right;
      for (const cell of table.querySelectorAll('th, td')) {
        if (shown(cell) && box(cell).right > edge + 1) {
          problems.push((cell.tagName === 'TH' ? 'column' : 'cell') + ' past the edge of '
                        + 'its box: ' + (cell.getAttribute('data-label') || cell.textContent)
                          .trim().slice(0, 40));
        }
      }
    }
    for (const note of top.querySelectorAll('.wb-estimate-note')) {
      let scroller = note.parentElement;
      while (scroller && scroller !== top && getComputedStyle(scroller).overflowX === 'visible') {
        scroller = scroller.parentElement;
      }
      if (shown(note) && box(note).right > box(scroller || top).right + 1) {
        problems.push('note past the edge of its box: ' + note.textContent.slice(0, 40));
      }
    }
    const walker = document.createTreeWalker(top, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const parent = node.parentElement;
      if (!parent || !shown(parent) || parent.closest('svg, textarea, script, style')) {
        continue;
      }
      for (const match of node.textContent.matchAll(/[A-Za-z0-9][A-Za-z0-9._]*[A-Za-z0-9]/g)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (tops.size > 1) problems.push('word broken over two lines: ' + match[0]);
      }
    }
  }
  return [...new Set(problems)];
}"""


def layout_problems(page: Any, root: str) -> list[str]:
    """What is wrong with how the elements under ``root`` (every match on show) are laid
    out, as a person would see it (:data:`_LAYOUT_PROBLEMS`); empty when nothing is."""
    return list(page.evaluate(_LAYOUT_PROBLEMS, root))
