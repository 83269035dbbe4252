"""A worker's holder port (the stream server that serves the values it keeps): a peer without
the session token is refused before anything it sends is parsed, and an authenticated peer's
malformed requests are answered with errors, never crash the server or reach other values."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import msgpack
import pytest

from fray_ray._private.objects.held_objects import FETCH, HeldObjects, HolderServer
from fray_ray._private.objects.serialization import serialize
from fray_ray._private.stream.frames import FRAME_PREFIX, REQUEST
from fray_ray._private.stream.protocol import ConnectionClosed, RemoteError
from fray_ray._private.stream.stream_server import introduce

TOKEN = "t" * 32
OBJECT = b"o" * 24 + bytes([1, 0, 0, 0])


@pytest.fixture
def server(tmp_path) -> Iterator[HolderServer]:
    held = HeldObjects(1 << 20, shared_dir=None)
    held.hold(OBJECT, serialize(b"secret" * 1000))
    made = HolderServer(held, token=TOKEN, bind_host="127.0.0.1", advertise_host="127.0.0.1", shared_dir=None).start()
    try:
        yield made
    finally:
        made.close()
        held.close()


def _fetch(server: HolderServer, body: object) -> tuple[object, list[bytearray]]:
    connection, _ = introduce(server.address, {"token": TOKEN}, timeout=10)
    connection.start({})
    try:
        return connection.call(FETCH, body, timeout=10)
    finally:
        connection.close()


def test_a_wrong_or_missing_token_is_refused(server: HolderServer) -> None:
    for greeting in ({"token": "wrong"}, {}):
        with pytest.raises((RemoteError, ConnectionClosed)):
            introduce(server.address, greeting, timeout=2)


def test_a_request_before_the_greeting_is_never_answered(server: HolderServer) -> None:
    host, port = server.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        header = msgpack.packb([REQUEST, 1, FETCH, {"ids": [OBJECT]}])
        sock.sendall(FRAME_PREFIX.pack(len(header), 0) + header)
        sock.settimeout(5)
        try:
            answer = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            answer = b""
        assert b"secret" not in answer


@pytest.mark.parametrize("body", [None, {"ids": "x"}, {"ids": [1, 2]}, {"ids": [b"x"] * 200_000}, [1]])
def test_malformed_requests_get_errors_and_the_server_keeps_serving(server: HolderServer, body: object) -> None:
    with pytest.raises(RemoteError):
        _fetch(server, body)
    answer, buffers = _fetch(server, {"ids": [OBJECT, b"unknown"]})
    assert answer["ids"] == [OBJECT] and answer["missing"] == [b"unknown"]
