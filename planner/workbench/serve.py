"""Serve the workbench: ``make app`` (Voilà) and ``make lab`` (JupyterLab, already planned).

``python -m planner.workbench.serve app`` runs Voilà on the workbench notebook with idle
kernel culling: each page visit has a kernel of its own, and a kernel whose page was
closed is shut down once it has been idle for :data:`CULL_IDLE_SECONDS`.

``python -m planner.workbench.serve lab`` works on copies of the notebooks in
:data:`RUN_DIR` (``.run/notebooks``, ignored by git), so running them never modifies the
committed notebooks. It starts JupyterLab on that folder, starts the workbench's kernel
through the server's sessions API, runs the notebook in it and writes the outputs into the
copy, and then opens the page: JupyterLab attaches to the running kernel and shows the
live, planned workbench.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import webbrowser
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import zmq
from nbformat.sign import NotebookNotary

from planner.workspace import WORKSPACE_VARIABLE

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
RUN_DIR = REPO / ".run" / "notebooks"
"""Where ``make lab`` keeps the copies it runs (ignored by git)."""
WORKBENCH = "workbench.ipynb"
CULL_IDLE_SECONDS = 120
"""A Voilà kernel with no page connected is shut down after this many idle seconds."""
CULL_INTERVAL_SECONDS = 30
OUTPUT_WAIT_SECONDS = 600
"""How long Voilà waits for a cell's outputs once the kernel has answered that it ran.
Outputs travel on another channel than the answer and can arrive well after it: behind
thousands of widget updates (a sweep's progress bar) on a busy machine. Voilà's default
(nbclient's 4 s) then drops the rest of the cell's outputs, its result table among them."""
STARTUP_SECONDS = 120


JUPYTER_DATA = Path(__file__).resolve().parent / "jupyter"
"""Jupyter data this package adds (on ``JUPYTER_PATH``): Voilà's ``planner`` template."""
VOILA_TEMPLATE = "planner"
"""Voilà's lab template without the stylesheets it fetches from a CDN."""
VOILA_EXTENSIONS = ("@jupyter-widgets/jupyterlab-manager", "@voila-dashboards/widgets-manager8")
"""The front-end extensions a Voilà page loads: the ipywidgets, nothing else.
Other installed lab extensions (Notebook 7's, built for a newer JupyterLab than Voilà
bundles) fail to load there and fill the console with errors."""


def voila_arguments(port: int, *, ip: str = "127.0.0.1", open_browser: bool = False,
                    cull_idle_seconds: int = CULL_IDLE_SECONDS,
                    cull_interval_seconds: int = CULL_INTERVAL_SECONDS) -> list[str]:
    """Voilà's options for the pages (the notebook or folder goes after them); run it
    with :func:`voila_environment`."""
    return [
        *([] if open_browser else ["--no-browser"]), f"--port={port}", f"--Voila.ip={ip}",
        f"--template={VOILA_TEMPLATE}", "--KernelManager.transport=ipc",
        # Each cell's outputs and its widgets' models reach the page together, as the
        # cell runs. Without it a page with hundreds of widgets (fencing.ipynb) sometimes
        # draws a widget before the page has its model ("widget model not found").
        "--VoilaConfiguration.progressive_rendering=True",
        f"--VoilaExecutor.iopub_timeout={OUTPUT_WAIT_SECONDS}",
        *(f"--VoilaConfiguration.extension_allowlist={name}" for name in VOILA_EXTENSIONS),
        # Only kernels without a connected page are culled (cull_connected stays False).
        f"--MappingKernelManager.cull_idle_timeout={cull_idle_seconds}",
        f"--MappingKernelManager.cull_interval={cull_interval_seconds}",
        "--MappingKernelManager.cull_busy=False",
    ]


WORKSPACE = REPO / "workspace"
"""Where the pages save fleets and write reports (ignored by git), unless
``PLANNER_WORKSPACE`` names another folder (:mod:`planner.workspace`)."""


def voila_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default this process's) with :data:`JUPYTER_DATA` on ``JUPYTER_PATH``, so
    Voilà finds the ``planner`` template, and the pages' workspace set."""
    environment = dict(os.environ if env is None else env)
    environment.setdefault(WORKSPACE_VARIABLE, str(WORKSPACE))
    paths = [str(JUPYTER_DATA), *filter(None, environment.get("JUPYTER_PATH", "").split(
        os.pathsep))]
    environment["JUPYTER_PATH"] = os.pathsep.join(dict.fromkeys(paths))
    return environment


def copy_notebooks(run_dir: Path = RUN_DIR) -> Path:
    """Copy the committed notebooks into ``run_dir`` (a copy newer than its original is
    kept: it holds a person's own edits)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
        copy = run_dir / notebook.name
        if not copy.exists() or copy.stat().st_mtime < notebook.stat().st_mtime:
            shutil.copy2(notebook, copy)
    return run_dir


def record_language(run_dir: Path, language_info: dict[str, Any]) -> None:
    """Write the kernel's ``language_info`` into every notebook copy in ``run_dir`` that
    lacks it. A front-end writes it on opening a notebook whose record differs from its
    kernel's, which shows the notebook as changed before a person did anything."""
    for path in sorted(run_dir.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        if notebook.metadata.get("language_info") != language_info:
            notebook.metadata["language_info"] = language_info
            nbformat.write(notebook, path)


def execute_in_kernel(path: Path, connection_file: Path,
                      timeout: float = 300) -> dict[str, Any]:
    """Run the notebook at ``path`` in the kernel of ``connection_file`` and save its
    outputs into the file, as the front-end would have; the kernel's ``language_info``."""
    from jupyter_client.blocking.client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(connection_file))
    client.load_connection_file()
    # No heartbeat: a busy machine can miss the first beats, which the client would take
    # for a dead kernel; kernel_info below waits for the kernel itself.
    client.start_channels(hb=False)
    try:
        client.wait_for_ready(timeout=timeout)
        language_info = dict(client.kernel_info(reply=True, timeout=timeout)["content"][
            "language_info"])
        record_language(path.parent, language_info)
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type != "code":
                continue
            cell.outputs = []
            msg_id = client.execute(cell.source, store_history=True)
            deadline = time.monotonic() + timeout
            while True:
                message = client.get_iopub_msg(timeout=max(deadline - time.monotonic(), 1))
                if message["parent_header"].get("msg_id") != msg_id:
                    continue
                kind = message["msg_type"]
                if kind == "execute_input":
                    cell.execution_count = message["content"]["execution_count"]
                elif kind == "status" and message["content"]["execution_state"] == "idle":
                    break
                elif kind in ("stream", "display_data", "execute_result", "error"):
                    cell.outputs.append(nbformat.v4.output_from_msg(message))
    finally:
        client.stop_channels()
    # Outputs the front-end did not make itself are untrusted, and JupyterLab shows an
    # untrusted widget as text: sign them, as running the notebook in the page would.
    NotebookNotary().sign(notebook)
    nbformat.write(notebook, path)
    return language_info


@dataclass
class LabServer:
    """A running JupyterLab: its process, address and token."""

    process: subprocess.Popen[bytes]
    port: int
    token: str
    runtime_dir: Path
    root_dir: Path
    app: str = "lab"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def url(self, notebook: str, workspace: str | None = None) -> str:
        """The page of ``notebook``; a named ``workspace`` opens it alone, whatever other
        pages have open."""
        if self.app == "notebook":
            return f"{self.base_url}notebooks/{notebook}?token={self.token}"
        where = f"lab/workspaces/{workspace}/tree" if workspace else "lab/tree"
        reset = "&reset" if workspace else ""
        return f"{self.base_url}{where}/{notebook}?token={self.token}{reset}"

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            f"{self.base_url}api/{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {self.token}",
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read()
        return json.loads(text) if text else None

    def start_kernel(self, notebook: str) -> Path:
        """A session (and kernel) for ``notebook``, as opening it would; its connection file."""
        session = self.api("POST", "sessions", {"path": notebook, "name": notebook,
                                                "type": "notebook",
                                                "kernel": {"name": "python3"}})
        connection = self.runtime_dir / f"kernel-{session['kernel']['id']}.json"
        deadline = time.monotonic() + STARTUP_SECONDS
        while not connection.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no connection file {connection}")
            time.sleep(0.2)
        return connection


def _wait_listening(process: subprocess.Popen[bytes], port: int, what: str) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen on port {port}") from None
            time.sleep(0.3)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a server started here and the kernels it started."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=20)


# JupyterLab's announcements plugin asks, in a toast over the page, whether to fetch news
# from the internet: the workbench works offline and its charts stay uncovered.
DISABLED_LAB_PLUGINS = ("@jupyterlab/apputils-extension:announcements",)


def _lab_config(config_dir: Path) -> Path:
    """A Jupyter configuration folder whose page config turns off
    :data:`DISABLED_LAB_PLUGINS` (read through ``JUPYTER_CONFIG_PATH``)."""
    labconfig = config_dir / "labconfig"
    labconfig.mkdir(parents=True, exist_ok=True)
    page_config = {"disabledExtensions": dict.fromkeys(DISABLED_LAB_PLUGINS, True)}
    (labconfig / "page_config.json").write_text(json.dumps(page_config, indent=2) + "\n")
    return config_dir


# The longest of a kernel's local socket names in its runtime folder (jupyter_client names
# them after the connection file: kernel-<uuid>-ipc-<port>).
_KERNEL_SOCKET_NAME = f"kernel-{'0' * 8}-{'0' * 4}-{'0' * 4}-{'0' * 4}-{'0' * 12}-ipc-65535"


def kernel_runtime_dir(preferred: Path) -> tuple[Path, bool]:
    """Where the server keeps its kernels' connection files and local sockets:
    ``preferred``, unless a socket path there would be longer than the system allows
    (``zmq.IPC_PATH_MAX_LEN``, 107 bytes on Linux: a checkout in a deep folder), then a
    fresh private folder in the system's temporary folder. The flag says it is such a
    folder, to remove once the server stops."""
    socket_path = preferred / _KERNEL_SOCKET_NAME
    if len(os.fsencode(socket_path)) <= zmq.IPC_PATH_MAX_LEN:
        preferred.mkdir(parents=True, exist_ok=True)
        return preferred, False
    return Path(tempfile.mkdtemp(prefix="planner-kernels-")), True


@contextmanager
def planned_lab(run_dir: Path, port: int, *, log: Any = None,
                extra_arguments: Sequence[str] = (),
                env: dict[str, str] | None = None, app: str = "lab") -> Iterator[LabServer]:
    """JupyterLab (or, with ``app="notebook"``, Notebook 7) on ``run_dir`` with the
    workbench copy already run in its kernel."""
    token = secrets.token_hex(16)
    runtime_dir, temporary = kernel_runtime_dir(run_dir.parent / "runtime")
    environment = dict(env if env is not None else os.environ,
                       JUPYTER_RUNTIME_DIR=str(runtime_dir))
    environment.setdefault(WORKSPACE_VARIABLE, str(WORKSPACE))
    config_dir = _lab_config(run_dir.parent / "config")
    environment["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
        [str(config_dir), *filter(None, [environment.get("JUPYTER_CONFIG_PATH")])])
    jupyter = str(Path(sys.executable).with_name("jupyter"))
    root = ["--allow-root"] if os.geteuid() == 0 else []
    command = [jupyter, app, "--no-browser", *root, "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={run_dir}",
               # The classic-server shim reads every ServerApp setting at start-up and so
               # warns that ServerApp.token is deprecated; neither front-end needs it.
               "--ServerApp.jpserver_extensions=notebook_shim=False",
               # Kernels talk over local sockets, not TCP ports anyone on the machine
               # could reach (ipykernel warns of the latter at every start).
               "--KernelManager.transport=ipc",
               *extra_arguments]
    process = subprocess.Popen(command, cwd=run_dir, env=environment, stdout=log,
                               stderr=subprocess.STDOUT if log is not None else None,
                               start_new_session=True)
    try:
        _wait_listening(process, port, f"jupyter {app}")
        server = LabServer(process, port, token, runtime_dir, run_dir, app)
        execute_in_kernel(run_dir / WORKBENCH, server.start_kernel(WORKBENCH))
        yield server
    finally:
        stop(process)
        if temporary:
            shutil.rmtree(runtime_dir, ignore_errors=True)


def free_port(preferred: int) -> int:
    """``preferred`` when nothing listens there, else a free port the system picks."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
        except OSError:
            sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port(preferred: int, what: str) -> int:
    port = free_port(preferred)
    if port != preferred:
        print(f"Port {preferred} is in use (another `make {what}` still running?); using "
              f"port {port} instead.", flush=True)
    return port


STOP_SIGNALS = (signal.SIGHUP, signal.SIGTERM)
"""Signals that stop a server started here as Ctrl-C does (closing its terminal sends
SIGHUP, ``kill`` SIGTERM): the server and its kernels are stopped and the port freed."""


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """Within the block, :data:`STOP_SIGNALS` raise :class:`SystemExit`, so the blocks
    that started servers stop them on the way out."""

    def stop_here(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = {number: signal.signal(number, stop_here) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def trust_notebooks(folder: Path = NOTEBOOKS) -> None:
    """Record the notebooks in ``folder`` as trusted in this user's signature store (as
    ``jupyter trust`` does; the files are not changed). Voilà runs a notebook itself, but
    on opening an unsigned one it logs "Notebook ... is not trusted" for every page."""
    notary = NotebookNotary()
    for path in sorted(folder.glob("*.ipynb")):
        notary.sign(nbformat.read(path, as_version=4))


def serve_app(port: int, *, open_browser: bool = True) -> int:
    """Voilà on every notebook (``make app``), until it exits or is stopped."""
    trust_notebooks()
    voila = str(Path(sys.executable).with_name("voila"))
    command = [voila, *voila_arguments(port, open_browser=open_browser), str(NOTEBOOKS)]
    process = subprocess.Popen(command, env=voila_environment(), start_new_session=True)
    try:
        _wait_listening(process, port, "voila")
        print(f"Voilà on port {port}: http://127.0.0.1:{port}/ lists every notebook; the "
              f"workbench is http://127.0.0.1:{port}/voila/render/{WORKBENCH}", flush=True)
        return process.wait()
    finally:
        stop(process)


def serve_lab(port: int, *, open_browser: bool = True) -> int:
    """JupyterLab on the already-run workbench copy (``make lab``), until it exits or is
    stopped."""
    run_dir = copy_notebooks()
    print(f"Running {run_dir / WORKBENCH} (a copy; the committed notebooks stay as they are)",
          flush=True)
    with planned_lab(run_dir, port) as server:
        url = server.url(WORKBENCH)
        print(f"JupyterLab on port {port}: {url}", flush=True)
        if open_browser:
            webbrowser.open(url)
        return server.process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m planner.workbench.serve",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("app", "lab"))
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--no-browser", action="store_true",
                        help="do not open a web browser on the page")
    args = parser.parse_args(argv)
    try:
        with stopped_by_signals():
            if args.what == "app":
                return serve_app(_port(args.port or 8866, "app"),
                                 open_browser=not args.no_browser)
            return serve_lab(_port(args.port or 8888, "lab"), open_browser=not args.no_browser)
    except KeyboardInterrupt:
        return 0
    except SystemExit as stopped:
        print("Stopped.", flush=True)
        return int(stopped.code or 0)


if __name__ == "__main__":
    raise SystemExit(main())
