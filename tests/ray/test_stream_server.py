"""The stream server's gate: one small greeting with the token, or the connection is closed."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pytest

from fray_ray._private.stream.protocol import Connection, RemoteError
from fray_ray._private.stream.stream_server import GateStats, StreamLimits, StreamServer, introduce

TOKEN = "s" * 32
PREFIX = struct.Struct("<II")


def _wait_until(condition: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)
    return result


class Served:
    """A StreamServer whose authenticated connections answer `hello` and echo requests."""

    def __init__(self, limits: StreamLimits | None = None) -> None:
        self.greetings: list[list[Any]] = []
        self.connections: list[Connection] = []
        self.server = StreamServer(self._on_connect, token=TOKEN, limits=limits).start()

    def _on_connect(self, connection: Connection, greeting: list[Any]) -> None:
        self.greetings.append(greeting)
        self.connections.append(connection)
        connection.start(
            {
                "hello": lambda c, mid, body, bufs: c.reply(mid, {"welcome": body["name"]}),
                "echo": lambda c, mid, body, bufs: c.reply(mid, body, bufs),
            },
            first_frame=greeting,
        )

    def stats(self) -> GateStats:
        return self.server.stats()

    def close(self) -> None:
        self.server.close()
        for connection in self.connections:
            connection.close()


@pytest.fixture
def served() -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def make(**limits: Any) -> Served:
        server = Served(StreamLimits(**limits) if limits else None)
        started.append(server)
        return server

    yield make
    for server in started:
        server.close()


def _raw(server: Served) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.server.port), timeout=30)


def _closed_by_peer(sock: socket.socket) -> bool:
    """Read until EOF (or a reset); True once the server has closed the connection."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def _frame(header: list[Any], buffer_count: int = 0) -> bytes:
    packed = msgpack.packb(header, use_bin_type=True)
    return PREFIX.pack(len(packed), buffer_count) + packed


def test_a_greeting_with_the_token_gets_a_connection_and_is_answered_first(served) -> None:
    server = served()
    connection, answer = introduce(server.server.address, {"token": TOKEN, "name": "w1"})
    try:
        assert answer == {"welcome": "w1"}
        connection.start({})
        assert connection.call("echo", {"n": 1}, [b"abc"], timeout=30) == ({"n": 1}, [bytearray(b"abc")])
        assert server.greetings[0][2:] == ["hello", {"token": TOKEN, "name": "w1"}]
        assert server.stats().authenticated == 1
    finally:
        connection.close()
    _wait_until(lambda: server.stats().authenticated == 0)


def test_a_wrong_or_missing_token_is_refused_with_a_reason_and_never_dispatched(served) -> None:
    server = served()
    for greeting in ({"token": "x" * 32, "name": "w"}, {"name": "w"}, {"token": b"bytes", "name": "w"}):
        with pytest.raises(RemoteError) as refused:
            introduce(server.server.address, greeting, timeout=5)
        assert refused.value.kind == "Unauthenticated"
    assert server.greetings == []
    _wait_until(lambda: server.stats().refused == 3)


@pytest.mark.parametrize(
    "first_bytes",
    [
        _frame([0, 1, "echo", {"token": TOKEN}]),  # not a hello
        _frame([0, 1, "hello", {"token": TOKEN}], buffer_count=1),  # out-of-band buffers
        PREFIX.pack(1 << 20, 0),  # a header beyond the greeting's limit
        PREFIX.pack(0xFFFFFFFF, 0xFFFFFFFF),  # absurd announcements
        PREFIX.pack(3, 0) + b"\xc1\xc1\xc1",  # not msgpack
        _frame([1, 1, "hello", {"token": TOKEN}]),  # a reply, not a request
        _frame([0, 1, "hello", ["not", "a", "map"]]),
    ],
    ids=["other-method", "buffers", "large-header", "absurd", "garbage", "reply", "list-body"],
)
def test_anything_but_one_small_hello_first_is_closed(served, first_bytes: bytes) -> None:
    server = served()
    with _raw(server) as sock:
        sock.sendall(first_bytes)
        assert _closed_by_peer(sock)
    assert server.greetings == []
    _wait_until(lambda: server.stats().refused == 1)


def test_a_silent_or_slow_greeting_is_closed_after_the_handshake_timeout(served) -> None:
    server = served(handshake_timeout_s=0.3)
    with _raw(server) as silent, _raw(server) as slow:
        slow.sendall(_frame([0, 1, "hello", {"token": TOKEN}])[:5])  # the rest never comes
        assert _closed_by_peer(silent)
        assert _closed_by_peer(slow)
    _wait_until(lambda: server.stats().timed_out == 2)
    assert server.greetings == []


def test_strangers_beyond_max_pending_evict_the_oldest_and_a_worker_still_gets_in(served) -> None:
    server = served(max_pending=4)
    strangers = [_raw(server) for _ in range(10)]
    try:
        _wait_until(lambda: (stats := server.stats()).evicted == 6 and stats.pending == 4)
        for sock in strangers[:6]:  # the oldest went first
            assert _closed_by_peer(sock)
        connection, answer = introduce(server.server.address, {"token": TOKEN, "name": "late"})
        connection.close()
        assert answer == {"welcome": "late"}
    finally:
        for sock in strangers:
            sock.close()


def test_authenticated_connections_beyond_the_cap_are_refused(served) -> None:
    server = served(max_connections=1)
    first, _ = introduce(server.server.address, {"token": TOKEN, "name": "a"})
    with pytest.raises(RemoteError) as refused:
        introduce(server.server.address, {"token": TOKEN, "name": "b"}, timeout=5)
    assert refused.value.kind == "TooManyConnections"
    first.close()
    _wait_until(lambda: server.stats().authenticated == 0)
    second, _ = introduce(server.server.address, {"token": TOKEN, "name": "c"})
    second.close()


def test_introduce_gives_up_with_connection_closed_when_nothing_answers() -> None:
    with socket.create_server(("127.0.0.1", 0)) as mute:  # accepts (in the kernel), never answers
        address = f"127.0.0.1:{mute.getsockname()[1]}"
        with pytest.raises(ConnectionError):
            introduce(address, {"token": TOKEN}, timeout=0.5)


def test_introduce_stops_retrying_once_told_the_server_is_gone() -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        address = f"127.0.0.1:{closed.getsockname()[1]}"
    failures: list[Exception] = []

    def gone(failure: Exception) -> bool:
        failures.append(failure)
        return len(failures) >= 2

    with pytest.raises(ConnectionError):  # refused: without give_up it would retry for the minute
        introduce(address, {"token": TOKEN}, timeout=60, give_up=gone)
    assert len(failures) == 2 and all(isinstance(f, ConnectionRefusedError) for f in failures)


def test_close_releases_the_port_and_every_pending_connection() -> None:
    server = StreamServer(lambda connection, greeting: connection.close(), token=TOKEN).start()
    port = server.port
    with socket.create_connection(("127.0.0.1", port), timeout=30) as waiting:
        _wait_until(lambda: server.stats().pending == 1)
        closer = threading.Thread(target=server.close)
        closer.start()
        assert _closed_by_peer(waiting)
        closer.join()
    server.close()  # idempotent
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))


def test_a_server_needs_a_token_and_sane_limits() -> None:
    with pytest.raises(ValueError):
        StreamServer(lambda c, g: None, token="")
    with pytest.raises(ValueError):
        StreamLimits(handshake_timeout_s=0)
    with pytest.raises(ValueError):
        StreamLimits(max_pending=0)
