"""The sending half of a stream connection (`protocol.Connection`): its outbox, deferred
notifications and the writer thread.

Frames leave in the order they were sent, through one outbox. A plain send writes the outbox
(its own frame last) before it returns. A *deferred* send (`notify(..., defer=True)`) only
queues its notification: a caller that pipelines a thousand calls pays one append per call
instead of a system call (and a round of the GIL) each. Deferred notifications of one method
that follow each other in the outbox leave as one batch frame (`frames.Batch`), so the peer
reads, unpacks and dispatches them once, and a handler that takes batches handles them
together. Deferring is for frames that more are likely to follow soon (calls to an actor that
is still busy with earlier ones, results while more work waits); a frame that someone waits
for alone goes out at once, as a plain send. `hold=True` queues the same way for a caller that
flushes itself right after (a scheduling round).

Who writes a deferred frame: its sender, once its batch holds `_FLUSH_ITEMS` notifications (as
far as the socket takes them without waiting: a deferred send never waits for a peer that reads
slowly); its sender again before it waits for answers (`flush_deferred`) or, reading its own
connection, before it sleeps; and otherwise the connection's writer thread, once the sender has
been quiet for `_WRITER_DELAY_S`. The writer stays out of an active sender's way on purpose:
in Python it would hold the send lock while it waits for the GIL that sender holds, and the
sender's own writes would stall until the GIL switched threads (5 ms).
"""

from __future__ import annotations

import socket
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import msgpack

from fray_ray._private.stream.frames import Batch, ConnectionClosed, check_frame, frame_bytes, frame_of, frame_parts

#: Frame parts below this size are joined into one write; larger ones go out from their own memory.
_COALESCE_BYTES = 64 * 1024
#: A batch this long is written by its sender rather than left for the writer thread.
_FLUSH_ITEMS = 32
#: How long the writer thread lets a sender that is still deferring write its own batches.
_WRITER_DELAY_S = 0.005

Buffers = Sequence[bytes | bytearray | memoryview]


_this_thread = threading.local()


def _deferred_by_thread(connection: Outbox) -> None:
    """This thread deferred frames on `connection` (`flush_deferred` writes them)."""
    connections = getattr(_this_thread, "connections", None)
    if connections is None:
        connections = _this_thread.connections = weakref.WeakSet()
    connections.add(connection)


def flush_deferred() -> None:
    """Write what this thread deferred, on every connection: before it waits for answers,
    which those frames may be what the peer needs to send them."""
    connections = getattr(_this_thread, "connections", None)
    if connections:
        _this_thread.connections = weakref.WeakSet()
        for connection in list(connections):
            connection.flush_if_deferred()


class Outbox:
    """The sending state of a `Connection`, which supplies `_sock`, `name` and `_closed`, and
    calls `_init_outbox` in its constructor."""

    _sock: socket.socket
    name: str
    _closed: bool

    def _init_outbox(self) -> None:
        self._send_lock = threading.Lock()  # held while writing to the socket
        self._outbox_lock = threading.Lock()  # guards the three fields below
        self._outbox: list[list[bytes | memoryview] | Batch] = []  # frames not yet written, in order
        self._writer_woken = False  # the writer thread will look at the outbox again
        self._writer: threading.Thread | None = None  # started at the first deferred send
        self._sender_writes = 0  # writes by senders of their own deferred frames, as the writer counts them
        self._writer_wake = threading.Lock()  # locked while the writer has nothing to do
        self._writer_wake.acquire()

    def _send(self, header: list[Any], buffers: Buffers = ()) -> None:
        packed = msgpack.packb(header, use_bin_type=True)
        # Lengths in bytes: a buffer of another item size is written as its bytes.
        as_bytes = [b if isinstance(b, bytes) else memoryview(b).cast("B") for b in buffers]
        check_frame(header[2], len(packed), as_bytes)
        parts = frame_of(packed, as_bytes)
        with self._outbox_lock:
            if self._closed:
                raise ConnectionClosed(f"{self.name}: connection closed")
            self._outbox.append(parts)
        self._flush()

    def _defer(self, method: str, body: Any, buffers: Sequence[bytes], wake_writer: bool = True) -> None:
        """Queue a notification for the writer thread (or, without `wake_writer`, for the
        caller's own `flush()`), in the batch of the same method at the end of the outbox if
        there is one."""
        packed = msgpack.packb(body, use_bin_type=True)
        check_frame(method, len(packed), buffers)
        with self._outbox_lock:
            if self._closed:
                raise ConnectionClosed(f"{self.name}: connection closed")
            outbox = self._outbox
            batch = outbox[-1] if outbox else None
            if type(batch) is not Batch or batch.method != method or not batch.has_room(packed, len(buffers)):
                batch = Batch(method)
                outbox.append(batch)
                if wake_writer:
                    _deferred_by_thread(self)
            batch.add(packed, buffers)
            if len(batch.bodies) < _FLUSH_ITEMS:
                if wake_writer:
                    self._wake_writer_locked()
                return
        # A long batch of small frames goes now, from this thread, as far as the socket takes it
        # without waiting; unless a write is under way (that writer looks at the outbox again).
        if self._send_lock.acquire(blocking=False):
            try:
                self._sender_writes += 1
                self._write_without_waiting()
            finally:
                self._send_lock.release()
        else:
            with self._outbox_lock:
                self._wake_writer_locked()

    def _write_without_waiting(self) -> None:
        """Write what is queued as far as the socket takes it at once (with `_send_lock` held);
        the rest, and anything large, is left first in the outbox for the writer thread: a
        deferred send never waits for a peer that reads slowly."""
        with self._outbox_lock:
            frames = self._outbox
            if sum(frame_bytes(frame) for frame in frames) > _COALESCE_BYTES * 4:
                self._wake_writer_locked()
                return
            self._outbox = []
        data = b"".join(part for frame in frames for part in frame_parts(frame))
        try:
            sent = self._sock.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise ConnectionClosed(f"{self.name}: {exc}") from exc
        if sent < len(data):
            with self._outbox_lock:
                self._outbox.insert(0, [memoryview(data)[sent:]])
                self._wake_writer_locked()

    def flush(self) -> None:
        """Write every queued (deferred) frame now, on this thread; a closed connection is ignored."""
        try:
            self._flush()
        except ConnectionClosed:
            pass

    def _flush(self) -> None:
        """Write every queued frame; ConnectionClosed if the socket fails."""
        with self._send_lock:
            self._write_queued()

    def _write_queued(self) -> None:
        """`_flush` with `_send_lock` held."""
        with self._outbox_lock:
            frames, self._outbox = self._outbox, []
        if not frames:
            return  # another thread wrote them
        small: list[bytes | memoryview] = []
        small_bytes = 0
        try:
            for frame in frames:
                for part in frame_parts(frame):
                    if len(part) >= _COALESCE_BYTES:  # a large buffer goes out from its own memory
                        if small:
                            self._sock.sendall(b"".join(small))
                            small, small_bytes = [], 0
                        self._sock.sendall(part)
                    else:
                        small.append(part)
                        small_bytes += len(part)
                        if small_bytes >= _COALESCE_BYTES:
                            self._sock.sendall(b"".join(small))
                            small, small_bytes = [], 0
            if small:
                self._sock.sendall(b"".join(small))
        except OSError as exc:
            raise ConnectionClosed(f"{self.name}: {exc}") from exc

    def _wake_writer(self) -> None:
        with self._outbox_lock:
            if self._writer is not None:
                self._wake_writer_locked()

    def _wake_writer_locked(self) -> None:
        if not self._writer_woken:
            self._writer_woken = True
            self._writer_wake.release()
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name=f"{self.name}-writer", daemon=True)
            self._writer.start()

    def _write_loop(self) -> None:
        while True:
            self._writer_wake.acquire()
            # A sender still deferring writes its own batches (`_FLUSH_ITEMS`, and before it
            # waits): this thread writes only what one left behind, once it has been quiet a
            # while. Writing beside an active sender would hold the send lock while waiting for
            # the GIL the sender holds, and stall the sender's writes until the GIL switches.
            while True:
                seen = self._sender_writes
                time.sleep(_WRITER_DELAY_S)
                if self._sender_writes == seen or self._closed:
                    break
            with self._outbox_lock:
                self._writer_woken = False
                if self._closed:
                    return
            try:
                self._flush()
            except ConnectionClosed:
                return  # the reader sees the socket fail and closes the connection

    def flush_if_deferred(self) -> None:
        """Write deferred frames now, if any (before this thread sleeps: nobody else may)."""
        if self._outbox:
            self._sender_writes += 1
            self.flush()

    def _flush_before_sleep(self) -> None:
        """A thread that reads this connection itself found nothing to read and will sleep:
        what it deferred (answers, while more calls were queued) goes first."""
        if self._outbox and not self._closed:
            self.flush_if_deferred()
