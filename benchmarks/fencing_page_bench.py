"""How long the fencing page takes in Voilà until its first scenario stepper is usable.

The target is 10 s from opening ``notebooks/fencing.ipynb`` (served by Voilà with the
options ``make app`` uses) in headless Chromium to the first stepper's sequence chart
drawn at its first event and "next ▶" moving it to the second. Each run is a fresh page,
and so a fresh kernel. Chromium comes from $PLANNER_CHROMIUM or ``chromium`` on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 10.0
RUNS = 3
PAGE_SECONDS = 120.0

# The first sequence chart's drawn title, once plotly has drawn it ('' before).
_FIRST_TITLE = """() => {
  const title = document.querySelector('.fx-sequence-figure .js-plotly-plot .gtitle');
  return title ? title.textContent : '';
}"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(page: Any, wanted: str, deadline: float) -> None:
    while wanted not in page.evaluate(_FIRST_TITLE):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the first stepper never showed {wanted!r}")
        time.sleep(0.05)


def _usable_seconds(browser: Any, url: str) -> float:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        started = time.monotonic()
        deadline = started + PAGE_SECONDS
        page.goto(url, timeout=PAGE_SECONDS * 1000, wait_until="commit")
        _wait_for(page, "(event 1 of ", deadline)
        page.get_by_role("button", name="next ▶").first.click()
        _wait_for(page, "(event 2 of ", deadline)
        return time.monotonic() - started
    finally:
        page.close()


def run(runs: int = RUNS) -> dict[str, Any]:
    """``seconds`` of each run (page opened to a usable first stepper), their ``median``,
    ``target_seconds`` and ``verdict`` (``ok`` or ``MISSED``)."""
    sys.path.insert(0, str(ROOT))
    from playwright.sync_api import sync_playwright

    from planner.workbench.serve import stop, voila_arguments, voila_environment

    chromium = os.environ.get("PLANNER_CHROMIUM") or shutil.which("chromium")
    if not chromium:
        raise RuntimeError("no Chromium: install Debian's chromium or set PLANNER_CHROMIUM")
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        # A copy, so that nothing the page does can touch the committed notebook.
        notebook = Path(tmp) / "fencing.ipynb"
        shutil.copy(ROOT / "notebooks" / "fencing.ipynb", notebook)
        # voila_environment: Voilà finds the page template make app uses.
        env = voila_environment(dict(os.environ, JUPYTER_CONFIG_DIR=f"{tmp}/config",
                   JUPYTER_RUNTIME_DIR=f"{tmp}/runtime",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                            os.environ.get("PYTHONPATH")]))))
        voila = str(Path(sys.executable).with_name("voila"))
        with open(f"{tmp}/voila.log", "wb") as log:
            server = subprocess.Popen([voila, *voila_arguments(port), str(notebook)],
                                      cwd=tmp, env=env, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + PAGE_SECONDS
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=5).close()
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(Path(f"{tmp}/voila.log").read_text()) from None
                    time.sleep(0.2)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=chromium, headless=True,
                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
                try:
                    url = f"http://127.0.0.1:{port}/"
                    seconds = [_usable_seconds(browser, url) for _ in range(runs)]
                finally:
                    browser.close()
        finally:
            stop(server)
    median = sorted(seconds)[len(seconds) // 2]
    return {"seconds": [round(s, 1) for s in seconds], "median": round(median, 1),
            "target_seconds": TARGET_SECONDS,
            "verdict": "ok" if median <= TARGET_SECONDS else "MISSED"}


def print_table() -> bool:
    """Print the result; True when the target is met."""
    result = run()
    print("| page | runs s | median s | target |")
    print("|---|---|---:|---|")
    print(f"| fencing.ipynb in Voilà, first stepper usable | "
          f"{', '.join(f'{s:.1f}' for s in result['seconds'])} | {result['median']:.1f} | "
          f"{result['verdict']} (<= {TARGET_SECONDS:g} s) |", flush=True)
    return result["verdict"] == "ok"


if __name__ == "__main__":
    if sys.argv[1:] == ["--json"]:
        print(json.dumps(run()))
    else:
        sys.exit(0 if print_table() else 1)
