"""Batch frames on a stream connection: deferred notifications of one method leave as one
frame and reach a handler that takes batches as one list; a reader that falls behind gathers
what has arrived; a malformed batch ends the connection and reaches no handler; a sender
writes its own long batches, never waiting for a peer that does not read, and writes what it
deferred before it waits."""

from __future__ import annotations

import array
import fcntl
import struct
import termios
import threading
from collections.abc import Iterator

import msgpack
import pytest

from fray_ray._private.stream import outbox
from fray_ray._private.stream.frames import BATCH, NOTIFY
from fray_ray._private.stream.outbox import flush_deferred
from fray_ray._private.stream.protocol import Connection
from tests.waiting import wait_for

PREFIX = struct.Struct("<II")


class _Batches:
    """A handler that takes batches: each call's (body, buffers) list, in arrival order."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[object, list[bytes]]]] = []
        self._lock = threading.Lock()
        self.first_call_may_return = threading.Event()
        self.first_call_may_return.set()

    def __call__(self, connection: Connection, message_id: int | None, body: object, buffers: list[bytearray]) -> None:
        self.batch(connection, [(body, buffers)])

    def batch(self, connection: Connection, items: list[tuple[object, list[bytearray]]]) -> None:
        with self._lock:
            self.calls.append([(body, [bytes(b) for b in buffers]) for body, buffers in items])
            first = len(self.calls) == 1
        if first:
            self.first_call_may_return.wait(30)

    def bodies(self) -> list[object]:
        with self._lock:
            return [body for call in self.calls for body, _ in call]


def _unread_bytes(connection: Connection) -> int:
    """Bytes that arrived on `connection`'s socket and nobody has read yet."""
    count = array.array("i", [0])
    fcntl.ioctl(connection._sock.fileno(), termios.FIONREAD, count)
    return count[0]


class _One:
    """A plain handler: every notification alone."""

    def __init__(self) -> None:
        self.items: list[object] = []

    def __call__(self, connection: Connection, message_id: int | None, body: object, buffers: list[bytearray]) -> None:
        self.items.append(body)


@pytest.fixture
def pair(tcp_pair) -> Iterator[tuple[Connection, Connection, _Batches, _One]]:
    ours, theirs = tcp_pair
    batches, plain = _Batches(), _One()
    sender = Connection(ours, name="sender").start({})
    reader = Connection(theirs, name="reader").start({"b": batches, "p": plain})
    yield sender, reader, batches, plain
    sender.close()
    reader.close()


def test_deferred_notifications_of_one_method_reach_a_batch_handler_together_in_order(pair) -> None:
    sender, _, batches, plain = pair
    for i in range(10):
        sender.notify("b", i, [bytes([i])] if i % 3 == 0 else [], hold=True)
    sender.notify("p", "between", hold=True)  # another method ends the batch
    for i in range(10, 15):
        sender.notify("b", i, hold=True)
    sender.flush()
    wait_for(lambda: len(batches.bodies()) == 15 and plain.items == ["between"])
    assert batches.bodies() == list(range(15))
    assert [len(call) for call in batches.calls] == [10, 5]
    assert all(buffers == ([bytes([body])] if body % 3 == 0 else []) for body, buffers in batches.calls[0])


def test_a_handler_without_batches_gets_a_batch_one_by_one(pair) -> None:
    sender, _, _, plain = pair
    for i in range(40):
        sender.notify("p", i, hold=True)
    sender.flush()
    wait_for(lambda: len(plain.items) == 40)
    assert plain.items == list(range(40))


def test_a_reader_that_falls_behind_takes_what_has_arrived_in_one_batch(pair) -> None:
    sender, reader, batches, _ = pair
    batches.first_call_may_return.clear()
    sender.notify("b", 0)  # plain frames, one each
    wait_for(lambda: batches.calls, what="the first frame's handler, which now holds the reader")
    for i in range(1, 11):
        sender.notify("b", i)
    waiting = sum(PREFIX.size + len(msgpack.packb([NOTIFY, 0, "b", i])) for i in range(1, 11))
    wait_for(lambda: _unread_bytes(reader) >= waiting, what="the ten frames to wait in the reader's socket")
    batches.first_call_may_return.set()
    wait_for(lambda: len(batches.bodies()) == 11)
    assert batches.bodies() == list(range(11))
    assert len(batches.calls) < 11  # frames that were waiting were dispatched together


@pytest.mark.parametrize(
    "batch_body",
    [
        [[1, 0], "a", "b"],  # counts say 1 buffer, the frame carries none
        [[0], "a", "b"],  # fewer counts than bodies
        ["not counts", "a"],
        [],
        "not a list",
    ],
    ids=["buffer-count", "body-count", "counts-type", "empty", "not-a-list"],
)
def test_a_malformed_batch_closes_the_connection_and_reaches_no_handler(tcp_pair, batch_body) -> None:
    ours, theirs = tcp_pair
    batches = _Batches()
    reader = Connection(theirs, name="reader").start({"b": batches})
    closed = threading.Event()
    reader.add_close_callback(lambda _: closed.set())
    header = msgpack.packb([BATCH, 0, "b", batch_body])
    ours.sendall(PREFIX.pack(len(header), 0) + header)
    assert closed.wait(30)
    assert batches.calls == []
    reader.close()


def test_a_single_deferred_notification_travels_as_a_plain_frame(tcp_pair) -> None:
    ours, theirs = tcp_pair
    sender = Connection(ours, name="sender").start({})
    sender.notify("m", {"x": 1}, [b"buf"], hold=True)
    sender.flush()
    theirs.settimeout(30)
    prefix = theirs.recv(PREFIX.size, 0)
    header_length, buffer_count = PREFIX.unpack(prefix)
    header = b""
    while len(header) < header_length:
        header += theirs.recv(header_length - len(header))
    assert msgpack.unpackb(header) == [NOTIFY, 0, "m", {"x": 1}] and buffer_count == 1
    sender.close()


def test_a_sender_writes_a_long_batch_itself(pair, monkeypatch) -> None:
    sender, _, batches, _ = pair
    monkeypatch.setattr(Connection, "_wake_writer_locked", lambda self: None)  # no writer thread at all
    for i in range(outbox._FLUSH_ITEMS - 1):
        sender.notify("b", i, defer=True)
    assert sender._outbox, "a short batch waits for the writer thread"
    sender.notify("b", outbox._FLUSH_ITEMS - 1, defer=True)
    assert not sender._outbox
    wait_for(lambda: len(batches.bodies()) == outbox._FLUSH_ITEMS, what="the batch the sender wrote itself")


def test_what_a_thread_deferred_goes_before_it_waits(pair, monkeypatch) -> None:
    sender, _, batches, _ = pair
    monkeypatch.setattr(Connection, "_wake_writer_locked", lambda self: None)
    sender.notify("b", "deferred", defer=True)
    assert sender._outbox
    flush_deferred()
    assert not sender._outbox
    wait_for(lambda: batches.bodies() == ["deferred"])


def test_the_writer_thread_writes_what_a_quiet_sender_left(pair) -> None:
    sender, _, batches, _ = pair
    for i in range(5):
        sender.notify("b", i, defer=True)
    wait_for(lambda: batches.bodies() == list(range(5)), what="the writer thread to write the five")


def test_deferring_never_waits_for_a_peer_that_does_not_read(tcp_pair) -> None:
    ours, theirs = tcp_pair  # `theirs` never reads
    sender = Connection(ours, name="stuck-sender").start({})
    done = threading.Event()

    def pipeline() -> None:
        for i in range(200_000):  # far more than the socket buffers hold
            sender.notify("m", i, defer=True)
        done.set()

    threading.Thread(target=pipeline, daemon=True).start()
    assert done.wait(120), "a deferred notify waited for a peer that does not read"
    closed = threading.Event()
    threading.Thread(target=lambda: (sender.close(), closed.set()), daemon=True).start()
    assert closed.wait(30)


def test_a_get_that_lends_itself_to_a_closed_connection_waits_its_own_way(tcp_pair) -> None:
    ours, theirs = tcp_pair
    connection = Connection(ours, name="closed").start({})
    connection.close()
    assert connection.serve_until(lambda: False, timeout=5) is False
