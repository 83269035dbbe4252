"""Connection limits of the Connect servers (uvicorn with `LimitedHttpProtocol`), on real sockets
with short limits: header and body deadlines, the head-size limit, and the connection cap that
sheds silent or idle connections rather than refusing a real client."""

from __future__ import annotations

import asyncio
import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fray_ray.iris.http_limits import ConnectionLimits
from fray_ray.iris.transport import BearerAuth, RpcServer

TOKEN = "limits-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


def _wait_until(condition: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)
    return result


class App:
    """Answers POST /echo with its body; POST /hold waits until `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.holding = 0

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] == "/hold":
            self.holding += 1
            await asyncio.get_running_loop().run_in_executor(None, self.release.wait, 30)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
def server() -> Iterator[tuple[RpcServer, App]]:
    app = App()
    limits = ConnectionLimits(header_timeout_s=0.5, body_timeout_s=0.5, keep_alive_s=30, max_head_bytes=2048, max_connections=8)
    with RpcServer(BearerAuth(app, TOKEN), limits=limits, name="limits-test") as rpc:
        yield rpc, app
        app.release.set()


def _raw(rpc: RpcServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", rpc.port), timeout=30)


def _read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def _post(rpc: RpcServer, path: str = "/echo", body: bytes = b"hi", headers: dict[str, str] = AUTH) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", rpc.port, timeout=30)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_a_silent_connection_and_a_trickled_head_are_closed_at_the_header_deadline(server) -> None:
    rpc, _ = server
    head = f"POST /echo HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\n\r\n".encode()
    with _raw(rpc) as silent, _raw(rpc) as trickle:
        sent = 0
        trickle.settimeout(0.1)
        while sent < len(head):  # a byte every 0.1 s: each one would have reset uvicorn's timer
            try:
                trickle.send(head[sent : sent + 1])
            except OSError:
                break
            sent += 1
            try:
                if trickle.recv(1) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        assert sent < len(head), "the server let a head trickle in for longer than its deadline"
        silent.settimeout(30)
        assert _read_until_closed(silent) == b""
    assert rpc.connections is not None and rpc.connections.timed_out >= 2


def test_a_head_over_the_limit_is_answered_431_and_closed(server) -> None:
    rpc, _ = server
    with _raw(rpc) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nhost: x\r\nx-padding: " + b"a" * 4096 + b"\r\n\r\n")
        assert _read_until_closed(sock).startswith(b"HTTP/1.1 431 ")


def test_a_pause_in_the_body_closes_the_connection(server) -> None:
    rpc, _ = server
    with _raw(rpc) as sock:
        sock.sendall(f"POST /echo HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: 100\r\n\r\n".encode())
        sock.sendall(b"x" * 10)  # ... and the other 90 bytes never come
        assert _read_until_closed(sock) == b""


def test_a_request_without_the_token_is_refused_and_its_connection_closed(server) -> None:
    rpc, _ = server
    with _raw(rpc) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello")
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 401 ")
    assert b"connection: close" in answer.lower()


def test_at_the_cap_silent_connections_make_room_for_a_real_client(server) -> None:
    rpc, _ = server
    table = rpc.connections
    assert table is not None
    silent = [_raw(rpc) for _ in range(20)]
    try:
        _wait_until(lambda: table.evicted >= 12)
        for _ in range(3):
            assert _post(rpc) == (200, b"hi")
        assert len(table) <= table.capacity
        silent[0].settimeout(30)
        assert _read_until_closed(silent[0]) == b""  # the oldest went first
    finally:
        for sock in silent:
            sock.close()


def test_idle_kept_alive_connections_are_shed_before_busy_ones_and_a_full_server_refuses(server) -> None:
    rpc, app = server
    table = rpc.connections
    assert table is not None
    idle = http.client.HTTPConnection("127.0.0.1", rpc.port, timeout=30)
    idle.request("POST", "/echo", body=b"1", headers=AUTH)
    assert idle.getresponse().read() == b"1"  # now kept alive, idle
    results: list[tuple[int, bytes]] = []
    holders = [threading.Thread(target=lambda: results.append(_post(rpc, "/hold", b"h"))) for _ in range(8)]
    try:
        for started, holder in enumerate(holders, 1):  # one at a time: each is busy before the next
            holder.start()
            _wait_until(lambda started=started: app.holding == started)
        # eight busy connections at a cap of eight: the idle one made room for the last
        idle.sock.settimeout(30)
        assert _read_until_closed(idle.sock) == b""
        with _raw(rpc) as newcomer:  # nothing left to shed: the newcomer is refused
            newcomer.settimeout(30)
            assert _read_until_closed(newcomer) == b""
        assert table.refused >= 1
    finally:
        app.release.set()
        for holder in holders:
            holder.join(30)
        idle.close()
    assert results == [(200, b"h")] * 8
    assert _post(rpc) == (200, b"hi")


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        ConnectionLimits(header_timeout_s=0)
    with pytest.raises(ValueError):
        ConnectionLimits(max_head_bytes=10)
    with pytest.raises(ValueError):
        ConnectionLimits(max_connections=0)
    assert 16 <= ConnectionLimits(max_connections=1_000_000).effective_max_connections() <= 1_000_000


def test_the_uvicorn_hooks_the_limits_rely_on_still_exist() -> None:
    """LimitedHttpProtocol extends uvicorn's httptools protocol; an upgrade that renames one of
    these would silently disable a limit, so it must fail here instead."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from fray_ray.iris.http_limits import LimitedHttpProtocol

    hooks = {
        "connection_made", "connection_lost", "data_received", "on_message_begin", "on_url", "on_header",
        "on_headers_complete", "on_body", "on_message_complete", "on_response_complete",
    }
    for name in hooks:
        assert callable(getattr(HttpToolsProtocol, name, None)), name
        assert name in vars(LimitedHttpProtocol), name
