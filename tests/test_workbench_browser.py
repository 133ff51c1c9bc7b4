"""End to end: the workbench notebook served by Voila, driven in headless Chromium.

Starts Voila on a free port on 127.0.0.1, opens the page, adds a small node, shrinks
another so the model needs one more stage, and checks that the page says so. Skipped when
no Chromium is installed, except in CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "workbench.ipynb"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
STARTUP_SECONDS = 180
PAGE_MS = 240_000
EDIT_MS = 60_000

pytestmark = pytest.mark.browser


def chromium_path() -> str | None:
    path = os.environ.get("PLANNER_CHROMIUM") or shutil.which("chromium")
    return path if path and Path(path).exists() else None


@pytest.fixture(scope="module")
def chromium() -> str:
    path = chromium_path()
    if path is None:
        message = "no Chromium: install Debian's chromium package or set PLANNER_CHROMIUM"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    # Voila runs the notebook in a kernel process of its own: stop the whole group.
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=20)


@pytest.fixture
def voila_url(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    voila = Path(sys.executable).with_name("voila")
    log_path = tmp_path / "voila.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(voila), "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1",
             str(NOTEBOOK)],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"Voila exited with {process.returncode}:\n{log_path.read_text()}")
            # Listening is enough: the page itself runs the notebook, which the browser
            # waits for.
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"Voila did not answer on {url}:\n{log_path.read_text()}")
                time.sleep(0.5)
        yield url
    finally:
        _stop(process)


def test_shrinking_a_node_adds_a_stage_in_the_page(
        chromium: str, voila_url: str, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS,
                                             headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2600})
            page.goto(voila_url, timeout=PAGE_MS, wait_until="domcontentloaded")
            expect = sync_api.expect
            summary = page.locator(".wb-summary")
            expect(summary).to_contain_text("5 stages · context 262,144", timeout=PAGE_MS)
            rows = page.locator(".wb-node-row")
            expect(rows).to_have_count(5, timeout=EDIT_MS)

            page.locator("button.wb-add-node").click()
            expect(rows).to_have_count(6, timeout=EDIT_MS)
            spare = rows.nth(5).locator(".wb-node-vram input")
            spare.fill("8 GiB")
            spare.press("Enter")
            expect(page.locator(".wb-memory-figure")).to_contain_text("unused",
                                                                      timeout=EDIT_MS)
            expect(summary).to_contain_text("5 stages", timeout=EDIT_MS)

            first = rows.nth(0).locator(".wb-node-vram input")
            first.fill("8 GiB")
            first.press("Enter")
            expect(summary).to_contain_text("6 stages · context 262,144", timeout=EDIT_MS)
            expect(page.locator(".wb-stage-table")).to_contain_text("stage-5",
                                                                    timeout=EDIT_MS)
            expect(page.locator(".wb-error")).to_be_hidden()

            screenshot = tmp_path / "workbench.png"
            page.screenshot(path=str(screenshot), full_page=True)
            assert screenshot.stat().st_size > 10_000
        finally:
            browser.close()
