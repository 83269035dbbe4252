"""Generators: streaming ``ObjectRefGenerator``, static ``num_returns=k`` and ``"dynamic"``.

Mirrors Ray's test_generators.py and test_streaming_generator.py (ray-api.md §1.5).
"""

from __future__ import annotations

import asyncio
import pickle
import time

import pytest

from compat_tests._backend import exceptions, ray
from compat_tests.helpers import Recorder, SignalActor


@ray.remote
def _count(n, fail_at=None):
    for i in range(n):
        if i == fail_at:
            raise ValueError(f"failed at {i}")
        yield i


class _CustomError(Exception):
    pass


# --- streaming (the default for generator functions) ---------------------------------------


def test_streaming_generator__basic(ray_start_regular_shared):
    gen = _count.remote(4)
    assert isinstance(gen, ray.ObjectRefGenerator)
    refs = list(gen)
    assert all(isinstance(r, ray.ObjectRef) for r in refs)
    assert ray.get(refs) == [0, 1, 2, 3]


def test_streaming_generator__next_and_stop_iteration(ray_start_regular_shared):
    gen = _count.remote(2)
    assert ray.get(next(gen)) == 0
    assert ray.get(next(gen)) == 1
    with pytest.raises(StopIteration):
        next(gen)
    with pytest.raises(StopIteration):
        next(gen)


def test_streaming_generator__explicit_streaming_option(ray_start_regular_shared):
    gen = _count.options(num_returns="streaming").remote(3)
    assert [ray.get(r) for r in gen] == [0, 1, 2]


def test_streaming_generator__error_mid_stream(ray_start_regular_shared):
    gen = _count.remote(5, fail_at=2)
    assert ray.get(next(gen)) == 0
    assert ray.get(next(gen)) == 1
    failing = next(gen)
    with pytest.raises(ValueError, match="failed at 2"):
        ray.get(failing)
    with pytest.raises(exceptions.RayTaskError):
        ray.get(failing)
    with pytest.raises(StopIteration):
        next(gen)


def test_streaming_generator__async_iteration(ray_start_regular_shared):
    async def consume():
        values = []
        async for ref in _count.remote(3):
            values.append(await ref)
        gen = _count.remote(1)
        values.append(await (await gen.__anext__()))
        with pytest.raises(StopAsyncIteration):
            await gen.__anext__()
        return values

    assert asyncio.run(consume()) == [0, 1, 2, 0]


def test_streaming_generator__items_arrive_before_the_task_ends(ray_start_regular_shared):
    signal = SignalActor.remote()

    @ray.remote(num_cpus=0)
    def first_then_wait(sig):
        yield "first"
        ray.get(sig.wait.remote())
        yield "second"

    gen = first_then_wait.remote(signal)
    assert ray.get(next(gen), timeout=60) == "first"  # the task is still blocked here
    signal.send.remote()
    assert ray.get(next(gen), timeout=60) == "second"
    with pytest.raises(StopIteration):
        next(gen)


def test_streaming_generator__wait_on_generator(ray_start_regular_shared):
    signal = SignalActor.remote()

    @ray.remote(num_cpus=0)
    def waits_first(sig):
        ray.get(sig.wait.remote())
        yield 1

    gen = waits_first.remote(signal)
    assert ray.wait([gen], timeout=0.2) == ([], [gen])
    signal.send.remote()
    ready, not_ready = ray.wait([gen], timeout=60)
    assert ready == [gen] and not_ready == []
    assert ray.get(next(gen)) == 1


def test_streaming_generator__not_serializable(ray_start_regular_shared):
    gen = _count.remote(1)
    with pytest.raises(TypeError):
        pickle.dumps(gen)

    @ray.remote
    def takes(g):
        return g

    with pytest.raises(TypeError):
        takes.remote(_count.remote(1))
    assert [ray.get(r) for r in gen] == [0]


def test_streaming_generator__cancel(ray_start_regular_shared):
    @ray.remote
    def endless():
        for i in range(100_000):
            yield i
            time.sleep(0.01)  # paces the stream; not used for synchronisation

    gen = endless.remote()
    assert ray.get(next(gen), timeout=60) == 0
    ray.cancel(gen)
    seen = 0
    cancelled = False
    deadline = time.monotonic() + 60
    for ref in gen:  # the stream ends soon after the cancel
        assert time.monotonic() < deadline
        try:
            ray.get(ref, timeout=60)
            seen += 1
        except exceptions.TaskCancelledError:
            cancelled = True
    assert seen < 100_000
    assert cancelled


def test_streaming_generator__actor_generators(ray_start_regular_shared):
    @ray.remote(num_cpus=0)
    class Source:
        def sync_items(self, n):
            for i in range(n):  # noqa: UP028 (Ray 2.60 sends into remote generators; a delegated range iterator cannot take it)
                yield i

        async def async_items(self, n):
            for i in range(n):
                await asyncio.sleep(0)
                yield i * 10

    source = Source.remote()
    assert [ray.get(r) for r in source.sync_items.remote(3)] == [0, 1, 2]
    assert [ray.get(r) for r in source.async_items.remote(3)] == [0, 10, 20]


def test_streaming_generator__actor_killed_mid_stream(ray_start_regular_shared):
    signal = SignalActor.remote()

    @ray.remote(num_cpus=0)
    class Source:
        def items(self, sig):
            yield "before"
            ray.get(sig.wait.remote())
            yield "after"

    source = Source.remote()
    gen = source.items.remote(signal)
    assert ray.get(next(gen), timeout=60) == "before"
    ray.kill(source)
    with pytest.raises(exceptions.RayActorError):
        for ref in gen:
            ray.get(ref, timeout=60)
    signal.send.remote()


def test_streaming_generator__retry_exceptions(ray_start_regular_shared):
    attempts = Recorder.remote()

    @ray.remote(retry_exceptions=[_CustomError], max_retries=2)
    def flaky_stream(recorder):
        attempt = ray.get(recorder.record.remote("attempt"))
        for i in range(3):
            if attempt == 1 and i == 2:
                raise _CustomError()
            yield i

    # The consumer sees one clean stream; the retry replays the generator.
    assert [ray.get(r) for r in flaky_stream.remote(attempts)] == [0, 1, 2]
    assert ray.get(attempts.count.remote()) == 2


# --- static and dynamic num_returns ---------------------------------------------------------


def test_generators__generator_returns(ray_start_regular_shared):
    refs = _count.options(num_returns=3).remote(3)
    assert isinstance(refs, list) and len(refs) == 3
    assert ray.get(refs) == [0, 1, 2]
    # Fewer yields than num_returns fail at get time.
    with pytest.raises(ValueError):
        ray.get(_count.options(num_returns=3).remote(2))
    # More yields than num_returns are tolerated: the first k values are returned.
    assert ray.get(_count.options(num_returns=2).remote(3)) == [0, 1]


def test_generators__actor_method_generator_returns(ray_start_regular_shared):
    @ray.remote(num_cpus=0)
    class Source:
        @ray.method(num_returns=2)
        def pair(self):
            yield "a"
            yield "b"

    a, b = Source.remote().pair.remote()
    assert ray.get([a, b]) == ["a", "b"]


def test_generators__generator_errors(ray_start_regular_shared):
    refs = _count.options(num_returns=3).remote(3, fail_at=1)
    assert ray.get(refs[0]) == 0
    for ref in refs[1:]:
        with pytest.raises(ValueError):
            ray.get(ref)


def test_generators__dynamic_generator(ray_start_regular_shared):
    ref = _count.options(num_returns="dynamic").remote(4)
    assert isinstance(ref, ray.ObjectRef)
    inner = ray.get(ref)
    refs = list(inner)
    assert all(isinstance(r, ray.ObjectRef) for r in refs)
    assert ray.get(refs) == [0, 1, 2, 3]

    @ray.remote(num_returns="dynamic")
    def nothing():
        return
        yield

    assert list(ray.get(nothing.remote())) == []


def test_generators__dynamic_generator_retry_exception(ray_start_regular_shared):
    attempts = Recorder.remote()

    @ray.remote(num_returns="dynamic", retry_exceptions=[_CustomError], max_retries=3)
    def flaky(recorder):
        attempt = ray.get(recorder.record.remote("attempt"))
        for i in range(3):
            if attempt < 2 and i == 1:
                raise _CustomError()
            yield i

    assert ray.get(list(ray.get(flaky.remote(attempts)))) == [0, 1, 2]
    assert ray.get(attempts.count.remote()) == 2


def test_generators__dynamic_generator_error_after_yields(ray_start_regular_shared):
    # The task's ref holds a generator of the items yielded before the error, then one more
    # item whose get raises it.
    @ray.remote(num_returns="dynamic")
    def two_then_fail():
        yield "a"
        yield "b"
        raise _CustomError("after two")

    refs = list(ray.get(two_then_fail.remote(), timeout=60))
    assert len(refs) == 3
    assert ray.get(refs[:2], timeout=60) == ["a", "b"]
    with pytest.raises(_CustomError, match="after two") as info:
        ray.get(refs[2], timeout=60)
    assert isinstance(info.value, exceptions.RayTaskError)

    @ray.remote(num_returns="dynamic")
    def fail_at_once():
        raise _CustomError("before any item")
        yield

    refs = list(ray.get(fail_at_once.remote(), timeout=60))
    assert len(refs) == 1
    with pytest.raises(_CustomError, match="before any item"):
        ray.get(refs[0], timeout=60)


def test_generators__dynamic_generator_retryable_error_fails_the_task_ref(ray_start_regular_shared):
    # An error that retry_exceptions covers fails the task's own ref once retries are spent
    # (here none); one it does not cover is not retried and ends the generator.
    attempts = Recorder.remote()

    @ray.remote(num_returns="dynamic", max_retries=0, retry_exceptions=True)
    def retryable():
        yield 1
        raise _CustomError("retryable")

    with pytest.raises(_CustomError, match="retryable"):
        ray.get(retryable.remote(), timeout=60)

    @ray.remote(num_returns="dynamic", max_retries=2, retry_exceptions=[KeyError])
    def not_covered(recorder):
        ray.get(recorder.record.remote("attempt"))
        yield 1
        raise _CustomError("not covered")

    refs = list(ray.get(not_covered.remote(attempts), timeout=60))
    assert ray.get(refs[0], timeout=60) == 1
    with pytest.raises(_CustomError, match="not covered"):
        ray.get(refs[1], timeout=60)
    assert ray.get(attempts.count.remote()) == 1
