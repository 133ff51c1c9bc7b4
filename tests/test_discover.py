"""``planner discover``: over real sockets, against real rpc-servers (llama.cpp b11434,
when built) and against servers that answer badly on purpose; the fleet file it writes,
and what it refuses to connect to or overwrite."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from test_rpc_protocol import hello, server

from planner.cli import main
from planner.fleet import FleetFileError, ModelChoice, load_fleet, save_fleet
from planner.llamacpp.discovery import discovered_fleet, discovery_warnings
from planner.llamacpp.launch import launch_for_plan
from planner.llamacpp.rpc import RpcDiscoveryError, RpcServerReport, Transcript, replay
from planner.llamacpp.runner import (
    LlamaCppRunError,
    _query,
    binaries_dir,
    query_rpc_servers,
)
from planner.planning import plan_topology

ROOT = Path(__file__).resolve().parent.parent
PRESET = "qwen3-coder-480b-a35b"


def built_rpc_server() -> Path | None:
    try:
        path = binaries_dir() / "ggml-rpc-server"
    except LlamaCppRunError:
        return None
    return path if path.exists() else None


# -- servers that answer badly on purpose --------------------------------------------------


@contextmanager
def hostile(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A TCP server on 127.0.0.1 that runs ``answer`` on its first connection."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def serve() -> None:
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        with connection, suppress(OSError):
            answer(connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        listener.close()
        thread.join(5)


def sends(data: bytes, *, then_wait: float = 0.0) -> Callable[[socket.socket], None]:
    def answer(connection: socket.socket) -> None:
        connection.recv(33)  # HELLO
        connection.sendall(data)
        if then_wait:
            threading.Event().wait(then_wait)
    return answer


def refused(answer: Callable[[socket.socket], None], timeout_s: float = 5.0
            ) -> RpcDiscoveryError:
    with hostile(answer) as address, pytest.raises(RpcDiscoveryError) as caught:
        query_rpc_servers([address], timeout_s=timeout_s)
    assert address in caught.value.message
    return caught.value


def test_a_server_that_never_answers_is_a_timeout() -> None:
    error = refused(sends(b"", then_wait=3), timeout_s=0.5)
    assert error.code == "RpcTimeout" and "HELLO" in error.message
    assert "serves one at a time" in error.message


def test_a_server_that_trickles_its_reply_is_held_to_the_whole_deadline() -> None:
    def trickle(connection: socket.socket) -> None:
        connection.recv(33)
        for byte in hello():
            connection.sendall(bytes([byte]))
            threading.Event().wait(0.05)  # 28 bytes at 20 a second: past the deadline
    assert refused(trickle, timeout_s=0.5).code == "RpcTimeout"


def test_a_server_that_resets_the_connection_mid_reply() -> None:
    def reset(connection: socket.socket) -> None:
        connection.recv(33)
        connection.sendall(hello()[:10])
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    error = refused(reset)
    assert error.code == "InvalidRpcReply" and "inside its HELLO reply" in error.message


def test_an_http_server_is_no_rpc_server() -> None:
    assert refused(sends(b"HTTP/1.1 400 Bad Request\r\n\r\n")).code == "NotAnRpcServer"


def test_a_huge_announced_reply_is_refused_without_reading_it() -> None:
    error = refused(sends(hello() + struct.pack("<Q", 2**62) + bytes(1000)))
    assert error.code == "InvalidRpcReply" and "nothing of it was read" in error.message


def test_the_socket_reads_what_the_protocol_module_reads() -> None:
    """Over a real socket, the bytes received are the server's, and the report is the one
    replaying them gives."""
    stream = server((5, 10), (7, 10))
    transcripts: dict[str, Transcript] = {}
    with hostile(lambda c: (c.recv(33), c.sendall(stream), threading.Event().wait(1))
                 ) as address:
        [report] = query_rpc_servers([address], transcripts=transcripts)
    assert bytes(transcripts[address].received) == stream
    again, sent = replay(address, stream)
    assert report.devices == again.devices
    assert bytes(transcripts[address].sent) == sent
    assert report.connected_to == address and report.round_trip_ms is not None


def test_nothing_but_the_named_addresses_is_connected_to() -> None:
    with pytest.raises(RpcDiscoveryError) as caught:
        _query("a:1", ("127.0.0.1", 9), frozenset({("127.0.0.1", 1)}), 1.0, Transcript())
    assert caught.value.code == "AddressNotNamed"


def test_a_closed_port_is_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RpcDiscoveryError) as caught:
        query_rpc_servers([f"127.0.0.1:{port}"])
    assert caught.value.code == "RpcUnreachable" and f"port {port}" in caught.value.message


def test_an_address_named_twice_is_refused_before_connecting() -> None:
    with hostile(sends(b"")) as address, pytest.raises(RpcDiscoveryError) as caught:
        query_rpc_servers([address, address.replace("127.0.0.1", "localhost")])
    assert caught.value.code == "DuplicateRpcServer"


# -- the fleet it makes ----------------------------------------------------------------------


def report(address: str, *devices: tuple[int, int], ip: str = "10.0.0.7",
           round_trip: float | None = 0.25) -> RpcServerReport:
    replayed, _ = replay(address, server(*devices))
    return RpcServerReport(address, replayed.version, replayed.devices, False,
                           f"{ip}:{address.rpartition(':')[2]}", round_trip)


def test_one_node_per_device_with_its_memory_address_and_round_trip() -> None:
    reports = [report("gpu-a:50052", (20 * 2**30, 24 * 2**30)),
               report("gpu-b:50052", (70 * 2**30, 80 * 2**30), (60 * 2**30, 80 * 2**30),
                      ip="10.0.0.8", round_trip=1.5)]
    document = discovered_fleet(reports, ModelChoice(preset=PRESET), gpu="rtx-4090")
    assert [(n.node_id, n.detected_vram_bytes, n.max_vram_bytes,
             n.stage_transfer_latency_ms) for n in document.nodes] == [
        ("gpu-a:50052", 24 * 2**30, 20 * 2**30, 0.25),
        ("gpu-b:50052/0", 80 * 2**30, 70 * 2**30, 1.5),
        ("gpu-b:50052/1", 80 * 2**30, 60 * 2**30, 1.5)]
    assert dict(document.addresses) == {"gpu-a:50052": "gpu-a:50052",
                                        "gpu-b:50052/0": "gpu-b:50052",
                                        "gpu-b:50052/1": "gpu-b:50052"}
    assert dict(document.rpc_devices) == {"gpu-b:50052/0": 0, "gpu-b:50052/1": 1}
    assert {own.gpu for own in document.reliability.values()} == {"rtx-4090"}
    assert discovery_warnings(reports) == []


def test_servers_of_one_host_reporting_the_same_memory_are_warned_about() -> None:
    reports = [report("127.0.0.1:1", (8, 8), ip="127.0.0.1"),
               report("127.0.0.1:2", (8, 8), ip="127.0.0.1")]
    [warning] = discovery_warnings(reports)
    assert "127.0.0.1:1, 127.0.0.1:2 run on one host" in warning


def test_the_fleet_file_reads_back_and_launches_at_the_addresses_named(
        tmp_path: Path) -> None:
    reports = [report("gpu-a:50052", (150 * 2**30, 160 * 2**30)),
               report("gpu-b:50052", *[(150 * 2**30, 160 * 2**30)] * 2, ip="10.0.0.8")]
    document = discovered_fleet(reports, ModelChoice(preset=PRESET))
    path = save_fleet(document, tmp_path / "fleet.toml", overwrite=False)
    again = load_fleet(path)
    assert again == document
    text = path.read_text()
    assert 'address = "gpu-b:50052"\nrpc_device = 1' in text
    assert 'max_vram = "150 GiB"' in text
    plan = plan_topology(again.to_request())
    launch = launch_for_plan(again, plan, model_path="m.gguf")
    argv = list(launch.llama_server)
    assert set(argv[argv.index("--rpc") + 1].split(",")) <= {"gpu-a:50052", "gpu-b:50052"}


def test_an_existing_file_is_never_overwritten_without_being_asked(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text("# mine\n")
    document = discovered_fleet([report("h:1", (1 * 2**30, 2 * 2**30))],
                                ModelChoice(preset=PRESET))
    with pytest.raises(FleetFileError) as caught:
        save_fleet(document, path, overwrite=False)
    assert caught.value.code == "WouldOverwrite" and str(path) in str(caught.value)
    assert path.read_text() == "# mine\n"
    link = tmp_path / "link.toml"
    link.symlink_to(tmp_path / "nowhere.toml")  # a dangling link is something there too
    with pytest.raises(FleetFileError):
        save_fleet(document, link, overwrite=False)
    assert not (tmp_path / "nowhere.toml").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.toml", "link.toml"]


# -- the command -----------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planner.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)


def test_writing_a_fleet_needs_a_model_and_nothing_is_asked_without_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    # The address is never connected to: the command line is refused first.
    assert main(["discover", "127.0.0.1:9", "-o", "x.toml"]) == 2
    assert "give --model" in capsys.readouterr().err


def test_a_bad_timeout_or_kind_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", "127.0.0.1:9", "--timeout", "0"]) == 2
    assert main(["discover", "127.0.0.1:9", "--gpu", "no-such-gpu"]) == 2
    err = capsys.readouterr().err
    assert "--timeout" in err and "no-such-gpu" in err


def test_the_command_over_a_server_answering_as_protocol_7(tmp_path: Path) -> None:
    stream = server((3 * 2**30, 4 * 2**30))
    out = tmp_path / "fleet.toml"
    with hostile(lambda c: (c.recv(33), c.sendall(stream), threading.Event().wait(2))
                 ) as address:
        done = cli("discover", address, "--model", PRESET, "-o", str(out), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["fleet_file"] == str(out)
    assert data["devices"][0]["total_bytes"] == 4 * 2**30
    assert load_fleet(out).nodes[0].max_vram_bytes == 3 * 2**30
    with hostile(lambda c: (c.recv(33), c.sendall(stream), threading.Event().wait(2))
                 ) as address:
        again = cli("discover", address, "--model", PRESET, "-o", str(out))
    assert again.returncode == 2 and "already exists" in again.stderr
    assert str(out) in again.stderr


def test_the_fleet_file_written_keeps_the_size_of_the_preset_s_file(tmp_path: Path) -> None:
    """``--file-size`` is written as the fleet file's ``model.file_bytes``; a size the
    preset cannot take, or one given with a GGUF file, is refused before any server is
    asked."""
    stream = server((3 * 2**30, 4 * 2**30))
    out = tmp_path / "fleet.toml"
    with hostile(lambda c: (c.recv(33), c.sendall(stream), threading.Event().wait(2))
                 ) as address:
        done = cli("discover", address, "--model", "gpt-oss-20b", "--file-size", "11.27GiB",
                   "-o", str(out))
    assert done.returncode == 0, done.stderr
    document = load_fleet(out)
    assert document.model.file_bytes == round(11.27 * 2**30)
    assert document.to_request().model_weight_bytes == round(11.27 * 2**30)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    for model, size, said in (("gpt-oss-20b", "1KB", "--file-size: a file of 1,000 bytes"),
                              (str(gguf), "1GiB", "--file-size: a GGUF file's tensors state")):
        # 127.0.0.1:9 is never connected to: the command line is refused first.
        refused = cli("discover", "127.0.0.1:9", "--model", model, "--file-size", size,
                      "-o", str(tmp_path / "other.toml"))
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
        assert not (tmp_path / "other.toml").exists()


@pytest.mark.skipif(built_rpc_server() is None, reason="llama.cpp is not built "
                    "(validation/build_llama_cpp.sh)")
def test_real_rpc_servers_of_one_and_two_devices(tmp_path: Path) -> None:
    """llama.cpp's own rpc-server (b11434), started here on loopback: two of them, one
    serving two devices (-d CPU,CPU)."""
    from planner.llamacpp.runner import free_port, rpc_servers

    binary = str(built_rpc_server())
    ports = [free_port(), free_port()]
    commands = [(f"127.0.0.1:{ports[0]}", [binary, "--host", "127.0.0.1", "--port",
                                           str(ports[0])]),
                (f"127.0.0.1:{ports[1]}", [binary, "--host", "127.0.0.1", "--port",
                                           str(ports[1]), "-d", "CPU,CPU"])]
    out = tmp_path / "fleet.toml"
    with rpc_servers(commands):
        done = cli("discover", *(address for address, _ in commands), "--model", PRESET,
                   "-o", str(out))
    assert done.returncode == 0, done.stderr
    document = load_fleet(out)
    assert len(document.nodes) == 3
    assert dict(document.rpc_devices) == {f"127.0.0.1:{ports[1]}/0": 0,
                                          f"127.0.0.1:{ports[1]}/1": 1}
    assert all(0 < node.max_vram_bytes <= node.detected_vram_bytes
               for node in document.nodes if node.max_vram_bytes is not None)
    assert "run on one host (127.0.0.1)" in done.stderr
