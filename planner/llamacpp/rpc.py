"""llama.cpp's RPC protocol as release b11434 speaks it (protocol 7.0.0): the three
exchanges that ask an ``rpc-server`` for its devices' memory, and the checks of its
replies. Pure: bytes in, bytes out; the socket is :mod:`planner.llamacpp`'s.

Every message is little-endian and packed (``ggml/src/ggml-rpc/ggml-rpc.cpp``):

- a request is the command (1 byte), the payload's size (``uint64``) and the payload;
- a reply is its size (``uint64``) and its body.

The exchanges, in the order llama.cpp's own client makes them:

1. ``RPC_CMD_HELLO`` (14, the first command of every connection; the server closes any
   other): a 24-byte ``conn_caps`` payload, all zero here (plain TCP, no RDMA), and a
   28-byte reply: ``major``, ``minor``, ``patch``, a padding byte and the server's own
   24 ``conn_caps`` bytes. llama.cpp's client accepts a server whose ``major`` equals
   its own (7) and whose ``minor`` is at most its own (0); so does this module. A server
   that offers a transport upgrade (non-zero caps) is answered with none: the exchange
   stays on the connection the user named.
2. ``RPC_CMD_DEVICE_COUNT`` (15): no payload; a 4-byte reply, ``uint32 device_count``.
3. ``RPC_CMD_GET_DEVICE_MEMORY`` (11) for each device: ``uint32 device``; a 16-byte reply,
   ``uint64 free_mem`` then ``uint64 total_mem`` (``ggml_backend_dev_memory`` of the
   server's device). A device index the server does not have closes the connection.
   Device 0 is then asked :data:`ROUND_TRIP_PROBES` more times (each reply checked as
   the first), so that the adapter times a few round trips.

A reply is never trusted: its announced size must be the one the command's reply has
before a byte of the body is read (so no reply makes the reader allocate what it says),
the device count must be from 1 to :data:`~planner.limits.MAX_RPC_DEVICES`, and a
device's total memory above 0, at most :data:`~planner.limits.MAX_NODE_BYTES` and at
least its free memory.

The exchanges are written once, as a generator (:func:`device_memory_conversation`): it
yields what to send and how many bytes to read next, and is given those bytes. The
adapter runs it over a socket; :func:`replay` runs it over recorded bytes.
"""

from __future__ import annotations

import ipaddress
import string
import struct
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner._validate import shown
from planner.errors import CodedError
from planner.fleet._fields import address_problem
from planner.limits import MAX_NODE_BYTES, MAX_RPC_DEVICES

PROTOCOL_VERSION = (7, 0, 0)
"""``RPC_PROTO_{MAJOR,MINOR,PATCH}_VERSION`` of llama.cpp b11434 (``ggml-rpc.h``)."""
LLAMA_CPP_RELEASE = "b11434"

COMMAND_GET_DEVICE_MEMORY = 11
COMMAND_HELLO = 14
COMMAND_DEVICE_COUNT = 15
SIZE_FIELD_BYTES = 8
CONN_CAPS_BYTES = 24
HELLO_REPLY_BYTES = 4 + CONN_CAPS_BYTES
DEVICE_COUNT_REPLY_BYTES = 4
DEVICE_MEMORY_REPLY_BYTES = 16
LARGEST_HELLO_OF_ANOTHER_VERSION = 64
"""A HELLO reply announcing at most this many bytes (but not 28) is read as an rpc-server
of another protocol version; a larger size is not an rpc-server's reply at all (an HTTP
server's ``HTTP/1.1`` read as a size is 3.5 x 10^18)."""

ROUND_TRIP_PROBES = 4
"""GET_DEVICE_MEMORY requests of device 0 after every device's, to time round trips."""

_COMMAND_NAMES = {COMMAND_HELLO: "HELLO", COMMAND_DEVICE_COUNT: "DEVICE_COUNT",
                  COMMAND_GET_DEVICE_MEMORY: "GET_DEVICE_MEMORY"}


class RpcDiscoveryError(CodedError):
    """An rpc-server could not be asked for its devices, or answered in a way that cannot
    be used. ``code`` is stable (docs/errors.md); ``address`` is the server as the user
    named it."""

    codes = ("InvalidRpcAddress", "DuplicateRpcServer", "AddressNotNamed", "RpcUnreachable",
             "RpcTimeout", "NotAnRpcServer", "RpcVersionMismatch", "InvalidRpcReply")

    def __init__(self, code: str, message: str, *, address: str | None = None,
                 **details: Any) -> None:
        where = f"{address}: " if address is not None else ""
        super().__init__(code, where + message, address=address, **details)
        self.address = address


@dataclass(frozen=True, slots=True)
class RpcDevice:
    """One device of an rpc-server, as it reported itself."""

    index: int
    free_bytes: int
    total_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "free_bytes": self.free_bytes,
                "total_bytes": self.total_bytes}


@dataclass(frozen=True, slots=True)
class RpcServerReport:
    """What one rpc-server said: its protocol version and its devices."""

    address: str
    """The server as the user named it (``host:port``)."""
    version: tuple[int, int, int]
    devices: tuple[RpcDevice, ...]
    transport_offered: bool = False
    """The server offered a transport upgrade (RDMA) in its HELLO; it was not taken."""
    connected_to: str | None = None
    """The IPv4 address and port the name resolved to, when it was resolved."""
    round_trip_ms: float | None = None
    """The shortest request-to-reply time of the exchanges, in milliseconds."""

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "connected_to": self.connected_to,
                "protocol_version": ".".join(map(str, self.version)),
                "transport_offered": self.transport_offered,
                "round_trip_ms": self.round_trip_ms,
                "devices": [device.to_dict() for device in self.devices]}


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a conversation: send ``request`` (maybe empty), then read exactly
    ``read`` bytes. ``what`` names the step in messages."""

    request: bytes
    read: int
    what: str


# -- the requests ---------------------------------------------------------------------------


def request(command: int, payload: bytes = b"") -> bytes:
    """A request: the command byte, the payload's size and the payload."""
    return bytes([command]) + struct.pack("<Q", len(payload)) + payload


def hello_request() -> bytes:
    """HELLO with all-zero ``conn_caps``: plain TCP, no transport upgrade."""
    return request(COMMAND_HELLO, bytes(CONN_CAPS_BYTES))


def device_count_request() -> bytes:
    return request(COMMAND_DEVICE_COUNT)


def device_memory_request(device: int) -> bytes:
    return request(COMMAND_GET_DEVICE_MEMORY, struct.pack("<I", device))


# -- the replies ----------------------------------------------------------------------------


def _readable(data: bytes) -> str:
    """Bytes shown as text when they are printable ASCII (an HTTP server's first bytes),
    else as hex."""
    text = data.decode("ascii", errors="replace")
    if data and all(ch in string.printable and ch not in "\x0b\x0c" for ch in text):
        return shown(text)
    return data.hex(" ")


def reply_size(header: bytes, command: int, expected: int, address: str) -> int:
    """The body size a reply's header announces, refused unless it is ``expected``."""
    size = int(struct.unpack("<Q", header)[0])
    if size == expected:
        return size
    name = _COMMAND_NAMES.get(command, str(command))
    if command == COMMAND_HELLO:
        if size <= LARGEST_HELLO_OF_ANOTHER_VERSION:
            raise RpcDiscoveryError(
                "RpcVersionMismatch",
                f"answered HELLO with a {size}-byte reply where protocol "
                f"{_version_text(PROTOCOL_VERSION)} (llama.cpp {LLAMA_CPP_RELEASE}) replies "
                f"{expected} bytes: an rpc-server of another protocol version; run the "
                f"rpc-server of llama.cpp {LLAMA_CPP_RELEASE}", address=address,
                reply_bytes=size)
        raise RpcDiscoveryError(
            "NotAnRpcServer",
            f"is not an rpc-server: its first reply ({_readable(header)}) is no answer to "
            "llama.cpp's HELLO", address=address)
    raise RpcDiscoveryError(
        "InvalidRpcReply",
        f"announced a {size:,}-byte reply to {name} where protocol "
        f"{_version_text(PROTOCOL_VERSION)} replies {expected} bytes; nothing of it was read",
        address=address, command=name, reply_bytes=size)


def _version_text(version: Sequence[int]) -> str:
    return ".".join(str(part) for part in version)


def parse_hello(body: bytes, address: str) -> tuple[tuple[int, int, int], bool]:
    """The server's protocol version and whether it offered a transport upgrade; refused
    (``RpcVersionMismatch``) unless llama.cpp b11434's client would accept it."""
    _exact(body, HELLO_REPLY_BYTES, "HELLO", address)
    major, minor, patch = body[0], body[1], body[2]
    version = (major, minor, patch)
    if major != PROTOCOL_VERSION[0] or minor > PROTOCOL_VERSION[1]:
        raise RpcDiscoveryError(
            "RpcVersionMismatch",
            f"speaks RPC protocol {_version_text(version)}; llama.cpp {LLAMA_CPP_RELEASE} "
            f"(the release this planner pins) speaks {_version_text(PROTOCOL_VERSION)} and "
            f"accepts a server of major version {PROTOCOL_VERSION[0]} and minor version at "
            f"most {PROTOCOL_VERSION[1]}; run the rpc-server of llama.cpp "
            f"{LLAMA_CPP_RELEASE}", address=address, version=_version_text(version))
    return version, any(body[4:])


def parse_device_count(body: bytes, address: str) -> int:
    """The number of devices, from 1 to :data:`MAX_RPC_DEVICES`."""
    _exact(body, DEVICE_COUNT_REPLY_BYTES, "DEVICE_COUNT", address)
    (count,) = struct.unpack("<I", body)
    if count == 0:
        raise RpcDiscoveryError("InvalidRpcReply", "reports no devices", address=address,
                                device_count=count)
    if count > MAX_RPC_DEVICES:
        raise RpcDiscoveryError(
            "InvalidRpcReply",
            f"reports {count:,} devices; one llama.cpp process schedules at most "
            f"{MAX_RPC_DEVICES} backends (GGML_SCHED_MAX_BACKENDS), so no more are asked for",
            address=address, device_count=count)
    return int(count)


def parse_device_memory(body: bytes, device: int, address: str) -> RpcDevice:
    """A device's free and total memory, checked against each other and the caps."""
    _exact(body, DEVICE_MEMORY_REPLY_BYTES, f"GET_DEVICE_MEMORY of device {device}", address)
    free, total = struct.unpack("<QQ", body)
    problem = None
    if total == 0:
        problem = "reports 0 bytes of total memory"
    elif total > MAX_NODE_BYTES:
        problem = (f"reports {total:,} bytes of total memory, more than the "
                   f"{MAX_NODE_BYTES:,} bytes (1 PiB) a node may have")
    elif free > total:
        problem = f"reports more free memory ({free:,} bytes) than total ({total:,} bytes)"
    if problem is not None:
        raise RpcDiscoveryError("InvalidRpcReply", f"device {device} {problem}",
                                address=address, device=device, free_bytes=free,
                                total_bytes=total)
    return RpcDevice(device, int(free), int(total))


def _exact(body: bytes, size: int, what: str, address: str) -> None:
    if len(body) != size:
        raise RpcDiscoveryError(
            "InvalidRpcReply", f"closed the connection inside its {what} reply "
            f"({len(body)} of {size} bytes)", address=address, command=what)


# -- the conversation -----------------------------------------------------------------------

Conversation = Generator[Step, bytes, RpcServerReport]


def device_memory_conversation(address: str) -> Conversation:
    """HELLO, DEVICE_COUNT and GET_DEVICE_MEMORY for every device: yields each
    :class:`Step`, is sent the bytes read, returns the :class:`RpcServerReport`."""
    header = yield Step(hello_request(), SIZE_FIELD_BYTES, "HELLO")
    if len(header) < SIZE_FIELD_BYTES:
        raise RpcDiscoveryError(
            "NotAnRpcServer",
            "closed the connection without answering llama.cpp's HELLO"
            + (f" (it sent {_readable(header)})" if header else "")
            + f": not an rpc-server, or one of another protocol version than "
            f"{_version_text(PROTOCOL_VERSION)} (llama.cpp {LLAMA_CPP_RELEASE})",
            address=address)
    size = reply_size(header, COMMAND_HELLO, HELLO_REPLY_BYTES, address)
    version, offered = parse_hello((yield Step(b"", size, "HELLO")), address)
    header = yield Step(device_count_request(), SIZE_FIELD_BYTES, "DEVICE_COUNT")
    _exact(header, SIZE_FIELD_BYTES, "DEVICE_COUNT", address)
    size = reply_size(header, COMMAND_DEVICE_COUNT, DEVICE_COUNT_REPLY_BYTES, address)
    count = parse_device_count((yield Step(b"", size, "DEVICE_COUNT")), address)
    devices: list[RpcDevice] = []
    # Every device, then device 0 again a few times: each exchange is a round trip whose
    # time the adapter measures (the shortest is the link's latency).
    for device in [*range(count), *[0] * ROUND_TRIP_PROBES]:
        what = f"GET_DEVICE_MEMORY of device {device}"
        header = yield Step(device_memory_request(device), SIZE_FIELD_BYTES, what)
        _exact(header, SIZE_FIELD_BYTES, what, address)
        size = reply_size(header, COMMAND_GET_DEVICE_MEMORY, DEVICE_MEMORY_REPLY_BYTES,
                          address)
        reply = parse_device_memory((yield Step(b"", size, what)), device, address)
        if len(devices) < count:
            devices.append(reply)
    return RpcServerReport(address, version, tuple(devices), offered)


def converse(conversation: Conversation, exchange: Callable[[Step], bytes]) -> RpcServerReport:
    """Run ``conversation``, ``exchange`` sending each step's request and returning the
    bytes it read (fewer than asked when the connection closed)."""
    step = next(conversation)
    while True:
        try:
            step = conversation.send(exchange(step))
        except StopIteration as done:
            report: RpcServerReport = done.value
            return report


@dataclass(slots=True)
class Transcript:
    """The bytes of one conversation: what was sent and what was received."""

    sent: bytearray = field(default_factory=bytearray)
    received: bytearray = field(default_factory=bytearray)

    def to_dict(self) -> dict[str, str]:
        return {"sent_hex": self.sent.hex(), "received_hex": self.received.hex()}


def replay(address: str, received: bytes) -> tuple[RpcServerReport, bytes]:
    """Run the conversation over recorded reply bytes, as if a server had sent them:
    the report, and the bytes the conversation sent (to compare with a recording)."""
    stream = memoryview(received)
    position = 0
    requests = bytearray()

    def exchange(step: Step) -> bytes:
        nonlocal position
        requests.extend(step.request)
        chunk = bytes(stream[position:position + step.read])
        position += len(chunk)
        return chunk

    report = converse(device_memory_conversation(address), exchange)
    return report, bytes(requests)


# -- the addresses a user names -----------------------------------------------------------


def named_endpoint(address: Any) -> tuple[str, int]:
    """The host and port of an rpc-server address ``host:port`` as a user names it: a host
    name or an IPv4 address (llama.cpp's RPC is IPv4 only) and a port from 1 to 65535."""
    problem = address_problem(address)
    if problem is not None:
        raise RpcDiscoveryError("InvalidRpcAddress",
                                f"the rpc-server address {problem} (got {shown(address)})",
                                address=None, value=shown(address))
    host, _, port = str(address).rpartition(":")
    return host, int(port)


def check_resolved(address: str, ip: str) -> None:
    """Refuse a name that resolves to an address naming no one host: the unspecified
    address (0.0.0.0 reaches whatever listens on this machine), a broadcast or a
    multicast address."""
    resolved = ipaddress.IPv4Address(ip)
    kind = ("the unspecified address" if resolved.is_unspecified
            else "a multicast address" if resolved.is_multicast
            else "the broadcast address" if resolved == ipaddress.IPv4Address("255.255.255.255")
            else None)
    if kind is not None:
        raise RpcDiscoveryError(
            "InvalidRpcAddress", f"resolves to {ip}, {kind}, which names no one host; "
            "name the host the rpc-server runs on", address=address, resolved=ip)


def refuse_duplicates(resolved: Sequence[tuple[str, tuple[str, int]]]) -> None:
    """Refuse two named addresses that reach the same server (``localhost:50052`` and
    ``127.0.0.1:50052``): its devices would be counted twice."""
    seen: dict[tuple[str, int], str] = {}
    for address, endpoint in resolved:
        if endpoint in seen:
            raise RpcDiscoveryError(
                "DuplicateRpcServer",
                f"reaches the same rpc-server as {seen[endpoint]} ({endpoint[0]}:"
                f"{endpoint[1]}); name each server once, or its devices count twice",
                address=address, other=seen[endpoint])
        seen[endpoint] = address
