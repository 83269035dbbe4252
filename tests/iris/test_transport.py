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
