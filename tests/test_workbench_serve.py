"""The launchers behind `make lab` and `make app`, without starting a server."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import nbformat

from planner.workbench import serve

REPO = Path(__file__).resolve().parents[1]


def test_make_lab_and_make_app_run_the_launcher() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^lab:.*\n\t\$\(BIN\)/python -m planner\.workbench\.serve lab ",
                     makefile, re.M)
    assert re.search(r"^app:.*\n\t\$\(BIN\)/python -m planner\.workbench\.serve app ",
                     makefile, re.M)
    assert serve.RUN_DIR.relative_to(REPO).parts[0] == ".run"
    assert "/.run/" in (REPO / ".gitignore").read_text().split()


def test_copies_are_made_once_and_keep_later_edits(tmp_path: Path) -> None:
    run_dir = serve.copy_notebooks(tmp_path / "notebooks")
    names = sorted(p.name for p in serve.NOTEBOOKS.glob("*.ipynb"))
    assert sorted(p.name for p in run_dir.iterdir()) == names
    copy = run_dir / serve.WORKBENCH
    assert copy.read_bytes() == (serve.NOTEBOOKS / serve.WORKBENCH).read_bytes()
    copy.write_text("{}")  # a person's own edit, saved after the copy was made
    serve.copy_notebooks(run_dir)
    assert copy.read_text() == "{}"
    # An original newer than its copy replaces it.
    old = (serve.NOTEBOOKS / serve.WORKBENCH).stat().st_mtime - 10
    os.utime(copy, (old, old))
    serve.copy_notebooks(run_dir)
    assert copy.read_bytes() == (serve.NOTEBOOKS / serve.WORKBENCH).read_bytes()


def test_voila_culls_kernels_of_closed_pages() -> None:
    arguments = serve.voila_arguments(8866)
    assert "--no-browser" in arguments
    assert "--no-browser" not in serve.voila_arguments(8866, open_browser=True)
    assert f"--MappingKernelManager.cull_idle_timeout={serve.CULL_IDLE_SECONDS}" in arguments
    assert "--MappingKernelManager.cull_busy=False" in arguments
    assert not any("cull_connected=True" in a for a in arguments)


def test_copies_record_the_kernels_language(tmp_path: Path) -> None:
    """The front-end finds the kernel's language already recorded in each copy, so it
    does not mark the notebook as changed on opening it."""
    run_dir = serve.copy_notebooks(tmp_path / "notebooks")
    info = {"name": "python", "version": "3.11.2", "mimetype": "text/x-python",
            "file_extension": ".py"}
    serve.record_language(run_dir, info)
    for copy in run_dir.glob("*.ipynb"):
        notebook = nbformat.read(copy, as_version=4)
        assert notebook.metadata["language_info"] == info, copy.name
        original = nbformat.read(serve.NOTEBOOKS / copy.name, as_version=4)
        assert [c.source for c in notebook.cells] == [c.source for c in original.cells]
    before = {copy.name: copy.stat().st_mtime_ns for copy in run_dir.glob("*.ipynb")}
    serve.record_language(run_dir, info)  # already recorded: nothing is rewritten
    assert {copy.name: copy.stat().st_mtime_ns for copy in run_dir.glob("*.ipynb")} == before



def _binds_a_kernel_socket(folder: Path) -> bool:
    """Whether a kernel's longest local socket name binds in ``folder``."""
    import zmq

    context = zmq.Context.instance()
    sock = context.socket(zmq.REP)
    try:
        sock.bind(f"ipc://{folder / serve._KERNEL_SOCKET_NAME}")
    except zmq.ZMQError:
        return False
    finally:
        sock.close(linger=0)
    return True


def test_kernels_get_a_socket_folder_they_can_bind_in(tmp_path: Path) -> None:
    """Kernels talk over local sockets named after their connection file; under a deep
    folder (a checkout far from /, or pytest's temporary folders under xdist) the name is
    longer than a socket path may be, and starting a kernel failed with HTTP 500."""
    with tempfile.TemporaryDirectory(prefix="k") as short:
        shallow, temporary = serve.kernel_runtime_dir(Path(short) / "runtime")
        assert (shallow, temporary) == (Path(short) / "runtime", False) and shallow.is_dir()
        assert _binds_a_kernel_socket(shallow)
    deep = tmp_path / ("d" * 60) / "runtime"
    deep.mkdir(parents=True)
    assert not _binds_a_kernel_socket(deep)
    chosen, temporary = serve.kernel_runtime_dir(deep)
    try:
        assert temporary and chosen != deep and chosen.is_dir()
        assert chosen.stat().st_mode & 0o077 == 0, "the folder is private"
        assert _binds_a_kernel_socket(chosen)
    finally:
        shutil.rmtree(chosen)
