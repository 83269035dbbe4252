"""Helpers in ``ray.util``: ``as_completed`` and ``map_unordered``.

Both exist in Ray 2.60 (``ray.util.as_completed(refs, chunk_size=10, yield_obj_refs=False)``,
``ray.util.map_unordered(fn, items, backpressure_size=100, chunk_size=10,
yield_obj_refs=False)``; ray-api.md §1.8). ``list_named_actors`` is tested in
test_named_actors.py, ``get_node_ip_address`` in test_cluster_resources.py.
"""

from __future__ import annotations

import pytest

from compat_tests._backend import ray, util
from compat_tests.helpers import SignalActor


@ray.remote
def _square(x):
    return x * x


@ray.remote(num_cpus=0)
def _wait_then_return(signal, value):
    ray.get(signal.wait.remote())
    return value


def test_as_completed__values(ray_start_regular_shared):
    refs = [_square.remote(i) for i in range(25)]
    assert sorted(util.as_completed(refs)) == [i * i for i in range(25)]
    assert list(util.as_completed([])) == []


def test_as_completed__yield_obj_refs(ray_start_regular_shared):
    refs = [_square.remote(i) for i in range(4)]
    yielded = list(util.as_completed(refs, yield_obj_refs=True))
    assert all(isinstance(r, ray.ObjectRef) for r in yielded)
    assert set(yielded) == set(refs)


def test_as_completed__completion_order(ray_start_regular_shared):
    signal = SignalActor.remote()
    refs = [_wait_then_return.remote(signal, "slow"), _square.remote(3)]
    stream = util.as_completed(refs, chunk_size=1)
    assert next(stream) == 9  # the finished one first, although submitted second
    signal.send.remote()
    assert next(stream) == "slow"
    with pytest.raises(StopIteration):
        next(stream)


def test_as_completed__errors_and_arguments(ray_start_regular_shared):
    @ray.remote
    def fail():
        raise ValueError("as_completed failure")

    with pytest.raises(ValueError, match="as_completed failure"):
        list(util.as_completed([fail.remote()]))
    with pytest.raises(ValueError):
        list(util.as_completed([_square.remote(1)], chunk_size=0))
    with pytest.raises(TypeError):
        list(util.as_completed([1]))


def test_map_unordered__values(ray_start_regular_shared):
    assert sorted(util.map_unordered(_square, range(30))) == [i * i for i in range(30)]
    small_window = util.map_unordered(_square, range(30), backpressure_size=3, chunk_size=2)
    assert sorted(small_window) == [i * i for i in range(30)]


def test_map_unordered__yield_obj_refs(ray_start_regular_shared):
    refs = list(util.map_unordered(_square, range(3), yield_obj_refs=True))
    assert all(isinstance(r, ray.ObjectRef) for r in refs)
    assert sorted(ray.get(refs)) == [0, 1, 4]
