"""Deferred sends on a stream connection: frames queued for the connection's writer thread
leave in order with plain ones, without a later send to push them, and never hold memory the
caller may still change."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from fray_ray._private.stream.protocol import Connection
from tests.waiting import wait_for


class _Received:
    """The `m` notifications a connection's reader delivers: (body, buffers) in arrival order."""

    def __init__(self) -> None:
        self.items: list[tuple[object, list[bytes]]] = []
        self._lock = threading.Lock()

    def __call__(self, connection: Connection, message_id: int | None, body: object, buffers: list[bytearray]) -> None:
        with self._lock:
            self.items.append((body, [bytes(b) for b in buffers]))

    def bodies(self) -> list[object]:
        with self._lock:
            return [body for body, _ in self.items]


@pytest.fixture
def connections(tcp_pair) -> Iterator[tuple[Connection, Connection, _Received]]:
    """(sender, reader, what the reader received) over a loopback pair; both closed afterwards."""
    ours, theirs = tcp_pair
    received = _Received()
    sender = Connection(ours, name="sender").start({})
    reader = Connection(theirs, name="reader").start({"m": received})
    yield sender, reader, received
    sender.close()
    reader.close()


def _writer_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"{name}-writer"]


def test_deferred_frames_arrive_on_their_own_and_in_order_with_plain_ones(connections) -> None:
    sender, _, received = connections
    sender.notify("m", 0)
    for i in range(1, 500):
        sender.notify("m", i, defer=True)
    wait_for(lambda: len(received.bodies()) == 500, what="the deferred frames, with nothing sent after them")
    sender.notify("m", 500, defer=True)
    sender.notify("m", 501)  # a plain send writes what is queued before its own frame
    sender.notify("m", 502, defer=True)
    wait_for(lambda: len(received.bodies()) == 503)
    assert received.bodies() == list(range(503))


def test_a_deferred_frame_never_waits_with_memory_the_caller_may_change(connections) -> None:
    sender, _, received = connections
    mutable = bytearray(b"before")
    sender.notify("m", "mutable", [mutable], defer=True)  # sent at once: a bytearray can change
    mutable[:] = b"after!"
    owned = b"stays"
    sender.notify("m", "owned", [owned], defer=True)
    wait_for(lambda: len(received.bodies()) == 2)
    assert received.items == [("mutable", [b"before"]), ("owned", [b"stays"])]


def test_close_writes_what_is_queued_and_ends_the_writer(connections) -> None:
    sender, _, received = connections
    big = bytes(256 * 1024)  # larger than one coalesced write: goes out from its own memory
    for i in range(200):
        sender.notify("m", i, [big] if i % 50 == 0 else [], defer=True)
    sender.close()
    wait_for(lambda: len(received.bodies()) == 200, what="every queued frame, written before the close")
    assert received.bodies() == list(range(200))
    assert all(buffers == ([big] if body % 50 == 0 else []) for body, buffers in received.items)  # type: ignore[operator]
    wait_for(lambda: not _writer_threads("sender"), what="the writer thread to end")


def test_the_writer_ends_when_the_peer_goes_away(connections) -> None:
    sender, reader, received = connections
    sender.notify("m", 1, defer=True)
    wait_for(lambda: received.bodies() == [1])
    assert _writer_threads("sender")
    reader.close()
    wait_for(lambda: sender.closed, what="the sender to see the connection closed")
    wait_for(lambda: not _writer_threads("sender"), what="the writer thread to end")


def test_close_does_not_wait_for_a_peer_that_stopped_reading(tcp_pair) -> None:
    ours, theirs = tcp_pair  # `theirs` never reads
    sender = Connection(ours, name="stuck-sender").start({})
    chunk = bytes(1 << 20)
    for i in range(64):  # far more than the socket buffers hold
        sender.notify("m", i, [chunk], defer=True)
    closed = threading.Event()
    threading.Thread(target=lambda: (sender.close(), closed.set()), daemon=True).start()
    assert closed.wait(30), "close() hung behind a write the peer never reads"
    wait_for(lambda: not _writer_threads("stuck-sender"), what="the writer thread to end")


# ---- on a real session: answers coalesced in the actor never wait behind a long call --------


def test_pipelined_answers_do_not_wait_for_the_calls_behind_them(cluster_session) -> None:
    import fray_ray

    @fray_ray.remote(max_concurrency=2)
    class Gate:
        def __init__(self) -> None:
            self.opened = threading.Event()

        def quick(self, i: int) -> int:
            return i

        def wait_until_opened(self) -> str:
            return "opened" if self.opened.wait(120) else "never opened"

        def open(self) -> None:
            self.opened.set()

    gate = Gate.remote()
    blocked = gate.wait_until_opened.remote()  # holds one of the two call threads
    quick = [gate.quick.remote(i) for i in range(300)]
    # Every quick answer arrives while a call is still running: none waited for it.
    assert fray_ray.get(quick, timeout=60) == list(range(300))
    ready, _ = fray_ray.wait([blocked], timeout=0.2)
    assert ready == []
    fray_ray.get(gate.open.remote(), timeout=60)
    assert fray_ray.get(blocked, timeout=60) == "opened"
    fray_ray.kill(gate)
