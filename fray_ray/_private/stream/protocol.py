"""The stream protocol between a driver and its workers: msgpack frames on one TCP socket.

Connect RPC costs ~500 µs per call here; the paths between fray_ray's own processes (tasks
to executors, calls to actors, results, object fetches) need far less, so they use one
persistent, pipelined, bidirectional connection per worker.

Frames (`frames`) are msgpack headers `[kind, message id, method, body]` plus out-of-band
buffers: large binary values (pickle-5 buffers, numpy data) are written straight from the
caller's memory and read straight into their own bytearray. Either side may send requests
(answered by a REPLY or ERROR with the same id) and notifications; frames leave in order
through one outbox (`outbox`), and notifications that follow each other may leave as one batch.

Either side may send requests. Handlers run on the reader thread, or on a thread that reads
the connection itself while it waits (`serve_until`, see `read_lending`), and must not block:
slow work is handed to another thread, and its reply sent with `reply()` later. A handler that
takes batches (`batch` on it, see `messages.handlers`) gets the notifications of a batch frame
together, and the reader thread gathers consecutive notifications of one method that have
arrived already into one batch as well: a reader that falls behind catches up in batches.

A reader trusts no length it is told: a frame's header size, buffer count and buffer sizes are
checked against the maxima in `frames` before anything is allocated, and a large buffer grows
as its bytes arrive, so a peer that announces 2 GiB and sends nothing costs at most
`EAGER_READ_BYTES`. A malformed batch ends the connection before any of it is dispatched. Who
may speak at all is decided before a `Connection` exists (see `stream_server`).

A worker's connection reads large buffers into reused blocks (`buffers.ReceivedBlocks`) when it
has a free one of the right size: faulting in fresh pages costs more than the copy itself.
"""

from __future__ import annotations

import concurrent.futures
import io
import itertools
import logging
import socket
import threading
import weakref
from collections.abc import Callable
from typing import Any

import msgpack

from fray_ray._private.stream.buffers import Arrivals, Block
from fray_ray._private.stream.frames import (
    BATCH,
    BATCH_ITEMS,
    BUFFER_LENGTH,
    ERROR,
    FRAME_PREFIX,
    MAX_BUFFER_BYTES,
    MAX_BUFFERS_PER_FRAME,
    MAX_HEADER_BYTES,
    NOTIFY,
    REPLY,
    REQUEST,
    ConnectionClosed,
    FrameTooLarge,
    MessageTooLarge,
    split_batch,
)
from fray_ray._private.stream.outbox import Buffers, Outbox
from fray_ray._private.stream.read_lending import LendableSocket, ReadLending

logger = logging.getLogger(__name__)

#: Reads up to this size are allocated at once; larger ones grow as bytes arrive.
EAGER_READ_BYTES = 1 << 20
_ZEROS = memoryview(bytes(EAGER_READ_BYTES))
#: Bytes the reader buffers from the socket, so a small frame costs one system call.
_READ_BUFFER_BYTES = 64 * 1024
#: How long `close()` may spend writing the frames still queued.
_CLOSE_WRITE_TIMEOUT_S = 1.0

#: handler(connection, message_id, body, buffers); message_id is None for notifications.
Handler = Callable[["Connection", int | None, Any, list[bytearray]], None]
#: batch(connection, [(body, buffers), ...]): the notifications of one batch frame, in order.
BatchHandler = Callable[["Connection", list[tuple[Any, list[bytearray]]]], None]


class RemoteError(Exception):
    """A handler on the other side failed; `kind` and `message` describe it."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def _fill(reader: io.BufferedReader, view: memoryview) -> None:
    """Read exactly `len(view)` bytes into `view`."""
    filled = 0
    size = len(view)
    while filled < size:
        n = reader.readinto(view[filled:])
        if not n:
            raise ConnectionClosed("connection closed by peer")
        filled += n


def _read_exactly(reader: io.BufferedReader, size: int, blocks: Arrivals | None = None) -> bytearray | Block:
    """`size` bytes from `reader`, into a free block of `blocks` if there is one. Otherwise memory
    follows what has arrived, not what was announced: beyond `EAGER_READ_BYTES` the buffer at
    most doubles what is already filled."""
    if blocks is not None:
        block = blocks.take(size)
        if block is not None:
            _fill(reader, memoryview(block))
            return block
        buffer = _read_exactly(reader, size)
        blocks.keep(buffer)
        return buffer
    if size <= EAGER_READ_BYTES:
        buffer = bytearray(size)
        _fill(reader, memoryview(buffer))
        return buffer
    buffer = bytearray(EAGER_READ_BYTES)
    filled = 0
    while True:
        _fill(reader, memoryview(buffer)[filled:])
        filled = len(buffer)
        if filled == size:
            return buffer
        target = min(size, 2 * filled)
        while len(buffer) < target:  # grown from a resident block of zeros: no temporary copy
            buffer += _ZEROS[: target - len(buffer)]


class Connection(Outbox, ReadLending):
    """One framed, multiplexed connection. Thread-safe for senders.

    `start(handlers)` spawns the reader thread. `request()` returns a Future for the reply;
    `notify()` sends and forgets. `on_close` callbacks run once, after the reader stops. A
    worker thread may read the connection itself while it waits for work (`serve_until`,
    see `read_lending`).
    """

    def __init__(self, sock: socket.socket, *, name: str = "connection",
                 received_blocks: Arrivals | None = None) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._raw = LendableSocket(sock)
        self._raw.before_sleep = weakref.WeakMethod(self._flush_before_sleep)  # no cycle through the socket
        self._reader_file = io.BufferedReader(self._raw, _READ_BUFFER_BYTES)
        self.name = name
        self._received_blocks = received_blocks  # where large buffers are read into (workers)
        self._state_lock = threading.Lock()  # guards _pending and _closed
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._closed = False
        self._ids = itertools.count(1)
        self._handlers: dict[str, Handler] = {}
        self._reader: threading.Thread | None = None
        self._on_close: list[Callable[[Connection], None]] = []
        self._packer_lock = threading.Lock()
        self.peer_info: dict[str, Any] = {}
        self._init_outbox()
        self._init_lending()

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self, handlers: dict[str, Handler], *, first_frame: list[Any] | None = None) -> Connection:
        """Spawn the reader thread. `first_frame`, a header already read (the greeting a
        server authenticated), is dispatched to `handlers` before anything else is read."""
        self._handlers = handlers
        self._reader = threading.Thread(
            target=self._read_loop, args=(first_frame,), name=f"{self.name}-reader", daemon=True
        )
        self._reader.start()
        return self

    def handshake(self, method: str, body: Any, timeout: float) -> Any:
        """Send the first request and read its reply on this thread, before `start()`.

        Returns the reply's body; raises RemoteError if the peer answers with an error and
        ConnectionClosed if it closes (or does not answer within `timeout` seconds).
        """
        message_id = next(self._ids)
        self._sock.settimeout(timeout)
        try:
            self._send([REQUEST, message_id, method, body])
            (kind, reply_id, _, reply_body), _ = self._read_frame()
        except (OSError, ValueError, TypeError, msgpack.UnpackException) as exc:  # timeouts are OSErrors
            raise ConnectionClosed(f"{self.name}: no answer to {method}: {exc}") from exc
        finally:
            try:
                self._sock.settimeout(None)
            except OSError:
                pass
        if kind == ERROR and reply_id == message_id:
            raise RemoteError(*reply_body)
        if kind != REPLY or reply_id != message_id:
            raise ConnectionClosed(f"{self.name}: the peer did not answer {method}")
        return reply_body

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
        """Write what is queued (for at most about two `_CLOSE_WRITE_TIMEOUT_S`: a peer that
        stopped reading must not hold up the close), then close the socket; pending requests
        fail with ConnectionClosed."""
        if self._send_lock.acquire(timeout=_CLOSE_WRITE_TIMEOUT_S):  # a write under way ends first
            try:
                self._sock.settimeout(_CLOSE_WRITE_TIMEOUT_S)  # nor a peer that reads too slowly
                self._write_queued()
            except (ConnectionClosed, OSError):
                pass
            finally:
                self._send_lock.release()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._mark_closed()
        reader = self._reader
        if reader is None:
            self._reader_file.close()  # no reader thread will: release the socket's descriptor
        elif reader is not threading.current_thread():
            reader.join(timeout=5)

    def _mark_closed(self) -> None:
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            pending, self._pending = self._pending, {}
            callbacks, self._on_close = self._on_close, []
        self._wake_writer()  # it sees the connection closed and ends
        self._end_lending()
        for future in pending.values():
            if not future.done():
                future.set_exception(ConnectionClosed(f"{self.name}: connection closed"))
        for callback in callbacks:
            try:
                callback(self)
            except Exception:  # noqa: BLE001 - one callback must not stop the others
                logger.exception("close callback failed")

    # ---- sending -------------------------------------------------------------------------

    def request(self, method: str, body: Any = None, buffers: Buffers = ()) -> concurrent.futures.Future:
        """Send a request; the Future resolves to `(body, buffers)` of the reply."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        message_id = next(self._ids)
        with self._state_lock:
            if self._closed:
                future.set_exception(ConnectionClosed(f"{self.name}: connection closed"))
                return future
            self._pending[message_id] = future
        self.hand_to_standby()
        try:
            self._send([REQUEST, message_id, method, body], buffers)
        except ConnectionClosed as exc:
            with self._state_lock:
                self._pending.pop(message_id, None)
            if not future.done():
                future.set_exception(exc)
        except MessageTooLarge:  # nothing was sent; the caller hears why at once
            with self._state_lock:
                self._pending.pop(message_id, None)
            raise
        return future

    def call(self, method: str, body: Any = None, buffers: Buffers = (), timeout: float | None = None) -> tuple[Any, list[bytearray]]:
        """request() and wait for the reply."""
        return self.request(method, body, buffers).result(timeout)

    def notify(self, method: str, body: Any = None, buffers: Buffers = (), *, defer: bool = False,
               hold: bool = False) -> None:
        """Send a message that expects no answer; with `defer`, the writer thread sends it
        (soon, together with what else has queued by then); with `hold`, the caller's next
        `flush()` does (it sends more first). Only immutable buffers may wait: with others the
        frame goes at once, since the caller may change their memory."""
        if (defer or hold) and all(type(b) is bytes for b in buffers):
            self._defer(method, body, buffers, wake_writer=not hold)  # type: ignore[arg-type]
        else:
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
        reader = self._reader_file
        prefix = reader.read(FRAME_PREFIX.size)
        if len(prefix) < FRAME_PREFIX.size:
            raise ConnectionClosed("connection closed by peer")
        header_length, buffer_count = FRAME_PREFIX.unpack(prefix)
        if header_length > MAX_HEADER_BYTES:
            raise FrameTooLarge(f"frame header of {header_length} bytes exceeds {MAX_HEADER_BYTES}")
        if buffer_count > MAX_BUFFERS_PER_FRAME:
            raise FrameTooLarge(f"frame with {buffer_count} buffers exceeds {MAX_BUFFERS_PER_FRAME}")
        if header_length <= _READ_BUFFER_BYTES:
            packed: bytes | bytearray = reader.read(header_length)
            if len(packed) < header_length:
                raise ConnectionClosed("connection closed by peer")
        else:
            packed = _read_exactly(reader, header_length)
        header = msgpack.unpackb(packed, raw=False, strict_map_key=False)
        if type(header) is not list or len(header) != 4:
            raise ValueError("a frame's header must be [kind, id, method, body]")
        buffers = []
        for _ in range(buffer_count):
            length_bytes = reader.read(BUFFER_LENGTH.size)
            if len(length_bytes) < BUFFER_LENGTH.size:
                raise ConnectionClosed("connection closed by peer")
            (length,) = BUFFER_LENGTH.unpack(length_bytes)
            if length > MAX_BUFFER_BYTES:
                raise FrameTooLarge(f"frame buffer of {length} bytes exceeds {MAX_BUFFER_BYTES}")
            buffers.append(_read_exactly(reader, length, self._received_blocks))
        if header[0] == BATCH:
            header[3] = split_batch(header[3], buffers)  # checked here: a bad batch ends the connection
            buffers = []
        return header, buffers

    def _read_loop(self, first_frame: list[Any] | None = None) -> None:
        try:
            if first_frame is not None:
                self._dispatch(first_frame, [])
            while self._standby_turn():  # at once, unless a worker thread reads (`serve_until`)
                self._read_and_dispatch(gather=True)
                self._after_standby_frame()
        except Exception as exc:  # noqa: BLE001 - whatever a frame did wrong ends the connection
            self._reading_failed(exc)
        finally:
            self._mark_closed()
            try:
                self._reader_file.close()
                self._sock.close()
            except OSError:
                pass

    def _read_and_dispatch(self, gather: bool = False) -> None:
        """Read a frame and dispatch it. With `gather` (the reader thread), notifications of one
        method that arrived one after another, for a handler that takes batches, are dispatched
        together, as far as they are here already: a reader that falls behind catches up in
        batches. A thread that waits for one answer (`serve_until`) does not look further."""
        header, buffers = self._read_frame()
        if (not gather or header[0] != NOTIFY or getattr(self._handlers.get(header[2]), "batch", None) is None
                or not self._input_ready()):
            self._dispatch(header, buffers)
            return
        method = header[2]
        items = [(header[3], buffers)]
        header = buffers = None  # the frames' memory is their handler's: held by `items` alone
        while len(items) < BATCH_ITEMS and self._input_ready():
            header, buffers = self._read_frame()
            if header[0] == NOTIFY and header[2] == method:
                items.append((header[3], buffers))
            elif header[0] == BATCH and header[2] == method:
                items.extend(header[3])
            else:
                break
            header = buffers = None
        self._dispatch_batch(method, items)
        if header is not None:
            items = []
            self._dispatch(header, buffers)

    def _reading_failed(self, exc: BaseException) -> None:
        if isinstance(exc, FrameTooLarge):
            logger.warning("%s: %s; closing the connection", self.name, exc)
        elif not isinstance(exc, (ConnectionClosed, OSError, ValueError, TypeError, msgpack.UnpackException)):
            logger.error("%s: reading failed; closing the connection", self.name, exc_info=exc)
        self._mark_closed()

    def _dispatch(self, header: list[Any], buffers: list[bytearray]) -> None:
        kind, message_id, method, body = header
        if kind == BATCH:
            self._dispatch_batch(method, body)
            return
        if kind == REPLY or kind == ERROR:
            with self._state_lock:
                future = self._pending.pop(message_id, None)
            if future is None or future.done():
                return
            if kind == REPLY:
                future.set_result((body, buffers))
            else:
                future.set_exception(RemoteError(*body))
            return
        handler = self._handlers.get(method)
        if handler is None:
            if kind == REQUEST:
                self.reply_error(message_id, "UnknownMethod", f"no handler for {method!r}")
            return
        try:
            handler(self, message_id if kind == REQUEST else None, body, buffers)
        except Exception as exc:  # noqa: BLE001 - a bad message must not kill the connection
            logger.exception("%s: handler %s failed", self.name, method)
            if kind == REQUEST:
                self.reply_error(message_id, type(exc).__name__, str(exc))

    def _dispatch_batch(self, method: str, items: list[tuple[Any, list[bytearray]]]) -> None:
        """The notifications of a batch frame: to the handler's `batch` at once if it has one,
        else one by one."""
        handler = self._handlers.get(method)
        if handler is None:
            return
        batch: BatchHandler | None = getattr(handler, "batch", None)
        if batch is not None:
            try:
                batch(self, items)
            except Exception:  # noqa: BLE001 - a bad message must not kill the connection
                logger.exception("%s: handler %s failed", self.name, method)
            return
        for body, buffers in items:
            try:
                handler(self, None, body, buffers)
            except Exception:  # noqa: BLE001
                logger.exception("%s: handler %s failed", self.name, method)
