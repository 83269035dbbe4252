"""Generator methods a task calls straight on the actor's host: the items come to the caller,
not through the driver; a wait with the driver's objects, a lost gate or a killed host hand the
stream to the driver. Real worker processes on the embedded cluster; the driver process is this
test's, and counts the calls and items that reach it."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import fray_ray
from fray_ray._private.core import runtime_slot
from fray_ray.exceptions import ActorDiedError, ActorUnavailableError, OwnerDiedError, TaskCancelledError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import pid_alive, wait_for  # noqa: E402


@pytest.fixture(scope="module")
def session(cluster_session: fray_ray.RayContext) -> fray_ray.RayContext:
    return cluster_session


@pytest.fixture
def through_driver(session: fray_ray.RayContext) -> Iterator[dict[str, list[bytes]]]:
    """The ids of the actor calls the driver accepts, and of the streams it stores items of,
    while the test runs."""
    driver = runtime_slot.current()
    seen: dict[str, list[bytes]] = {"calls": [], "items": []}
    submit_call, add_item = driver.actors.submit_call, driver.streams.add_item

    def counted_call(call: Any) -> None:
        seen["calls"].append(call.call_id)
        submit_call(call)

    def counted_item(stream_id: bytes, index: int, value: Any) -> None:
        seen["items"].append(stream_id)
        add_item(stream_id, index, value)

    driver.actors.submit_call, driver.streams.add_item = counted_call, counted_item
    try:
        yield seen
    finally:
        del driver.actors.submit_call, driver.streams.add_item


def _direct_sent() -> int:
    direct = runtime_slot.current().direct
    return 0 if direct is None else direct.sent


@fray_ray.remote
class Source:
    def ping(self) -> int:
        return os.getpid()

    def count(self, n: int) -> Iterator[int]:
        for i in range(n):
            yield i * 10

    def fail_after(self, n: int) -> Iterator[int]:
        yield from range(n)
        raise ValueError("the source ran dry")


@fray_ray.remote
class AsyncSource:
    def __init__(self) -> None:
        self.stop = asyncio.Event()

    async def count(self, n: int) -> Any:
        for i in range(n):
            await asyncio.sleep(0)
            yield i

    async def until_stopped(self) -> Any:
        index = 0
        while True:
            yield index
            index += 1
            try:
                await asyncio.wait_for(self.stop.wait(), 0.05)
            except TimeoutError:
                continue

    async def ping(self) -> str:
        return "pong"


@fray_ray.remote
class Echo:
    def echo(self, value: Any) -> Any:
        return value


@fray_ray.remote
def consume(source: Any, async_source: Any) -> dict[str, Any]:
    fray_ray.get([source.ping.remote(), async_source.ping.remote()])  # the routes are known from here on
    sent = _direct_sent()
    plain = [fray_ray.get(ref) for ref in source.count.remote(5)]
    failing: list[Any] = []
    for ref in source.fail_after.remote(2):
        try:
            failing.append(fray_ray.get(ref))
        except ValueError as exc:
            failing.append(str(exc).splitlines()[-1])
    generator = async_source.count.remote(3)
    sync_iterated = [fray_ray.get(ref) for ref in generator]
    return {"plain": plain, "failing": failing, "async": sync_iterated, "finished": generator.is_finished(),
            "direct": _direct_sent() - sent}


def test_generator_methods_stream_straight_from_the_host(through_driver: dict[str, list[bytes]]) -> None:
    source, async_source = Source.remote(), AsyncSource.remote()
    fray_ray.get([source.ping.remote(), async_source.ping.remote()])
    through_driver["calls"].clear()
    result = fray_ray.get(consume.remote(source, async_source))
    assert result["plain"] == [0, 10, 20, 30, 40]
    assert result["failing"] == [0, 1, "ValueError: the source ran dry"]
    assert result["async"] == [0, 1, 2] and result["finished"]
    assert result["direct"] == 3
    assert through_driver["calls"] == [] and through_driver["items"] == []


@fray_ray.remote
class AsyncConsumer:
    async def consume(self, source: Any) -> list[int]:
        await source.ping.remote()
        return [await ref for ref in [ref async for ref in source.count.remote(4)]]


def test_an_async_actor_iterates_a_direct_generator(through_driver: dict[str, list[bytes]]) -> None:
    source = Source.remote()
    fray_ray.get(source.ping.remote())
    assert fray_ray.get(AsyncConsumer.remote().consume.remote(source)) == [0, 10, 20, 30]
    assert through_driver["items"] == []


@fray_ray.remote
def pass_items_on_and_wait_with_driver_objects(source: Any, echo: Any) -> dict[str, Any]:
    fray_ray.get([source.ping.remote(), echo.echo.remote(0)])
    passed = fray_ray.get([echo.echo.remote(ref) for ref in source.count.remote(3)])  # items leave this process
    generator = source.count.remote(4)
    first = fray_ray.get(next(generator))
    held_by_the_driver = fray_ray.put(b"x" * 10)
    ready, _ = fray_ray.wait([generator, held_by_the_driver], num_returns=2, timeout=60)  # the driver waits now
    rest = [fray_ray.get(ref) for ref in generator]
    return {"passed": passed, "first": first, "ready": len(ready), "rest": rest}


def test_items_passed_on_and_a_wait_with_driver_objects(through_driver: dict[str, list[bytes]]) -> None:
    source, echo = Source.remote(), Echo.remote()
    fray_ray.get([source.ping.remote(), echo.echo.remote(0)])
    result = fray_ray.get(pass_items_on_and_wait_with_driver_objects.remote(source, echo))
    assert result == {"passed": [0, 10, 20], "first": 0, "ready": 2, "rest": [10, 20, 30]}
    # only the stream the wait handed over reached the driver: its three items not taken yet
    assert len(through_driver["items"]) == 3 and len(set(through_driver["items"])) == 1


@fray_ray.remote
def cancel_a_direct_generator(source: Any) -> tuple[list[Any], str]:
    fray_ray.get(source.ping.remote())
    generator = source.until_stopped.remote()
    seen = [fray_ray.get(next(generator))]
    fray_ray.cancel(generator)
    try:
        for ref in generator:
            seen.append(fray_ray.get(ref))
    except TaskCancelledError:
        return seen, "cancelled"
    return seen, "not cancelled"


def test_cancel_a_direct_generator(through_driver: dict[str, list[bytes]]) -> None:
    source = AsyncSource.remote()
    seen, outcome = fray_ray.get(cancel_a_direct_generator.remote(source))
    assert outcome == "cancelled" and seen == list(range(len(seen))), seen
    assert fray_ray.get(source.ping.remote()) == "pong"  # the actor lives on
    assert through_driver["items"] == []


@fray_ray.remote(max_restarts=1)
class DiesMidStream:
    def ping(self) -> bool:
        return fray_ray.get_runtime_context().was_current_actor_reconstructed

    def count(self, n: int, die_at: int) -> Iterator[int]:
        for i in range(n):
            if i == die_at and not fray_ray.get_runtime_context().was_current_actor_reconstructed:
                os._exit(1)
            yield i


@fray_ray.remote
def read_through_a_death(actor: Any, retries: int) -> tuple[list[int], str]:
    fray_ray.get(actor.ping.remote())
    seen: list[int] = []
    try:
        for ref in actor.count.options(max_task_retries=retries).remote(6, 3):
            seen.append(fray_ray.get(ref, timeout=120))
    except (ActorDiedError, ActorUnavailableError) as exc:
        outcome = type(exc).__name__
    else:
        outcome = "ended"
    assert not runtime_slot.current().direct._streams._streams  # the driver finished the stream: nothing kept here
    return seen, outcome


def test_a_host_killed_mid_stream_fails_the_rest_without_retries() -> None:
    seen, outcome = fray_ray.get(read_through_a_death.remote(DiesMidStream.remote(), 0))
    assert outcome == "ActorUnavailableError"  # as through the driver: the actor restarts, the call may have run
    assert seen == list(range(len(seen))) and len(seen) <= 3  # the items sent before the death, in order


def test_a_host_killed_mid_stream_is_run_again_and_each_item_comes_once() -> None:
    actor = DiesMidStream.remote()
    assert fray_ray.get(read_through_a_death.remote(actor, 1)) == ([0, 1, 2, 3, 4, 5], "ended")
    assert fray_ray.get(actor.ping.remote()) is True  # it was the restarted instance that finished


@fray_ray.remote(concurrency_groups={"control": 1})
class Paced:
    """Yields one item each time it is let go (`go`, another concurrency group)."""

    def __init__(self) -> None:
        self.released = threading.Semaphore(0)

    def count(self, n: int) -> Iterator[int]:
        for i in range(n):
            self.released.acquire()
            yield i

    @fray_ray.method(concurrency_group="control")
    def go(self, times: int = 1) -> None:
        for _ in range(times):
            self.released.release()


@fray_ray.remote
def break_the_gate_mid_stream(actor: Any) -> tuple[list[int], str]:
    fray_ray.get(actor.go.remote(0))
    generator = actor.count.remote(5)
    actor.go.remote()
    seen = [fray_ray.get(next(generator))]
    direct = runtime_slot.current().direct
    assert direct is not None
    for link in list(direct._links.values()):  # as a network would: the host lives on
        link.connection.close()
    actor.go.remote(4)  # through the driver now (the gate is gone): the rest follow
    try:
        seen.extend(fray_ray.get(ref, timeout=120) for ref in generator)
    except ActorUnavailableError:
        return seen, "lost"
    return seen, "ended"


def test_a_stream_whose_gate_breaks_goes_on_through_the_driver() -> None:
    actor = Paced.remote()
    seen, outcome = fray_ray.get(break_the_gate_mid_stream.remote(actor))
    # every item once and in order; an item in flight when the gate broke may be lost, and
    # then the stream says so instead of hanging
    assert seen == list(range(len(seen))), seen
    assert (outcome, len(seen)) == ("ended", 5) or outcome == "lost", (seen, outcome)


@fray_ray.remote
def drop_a_generator_early(source: Any) -> int:
    fray_ray.get(source.ping.remote())
    generator = source.count.remote(50)
    first = fray_ray.get(next(generator))
    del generator
    streams = runtime_slot.current().direct._streams
    deadline = time.monotonic() + 60
    while streams._streams:  # forgotten once the call has ended on the host
        assert time.monotonic() < deadline, "the dropped stream was never forgotten"
        fray_ray.get(source.ping.remote())  # a call into the runtime lets go of the dropped refs
    return first


def test_a_dropped_generator_is_forgotten_when_its_call_ends() -> None:
    assert fray_ray.get(drop_a_generator_early.remote(Source.remote())) == 0


@fray_ray.remote
def endless() -> Iterator[int]:
    index = 0
    while True:
        yield index
        index += 1
        time.sleep(0.01)


@fray_ray.remote
def cancel_a_generator_task() -> str:
    generator = endless.remote()  # a generator task: its stream is kept by the driver
    fray_ray.get(next(generator))
    fray_ray.cancel(generator)
    deadline = time.monotonic() + 60
    try:
        for ref in generator:
            fray_ray.get(ref, timeout=120)
            if time.monotonic() > deadline:
                return "still running"
    except TaskCancelledError:
        return "cancelled"
    return "ended"


def test_a_task_cancels_a_generator_task_it_made() -> None:
    assert fray_ray.get(cancel_a_generator_task.remote()) == "cancelled"


@fray_ray.remote
class LargeItems:
    def ready(self) -> bool:
        return True

    def make(self, n: int, size: int) -> Iterator[bytes]:
        for index in range(n):
            yield bytes([index]) * size


@fray_ray.remote
class HandsItsStreamOver:
    def read(self, source: Any, n: int, size: int) -> tuple[int, list[int], list[Any]]:
        sent = _direct_sent()
        while _direct_sent() == sent:  # until this caller's calls go to the source directly
            fray_ray.get(source.ready.remote())
        generator = source.make.remote(n, size)
        first = fray_ray.get(next(generator))
        fray_ray.wait([generator, fray_ray.put(b"x")], num_returns=2, timeout=60)  # the driver takes the stream
        rest = list(generator)
        return os.getpid(), [first[0]] + [fray_ray.get(ref)[0] for ref in rest], rest  # the refs leave this process


def test_large_items_of_a_handed_over_stream_stay_with_their_caller_and_die_with_it() -> None:
    size = 1 << 20  # over the inline limit
    driver = runtime_slot.current()
    stored: list[str] = []
    add_item = driver.streams.add_item

    def recorded(stream_id: bytes, index: int, value: Any) -> None:
        stored.append(type(value).__name__)
        add_item(stream_id, index, value)

    driver.streams.add_item = recorded
    try:
        caller = HandsItsStreamOver.remote()
        pid, firsts, refs = fray_ray.get(caller.read.remote(LargeItems.remote(), 3, size))
    finally:
        del driver.streams.add_item
    assert firsts == [0, 1, 2]
    assert stored == ["RemoteResult", "RemoteResult"]  # where they are, not their bytes
    assert fray_ray.get(refs[1]) == bytes([2]) * size  # read from the caller's process
    fray_ray.kill(caller)
    wait_for(lambda: not pid_alive(pid), what="the caller's process gone")
    with pytest.raises(OwnerDiedError):  # the caller was their owner, as in Ray
        fray_ray.get(refs[0], timeout=60)
