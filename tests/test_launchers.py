"""`make lab` and `make app` as a person runs them: each says its port, serves what it
should, and stops cleanly when its terminal closes (SIGHUP) or it is killed (SIGTERM),
leaving no server or kernel behind and its port free."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from browser_support import REPO, free_port

pytestmark = pytest.mark.slow

STARTUP_SECONDS = 240


def _children(pid: int) -> set[int]:
    """Every process below ``pid``."""
    found: set[int] = set()
    parents = {pid}
    changed = True
    while changed:
        changed = False
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in found:
                continue
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent in parents:
                found.add(int(entry.name))
                parents.add(int(entry.name))
                changed = True
    return found


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def _launched(what: str, port: int, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str],
                                                                       list[str]]]:
    """``python -m planner.workbench.serve WHAT --port PORT`` until it says its URL."""
    env = dict(os.environ, BROWSER="true", JUPYTER_CONFIG_DIR=str(tmp_path / "config"))
    process = subprocess.Popen(
        [sys.executable, "-m", "planner.workbench.serve", what, "--port", str(port),
         "--no-browser"], cwd=REPO, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        assert process.stdout is not None
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if re.search(r"on port \d+: http", line):
                yield process, lines
                return
        pytest.fail(f"`serve {what}` did not say its URL:\n{''.join(lines)}")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _stops_cleanly(process: subprocess.Popen[str], lines: list[str], port: int,
                   stop_signal: int) -> str:
    """Stop the launcher with ``stop_signal``; what it printed after ``lines``."""
    below = _children(process.pid)
    assert _alive(below), "the server runs below the launcher"
    process.send_signal(stop_signal)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running 60 s after {signal.Signals(stop_signal).name}")
    deadline = time.monotonic() + 30
    while (_alive(below) or _listening(port)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _alive(below) == set(), "a server or kernel outlived the launcher"
    assert not _listening(port), f"port {port} is still held"
    assert process.stdout is not None
    rest = process.stdout.read()
    assert "Stopped." in rest, rest
    return rest


@pytest.mark.parametrize("stop_signal", [signal.SIGHUP, signal.SIGTERM],
                         ids=["SIGHUP", "SIGTERM"])
def test_make_lab_says_its_port_and_stops_on_a_signal(tmp_path: Path, stop_signal: int) -> None:
    port = free_port()
    with _launched("lab", port, tmp_path) as (process, lines):
        output = "".join(lines)
        assert f"JupyterLab on port {port}: http://127.0.0.1:{port}/lab/tree/" in output
        # A clean start prints no warning (jupyter_server's "ServerApp.token is
        # deprecated" came from the classic-server shim reading every setting).
        assert not re.search(r"warning|deprecated", output, re.I), output
        _stops_cleanly(process, lines, port, stop_signal)


def test_make_lab_says_when_its_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        with _launched("lab", busy, tmp_path) as (process, lines):
            output = "".join(lines)
            assert f"Port {busy} is in use" in output
            port = int(re.search(r"JupyterLab on port (\d+)", output)[1])
            assert port != busy
            _stops_cleanly(process, lines, port, signal.SIGTERM)


def test_make_app_serves_every_notebook_from_an_index_page(tmp_path: Path) -> None:
    port = free_port()
    with _launched("app", port, tmp_path) as (process, lines):
        output = "".join(lines)
        assert f"Voilà on port {port}: http://127.0.0.1:{port}/ lists every notebook" in output
        index = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=60).read().decode()
        links = re.findall(r'href="(/voila/render/[^"]+)"', index)
        notebooks = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))
        assert sorted(link.rsplit("/", 1)[1] for link in links) == notebooks
        assert links[0].endswith("/workbench.ipynb")
        assert "cdn." not in index and "https://" not in index
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/voila/render/fencing.ipynb",
                                      timeout=120).read().decode()
        assert "fencing" in page.lower()
        rest = _stops_cleanly(process, lines, port, signal.SIGHUP)
        # Opening a page logs no warning (Voilà's "Notebook fencing.ipynb is not trusted").
        assert not re.search(r"warning", "".join(lines) + rest, re.I), "".join(lines) + rest
