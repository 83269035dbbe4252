"""The actor contract (run against LocalClient): handles, methods, groups, context, hosted actors."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from fray_ray.fray import (
    ActorContext,
    ActorGroup,
    ActorHandle,
    ActorUnavailableError,
    HostedActor,
    LocalClient,
    current_actor,
)
from fray_ray.fray.actor import _reset_current_actor, _set_current_actor

DEADLINE = 20.0


class Counter:
    def __init__(self, start: int = 0) -> None:
        self.value = start
        self.label = "not a method"

    def increment(self, by: int = 1) -> int:
        self.value += by
        return self.value

    def get(self) -> int:
        return self.value

    def echo(self, x):
        return x

    def add(self, a: int, b: int = 0) -> int:
        return a + b

    def boom(self) -> None:
        raise ValueError("actor method failed")

    def _secret(self) -> str:
        return "hidden"


class RemembersContext:
    def __init__(self) -> None:
        self.ctx = current_actor()

    def describe(self) -> tuple[int, str]:
        return self.ctx.index, self.ctx.group_name


def test_create_actor_and_call_remote(client: LocalClient) -> None:
    actor = client.create_actor(Counter, name="echo")
    future = actor.echo.remote(5)
    assert isinstance(future, Future)
    assert future.result(timeout=DEADLINE) == 5


def test_create_actor_synchronous_call(client: LocalClient) -> None:
    actor = client.create_actor(Counter, name="sync", start=10)
    assert actor.get() == 10
    assert actor.increment() == 11


def test_create_actor_with_positional_args(client: LocalClient) -> None:
    actor = client.create_actor(Counter, 7, name="positional")
    assert actor.get() == 7


def test_actor_class_by_keyword(client: LocalClient) -> None:
    actor = client.create_actor(actor_class=Counter, name="kw", start=3)
    assert actor.get() == 3
    group = client.create_actor_group(actor_class=Counter, name="kwgroup", count=2)
    assert len(group.wait_ready(timeout=DEADLINE)) == 2


def test_submit_is_like_remote(client: LocalClient) -> None:
    actor = client.create_actor(Counter, name="submit")
    assert actor.add.submit(2, b=3).result(timeout=DEADLINE) == 5


def test_actor_method_with_kwargs(client: LocalClient) -> None:
    actor = client.create_actor(Counter, name="kwargs")
    assert actor.add.remote(a=3, b=4).result(timeout=DEADLINE) == 7
    assert actor.add(a=3, b=4) == 7


def test_method_exception_reaches_the_caller(client: LocalClient) -> None:
    actor = client.create_actor(Counter, name="boom")
    with pytest.raises(ValueError, match="actor method failed"):
        actor.boom.remote().result(timeout=DEADLINE)
    with pytest.raises(ValueError, match="actor method failed"):
        actor.boom()
    assert actor.increment() == 1  # the actor survives its method's exception


def test_handle_rejects_private_and_non_methods(client: LocalClient) -> None:
    actor = client.create_actor(Counter, name="strict")
    with pytest.raises(AttributeError):
        actor._secret
    with pytest.raises(AttributeError, match="not a method"):
        actor.label
    with pytest.raises(AttributeError, match="no method"):
        actor.missing


def test_actor_group_create_and_wait_ready(client: LocalClient) -> None:
    group = client.create_actor_group(Counter, name="trio", count=3)
    assert isinstance(group, ActorGroup)
    handles = group.wait_ready(timeout=DEADLINE)
    assert len(handles) == 3
    assert group.ready_count == 3
    assert all(isinstance(h, ActorHandle) for h in handles)
    handles[0].increment(5)
    handles[1].increment(1)
    assert [h.get() for h in handles] == [5, 1, 0]  # each actor has its own state


def test_actor_group_wait_ready_partial(client: LocalClient) -> None:
    group = client.create_actor_group(Counter, name="five", count=5)
    assert len(group.wait_ready(count=2, timeout=DEADLINE)) == 2
    with pytest.raises(ValueError, match="count"):
        group.wait_ready(count=6)


def test_discover_new_returns_each_handle_once(client: LocalClient, eventually) -> None:
    group = client.create_actor_group(Counter, name="disco", count=3)
    first = group.wait_ready(count=1, timeout=DEADLINE)
    eventually(lambda: group.ready_count == 3, "all actors ready")
    rest = group.discover_new()
    assert len(rest) == 2
    assert set(rest).isdisjoint(first)  # wait_ready's handles count as already discovered
    assert group.discover_new() == []


def test_discover_new_without_wait_ready(client: LocalClient, eventually) -> None:
    group = client.create_actor_group(Counter, name="found", count=3)
    eventually(lambda: group.ready_count == 3, "all actors ready")
    found = group.discover_new()
    assert len(found) == 3
    assert group.discover_new() == []


def test_actor_group_shutdown(client: LocalClient) -> None:
    group = client.create_actor_group(Counter, name="doomed", count=2)
    handles = group.wait_ready(timeout=DEADLINE)
    assert not group.is_done()
    group.shutdown()
    assert group.is_done()
    with pytest.raises(ActorUnavailableError):
        handles[0].increment.remote().result(timeout=DEADLINE)
    with pytest.raises(ActorUnavailableError):
        handles[1].get()
    group.shutdown()  # idempotent


def test_concurrent_remote_calls_thread_safety(client: LocalClient) -> None:
    actor = client.create_actor(Counter, name="shared")
    results: list[int] = []
    lock = threading.Lock()

    def call() -> None:
        value = actor.increment.remote().result(timeout=DEADLINE)
        with lock:
            results.append(value)

    threads = [threading.Thread(target=call) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert actor.get() == 10
    assert sorted(results) == list(range(1, 11))  # each caller saw a distinct value


def test_constructor_failure_raises_from_wait_ready(client: LocalClient) -> None:
    class Broken:
        def __init__(self) -> None:
            raise KeyError("no config")

    group = client.create_actor_group(Broken, name="broken", count=1)
    with pytest.raises(KeyError, match="no config"):
        group.wait_ready(timeout=DEADLINE)
    with pytest.raises(KeyError, match="no config"):
        client.create_actor(Broken, name="broken-single")


def test_current_actor_inside_init(client: LocalClient) -> None:
    group = client.create_actor_group(RemembersContext, name="ctx", count=2)
    handles = group.wait_ready(timeout=DEADLINE)
    assert [h.describe() for h in handles] == [(0, "ctx"), (1, "ctx")]


def test_current_actor_outside_an_actor_raises() -> None:
    with pytest.raises(RuntimeError, match="inside an actor"):
        current_actor()


def test_set_and_reset_current_actor() -> None:
    ctx = ActorContext(handle=None, index=4, group_name="g")  # type: ignore[arg-type]
    token = _set_current_actor(ctx)
    try:
        assert current_actor() is ctx
    finally:
        _reset_current_actor(token)
    with pytest.raises(RuntimeError):
        current_actor()


def test_actor_context_fail_records_and_sets_event() -> None:
    event = threading.Event()
    ctx = ActorContext(handle=None, index=0, group_name="g", shutdown_event=event)  # type: ignore[arg-type]
    error = RuntimeError("lost")
    ctx.fail(error)
    assert event.is_set()
    assert ctx.errors == (error,)
    without_event = ActorContext(handle=None, index=0, group_name="g")  # type: ignore[arg-type]
    without_event.fail(error)  # only records
    assert without_event.errors == (error,)


def test_handle_inside_context_reaches_the_actor(client: LocalClient) -> None:
    class SelfAware:
        def __init__(self) -> None:
            self.me = current_actor().handle
            self.n = 0

        def bump(self) -> int:
            self.n += 1
            return self.n

        def my_handle(self):
            return self.me

    actor = client.create_actor(SelfAware, name="self-aware")
    assert actor.my_handle() == actor
    assert actor.bump() == 1


def test_host_actor(client: LocalClient) -> None:
    hosted = client.host_actor(Counter, 2, name="hosted")
    assert isinstance(hosted, HostedActor)
    assert "hosted" in hosted.endpoint
    assert hosted.handle.increment() == 3
    hosted.shutdown()
    with pytest.raises(ActorUnavailableError):
        hosted.handle.get()
    hosted.shutdown()  # idempotent


def test_hosted_actor_is_a_context_manager_and_constructor_errors_raise(client: LocalClient) -> None:
    with client.host_actor(Counter, name="cm") as hosted:
        assert hosted.handle.get() == 0
    with pytest.raises(ActorUnavailableError):
        hosted.handle.get()

    class Broken:
        def __init__(self) -> None:
            raise OSError("cannot host")

    with pytest.raises(OSError, match="cannot host"):
        client.host_actor(Broken, name="broken-host")


def test_hosted_actor_stop_is_called_once() -> None:
    calls: list[int] = []
    hosted = HostedActor(handle=None, endpoint="x/y-0", stop=lambda: calls.append(1))  # type: ignore[arg-type]
    hosted.shutdown()
    hosted.shutdown()
    assert calls == [1]
