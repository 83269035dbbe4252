"""Frame reads on an authenticated connection: announced sizes are checked before anything is
allocated, and large buffers grow with the bytes that actually arrive."""

from __future__ import annotations

import struct
import threading
import tracemalloc

import msgpack
import pytest

from fray_ray._private.stream import frames, protocol
from fray_ray._private.stream.frames import MessageTooLarge
from fray_ray._private.stream.protocol import Connection, ConnectionClosed, RemoteError

PREFIX = struct.Struct("<II")
LENGTH = struct.Struct("<Q")
MIB = 1 << 20


def _closed_event(connection: Connection) -> threading.Event:
    closed = threading.Event()
    connection.add_close_callback(lambda _: closed.set())
    return closed


def test_a_large_buffer_grows_only_as_its_bytes_arrive(tcp_pair) -> None:
    ours, theirs = tcp_pair
    reader = ours.makefile("rb", buffering=64 * 1024)
    sender = threading.Thread(target=lambda: (theirs.sendall(b"x" * (3 * MIB)), theirs.close()))
    tracemalloc.start()
    try:
        sender.start()
        with pytest.raises(ConnectionClosed):
            protocol._read_exactly(reader, 2 << 30)  # announced 2 GiB, 3 MiB arrive
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        sender.join()
        reader.close()
    assert peak < 16 * MIB, f"reading 3 MiB of an announced 2 GiB peaked at {peak / MIB:.1f} MiB"


@pytest.mark.parametrize(
    "frame",
    [
        PREFIX.pack(protocol.MAX_HEADER_BYTES + 1, 0),
        PREFIX.pack(4, protocol.MAX_BUFFERS_PER_FRAME + 1),
        PREFIX.pack(len(msgpack.packb([3, 0, "m", None])), 1)
        + msgpack.packb([3, 0, "m", None])
        + LENGTH.pack(protocol.MAX_BUFFER_BYTES + 1),
    ],
    ids=["header", "buffer-count", "buffer-length"],
)
def test_announcements_beyond_the_maxima_close_the_connection(tcp_pair, frame: bytes) -> None:
    ours, theirs = tcp_pair
    called = []
    connection = Connection(ours, name="limits").start({"m": lambda *args: called.append(args)})
    closed = _closed_event(connection)
    theirs.sendall(frame)
    assert closed.wait(30)
    assert called == []
    connection.close()


def test_frames_with_large_small_and_empty_buffers_round_trip(tcp_pair) -> None:
    ours, theirs = tcp_pair
    echo = Connection(theirs, name="echo").start({"echo": lambda c, mid, body, bufs: c.reply(mid, body, bufs)})
    caller = Connection(ours, name="caller").start({})
    try:
        large = bytes(range(256)) * (5 * MIB // 256 + 3)  # not a power of two: every growth step is used
        body, buffers = caller.call("echo", {"k": [1, 2]}, [large, b"", b"small"], timeout=60)
        assert body == {"k": [1, 2]}
        assert [bytes(b) for b in buffers] == [large, b"", b"small"]
        assert all(isinstance(b, bytearray) for b in buffers)
    finally:
        caller.close()
        echo.close()


def test_handshake_returns_the_answer_or_raises_the_refusal(tcp_pair) -> None:
    ours, theirs = tcp_pair

    def answer(c: Connection, mid: int | None, body: dict, bufs: list) -> None:
        if body.get("token") == "right":
            c.reply(mid, {"ok": True})
        else:
            c.reply_error(mid, "Unauthenticated", "no")

    server = Connection(theirs, name="server").start({"hello": answer})
    client = Connection(ours, name="client")
    try:
        with pytest.raises(RemoteError) as refused:
            client.handshake("hello", {"token": "wrong"}, timeout=30)
        assert refused.value.kind == "Unauthenticated"
        assert client.handshake("hello", {"token": "right"}, timeout=30) == {"ok": True}
    finally:
        client.close()
        server.close()


def test_a_handshake_nobody_answers_times_out_as_connection_closed(tcp_pair) -> None:
    ours, _theirs = tcp_pair
    client = Connection(ours, name="client")
    try:
        with pytest.raises(ConnectionClosed):
            client.handshake("hello", {}, timeout=0.2)
    finally:
        client.close()


@pytest.mark.parametrize("limit, body, buffers, named", [
    ("MAX_HEADER_BYTES", b"h" * 5000, [], "frame header of"),
    ("MAX_BUFFERS_PER_FRAME", None, [b"b"] * 20, "20 out-of-band buffers"),
])
@pytest.mark.parametrize("defer", [False, True])
def test_a_message_beyond_the_limits_is_refused_by_its_sender_and_the_connection_stays(
        tcp_pair, monkeypatch, limit: str, body: object, buffers: list, named: str, defer: bool) -> None:
    ours, theirs = tcp_pair
    echo = Connection(theirs, name="echo").start({"echo": lambda c, mid, b, bufs: c.reply(mid, b, bufs),
                                                   "note": lambda *args: None})
    caller = Connection(ours, name="caller").start({})
    try:
        monkeypatch.setattr(frames, limit, {"MAX_HEADER_BYTES": 4096, "MAX_BUFFERS_PER_FRAME": 10}[limit])
        with pytest.raises(MessageTooLarge, match=f"the 'note' message is too large to send: .*{named}.*{limit}"):
            caller.notify("note", body, buffers, defer=defer)
        with pytest.raises(MessageTooLarge, match=f"{limit}"):
            caller.request("echo", body, buffers)
        assert not caller._pending  # nothing was sent and nothing waits for an answer
        assert caller.call("echo", {"k": 1}, [b"x"], timeout=60)[0] == {"k": 1}
        assert not caller.closed and not echo.closed
    finally:
        caller.close()
        echo.close()
