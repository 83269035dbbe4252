"""The stream protocol between a driver and its workers: msgpack frames on one TCP socket.

Connect RPC costs ~500 µs per call here; the paths between fray_ray's own processes (tasks
to executors, calls to actors, results, object fetches) need far less, so they use one
persistent, pipelined, bidirectional connection per worker.

A frame is `<u32 header length><u32 buffer count>` then the msgpack header, then for each
out-of-band buffer `<u64 length><bytes>`. The header is `[kind, message id, method, body]`:
kind REQUEST expects a REPLY (or ERROR) with the same id; NOTIFY expects nothing. Large
binary values (pickle-5 buffers, numpy data) travel as out-of-band buffers, so they are
written straight from the caller's memory and read straight into their own bytearray.

Either side may send requests. Handlers run on the reader thread and must not block: slow
work is handed to another thread, and its reply sent with `reply()` later.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

import msgpack

logger = logging.getLogger(__name__)

REQUEST, REPLY, ERROR, NOTIFY = 0, 1, 2, 3

_PREFIX = struct.Struct("<II")
_BUFFER_LENGTH = struct.Struct("<Q")
MAX_HEADER_BYTES = 64 * 1024 * 1024

Buffers = Sequence[bytes | bytearray | memoryview]
#: handler(connection, message_id, body, buffers); message_id is None for notifications.
Handler = Callable[["Connection", int | None, Any, list[bytearray]], None]


class ConnectionClosed(ConnectionError):
    """The peer went away (or we closed the connection) before a reply arrived."""


class RemoteError(Exception):
    """A handler on the other side failed; `kind` and `message` describe it."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def _recv_exactly(sock: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        n = sock.recv_into(view[received:], size - received)
        if n == 0:
            raise ConnectionClosed("connection closed by peer")
        received += n
    return buffer


class Connection:
    """One framed, multiplexed connection. Thread-safe for senders.

    `start(handlers)` spawns the reader thread. `request()` returns a Future for the reply;
    `notify()` sends and forgets. `on_close` callbacks run once, after the reader stops.
    """

    def __init__(self, sock: socket.socket, *, name: str = "connection") -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self.name = name
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()  # guards _pending and _closed
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._closed = False
        self._ids = itertools.count(1)
        self._handlers: dict[str, Handler] = {}
        self._reader: threading.Thread | None = None
        self._on_close: list[Callable[[Connection], None]] = []
        self._packer_lock = threading.Lock()
        self.peer_info: dict[str, Any] = {}

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self, handlers: dict[str, Handler]) -> Connection:
        self._handlers = handlers
        self._reader = threading.Thread(target=self._read_loop, name=f"{self.name}-reader", daemon=True)
        self._reader.start()
        return self

    def add_close_callback(self, callback: Callable[[Connection], None]) -> None:
        with self._state_lock:
            if not self._closed:
                self._on_close.append(callback)
                return
        callback(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the socket; pending requests fail with ConnectionClosed."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._mark_closed()
        reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout=5)

    def _mark_closed(self) -> None:
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            pending, self._pending = self._pending, {}
            callbacks, self._on_close = self._on_close, []
        for future in pending.values():
            if not future.done():
                future.set_exception(ConnectionClosed(f"{self.name}: connection closed"))
        for callback in callbacks:
            try:
                callback(self)
            except Exception:  # noqa: BLE001 - one callback must not stop the others
                logger.exception("close callback failed")

    # ---- sending -------------------------------------------------------------------------

    def _send(self, header: list[Any], buffers: Buffers = ()) -> None:
        packed = msgpack.packb(header, use_bin_type=True)
        parts: list[bytes | memoryview] = [_PREFIX.pack(len(packed), len(buffers)), packed]
        for buffer in buffers:
            view = memoryview(buffer).cast("B") if not isinstance(buffer, bytes) else buffer
            parts.append(_BUFFER_LENGTH.pack(len(view)))
            parts.append(view)
        with self._send_lock:
            if self._closed:
                raise ConnectionClosed(f"{self.name}: connection closed")
            try:
                if sum(len(p) for p in parts) < 65536:
                    self._sock.sendall(b"".join(parts))
                else:
                    for part in parts:
                        self._sock.sendall(part)
            except OSError as exc:
                raise ConnectionClosed(f"{self.name}: {exc}") from exc

    def request(self, method: str, body: Any = None, buffers: Buffers = ()) -> concurrent.futures.Future:
        """Send a request; the Future resolves to `(body, buffers)` of the reply."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        message_id = next(self._ids)
        with self._state_lock:
            if self._closed:
                future.set_exception(ConnectionClosed(f"{self.name}: connection closed"))
                return future
            self._pending[message_id] = future
        try:
            self._send([REQUEST, message_id, method, body], buffers)
        except ConnectionClosed as exc:
            with self._state_lock:
                self._pending.pop(message_id, None)
            if not future.done():
                future.set_exception(exc)
        return future

    def call(self, method: str, body: Any = None, buffers: Buffers = (), timeout: float | None = None) -> tuple[Any, list[bytearray]]:
        """request() and wait for the reply."""
        return self.request(method, body, buffers).result(timeout)

    def notify(self, method: str, body: Any = None, buffers: Buffers = ()) -> None:
        self._send([NOTIFY, 0, method, body], buffers)

    def reply(self, message_id: int, body: Any = None, buffers: Buffers = ()) -> None:
        """Answer request `message_id`; a closed connection is ignored (the asker is gone)."""
        try:
            self._send([REPLY, message_id, "", body], buffers)
        except ConnectionClosed:
            pass

    def reply_error(self, message_id: int, kind: str, message: str) -> None:
        try:
            self._send([ERROR, message_id, "", [kind, message]])
        except ConnectionClosed:
            pass

    # ---- receiving -----------------------------------------------------------------------

    def _read_frame(self) -> tuple[list[Any], list[bytearray]]:
        header_length, buffer_count = _PREFIX.unpack(_recv_exactly(self._sock, _PREFIX.size))
        if header_length > MAX_HEADER_BYTES:
            raise ConnectionClosed(f"frame header of {header_length} bytes is too large")
        header = msgpack.unpackb(_recv_exactly(self._sock, header_length), raw=False, strict_map_key=False)
        buffers = []
        for _ in range(buffer_count):
            (length,) = _BUFFER_LENGTH.unpack(_recv_exactly(self._sock, _BUFFER_LENGTH.size))
            buffers.append(_recv_exactly(self._sock, length))
        return header, buffers

    def _read_loop(self) -> None:
        try:
            while True:
                header, buffers = self._read_frame()
                kind, message_id, method, body = header
                if kind == REPLY or kind == ERROR:
                    with self._state_lock:
                        future = self._pending.pop(message_id, None)
                    if future is None or future.done():
                        continue
                    if kind == REPLY:
                        future.set_result((body, buffers))
                    else:
                        future.set_exception(RemoteError(*body))
                    continue
                handler = self._handlers.get(method)
                if handler is None:
                    if kind == REQUEST:
                        self.reply_error(message_id, "UnknownMethod", f"no handler for {method!r}")
                    continue
                try:
                    handler(self, message_id if kind == REQUEST else None, body, buffers)
                except Exception as exc:  # noqa: BLE001 - a bad message must not kill the connection
                    logger.exception("%s: handler %s failed", self.name, method)
                    if kind == REQUEST:
                        self.reply_error(message_id, type(exc).__name__, str(exc))
                finally:
                    buffers = None  # the frame's memory is its handler's now: hold it no longer
        except (ConnectionClosed, OSError, ValueError, msgpack.UnpackException):
            pass
        finally:
            self._mark_closed()
            try:
                self._sock.close()
            except OSError:
                pass


def connect(address: str, *, name: str = "connection", timeout: float = 30.0) -> Connection:
    """Open a Connection to `host:port` (not yet started)."""
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    sock.settimeout(None)
    return Connection(sock, name=name)


class StreamServer:
    """Accepts connections on host:port and hands each (started by `on_connect`) to the owner."""

    def __init__(self, on_connect: Callable[[Connection], None], *, host: str = "127.0.0.1", port: int = 0) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(512)
        self._on_connect = on_connect
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="stream-server", daemon=True)
        self.host = host
        self.port = self._sock.getsockname()[1]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> StreamServer:
        self._thread.start()
        return self

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._sock.accept()
            except OSError:
                return
            try:
                self._on_connect(Connection(sock, name="session"))
            except Exception:  # noqa: BLE001 - one bad connection must not stop accepting
                logger.exception("accepting a connection failed")
                sock.close()

    def close(self) -> None:
        self._closed.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
