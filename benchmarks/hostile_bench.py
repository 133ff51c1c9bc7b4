"""Hostile inputs to simulations, sweeps, fleet files and the workbench state: each must
finish or be refused by name within
its limits (30 s and 2 GB unless the row says otherwise), in a fresh process so that its
peak memory (the process's maximum resident size, imports included) is its own.

``python benchmarks/hostile_bench.py`` prints the table (exit 1 when a case MISSED);
``make bench`` includes it. The inputs are those of tests/test_sweep_hostile.py and
tests/test_simulation.py at full size.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "data" / "hostile"
FIVE = str(ROOT / "planner" / "data" / "fleets" / "qwen480b-5x80.toml")
GIB = 2**30
SECONDS = 30.0
PEAK_MB = 2048.0


class _Stop(Exception):
    pass


def _simulate(**options: Any) -> str:
    from planner.availability import NodeReliability
    from planner.fleet import load_fleet
    from planner.simulation import simulate

    request = load_fleet(FIVE).to_request()
    reliability = NodeReliability(annual_failure_rate=options.pop("annual_failure_rate", 0.5),
                                  repair_hours=options.pop("repair_hours", 24))
    simulate(request, reliability, **options)
    return "finished"


def _row_outcome(grid: Any, evaluation: str, **options: Any) -> str:
    """The sweep's outcome: the error codes of its rows (or 'finished')."""
    from planner.sweep import sweep

    results = sweep(grid, evaluation, **options)
    codes = sorted(set(results["error_code"].dropna()))
    return "rows: " + ", ".join(codes) if codes else "finished"


def _grid_1e9() -> str:
    from planner.sweep import load_grid

    load_grid(HOSTILE / "grid-1e9.toml")
    return "accepted"


def _grid_1e6() -> str:
    """The first result of a million-scenario grid file, in local processes."""
    from planner.sweep import load_grid, sweep

    grid, _ = load_grid(HOSTILE / "grid-1e6.toml")

    def stop(done: int, total: int) -> None:
        if done:
            raise _Stop

    try:
        sweep(grid, "plan", workers=2, progress=stop)
    except _Stop:
        return "first result"
    return "finished"


def _big_gguf() -> str:
    """A two-row sweep of a fleet whose GGUF file is 12 GB (sparse: the header of a small
    model, then zeros), fingerprinted and planned per row."""
    sys.path.insert(0, str(ROOT / "tests"))
    import gguf_files

    from planner.sweep import grid_from_axes

    with tempfile.TemporaryDirectory() as folder:
        gguf = Path(folder) / "model.gguf"
        gguf.write_bytes(gguf_files.gemma3())
        os.truncate(gguf, 12 * GIB)
        fleet = Path(folder) / "fleet.toml"
        fleet.write_text(f'[model]\ngguf = "{gguf}"\n[[nodes]]\nid = "n"\ncount = 2\n'
                         'vram = "24 GiB"\n')
        grid = grid_from_axes({"min_lanes": [1, 2]}, {"fleet": str(fleet)})
        return _row_outcome(grid, "plan", output=Path(folder) / "out.csv")


def _catalog(kind: str) -> str:
    from planner.sweep import grid_from_axes

    with tempfile.TemporaryDirectory() as folder:
        path = "/dev/zero"
        if kind == "fifo":
            path = str(Path(folder) / "catalog.toml")
            os.mkfifo(path)
        grid = grid_from_axes({"repair_hours": [24, 72]}, {"fleet": FIVE, "catalog": path})
        return _row_outcome(grid, "availability")


def _scheduler(answer: bytes | None, scheme: str = "tcp") -> str:
    """A sweep sent to a port that accepts and says nothing (Dask's connect timeout, 30 s
    by default, applies) or answers as a web server; over ``tls://``, with the test
    suite's TLS settings."""
    import dask

    from planner.sweep import SweepError, grid_from_axes, sweep

    tls = HOSTILE / "tls"
    settings = {"distributed.comm.tls.ca-file": str(tls / "cert.pem"),
                "distributed.comm.tls.client.cert": str(tls / "cert.pem"),
                "distributed.comm.tls.client.key": str(tls / "key.pem")}

    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            held.append(connection)
            if answer is not None:
                connection.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    grid = grid_from_axes({"repair_hours": [24]}, {"fleet": FIVE})
    try:
        with dask.config.set(settings):
            sweep(grid, "plan", scheduler=f"{scheme}://127.0.0.1:{server.getsockname()[1]}")
    except SweepError as error:
        return error.code
    finally:
        server.close()
    return "finished"


def _frames(*, counted: int | None = None, lengths: tuple[int, ...] = (8,)) -> bytes:
    """A Dask TCP message whose frame header claims ``counted`` frames (or the frames of
    ``lengths``), with 8 bytes of frames behind it."""
    import struct

    body = struct.pack("Q", len(lengths) if counted is None else counted)
    body += b"".join(struct.pack("Q", n) for n in lengths) + b"\0" * 8
    return struct.pack("Q", len(body)) + body


def _look_alike_ids() -> str:
    """A fleet file of 10,000 nodes, the last one's id the first one's with a zero-width
    space in it: refused by name once every id is compared by how it looks."""
    from planner.fleet import parse_fleet_toml

    nodes = [f"caf\u00e9-{i:05d}" for i in range(9_999)] + ["caf\u00e9-\u200b00000"]
    text = ("[model]\nnative_context_length = 65536\nlayer_count = 62\n"
            'model_weight_bytes = "40 GiB"\nkv_bytes_per_token = 65536\n\n'
            + "".join(f'[[nodes]]\nid = "{node_id}"\nvram = "48 GiB"\n\n' for node_id in nodes))
    parse_fleet_toml(text, "look-alike.toml")
    return "finished"


def _add_gpus(count: int) -> str:
    """The workbench state asked to add ``count`` GPUs at once."""
    from planner.workbench.state import WorkbenchState

    WorkbenchState.design_default().add_gpus("NVIDIA H100 SXM 80GB", 85_520_809_984, count)
    return "finished"


def _long_part_line() -> str:
    """A parts folder holding a 512 MB line (a record cut off and filled with junk): read
    in bounded pieces, skipped with a warning, its scenarios evaluated."""
    from planner.sweep import grid_from_axes

    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "out.csv"
        parts = Path(folder) / "out.csv.parts"
        parts.mkdir()
        with (parts / "part-0-000001.jsonl").open("wb") as handle:
            handle.write(b'{"scenario": 0, "junk": "')
            block = b"x" * (1 << 20)
            for _ in range(512):
                handle.write(block)
            handle.write(b'"}\n')
        grid = grid_from_axes({"repair_hours": [24, 72]}, {"fleet": FIVE})
        warned: list[str] = []
        outcome = _row_outcome(grid, "availability", output=output, warn=warned.append)
        return f"{outcome}, {len(warned)} warning" if warned else "no warning"


# name -> (what runs, the outcomes that pass, seconds allowed[, peak MB allowed])
CASES: dict[str, tuple[Any, ...]] = {
    "simulate: 1e9 failures per node-year, 36 s repairs": (
        lambda: _simulate(annual_failure_rate=1e9, repair_hours=0.01),
        ("SimulationTooLarge",), SECONDS),
    "simulate: a horizon of 1e9 hours": (
        lambda: _simulate(horizon_hours=1e9), ("SimulationTooLarge",), SECONDS),
    "sweep: simulations at 1e9 failures per node-year, 36 s repairs": (
        lambda: _row_outcome(_simulation_grid(), "simulation"),
        ("rows: SimulationTooLarge",), SECONDS),
    "sweep: a 510-byte grid of 10^9 scenarios": (_grid_1e9, ("InvalidGrid",), SECONDS),
    # Its rows are built as they are taken: the first result comes before any grid
    # DataFrame (the imports take about 100 MB, the result columns 8 bytes a scenario).
    "sweep: 10^6 scenarios, first result": (_grid_1e6, ("first result",), 10.0, 400.0),
    "sweep: 2 rows, a 12 GB GGUF": (_big_gguf, ("finished",), SECONDS),
    "sweep: catalog = /dev/zero": (lambda: _catalog("device"), ("rows: GpuCatalogNotFound",),
                                   SECONDS),
    "sweep: catalog = a FIFO": (lambda: _catalog("fifo"), ("rows: GpuCatalogNotFound",),
                                SECONDS),
    "sweep: a 512 MB line under the parts folder": (
        _long_part_line, ("finished, 1 warning",), SECONDS),
    "sweep: a scheduler port that answers HTTP": (
        lambda: _scheduler(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        ("SweepInterrupted",), SECONDS),
    # Dask's connect timeout is 30 s: the refusal comes after it, with a few seconds to
    # start and stop the client.
    "sweep: a scheduler port that never answers": (
        lambda: _scheduler(None), ("SweepInterrupted",), 40.0),
    "sweep: a tls:// scheduler port that never answers": (
        lambda: _scheduler(None, "tls"), ("SweepInterrupted",), 40.0),
    "sweep: a scheduler whose frame header claims 2^40 frames": (
        lambda: _scheduler(_frames(counted=2**40)), ("SweepInterrupted",), SECONDS),
    "sweep: a scheduler whose frame header claims an 8 TB frame": (
        lambda: _scheduler(_frames(lengths=(8 * 2**40,))), ("SweepInterrupted",), SECONDS),
    "fleet file: 10,000 nodes, the last id a look-alike of the first": (
        _look_alike_ids, ("DuplicateNodeId",), SECONDS),
    "workbench: add 10^5 GPUs at once": (lambda: _add_gpus(100_000),
                                        ("InvalidEditorValue",), SECONDS),
    "workbench: add 9,995 GPUs, up to the 10,000 nodes a fleet holds": (
        lambda: _add_gpus(9_995), ("finished",), SECONDS),
}


def _simulation_grid() -> Any:
    from planner.sweep import grid_from_axes

    return grid_from_axes({"seed": [0, 1]}, {"fleet": FIVE, "annual_failure_rate": 1e9,
                                             "repair_hours": 0.01, "horizon_hours": 8760})


def _measure(name: str) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from planner.errors import CodedError

    started = time.perf_counter()
    try:
        outcome = CASES[name][0]()
    except CodedError as error:
        outcome = error.code
    return {"outcome": outcome, "seconds": round(time.perf_counter() - started, 2),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def rows(timeout: float = 300.0) -> list[dict[str, Any]]:
    """One row per case, each measured in its own process."""
    found = []
    for name, (_, expected, seconds, *peak) in CASES.items():
        peak_mb = peak[0] if peak else PEAK_MB
        try:
            done = subprocess.run([sys.executable, __file__, name], capture_output=True,
                                  text=True, timeout=timeout)
            if done.returncode == 0:
                result = json.loads(done.stdout)
            else:
                tail = (done.stderr.strip().splitlines() or ["?"])[-1]
                result = {"outcome": f"crashed: {tail[:80]}", "seconds": float("nan"),
                          "peak_mb": float("nan")}
        except subprocess.TimeoutExpired:
            result = {"outcome": f"> {timeout:.0f} s", "seconds": float("nan"),
                      "peak_mb": float("nan")}
        ok = (result["outcome"] in expected and result["seconds"] < seconds
              and result["peak_mb"] < peak_mb)
        found.append({"case": name, **result, "limit": f"< {seconds:g} s, < {peak_mb:g} MB",
                      "verdict": "ok" if ok else "MISSED"})
    return found


def print_table() -> bool:
    """Print the table; True when every case is within its limits."""
    print("| hostile input | outcome | s | peak MB | limit | target |")
    print("|---|---|---:|---:|---|---|")
    met = True
    for row in rows():
        print(f"| {row['case']} | {row['outcome']} | {row['seconds']} | "
              f"{row['peak_mb']:.0f} | {row['limit']} | {row['verdict']} |", flush=True)
        met &= row["verdict"] == "ok"
    return met


if __name__ == "__main__":
    if len(sys.argv) == 2:
        print(json.dumps(_measure(sys.argv[1])))
    else:
        sys.exit(0 if print_table() else 1)
