"""ActorServer in one process, ActorClient in another, over real loopback sockets."""

from __future__ import annotations

import http.client
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from fray_ray.iris.actor_client import ActorClient
from fray_ray.iris.errors import ActorCallError, NotFound, Unavailable
from fray_ray.iris.resolver import FixedResolver

ACTOR = "/test/job/calculator-0"


@pytest.fixture(scope="module")
def actor_url() -> Iterator[str]:
    host = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("actor_host.py"))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = host.stdout.readline().strip()
        assert url.startswith("http://"), f"actor host did not start (exit {host.poll()})"
        yield url
    finally:
        host.stdin.close()
        try:
            host.wait(10)
        except subprocess.TimeoutExpired:
            host.kill()
            host.wait()


@pytest.fixture
def client(actor_url: str) -> Iterator[ActorClient]:
    with ActorClient(FixedResolver({ACTOR: actor_url}), ACTOR) as c:
        yield c


def test_call_returns_results_and_keeps_state(client: ActorClient) -> None:
    first = client.call("add", 2, y=3)
    assert client.add(10) == first + 10


def test_exception_keeps_its_type_and_remote_traceback(client: ActorClient) -> None:
    with pytest.raises(ZeroDivisionError) as info:
        client.call("divide", 1, 0)
    assert "divide" in info.value.remote_traceback


def test_unpicklable_exception_reports_type_and_message(client: ActorClient) -> None:
    with pytest.raises(ActorCallError, match="NotPicklableError: carries a lock"):
        client.call("fail_unpicklably")


def test_unknown_method_is_not_found(client: ActorClient) -> None:
    with pytest.raises(NotFound, match="no method 'missing'"):
        client.call("missing")


def test_unknown_actor_is_not_found(actor_url: str) -> None:
    with ActorClient(FixedResolver({"x": actor_url}), "x", actor_name="/nobody") as c:
        with pytest.raises(NotFound, match="no actor named '/nobody'"):
            c.call("add", 1)


def test_operation_returns_result(client: ActorClient) -> None:
    assert client.run_operation("echo", ("hello",), timeout=30) == "hello"


def test_operation_error_raises_original_type(client: ActorClient) -> None:
    with pytest.raises(ZeroDivisionError):
        client.run_operation("divide", (1, 0), timeout=30)


def test_operation_timeout_cancels_it(client: ActorClient) -> None:
    with pytest.raises(TimeoutError):
        client.run_operation("wait_until_cancelled", timeout=0.5, poll_interval=0.05)
    # The cancelled method returned, so the actor (max_concurrency=1) serves the next call.
    assert client.call("echo", 7) == 7


def test_operation_cancel_then_terminal_state_reported_once(client: ActorClient) -> None:
    operation_id = client.start_operation("wait_until_cancelled")
    client.cancel_operation(operation_id)
    status = client.get_operation(operation_id)
    while not status.state.finished:
        status = client.get_operation(operation_id)
    assert status.state.name == "CANCELLED"
    with pytest.raises(NotFound):
        client.get_operation(operation_id)


def test_introspection(client: ActorClient) -> None:
    assert client.health_check() is True
    methods = {name: (signature, doc) for name, signature, doc in client.list_methods()}
    signature, doc = methods["add"]
    assert signature.replace("'", "") == "(x: int, y: int = 0) -> int"
    assert doc == "Add x (and y) to the running total."
    assert client.list_actors() == [ACTOR]


@pytest.mark.parametrize(
    "body",
    [b"\xff\xff\xff\xff garbage", b"\x0a\xff\xff\xff\xff\x0f", b"\x1a\x05ab"],
    ids=["garbage", "bad-varint", "truncated"],
)
def test_malformed_body_gets_connect_error_and_server_keeps_serving(
    actor_url: str, client: ActorClient, body: bytes
) -> None:
    parsed = urllib.parse.urlparse(actor_url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=10)
    try:
        connection.request(
            "POST", "/iris.actor.ActorService/Call", body=body, headers={"content-type": "application/proto"}
        )
        response = connection.getresponse()
        payload = response.read()
    finally:
        connection.close()
    assert response.status != 200
    assert b'"code"' in payload
    assert client.call("echo", "still serving") == "still serving"


def test_unreachable_actor_raises_unavailable_after_retries() -> None:
    with ActorClient(FixedResolver({"gone": "http://127.0.0.1:1"}), "gone", max_call_attempts=2) as c:
        with pytest.raises(Unavailable):
            c.call("add", 1)


def test_unresolvable_name_raises_unavailable() -> None:
    with ActorClient(FixedResolver({}), "nobody", max_call_attempts=1) as c:
        with pytest.raises(Unavailable, match="no endpoint registered for actor 'nobody'"):
            c.call("add", 1)
