"""Bearer-token auth and prefix routing on the shared Connect server plumbing."""

from __future__ import annotations

import pytest

from fray_ray.iris.actor_client import ActorClient
from fray_ray.iris.actor_server import ActorServer
from fray_ray.iris.errors import Unauthenticated
from fray_ray.iris.resolver import FixedResolver
from fray_ray.iris.transport import new_token


class Echo:
    def echo(self, value: object) -> object:
        return value


def test_server_with_token_rejects_calls_without_it() -> None:
    with ActorServer(token="s3cret") as server:
        server.register("echo", Echo())
        resolver = FixedResolver({"echo": server.url})
        with ActorClient(resolver, "echo", max_call_attempts=1) as anonymous:
            with pytest.raises(Unauthenticated):
                anonymous.call("echo", 1)
        with ActorClient(resolver, "echo", token="wrong", max_call_attempts=1) as wrong:
            with pytest.raises(Unauthenticated):
                wrong.call("echo", 1)
        with ActorClient(resolver, "echo", token="s3cret") as good:
            assert good.call("echo", 1) == 1


def test_stop_releases_the_port() -> None:
    server = ActorServer().start()
    port = server.port
    server.stop()
    server.stop()  # idempotent
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_new_tokens_survive_a_command_line() -> None:
    """A generated token is pasted after `--token`; one starting with "-" would read as an option."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--token")
    tokens = {new_token() for _ in range(500)}
    assert len(tokens) == 500
    for token in tokens:
        assert parser.parse_args(["--token", token]).token == token


async def _hello_app(scope: dict, receive: object, send: object) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b"hello"})  # type: ignore[operator]


def _get(url: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def test_a_lazy_server_starts_uvicorn_at_its_first_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from fray_ray.iris.transport import RpcServer

    built: list[object] = []
    original = RpcServer._new_server
    monkeypatch.setattr(RpcServer, "_new_server", lambda self: built.append(self) or original(self))
    server = RpcServer(_hello_app, start_on_first_connection=True).start()
    try:
        assert built == []  # bound and listening, no event loop yet
        with socket.create_connection(("127.0.0.1", server.port)):
            pass  # a connection that says nothing and leaves still wakes it
        assert _get(server.url + "/") == b"hello"
        assert _get(server.url + "/") == b"hello"
        assert len(built) == 1
    finally:
        server.stop()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # its answered connections wait in TIME_WAIT
        sock.bind(("127.0.0.1", server.port))  # no longer listening


def test_a_lazy_server_stopped_before_any_connection_ends_its_thread() -> None:
    import socket
    import threading

    from fray_ray.iris.transport import RpcServer

    server = RpcServer(_hello_app, start_on_first_connection=True, name="lazy-test-server").start()
    port = server.port
    server.stop()
    server.stop()
    assert not [t for t in threading.enumerate() if t.name == "lazy-test-server"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
