"""The stream protocol's front door: a peer gets a `Connection` only after its first frame proves
it holds the session token.

Until then a connection is handled by one gate thread with a selector (never a thread per
connection), and may send exactly one small frame: no out-of-band buffers, a header of at most
`max_hello_bytes`, within `handshake_timeout_s` of being accepted. That frame must be a
`hello` request whose body carries the token; the comparison is constant-time. Anything else
is refused and closed, and nothing of it is dispatched or unpickled. The gate reads no byte
past the greeting, so what follows belongs to the `Connection` it hands to `on_connect`.

At most `max_pending` connections wait to authenticate; a new one evicts the oldest, so a
flood of idle or slow connections can neither exhaust file descriptors nor lock out a worker,
which sends its greeting as soon as it connects. Authenticated connections are capped at
`max_connections`.

`introduce()` is the other side: connect, greet, and get the server's answer, retrying while
the server sheds load.
"""

from __future__ import annotations

import errno
import hmac
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from fray_ray._private.stream.buffers import Arrivals
from fray_ray._private.stream.frames import ERROR, FRAME_PREFIX, REQUEST
from fray_ray._private.stream.protocol import Connection, ConnectionClosed, RemoteError

logger = logging.getLogger(__name__)

#: The method of the first frame; its body carries `token`.
HELLO = "hello"
#: The error kind a refused greeting is answered with.
UNAUTHENTICATED = "Unauthenticated"

_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


@dataclass(frozen=True)
class StreamLimits:
    """What an unauthenticated peer may cost a stream server."""

    #: The greeting must be complete this many seconds after the connection is accepted.
    handshake_timeout_s: float = 5.0
    #: Largest msgpack header the greeting may have.
    max_hello_bytes: int = 4096
    #: Connections still to authenticate; beyond this the oldest is closed.
    max_pending: int = 256
    #: Authenticated connections; beyond this a greeting is refused.
    max_connections: int = 8192
    #: Connections accepted per wake-up, so reading greetings keeps pace with a flood.
    accepts_per_wakeup: int = 64

    def __post_init__(self) -> None:
        if self.handshake_timeout_s <= 0:
            raise ValueError("handshake_timeout_s must be positive")
        if self.max_hello_bytes < 64:
            raise ValueError("max_hello_bytes must be at least 64")
        if self.max_pending < 1 or self.max_connections < 1 or self.accepts_per_wakeup < 1:
            raise ValueError("max_pending, max_connections and accepts_per_wakeup must be at least 1")


@dataclass(frozen=True)
class GateStats:
    """Counters of a stream server since it started."""

    pending: int
    authenticated: int
    accepted: int
    refused: int
    evicted: int
    timed_out: int


class _Pending:
    """A connection that has not finished its greeting."""

    __slots__ = ("sock", "deadline", "data", "need")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.data = bytearray()
        self.need = FRAME_PREFIX.size  # bytes of the greeting known to be due so far


class StreamServer:
    """Accepts on host:port and hands each authenticated `Connection` (not yet started) and its
    greeting's header to `on_connect`, which must return quickly (it runs on the gate thread).
    """

    def __init__(
        self,
        on_connect: Callable[[Connection, list[Any]], None],
        *,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        limits: StreamLimits | None = None,
        name: str = "session",
    ) -> None:
        if not token:
            raise ValueError("a stream server needs a non-empty token")
        self._on_connect = on_connect
        self._token = token.encode()
        self._limits = limits or StreamLimits()
        self._name = name
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, port))
            self._listener.listen(512)
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._pending: dict[socket.socket, _Pending] = {}  # insertion order is arrival order
        self._accepting_again_at: float | None = None  # set while out of file descriptors
        self._closed = threading.Event()
        self._count_lock = threading.Lock()  # guards _authenticated (close callbacks run anywhere)
        self._authenticated = 0
        self._accepted = self._refused = self._evicted = self._timed_out = 0
        self._thread = threading.Thread(target=self._run, name=f"{name}-gate", daemon=True)
        self.host = host
        self.port = self._listener.getsockname()[1]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stats(self) -> GateStats:
        with self._count_lock:
            authenticated = self._authenticated
        return GateStats(
            len(self._pending), authenticated, self._accepted, self._refused, self._evicted, self._timed_out
        )

    def start(self) -> StreamServer:
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_reader, selectors.EVENT_READ)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop accepting and close every connection still waiting to authenticate. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._thread.ident is None:  # never started: nothing else owns the sockets
            self._release()
            return
        try:
            self._wake_writer.send(b"x")
        except OSError:
            pass
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _release(self) -> None:
        for pending in list(self._pending.values()):
            pending.sock.close()
        self._pending.clear()
        self._selector.close()
        for sock in (self._listener, self._wake_reader, self._wake_writer):
            sock.close()

    # ---- the gate thread -----------------------------------------------------------------

    def _run(self) -> None:
        """The gate thread owns the listener and every pending socket, and releases them."""
        try:
            while not self._closed.is_set():
                for key, _ in self._selector.select(self._next_timeout()):
                    if key.fileobj is self._listener:
                        self._accept_some()
                    elif key.fileobj is self._wake_reader:
                        self._drain_wakeups()
                    elif key.fileobj in self._pending:
                        self._read_greeting(self._pending[key.fileobj])
                self._expire()
                self._resume_accepting()
        except Exception:  # noqa: BLE001 - a gate that fails must still release its sockets
            logger.exception("%s gate stopped", self._name)
        finally:
            self._release()

    def _next_timeout(self) -> float | None:
        deadlines = []
        if self._pending:
            deadlines.append(next(iter(self._pending.values())).deadline)
        if self._accepting_again_at is not None:
            deadlines.append(self._accepting_again_at)
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_reader.recv(64):
                pass
        except OSError:
            pass

    def _accept_some(self) -> None:
        for _ in range(self._limits.accepts_per_wakeup):
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    raise
                if self._pending:  # make room: the oldest stranger goes first
                    self._drop(next(iter(self._pending.values())), "evicted")
                    continue
                logger.warning("%s: out of file descriptors; pausing accepts for 0.1 s", self._name)
                self._selector.unregister(self._listener)
                self._accepting_again_at = time.monotonic() + 0.1
                return
            self._accepted += 1
            sock.setblocking(False)
            if len(self._pending) >= self._limits.max_pending:
                self._drop(next(iter(self._pending.values())), "evicted")
            pending = _Pending(sock, time.monotonic() + self._limits.handshake_timeout_s)
            self._pending[sock] = pending
            self._selector.register(sock, selectors.EVENT_READ)
            self._read_greeting(pending)  # a worker's greeting is usually there already

    def _resume_accepting(self) -> None:
        if self._accepting_again_at is not None and time.monotonic() >= self._accepting_again_at:
            self._accepting_again_at = None
            self._selector.register(self._listener, selectors.EVENT_READ)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._pending:
            oldest = next(iter(self._pending.values()))
            if oldest.deadline > now:
                return
            self._drop(oldest, "timed_out")

    def _drop(self, pending: _Pending, reason: str) -> None:
        if reason == "evicted":
            self._evicted += 1
        elif reason == "timed_out":
            self._timed_out += 1
        else:
            self._refused += 1
        self._pending.pop(pending.sock, None)
        try:
            self._selector.unregister(pending.sock)
        except (KeyError, ValueError):
            pass
        pending.sock.close()
        logger.debug("%s: closed an unauthenticated connection (%s)", self._name, reason)

    def _read_greeting(self, pending: _Pending) -> None:
        """Read what is due of the greeting (never more); act once it is complete."""
        while True:
            try:
                chunk = pending.sock.recv(pending.need - len(pending.data))
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._drop(pending, "refused")
                return
            if not chunk:
                self._drop(pending, "refused")
                return
            pending.data += chunk
            if len(pending.data) < pending.need:
                return
            if pending.need > FRAME_PREFIX.size:
                self._authenticate(pending)
                return
            header_length, buffer_count = FRAME_PREFIX.unpack(pending.data)
            if buffer_count or not 0 < header_length <= self._limits.max_hello_bytes:
                self._drop(pending, "refused")
                return
            pending.need = FRAME_PREFIX.size + header_length

    def _authenticate(self, pending: _Pending) -> None:
        header = _parse_greeting(bytes(pending.data[FRAME_PREFIX.size :]))
        if header is None:
            self._drop(pending, "refused")
            return
        message_id, body = header[1], header[3]
        token = body.get("token")
        try:
            given = token.encode() if isinstance(token, str) else b""
        except UnicodeEncodeError:
            given = b""
        if not hmac.compare_digest(given, self._token):
            _send_error(pending.sock, message_id, UNAUTHENTICATED, "wrong or missing session token")
            self._drop(pending, "refused")
            return
        with self._count_lock:
            full = self._authenticated >= self._limits.max_connections
            if not full:
                self._authenticated += 1
        if full:
            _send_error(
                pending.sock, message_id, "TooManyConnections",
                f"{self._name} already serves {self._limits.max_connections} connections",
            )
            self._drop(pending, "refused")
            return
        self._pending.pop(pending.sock)
        self._selector.unregister(pending.sock)
        sock = pending.sock
        try:
            sock.setblocking(True)
            connection = Connection(sock, name=self._name)
        except OSError:
            sock.close()
            self._connection_closed(None)
            return
        connection.add_close_callback(self._connection_closed)
        try:
            self._on_connect(connection, header)
        except Exception:  # noqa: BLE001 - one bad connection must not stop the gate
            logger.exception("%s: accepting a connection failed", self._name)
            connection.close()

    def _connection_closed(self, _connection: Connection | None) -> None:
        with self._count_lock:
            self._authenticated -= 1


def _parse_greeting(packed: bytes) -> list[Any] | None:
    """The greeting's header if it is a well-formed `hello` request with a map body, else None."""
    try:
        header = msgpack.unpackb(packed, raw=False, strict_map_key=False)
    except Exception:  # noqa: BLE001 - any malformed input is simply refused
        return None
    if not (isinstance(header, list) and len(header) == 4):
        return None
    kind, message_id, method, body = header
    if kind != REQUEST or not isinstance(message_id, int) or method != HELLO or not isinstance(body, dict):
        return None
    return header


def _send_error(sock: socket.socket, message_id: int, kind: str, message: str) -> None:
    """Best effort: tell a refused peer why, without ever waiting for it."""
    packed = msgpack.packb([ERROR, message_id, "", [kind, message]], use_bin_type=True)
    try:
        sock.send(FRAME_PREFIX.pack(len(packed), 0) + packed)
    except OSError:
        pass


def introduce(
    address: str,
    greeting: Mapping[str, Any],
    *,
    name: str = "connection",
    timeout: float = 60.0,
    received_blocks: Arrivals | None = None,
    give_up: Callable[[Exception], bool] | None = None,
) -> tuple[Connection, Any]:
    """Connect to a stream server and greet it; returns the Connection (not yet started) and
    the body of the server's answer.

    `greeting` is the hello body and must carry `token`. A refusal of the token raises
    RemoteError at once. A connection the server closes before answering (a gate shedding a
    flood of strangers, or timing out a greeting it could not read in time) is retried until
    `timeout` seconds have passed, then ConnectionClosed. An open connection is waited on, never
    given up for a new one: a server that is merely slow may already have accepted this one,
    and a second connection of the same worker would make the first one's close look like the
    worker's death. `received_blocks`: where the connection reads large buffers into (workers).
    `give_up(failure)`, asked before each retry, ends the retries early (the server is known
    gone, or the failure says so).
    """
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        remaining = deadline - time.monotonic()
        try:
            sock = socket.create_connection((host.strip("[]"), int(port)), timeout=max(0.1, min(10.0, remaining)))
            connection = Connection(sock, name=name, received_blocks=received_blocks)
        except OSError as exc:
            failure: Exception = exc
        else:
            try:
                answer = connection.handshake(HELLO, dict(greeting), timeout=max(0.1, deadline - time.monotonic()))
            except RemoteError:
                connection.close()
                raise
            except ConnectionClosed as exc:
                connection.close()
                failure = exc
            else:
                return connection, answer
        if time.monotonic() + delay >= deadline or (give_up is not None and give_up(failure)):
            raise ConnectionClosed(f"could not introduce {name} to {address}: {failure}") from failure
        time.sleep(delay)
        delay = min(1.0, delay * 2)
