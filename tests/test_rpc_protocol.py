"""llama.cpp's RPC protocol as ``planner discover`` speaks it: the recorded replies of
real rpc-servers (llama.cpp b11434, ``make validate``) replayed through the one
conversation, and hostile replies, truncated, resized, inconsistent or random, each
refused with a named error before anything it announces is read."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.limits import MAX_NODE_BYTES, MAX_RPC_DEVICES
from planner.llamacpp.rpc import (
    CONN_CAPS_BYTES,
    HELLO_REPLY_BYTES,
    PROTOCOL_VERSION,
    ROUND_TRIP_PROBES,
    RpcDiscoveryError,
    RpcServerReport,
    check_resolved,
    device_memory_request,
    hello_request,
    named_endpoint,
    refuse_duplicates,
    replay,
)

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "validation" / "results" / "mesh" / "rpc-replies.json"
ADDRESS = "10.0.0.7:50052"


def recorded() -> list[dict[str, Any]]:
    return list(json.loads(RECORDED.read_text())["servers"])


def reply(body: bytes) -> bytes:
    return struct.pack("<Q", len(body)) + body


def hello(major: int = 7, minor: int = 0, patch: int = 0, caps: bytes = bytes(24)) -> bytes:
    return reply(bytes([major, minor, patch, 0]) + caps)


def server(*devices: tuple[int, int], hello_reply: bytes | None = None,
           count: int | None = None) -> bytes:
    """The bytes an rpc-server of protocol 7.0 sends for these (free, total) devices, and
    for device 0 asked again to time round trips."""
    stream = hello() if hello_reply is None else hello_reply
    stream += reply(struct.pack("<I", len(devices) if count is None else count))
    for free, total in [*devices, *devices[:1] * ROUND_TRIP_PROBES]:
        stream += reply(struct.pack("<QQ", free, total))
    return stream


# -- what real servers sent ---------------------------------------------------------------


@pytest.mark.parametrize("record", recorded(), ids=lambda record: record["address"])
def test_recorded_replies_of_real_rpc_servers_replay_to_what_discover_saw(
        record: dict[str, Any]) -> None:
    report, sent = replay(record["address"], bytes.fromhex(record["received_hex"]))
    assert sent == bytes.fromhex(record["sent_hex"])  # the same requests, byte for byte
    seen = record["report"]
    assert report.version == PROTOCOL_VERSION
    assert [device.to_dict() for device in report.devices] == seen["devices"]
    assert report.transport_offered is seen["transport_offered"]


def test_the_recordings_cover_a_server_of_one_device_and_one_of_several() -> None:
    counts = sorted(len(record["report"]["devices"]) for record in recorded())
    assert counts[0] == 1 and counts[-1] >= 2


def test_the_requests_are_llama_cpps_bytes() -> None:
    # | cmd (1 byte) | payload size (uint64 LE) | payload |: HELLO is command 14 with
    # 24 zero bytes of conn_caps; GET_DEVICE_MEMORY is 11 with the uint32 device.
    assert hello_request() == b"\x0e" + struct.pack("<Q", 24) + bytes(24)
    assert device_memory_request(3) == b"\x0b" + struct.pack("<QI", 4, 3)


def test_two_devices() -> None:
    report, _ = replay(ADDRESS, server((10, 20), (0, 2**40)))
    assert [(d.index, d.free_bytes, d.total_bytes) for d in report.devices] == [
        (0, 10, 20), (1, 0, 2**40)]


# -- hostile replies, each with its name ---------------------------------------------------


def refused(stream: bytes) -> RpcDiscoveryError:
    with pytest.raises(RpcDiscoveryError) as caught:
        replay(ADDRESS, stream)
    assert caught.value.address == ADDRESS and ADDRESS in caught.value.message
    return caught.value


@pytest.mark.parametrize(("version", "accepted"), [
    ((7, 0, 0), True), ((7, 0, 9), True),  # a patch level is no mismatch
    ((7, 1, 0), False),  # a newer minor version: llama.cpp's client refuses it too
    ((6, 0, 0), False), ((8, 0, 0), False), ((0, 0, 0), False)])
def test_the_version_rule_is_llama_cpps_client_rule(version: tuple[int, int, int],
                                                     accepted: bool) -> None:
    stream = server((1, 2), hello_reply=hello(*version))
    if accepted:
        assert replay(ADDRESS, stream)[0].version == version
    else:
        error = refused(stream)
        assert error.code == "RpcVersionMismatch"
        assert ".".join(map(str, version)) in error.message and "7.0.0" in error.message


def test_a_hello_of_another_size_is_another_protocol_version() -> None:
    # An rpc-server of an older protocol answers HELLO with a reply of its own size.
    error = refused(reply(bytes([3, 0, 0])))
    assert error.code == "RpcVersionMismatch" and "3-byte reply" in error.message


def test_an_http_server_is_no_rpc_server_and_its_size_is_never_read_as_one() -> None:
    error = refused(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    assert error.code == "NotAnRpcServer" and "'HTTP/1.1'" in error.message


@pytest.mark.parametrize("stream", [b"", b"\x1c\x00\x00"], ids=["closed", "three bytes"])
def test_a_server_that_closes_before_answering_hello_is_no_rpc_server(stream: bytes) -> None:
    assert refused(stream).code == "NotAnRpcServer"


def test_an_offered_transport_upgrade_is_noted_and_not_taken() -> None:
    report, sent = replay(ADDRESS, server((1, 2), hello_reply=hello(caps=b"\x01" * 24)))
    assert report.transport_offered
    assert sent[9:9 + CONN_CAPS_BYTES] == bytes(CONN_CAPS_BYTES)  # we offered none


@pytest.mark.parametrize(("stream", "words"), [
    (server(count=0), "reports no devices"),
    (server(count=MAX_RPC_DEVICES + 1), f"reports {MAX_RPC_DEVICES + 1:,} devices"),
    (server(count=2**32 - 1), "reports 4,294,967,295 devices"),
    (server((3, 2)), "more free memory (3 bytes) than total (2 bytes)"),
    (server((0, 0)), "0 bytes of total memory"),
    (server((0, MAX_NODE_BYTES + 1)), "more than the"),
    (hello() + reply(b"\x01\x00"), "announced a 2-byte reply to DEVICE_COUNT"),
    (hello() + struct.pack("<Q", 2**63), "announced a 9,223,372,036,854,775,808-byte"),
    (hello() + reply(struct.pack("<I", 1)) + struct.pack("<Q", 10**12),
     "1,000,000,000,000-byte reply to GET_DEVICE_MEMORY"),
    (server((1, 2))[:-3], "inside its GET_DEVICE_MEMORY of device 0 reply (13 of 16 bytes)"),
    (hello()[:20], "inside its HELLO reply"),
    (hello() + reply(struct.pack("<I", 2)) + reply(struct.pack("<QQ", 1, 2)),
     "GET_DEVICE_MEMORY of device 1"),
], ids=["no devices", "too many", "2^32-1 devices", "free above total", "zero total",
        "beyond a node", "short count", "huge size", "huge memory reply", "cut memory",
        "cut hello", "missing device"])
def test_inconsistent_or_oversized_replies_are_refused(stream: bytes, words: str) -> None:
    error = refused(stream)
    assert error.code == "InvalidRpcReply"
    assert words in error.message


def test_every_device_count_is_asked_for_no_more_than_the_cap() -> None:
    """However many devices a server claims, discover asks for at most the cap's."""
    stream = server(*[(1, 2)] * MAX_RPC_DEVICES)
    report, sent = replay(ADDRESS, stream)
    assert len(report.devices) == MAX_RPC_DEVICES
    assert sent.count(b"\x0b\x04" + bytes(7)) == MAX_RPC_DEVICES + ROUND_TRIP_PROBES


# -- fuzzing: any bytes give a report that holds together or a named error ------------------


def check_or_named(stream: bytes) -> RpcServerReport | None:
    try:
        report, sent = replay(ADDRESS, stream)
    except RpcDiscoveryError as error:
        assert error.code in RpcDiscoveryError.codes
        return None
    assert 1 <= len(report.devices) <= MAX_RPC_DEVICES
    assert report.version[0] == PROTOCOL_VERSION[0]
    for index, device in enumerate(report.devices):
        assert device.index == index
        assert 0 <= device.free_bytes <= device.total_bytes <= MAX_NODE_BYTES
        assert device.total_bytes > 0
    # The requests are HELLO, DEVICE_COUNT, one GET_DEVICE_MEMORY per device and the
    # round-trip probes.
    assert len(sent) == 33 + 9 + 13 * (len(report.devices) + ROUND_TRIP_PROBES)
    return report


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes_give_a_consistent_report_or_a_named_error(stream: bytes) -> None:
    check_or_named(stream)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_recorded_replies_mutated_give_a_consistent_report_or_a_named_error(
        data: st.DataObject) -> None:
    stream = bytearray(bytes.fromhex(data.draw(st.sampled_from(recorded()))["received_hex"]))
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, len(stream)))
        action = data.draw(st.sampled_from(["flip", "cut", "insert", "set"]))
        if action == "flip" and where < len(stream):
            stream[where] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del stream[where:where + data.draw(st.integers(1, 16))]
        elif action == "insert":
            stream[where:where] = data.draw(st.binary(min_size=1, max_size=16))
        elif action == "set" and where + 8 <= len(stream):
            stream[where:where + 8] = struct.pack(
                "<Q", data.draw(st.sampled_from([0, 1, 2**32, 2**63, 2**64 - 1])))
    check_or_named(bytes(stream))


@settings(max_examples=300)
@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
                min_size=1, max_size=MAX_RPC_DEVICES))
def test_any_memory_figures_are_kept_exactly_or_refused(
        devices: list[tuple[int, int]]) -> None:
    report = check_or_named(server(*devices))
    valid = all(0 < total <= MAX_NODE_BYTES and free <= total for free, total in devices)
    assert (report is not None) == valid
    if report is not None:
        assert [(d.free_bytes, d.total_bytes) for d in report.devices] == devices


def test_the_hello_reply_size_is_the_packed_struct() -> None:
    # rpc_msg_hello_rsp: major, minor, patch, padding, conn_caps[RPC_CONN_CAPS_SIZE = 24].
    assert HELLO_REPLY_BYTES == 28


# -- addresses -------------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["10.0.0.7", "10.0.0.7:0", "[::1]:50052", "::1:50052",
                                     "host:port", "-rf:50052", "10.0.0.256:50052", 50052,
                                     "a b:1"])
def test_addresses_that_are_not_host_and_port_are_refused(address: Any) -> None:
    with pytest.raises(RpcDiscoveryError) as caught:
        named_endpoint(address)
    assert caught.value.code == "InvalidRpcAddress"


def test_names_that_name_no_one_host_are_refused() -> None:
    for ip in ("0.0.0.0", "224.0.0.1", "255.255.255.255"):
        with pytest.raises(RpcDiscoveryError) as caught:
            check_resolved("h:1", ip)
        assert caught.value.code == "InvalidRpcAddress" and ip in caught.value.message
    check_resolved("h:1", "127.0.0.1")
    check_resolved("h:1", "10.0.0.7")


def test_two_names_of_one_server_are_refused() -> None:
    with pytest.raises(RpcDiscoveryError) as caught:
        refuse_duplicates([("localhost:1", ("127.0.0.1", 1)), ("a:2", ("127.0.0.1", 2)),
                           ("127.0.0.1:1", ("127.0.0.1", 1))])
    assert caught.value.code == "DuplicateRpcServer"
    assert "localhost:1" in caught.value.message and "127.0.0.1:1" in caught.value.message
