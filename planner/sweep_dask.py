"""The Dask adapter: the one module that talks to ``dask.distributed``.

:func:`results` sends sweep batches to a cluster and yields each result as it finishes.
The cluster is an existing one (``scheduler="tcp://host:8786"`` or a
``dask.distributed.Client``), or a ``LocalCluster`` started here and closed afterwards
when ``scheduler`` is ``None`` or ``"dask"``. Workers of a remote cluster need the
``planner`` package installed (the same version); they do not need the fleet files,
which travel with the batches.

Before a client connects to a ``tcp://`` or ``tls://`` address, :func:`check_scheduler`
makes sure a Dask scheduler answers there within Dask's connect timeout
(``distributed.comm.timeouts.connect``, 30 s by default): a listener that never answers,
or a server of another kind (an HTTP port, a port that speaks no TLS), is a connection
error at once, not a client that waits for ever or reads a web page as a message length.
A ``tls://`` scheduler needs Dask's TLS settings (``distributed.comm.tls.ca-file`` and
``distributed.comm.tls.client.cert`` / ``.key``, or their ``DASK_*`` environment
variables); :func:`tls_problem` says what is missing.

A worker that dies is Dask's to handle: its unfinished batches are run again on the
other workers, and the batches already yielded were saved by the caller.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import socket
import ssl
import struct
import time
from collections.abc import Callable, Generator, Iterable
from typing import Any

import dask
import msgpack
from dask.utils import parse_timedelta
from distributed import Client, KilledWorker, LocalCluster, as_completed
from distributed.config import defaults as distributed_defaults

# What Dask raises when the cluster itself fails: a batch that keeps killing its workers
# (Dask gives up after a few tries), or a scheduler that cannot be reached, does not
# answer as one, or goes away (connection errors and timeouts are OSErrors).
CLUSTER_FAILURES = (KilledWorker, OSError)

# A Dask TCP message starts with its length as an unsigned 64-bit integer
# (distributed.comm.tcp), and a scheduler sends its handshake, a few hundred bytes at most,
# as soon as a connection opens.
_LENGTH = struct.Struct("Q")
HANDSHAKE_BYTES = 1 << 20


def _with_defaults() -> None:
    """Put back distributed's own defaults wherever Dask's configuration lacks them.

    A ``dask.config.set`` entered before ``distributed`` was first imported removes, on
    exit, every key added in the meantime, distributed's defaults among them; Dask then
    fails on the first of them it reads (a ``KeyError``). Values that are set stay."""
    dask.config.update(dask.config.config, copy.deepcopy(distributed_defaults),
                       priority="old")


def is_client(value: Any) -> bool:
    """Whether ``value`` is a ``dask.distributed.Client``."""
    return isinstance(value, Client)


def connect_timeout() -> float:
    """Dask's connect timeout in seconds (``distributed.comm.timeouts.connect``)."""
    _with_defaults()
    return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"),
                                 default="s"))


def tls_problem() -> str | None:
    """What Dask's configuration lacks to reach a ``tls://`` scheduler (``None`` when a
    client can: a CA file and a client certificate are set)."""
    missing = [key for key in ("distributed.comm.tls.ca-file",
                               "distributed.comm.tls.client.cert")
               if not dask.config.get(key, None)]
    if missing:
        return ("a tls:// scheduler needs Dask's TLS settings; set "
                f"{' and '.join(missing)} (and the client key) in Dask's configuration")
    return None


# OpenSSL's reasons for a peer that does not speak TLS at all (a plain TCP or HTTP port);
# any other TLS failure (an alert asking for a client certificate, say) comes from a TLS
# server, which Dask's own handshake, with the configured certificates, then judges.
_NOT_TLS = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "HTTP_REQUEST",
            "PACKET_LENGTH_TOO_LONG", "UNKNOWN_PROTOCOL", "RECORD_TOO_LARGE")


def check_scheduler(address: str, timeout: float | None = None) -> None:
    """Raise a ``ConnectionError`` (or ``TimeoutError``) unless a Dask scheduler answers
    at ``address`` (``tcp://``, ``tls://`` or a bare ``host:port``) within ``timeout``
    seconds (default :func:`connect_timeout`). Over TLS, the server must complete a TLS
    handshake in that time and then send a Dask handshake, or stop at a TLS alert (a
    scheduler that wants the client's certificate, which only Dask's own handshake
    sends)."""
    scheme, _, where = address.rpartition("://")
    if scheme not in ("", "tcp", "tls"):
        return
    host, _, port = where.rpartition(":")
    limit = connect_timeout() if timeout is None else timeout
    with socket.create_connection((host.strip("[]"), int(port)), timeout=limit) as sock:
        if scheme != "tls":
            message = _first_message(sock, address, limit)
        else:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            # Only whether the peer speaks TLS is checked here; who it is, Dask checks.
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            try:
                with context.wrap_socket(sock, do_handshake_on_connect=False) as tls:
                    try:
                        tls.do_handshake()
                    except TimeoutError:
                        raise TimeoutError(
                            f"{address} accepted the connection but did not answer the TLS "
                            f"handshake within {limit:g} s") from None
                    message = _first_message(tls, address, limit)
            except ssl.SSLEOFError:
                raise ConnectionError(f"{address} closed the connection without answering "
                                      "the TLS handshake") from None
            except ssl.SSLError as error:
                if error.reason in _NOT_TLS:
                    raise ConnectionError(f"{address} answered, but not over TLS (is it a "
                                          "plain tcp:// port, or another kind of server?)"
                                          ) from None
                return  # a TLS server's own refusal: Dask's handshake decides
    problem = _handshake_problem(message)
    if problem is not None:
        raise ConnectionError(f"{address} answered, but not as a Dask scheduler: its first "
                              f"message {problem}")


def _first_message(sock: socket.socket, address: str, limit: float) -> bytes:
    """The peer's first message, all of it within ``limit`` seconds: its length, then
    that many bytes, at most :data:`HANDSHAKE_BYTES`."""
    deadline = time.monotonic() + limit
    (length,) = _LENGTH.unpack(_read_exactly(sock, _LENGTH.size, address, limit, deadline))
    if not _LENGTH.size <= length <= HANDSHAKE_BYTES:
        raise ConnectionError(f"{address} answered, but not as a Dask scheduler (is it "
                              "another kind of server, such as a web page?)")
    return _read_exactly(sock, length, address, limit, deadline)


def _handshake_problem(message: bytes) -> str | None:
    """What is wrong with a scheduler's first message (``None`` for a Dask handshake):
    its frame header (a count, then each frame's length) must describe at most
    :data:`HANDSHAKE_BYTES` in all, and its first frame must be the msgpack mapping a
    scheduler sends (``distributed.comm.core.Comm.handshake_info``)."""
    (count,) = _LENGTH.unpack_from(message)
    if count == 0:
        return "holds no frames"
    if _LENGTH.size * (1 + count) > len(message):
        return (f"says it holds {count:,} frames in {len(message):,} bytes (its frame "
                "header alone would need more)")
    sizes = struct.unpack_from(f"{count}Q", message, _LENGTH.size)
    if sum(sizes) > HANDSHAKE_BYTES:
        return (f"says its frames hold {sum(sizes):,} bytes; a handshake holds at most "
                f"{HANDSHAKE_BYTES:,}")
    start = _LENGTH.size * (1 + count)
    try:
        handshake = msgpack.unpackb(message[start:start + sizes[0]])
    except (ValueError, msgpack.UnpackException):
        return "is not a msgpack message"
    if not isinstance(handshake, dict) or "pickle-protocol" not in handshake:
        return "is not a Dask handshake"
    return None


def _read_exactly(sock: socket.socket, size: int, address: str, limit: float,
                  deadline: float) -> bytes:
    received = bytearray()
    try:
        while len(received) < size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            chunk = sock.recv(min(size - len(received), 1 << 16))
            if not chunk:
                raise ConnectionError(f"{address} closed the connection without "
                                      "answering as a Dask scheduler")
            received += chunk
    except TimeoutError:
        raise TimeoutError(f"{address} accepted the connection but did not answer as "
                           f"a Dask scheduler within {limit:g} s") from None
    return bytes(received)


def _connect(address: str) -> Client:
    """Dask's client of the scheduler at ``address``, private to the sweep (never the
    session's default client). A peer that passed :func:`check_scheduler` but then
    answers Dask's own client with bytes Dask cannot read (a frame count of 2**40, a
    frame of 8 TB, a message that is not msgpack) fails in Dask's reader with whatever
    that reader raises; it is a ``ConnectionError`` here, like any peer that is no
    scheduler."""
    # Made in two steps so that a client whose connection failed is closed here, at
    # once, rather than by its finaliser at exit (which waits twice the connect timeout).
    client = Client.__new__(Client)
    silenced = _Silenced()
    decoder_log = logging.getLogger("distributed.protocol.core")
    decoder_log.addFilter(silenced)
    try:
        Client.__init__(client, address, timeout=connect_timeout(), set_as_default=False)
    except Exception as error:
        with contextlib.suppress(Exception):
            client.close(timeout=1)
        if isinstance(error, CLUSTER_FAILURES):
            raise
        # Any failure to read the peer: struct, msgpack, memory.
        why = ": ".join(part for part in (type(error).__name__, str(error)[:200]) if part)
        raise ConnectionError(f"{address} answered, but not as a Dask scheduler Dask can "
                              f"read ({why})") from None
    finally:
        decoder_log.removeFilter(silenced)
    return client


class _Silenced(logging.Filter):
    """Drops what Dask's message decoder logs (with a traceback) for a message it cannot
    read while the client connects: the failure is said once, as a ``ConnectionError``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return False


def local_cluster(workers: int | None = None, *, processes: bool = True) -> LocalCluster:
    """A ``LocalCluster`` of ``workers`` single-threaded workers (default 2), with its
    dashboard off so that it never fights for a port."""
    return LocalCluster(n_workers=workers or 2, threads_per_worker=1, processes=processes,
                        dashboard_address=None)


def results(batches: Iterable[Any], function: Callable[[Any], Any], *,
            scheduler: Any = None, workers: int | None = None) -> Generator[Any]:
    """``function(batch)`` for every batch, run on the cluster, yielded in the order
    they complete. Batches are taken from ``batches`` as earlier ones finish (two per
    worker thread in flight), so a long stream is never all in memory. Raises one of
    :data:`CLUSTER_FAILURES` when the cluster fails; the results yielded before stand."""
    _with_defaults()
    cluster = None
    if isinstance(scheduler, Client):
        client, owned = scheduler, False
    elif scheduler is None or scheduler == "dask":
        cluster = local_cluster(workers)
        client, owned = Client(cluster, set_as_default=False), True
    else:
        check_scheduler(scheduler)
        client, owned = _connect(scheduler), True
    try:
        pending = iter(batches)
        window = max(4, 2 * sum(client.nthreads().values()))
        running = as_completed([client.submit(function, batch, pure=False)
                                for batch in itertools.islice(pending, window)],
                               loop=client.loop)
        for future in running:
            result = future.result()
            future.release()
            following = next(pending, None)
            if following is not None:
                running.add(client.submit(function, following, pure=False))
            yield result
    finally:
        if owned:
            client.close()
        if cluster is not None:
            cluster.close()
