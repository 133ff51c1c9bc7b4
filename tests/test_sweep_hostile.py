"""Sweeps given hostile grids, inputs, saved parts, schedulers and outputs: each refused by
name before any work, or worked around with a warning, never a traceback, a hang or a
lost sweep. The hostile inputs live in tests/data/hostile/; their time and memory at
full size are measured by ``make bench`` (benchmarks/hostile_bench.py)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from test_cli import assert_user_error, run

from planner.limits import MAX_SWEEP_SCENARIOS
from planner.sweep import SweepError, grid_from_axes, load_grid, sweep
from planner.sweep._store import (
    DIGEST_BYTES,
    PartsFolder,
    SweepOutputError,
    SweepWarning,
    file_fingerprint,
)

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "data" / "hostile"
FIVE = str(ROOT / "planner" / "data" / "fleets" / "qwen480b-5x80.toml")


class Stop(Exception):
    pass


# -- grids --------------------------------------------------------------------------------


def test_a_grid_of_a_billion_scenarios_is_refused_before_any_row_is_built() -> None:
    # Building the rows would need tens of GB: that this returns at all shows none was
    # (make bench measures its time and memory).
    with pytest.raises(SweepError) as caught:
        load_grid(HOSTILE / "grid-1e9.toml")
    assert caught.value.code == "InvalidGrid"
    assert caught.value.details["scenarios"] == 10**9
    assert f"at most {MAX_SWEEP_SCENARIOS:,}" in caught.value.message


def test_a_grid_frame_of_too_many_rows_is_refused() -> None:
    with pytest.raises(SweepError) as caught:
        sweep(pd.DataFrame({"min_lanes": [1] * (MAX_SWEEP_SCENARIOS + 1)}))
    assert caught.value.code == "InvalidGrid"


def test_a_grid_of_a_million_scenarios_starts_evaluating_at_once() -> None:
    import tracemalloc

    sweep(grid_from_axes({"min_lanes": [1]}, {"fleet": FIVE}), "plan")  # caches filled
    seen: list[int] = []

    def stop_after_the_first_batch(done: int, total: int) -> None:
        seen.append(done)
        if done:
            raise Stop

    tracemalloc.start()
    try:
        grid, evaluation = load_grid(HOSTILE / "grid-1e6.toml")
        assert len(grid) == 10**6
        with pytest.raises(Stop):
            sweep(grid, evaluation, executor="inline", batch_size=2,
                  progress=stop_after_the_first_batch)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == [0, 2]
    # The rows are built as they are taken: what the sweep allocated before its first
    # result is its result columns (8 bytes a scenario each), not the grid's rows and
    # their values (a DataFrame of them and its lists of Python values: over 200 MB).
    assert peak < 128 * 2**20, peak / 2**20


@pytest.mark.parametrize(("column", "value"), [
    ("min_context", 1e300), ("min_context", 2**31 + 1), ("max_states", 2**63 - 1),
    ("max_states", 0), ("max_states", -5), ("max_states", "10"), ("min_lanes", 10**6),
    ("seed", -1), ("seed", 2.5), ("target_tpot_ms", 10**12), ("failures_tolerated", 10**9),
    ("horizon_hours", 0), ("annual_failure_rate", float("inf")), ("fleet", "x" * 5000),
    ("fleet", ["a.toml"]), ("min_context", True), ("file_bytes", 0),
    ("file_bytes", 2**53 + 1), ("file_bytes", "11.27 GiB"),
])
def test_grid_values_beyond_the_limits_are_refused_by_column(column: str,
                                                            value: object) -> None:
    with pytest.raises(SweepError) as caught:
        grid_from_axes({column: [value]}, {"fleet": FIVE} if column != "fleet" else None)
    assert caught.value.code == "InvalidGrid"
    assert caught.value.details["column"] == column


def test_a_grid_file_out_of_range_names_the_file_and_column() -> None:
    with pytest.raises(SweepError) as caught:
        load_grid(HOSTILE / "grid-out-of-range.toml")
    assert caught.value.details["column"] == "min_context"
    assert "grid-out-of-range.toml" in caught.value.message


@pytest.mark.parametrize("name", ["fifo", "folder", "missing"])
def test_a_grid_file_that_is_no_regular_file_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "grid.toml"
    if name == "fifo":
        os.mkfifo(path)
    elif name == "folder":
        path.mkdir()
    with pytest.raises(SweepError) as caught:
        load_grid(path)
    assert caught.value.code == "InvalidGrid" and str(path) in caught.value.message
    # It is a grid file that was asked for, and the message says so.
    assert "fleet file" not in caught.value.message
    if name != "missing":
        assert "grid file" in caught.value.message


# -- inputs -------------------------------------------------------------------------------


def test_a_missing_or_invalid_fleet_in_an_axis_is_that_rows_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[model\n")
    grid = grid_from_axes({"fleet": [FIVE, str(tmp_path / "missing.toml"), str(broken)]})
    results = sweep(grid, "plan", output=tmp_path / "out.csv")
    assert list(results["error_code"].fillna("")) == ["", "FileNotFound", "InvalidToml"]
    assert "no such file" in results.loc[1, "error_message"]
    assert results.loc[0, "context_length"] > 0
    # Once the file is there, the row is evaluated: its error was not saved as a result.
    shutil.copy(FIVE, tmp_path / "missing.toml")
    again = sweep(grid, "plan", output=tmp_path / "out.csv")
    assert pd.isna(again.loc[1, "error_code"])


def test_the_command_line_gives_a_missing_fleet_its_row(tmp_path: Path) -> None:
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text('evaluate = "plan"\n[axes]\n'
                         f'fleet = ["{FIVE}", "nowhere.toml"]\n')
    done = run("sweep", grid_file, "-o", tmp_path / "out.csv")
    assert done.returncode == 0, done.stderr
    written = pd.read_csv(tmp_path / "out.csv")
    assert list(written["error_code"].fillna("")) == ["", "FileNotFound"]
    assert "1 scenario(s) could not be evaluated" in done.stderr


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "folder"])
def test_a_catalog_that_is_no_regular_file_is_that_rows_error(tmp_path: Path,
                                                             kind: str) -> None:
    path = {"dev-zero": Path("/dev/zero"), "fifo": tmp_path / "catalog.toml",
            "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    grid = grid_from_axes({"repair_hours": [24]}, {"fleet": FIVE, "catalog": str(path)})
    results = sweep(grid, "availability")
    assert results.loc[0, "error_code"] == "GpuCatalogNotFound"


def test_a_large_input_file_is_fingerprinted_from_a_bounded_read(tmp_path: Path) -> None:
    big = tmp_path / "model.gguf"
    with big.open("wb") as handle:  # sparse: 3 GB that take no disk
        handle.truncate(3 * 2**30)
    first = file_fingerprint(big)
    with big.open("r+b") as handle:  # a change in the middle, out of the digest's reach
        handle.seek(2**30)
        handle.write(b"x")
    os.utime(big, ns=(0, 1))
    assert file_fingerprint(big) != first  # the time changed
    with big.open("r+b") as handle:  # a change within the last DIGEST_BYTES
        handle.seek(3 * 2**30 - DIGEST_BYTES // 2)
        handle.write(b"y")
    os.utime(big, ns=(0, 1))
    assert file_fingerprint(big) not in (first, file_fingerprint(tmp_path / "none"))
    assert file_fingerprint("/dev/zero") == "not a regular file"


# -- saved parts --------------------------------------------------------------------------


def _forged_lines(real: dict) -> Iterator[tuple[str, bytes]]:
    cases = json.loads((HOSTILE / "part_records.json").read_text(encoding="utf-8"))
    for case in cases["records"]:
        if "set" in case:
            yield case["about"], json.dumps({**real, **case["set"]}).encode() + b"\n"
        elif "raw_hex" in case:
            yield case["about"], bytes.fromhex(case["raw_hex"]) + b"\n"
        elif case["raw"] == "DEEP":
            yield case["about"], b"[" * 100_000 + b"\n"
        else:
            yield case["about"], case["raw"].encode() + b"\n"


def test_forged_and_corrupt_parts_are_skipped_with_a_warning_and_evaluated_again(
        tmp_path: Path) -> None:
    grid = grid_from_axes({"repair_hours": [24, 72, 168]}, {"fleet": FIVE,
                                                          "annual_failure_rate": 0.5})
    whole = sweep(grid, "availability")
    output = tmp_path / "out.csv"
    with pytest.raises(Stop):
        sweep(grid, "availability", executor="inline", batch_size=3, output=output,
              progress=lambda done, total: (_ for _ in ()).throw(Stop) if done else None)
    parts = tmp_path / "out.csv.parts"
    (saved,) = parts.glob("part-*.jsonl")
    real = json.loads(saved.read_text().splitlines()[0])
    for number, (about, line) in enumerate(_forged_lines(real)):
        # One bad line per file (the real records gone), so each must be skipped on its own.
        forged = parts / f"part-forged-{number:03d}.jsonl"
        forged.write_bytes(line)
        warnings: list[str] = []
        starts: list[int] = []
        saved.unlink(missing_ok=True)
        with pytest.raises(Stop):
            sweep(grid, "availability", executor="inline", batch_size=1, output=output,
                  warn=warnings.append,
                  progress=lambda done, total, s=starts: s.append(done) or (
                      (_ for _ in ()).throw(Stop) if len(s) > 1 else None))
        assert starts[0] == 0, about  # nothing resumed from the forged record
        assert len(warnings) == 1 and "skipped 1 saved record" in warnings[0], about
        assert forged.name in warnings[0]
        forged.unlink()
        for extra in parts.glob("part-*.jsonl"):
            extra.unlink()
    # A FIFO among the parts is skipped unread, and the sweep completes.
    os.mkfifo(parts / "part-fifo.jsonl")
    with pytest.warns(SweepWarning, match="not a regular file"):
        resumed = sweep(grid, "availability", output=output)
    pd.testing.assert_frame_equal(resumed, whole)
    assert not parts.exists()


def test_a_record_from_an_edited_input_is_stale_not_corrupt(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(Path(FIVE).read_text())
    grid = grid_from_axes({"repair_hours": [24, 72]}, {"fleet": str(fleet)})
    output = tmp_path / "out.csv"
    with pytest.raises(Stop):
        sweep(grid, "availability", executor="inline", batch_size=1, output=output,
              progress=lambda done, total: (_ for _ in ()).throw(Stop) if done else None)
    fleet.write_text(Path(FIVE).read_text().replace("count = 5", "count = 4"))
    warnings: list[str] = []
    results = sweep(grid, "availability", output=output, warn=warnings.append)
    assert warnings == [] and (results["node_count"] == 4).all()


# -- the output -----------------------------------------------------------------------


def test_a_second_sweep_on_the_same_output_stops_at_once(tmp_path: Path) -> None:
    output = tmp_path / "out.csv"
    grid = grid_from_axes({"repair_hours": [24]}, {"fleet": FIVE})
    with PartsFolder(output):  # another sweep writing it
        with pytest.raises(SweepOutputError) as caught:
            sweep(grid, "availability", output=output,
                  progress=lambda done, total: pytest.fail("evaluated"))
        assert caught.value.code == "OutputUnavailable"
        assert "another sweep is writing it" in caught.value.message
    sweep(grid, "availability", output=output)  # free again
    assert output.exists()


def test_concurrent_sweeps_on_one_output_never_lose_work(tmp_path: Path) -> None:
    output = tmp_path / "out.csv"
    grid = grid_from_axes({"repair_hours": [24, 72, 168, 500]}, {"fleet": FIVE})
    outcomes: list[str] = []

    def one() -> None:
        try:
            sweep(grid, "availability", executor="inline", batch_size=1, output=output)
            outcomes.append("done")
        except SweepOutputError:
            outcomes.append("busy")

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert "done" in outcomes and set(outcomes) <= {"done", "busy"}
    pd.testing.assert_frame_equal(pd.read_csv(output),
                                  pd.read_csv(output))  # a whole file was written
    assert len(pd.read_csv(output)) == 4


@pytest.mark.parametrize("where", ["missing-folder", "a-folder", "under-a-file"])
def test_an_unwritable_output_is_refused_before_any_scenario(tmp_path: Path,
                                                            where: str) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "out.csv").mkdir()
    output = {"missing-folder": tmp_path / "no" / "out.csv", "a-folder": tmp_path / "out.csv",
              "under-a-file": tmp_path / "file" / "out.csv"}[where]
    grid = grid_from_axes({"repair_hours": [24, 72]}, {"fleet": FIVE})
    with pytest.raises(SweepOutputError) as caught:
        sweep(grid, "availability", output=output,
              progress=lambda done, total: pytest.fail("evaluated"))
    assert caught.value.code == "OutputUnavailable"


def test_the_command_line_names_an_unwritable_output(tmp_path: Path) -> None:
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text(f'evaluate = "plan"\n[fixed]\nfleet = "{FIVE}"\n')
    assert_user_error(run("sweep", grid_file, "-o", tmp_path / "no" / "out.csv"), 2,
                      "OutputUnavailable", "does not exist")


# -- files beside the output ------------------------------------------------------------
# The user names the output; every other path a sweep writes (its temporary file, its
# parts folder and the files in it) is one the sweep makes afresh, and a link or a file
# already there under such a name is never followed, emptied or removed.

PRECIOUS = "precious data, 38 bytes long.........\n"


def _precious(folder: Path) -> Path:
    precious = folder / "precious.txt"
    precious.write_text(PRECIOUS)
    return precious


def test_a_link_named_like_the_temporary_file_is_never_written_through(
        tmp_path: Path) -> None:
    precious = _precious(tmp_path)
    (tmp_path / "out.csv.tmp").symlink_to(precious)
    grid = grid_from_axes({"min_lanes": [1, 2]}, {"fleet": FIVE})
    sweep(grid, "plan", output=tmp_path / "out.csv")
    assert precious.read_text() == PRECIOUS
    assert (tmp_path / "out.csv.tmp").is_symlink()
    assert len(pd.read_csv(tmp_path / "out.csv")) == 2


def test_a_file_named_like_the_temporary_file_is_kept(tmp_path: Path) -> None:
    (tmp_path / "out.csv.tmp").write_text(PRECIOUS)
    grid = grid_from_axes({"min_lanes": [1, 2]}, {"fleet": FIVE})
    sweep(grid, "plan", output=tmp_path / "out.csv")
    assert (tmp_path / "out.csv.tmp").read_text() == PRECIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv", "out.csv.tmp"]


def test_a_parts_folder_that_is_a_link_is_refused_before_any_scenario(
        tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out.csv.parts").symlink_to(elsewhere)
    grid = grid_from_axes({"min_lanes": [1, 2]}, {"fleet": FIVE})
    with pytest.raises(SweepOutputError) as caught:
        sweep(grid, "plan", output=tmp_path / "out.csv", executor="inline", batch_size=1,
              progress=lambda done, total: pytest.fail("evaluated") if done else None)
    assert caught.value.code == "OutputUnavailable"
    assert "symbolic link" in caught.value.message
    assert list(elsewhere.iterdir()) == []
    assert not (tmp_path / "out.csv").exists()


def test_the_command_line_refuses_a_parts_folder_that_is_a_link(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out.csv.parts").symlink_to(tmp_path / "elsewhere")
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text(f'evaluate = "plan"\n[fixed]\nfleet = "{FIVE}"\n')
    assert_user_error(run("sweep", grid_file, "-o", tmp_path / "out.csv"), 2,
                      "OutputUnavailable", "symbolic link")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_links_inside_the_parts_folder_are_never_followed(tmp_path: Path) -> None:
    precious = _precious(tmp_path)
    parts = tmp_path / "out.csv.parts"
    parts.mkdir()
    # Parts that point outside, and every temporary name this process's first parts
    # could take.
    for count in range(1, 4):
        (parts / f"part-{os.getpid()}-{count:06d}.jsonl").symlink_to(precious)
    for count in range(1, 12):
        (parts / f"part-{os.getpid()}-{count:06d}.tmp").symlink_to(precious)
    (parts / "part-0-000001.jsonl").symlink_to(precious)
    grid = grid_from_axes({"min_lanes": [1, 2, 3]}, {"fleet": FIVE})
    warnings: list[str] = []
    results = sweep(grid, "plan", output=tmp_path / "out.csv", executor="inline",
                    batch_size=1, warn=warnings.append)
    assert precious.read_text() == PRECIOUS
    assert len(results) == 3 and results["error_code"].isna().all()
    assert len(warnings) == 1 and "symbolic link" in warnings[0]


def test_a_second_sweep_never_touches_the_first_ones_files_while_it_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first sweep is held while it writes its output (after its temporary file is
    # written, before it replaces the output); a second sweep of the same output then
    # stops by name and the first one finishes whole.
    output = tmp_path / "out.csv"
    grid = grid_from_axes({"min_lanes": [1, 2, 3]}, {"fleet": FIVE})
    writing, release = threading.Event(), threading.Event()
    to_csv = pd.DataFrame.to_csv

    def held(frame: pd.DataFrame, *args: object, **kwargs: object) -> object:
        written = to_csv(frame, *args, **kwargs)  # type: ignore[call-overload]
        writing.set()
        assert release.wait(30)
        return written

    monkeypatch.setattr(pd.DataFrame, "to_csv", held)
    outcome: list[object] = []

    def first() -> None:
        try:
            outcome.append(sweep(grid, "plan", executor="inline", output=output))
        except BaseException as error:  # reported by the assertion below
            outcome.append(error)

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert writing.wait(30)
        with pytest.raises(SweepOutputError) as caught:
            sweep(grid, "plan", executor="inline", output=output)
        assert caught.value.code == "OutputUnavailable"
    finally:
        release.set()
        thread.join()
    assert isinstance(outcome[0], pd.DataFrame), outcome
    assert len(pd.read_csv(output)) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


# -- schedulers ---------------------------------------------------------------------------


@pytest.mark.parametrize("scheduler", ["bogus", "", "inproc://x", "tcp://", "tcp://h",
                                       "tcp://h:0", "tcp://h:99999", "http://h:80",
                                       "tcp://-h:8786", "tcp://[zz]:8786", "h:\uff18\uff17",
                                       "tcp://h:8786\n", 8786, ["tcp://h:1"], "tls://",
                                       "tls://h", "tls://h:0", "tls://-h:8786",
                                       "tls://h:8786/x", "tls:///:8786"])
def test_a_scheduler_that_is_no_dask_address_is_refused_by_name(scheduler: object) -> None:
    grid = grid_from_axes({"repair_hours": [24]}, {"fleet": FIVE})
    with pytest.raises(SweepError) as caught:
        sweep(grid, "plan", scheduler=scheduler)
    assert caught.value.code == "InvalidScheduler"


class _Listener:
    """A TCP port that accepts connections and then either says nothing or answers as a
    web server would."""

    def __init__(self, answer: bytes | None) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.answer = answer
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.connections.append(connection)
            answer = self.answer_to(len(self.connections))
            if answer is not None:
                connection.sendall(answer)

    def answer_to(self, connection: int) -> bytes | None:
        """What the ``connection``-th connection (from 1) is sent."""
        return self.answer

    def close(self) -> None:
        self.server.close()
        for connection in self.connections:
            connection.close()


@pytest.mark.parametrize(("answer", "words"), [
    (None, "did not answer as a Dask scheduler within 2 s"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "not as a Dask scheduler"),
])
def test_a_port_that_is_no_dask_scheduler_interrupts_the_sweep_within_the_timeout(
        answer: bytes | None, words: str) -> None:
    # The message names the 2 s it waited (make bench times the default 30 s).
    error = _sweep_on(_Listener(answer))
    assert error.code == "SweepInterrupted" and words in error.message


def _message(*frames: bytes, counted: int | None = None,
             lengths: tuple[int, ...] | None = None) -> bytes:
    """A Dask TCP message as distributed.comm.tcp frames it: its length, then the frame
    count, each frame's length and the frames; ``counted`` and ``lengths`` lie."""
    sizes = [len(frame) for frame in frames] if lengths is None else list(lengths)
    body = struct.pack("Q", len(sizes) if counted is None else counted)
    body += b"".join(struct.pack("Q", size) for size in sizes)
    body += b"".join(frames)
    return struct.pack("Q", len(body)) + body


@pytest.mark.parametrize(("answer", "words"), [
    (_message(b"\0" * 8, counted=2**40), "1,099,511,627,776 frames"),
    (_message(lengths=(8 * 2**40,)), "8,796,093,022,208 bytes"),
    (_message(), "no frames"),
    (_message(b"\xc1" * 8), "not as a Dask scheduler"),  # framed, but no message
    (_message(b"\x01" * 8), "not as a Dask scheduler"),
], ids=["2^40-frames", "8-TB-frame", "no-frames", "msgpack-junk", "msgpack-extra"])
def test_a_scheduler_whose_first_message_lies_about_its_frames_interrupts_the_sweep(
        answer: bytes, words: str) -> None:
    error = _sweep_on(_Listener(answer))
    assert error.code == "SweepInterrupted" and words in error.message


def _sweep_on(listener: _Listener) -> SweepError:
    """The error of a sweep sent to ``listener`` (closed after), waiting 2 s to connect."""
    import dask

    grid = grid_from_axes({"repair_hours": [24]}, {"fleet": FIVE})
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": "2s"}), \
                pytest.raises(SweepError) as caught:
            sweep(grid, "plan", scheduler=f"tcp://127.0.0.1:{listener.port}")
    finally:
        listener.close()
    return caught.value


class _TwoFacedListener(_Listener):
    """Answers its first connection (the sweep's check) as a Dask scheduler, and every
    later one (Dask's own client) with ``answer``."""

    def answer_to(self, connection: int) -> bytes | None:
        import msgpack

        return (_message(msgpack.packb({"compression": None, "python": (3, 11, 0),
                                        "pickle-protocol": 5}))
                if connection == 1 else self.answer)


@pytest.mark.parametrize("answer", [_message(b"\0" * 8, counted=2**40),
                                    _message(lengths=(8 * 2**40,)), _message(b"\xc1")],
                         ids=["2^40-frames", "8-TB-frame", "msgpack-junk"])
def test_a_scheduler_that_answers_dask_otherwise_than_the_check_interrupts_the_sweep(
        answer: bytes) -> None:
    error = _sweep_on(_TwoFacedListener(answer))
    assert error.code == "SweepInterrupted"
    assert "not as a Dask scheduler Dask can read" in error.message


TLS = Path(__file__).resolve().parent / "data" / "hostile" / "tls"
# Dask's TLS settings for a scheduler, its workers and a client, all with one self-signed
# certificate (valid for localhost and 127.0.0.1 until 2126).
TLS_SETTINGS = {
    "distributed.comm.tls.ca-file": str(TLS / "cert.pem"),
    **{f"distributed.comm.tls.{role}.{part}": str(TLS / f"{part}.pem")
       for role in ("scheduler", "worker", "client") for part in ("cert", "key")},
}


class _TlsListener(_Listener):
    """A TLS port with a real certificate that completes the TLS handshake and then says
    nothing (or answers as a web server over TLS)."""

    def __init__(self, answer: bytes | None) -> None:
        import ssl

        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(TLS / "cert.pem", TLS / "key.pem")
        super().__init__(answer)

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.connections.append(connection)
            try:
                tls = self.context.wrap_socket(connection, server_side=True)
            except OSError:  # a client that gave up on the handshake
                continue
            self.connections.append(tls)
            if self.answer is not None:
                tls.sendall(self.answer)


@pytest.mark.parametrize(("listener", "answer", "words"), [
    (_Listener, None, "did not answer the TLS handshake within 2 s"),
    (_Listener, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "not over TLS"),
    (_TlsListener, None, "did not answer as a Dask scheduler within 2 s"),
    (_TlsListener, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
     "not as a Dask scheduler"),
], ids=["tcp-silent", "tcp-http", "tls-silent", "tls-http"])
def test_a_tls_port_that_is_no_dask_scheduler_interrupts_the_sweep_within_the_timeout(
        listener: type[_Listener], answer: bytes | None, words: str) -> None:
    import dask

    server = listener(answer)
    grid = grid_from_axes({"repair_hours": [24]}, {"fleet": FIVE})
    try:
        with dask.config.set({**TLS_SETTINGS, "distributed.comm.timeouts.connect": "2s"}), \
                pytest.raises(SweepError) as caught:
            sweep(grid, "plan", scheduler=f"tls://127.0.0.1:{server.port}")
    finally:
        server.close()
    assert caught.value.code == "SweepInterrupted"
    assert words in caught.value.message


def test_a_tls_scheduler_without_dask_tls_settings_is_refused_by_name() -> None:
    grid = grid_from_axes({"repair_hours": [24]}, {"fleet": FIVE})
    with pytest.raises(SweepError) as caught:
        sweep(grid, "plan", scheduler="tls://127.0.0.1:8786")
    assert caught.value.code == "InvalidScheduler"
    assert "distributed.comm.tls.ca-file" in caught.value.message


def test_a_real_tls_scheduler_passes_the_check_and_runs_the_sweep() -> None:
    import dask
    from distributed import LocalCluster
    from distributed.security import Security

    grid = grid_from_axes({"repair_hours": [24, 48]}, {"fleet": FIVE})
    with dask.config.set(TLS_SETTINGS), LocalCluster(
            n_workers=1, processes=False, protocol="tls://", security=Security(),
            dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tls://")
        results = sweep(grid, "plan", scheduler=cluster.scheduler_address)
    pd.testing.assert_frame_equal(results, sweep(grid, "plan", executor="inline"))


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_fleet_whose_gguf_is_no_regular_file_is_that_rows_error(tmp_path: Path,
                                                                 kind: str) -> None:
    gguf = tmp_path / "model.gguf"
    if kind == "fifo":
        os.mkfifo(gguf)
    else:
        gguf.symlink_to("/dev/zero")
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[model]\ngguf = "{gguf}"\n[[nodes]]\nid = "n"\ncount = 2\n'
                     'vram = "24 GiB"\n')
    grid = grid_from_axes({"min_lanes": [1, 2]}, {"fleet": str(fleet)})
    results = sweep(grid, "plan", output=tmp_path / "out.csv")
    assert list(results["error_code"]) == ["ModelUnavailable", "ModelUnavailable"]
    assert all("not a regular file" in m for m in results["error_message"])


@pytest.mark.parametrize(("scheduler", "code"), [("bogus", "InvalidScheduler"),
                                                 ("inproc://x", "InvalidScheduler")])
def test_the_command_line_names_a_bad_scheduler(tmp_path: Path, scheduler: str,
                                                code: str) -> None:
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text(f'evaluate = "plan"\n[fixed]\nfleet = "{FIVE}"\n')
    assert_user_error(run("sweep", grid_file, "--scheduler", scheduler), 2, code)


def test_a_dask_setting_made_before_dask_distributed_loads_leaves_later_sweeps_working(
        ) -> None:
    # dask.config.set entered before distributed is first imported removes, on exit,
    # every key distributed added meanwhile, its defaults among them; the next sweep on
    # Dask read a setting that was gone (KeyError) and ended in "unexpected error".
    script = f"""
import socket, threading, dask
from planner.sweep import SweepError, grid_from_axes, sweep
server = socket.create_server(("127.0.0.1", 0))
threading.Thread(target=lambda: [server.accept() for _ in range(9)], daemon=True).start()
grid = grid_from_axes({{"repair_hours": [24]}}, {{"fleet": {FIVE!r}}})
for _ in range(2):
    with dask.config.set({{"distributed.comm.timeouts.connect": "1s"}}):
        try:
            sweep(grid, "plan", scheduler=f"tcp://127.0.0.1:{{server.getsockname()[1]}}")
        except SweepError as error:
            print(error.code)
print(len(sweep(grid, "plan", scheduler="dask", workers=1)))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["SweepInterrupted", "SweepInterrupted", "1"]


@pytest.mark.parametrize("column", ["fleet", "catalog"])
def test_a_path_with_a_nul_byte_is_refused_before_any_scenario(column: str) -> None:
    # A catalog path holding a NUL byte ended the sweep in "unexpected error: ValueError:
    # embedded null byte" while its file was fingerprinted.
    fixed = {} if column == "fleet" else {"fleet": FIVE}
    with pytest.raises(SweepError) as caught:
        sweep(grid_from_axes({column: ["a\0b.toml"]}, fixed), "plan")
    assert caught.value.code == "InvalidGrid" and "NUL byte" in caught.value.message


@pytest.mark.parametrize("column", ["fleet", "model", "kinds", "catalog", "kv_cache_type"])
def test_text_holding_a_lone_surrogate_is_refused_before_any_scenario(column: str) -> None:
    # A lone surrogate reached a pandas string column (pyarrow: UnicodeEncodeError) or a
    # file name: an unexpected error, not a row's error.
    fixed = {} if column == "fleet" else {"fleet": FIVE}
    with pytest.raises(SweepError) as caught:
        sweep(grid_from_axes({column: ["x\ud800"]}, fixed), "plan")
    assert caught.value.code == "InvalidGrid" and "lone surrogate" in caught.value.message
