"""ObjectRef semantics and using refs from asyncio and concurrent.futures in the driver.

Mirrors Ray's test_async.py (``ref.as_future()`` / ``await ref`` in a driver event loop) and the
ObjectRef facts of the reference (ray-api.md §1.3).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re

import pytest

from compat_tests._backend import ray
from compat_tests.helpers import SignalActor


@ray.remote
def _square(x):
    return x * x


@ray.remote(num_returns=2)
def _pair(x):
    return x, x * x


@ray.remote(num_cpus=0)
def _wait_then_return(signal, value):
    ray.get(signal.wait.remote())
    return value


# --- identity -------------------------------------------------------------------------------


def test_object_ref__hashable_and_equal_by_id(ray_start_regular_shared):
    a = ray.put(1)
    b = ray.put(1)
    assert a == a
    assert a != b  # same value, different objects
    position = {a: 0, b: 1}
    assert position[a] == 0 and position[b] == 1
    assert len({a, a, b}) == 2
    # A ref that travelled through the object store is still the same ref.
    same = ray.get(ray.put([a]))[0]
    assert same == a and hash(same) == hash(a)
    assert position[same] == 0


def test_object_ref__hex_binary_and_repr(ray_start_regular_shared):
    ref = _square.remote(3)
    hex_id = ref.hex()
    assert re.fullmatch(r"[0-9a-f]{56}", hex_id)
    assert isinstance(ref.binary(), bytes) and len(ref.binary()) == 28
    assert ref.binary().hex() == hex_id
    assert repr(ref) == f"ObjectRef({hex_id})"
    assert ray.put(0).hex() != ray.put(0).hex()
    assert ray.get(ref) == 9


def test_object_ref__task_and_job_ids(ray_start_regular_shared):
    first, second = _pair.remote(3)
    task_id = first.task_id()
    assert isinstance(task_id, ray.TaskID) and task_id == second.task_id()
    assert re.fullmatch(r"[0-9a-f]{48}", task_id.hex()) and first.hex().startswith(task_id.hex())
    assert task_id != _square.remote(3).task_id()
    job_id = first.job_id()
    assert isinstance(job_id, ray.JobID) and job_id == ray.put(1).job_id()
    assert job_id.hex() == ray.get_runtime_context().get_job_id()
    assert ray.get([first, second]) == [3, 9]


def test_object_ref__types(ray_start_regular_shared):
    ref = ray.put(1)
    assert isinstance(ref, ray.ObjectRef)
    assert ray.ObjectID is ray.ObjectRef
    assert isinstance(_square.remote(2), ray.ObjectRef)
    assert ray.ObjectRef.nil().is_nil()
    assert not ref.is_nil()


def test_object_ref__returned_inside_values(ray_start_regular_shared):
    @ray.remote
    def make_refs():
        return [_square.remote(4), ray.put("kept")]

    refs = ray.get(make_refs.remote())
    assert all(isinstance(r, ray.ObjectRef) for r in refs)
    assert ray.get(refs) == [16, "kept"]

    @ray.remote
    def return_ref():
        return _square.remote(5)

    inner = ray.get(return_ref.remote())  # a future of a future
    assert isinstance(inner, ray.ObjectRef)
    assert ray.get(inner) == 25


# --- futures --------------------------------------------------------------------------------


def test_object_ref__future(ray_start_regular_shared):
    future = _square.remote(6).future()
    assert isinstance(future, concurrent.futures.Future)
    assert future.result(timeout=60) == 36

    @ray.remote
    def fail():
        raise ValueError("in future")

    with pytest.raises(ValueError, match="in future"):
        fail.remote().future().result(timeout=60)

    done, _ = concurrent.futures.wait(
        [_square.remote(i).future() for i in range(4)], timeout=60
    )
    assert sorted(f.result() for f in done) == [0, 1, 4, 9]


def test_async__simple(ray_start_regular_shared):
    async def main():
        direct = await _square.remote(7)
        via_future = await _square.remote(8).as_future()
        return direct, via_future

    assert asyncio.run(main()) == (49, 64)


def test_async__as_future_is_an_asyncio_future(ray_start_regular_shared):
    async def main():
        future = _square.remote(2).as_future()
        assert isinstance(future, asyncio.Future)
        return await future

    assert asyncio.run(main()) == 4


def test_async__gather(ray_start_regular_shared):
    async def main():
        return await asyncio.gather(*[_square.remote(i).as_future() for i in range(5)])

    assert asyncio.run(main()) == [0, 1, 4, 9, 16]


def test_async__gather_mixup(ray_start_regular_shared):
    async def plain(x):
        await asyncio.sleep(0.01)
        return x

    async def main():
        return await asyncio.gather(
            _square.remote(3).as_future(), plain("p"), _square.remote(4), plain(None)
        )

    assert asyncio.run(main()) == [9, "p", 16, None]


def test_async__wait(ray_start_regular_shared):
    async def main():
        futures = [_square.remote(i).as_future() for i in range(4)]
        done, pending = await asyncio.wait(futures, timeout=60)
        return sorted(f.result() for f in done), pending

    results, pending = asyncio.run(main())
    assert results == [0, 1, 4, 9] and not pending


def test_async__wait_timeout(ray_start_regular_shared):
    signal = SignalActor.remote()
    blocked = _wait_then_return.remote(signal, "late")

    async def main():
        future = blocked.as_future()
        done, pending = await asyncio.wait([future], timeout=0.2)
        return len(done), len(pending)

    assert asyncio.run(main()) == (0, 1)
    signal.send.remote()
    assert ray.get(blocked) == "late"


def test_async__wait_mixup(ray_start_regular_shared):
    signal = SignalActor.remote()
    blocked = _wait_then_return.remote(signal, "late")

    async def main():
        quick = asyncio.ensure_future(asyncio.sleep(0, result="coroutine"))
        ray_done = _square.remote(3).as_future()
        slow = blocked.as_future()
        done, pending = await asyncio.wait(
            [quick, ray_done, slow], timeout=60, return_when=asyncio.FIRST_COMPLETED
        )
        assert slow not in done
        await asyncio.wait([quick, ray_done], timeout=60)
        results = (quick.result(), ray_done.result(), slow.done())
        slow.cancel()
        return results

    assert asyncio.run(main()) == ("coroutine", 9, False)
    signal.send.remote()
    assert ray.get(blocked) == "late"


def test_async__await_raises_task_error(ray_start_regular_shared):
    @ray.remote
    def fail():
        raise KeyError("awaited")

    async def main():
        await fail.remote()

    with pytest.raises(KeyError):
        asyncio.run(main())
