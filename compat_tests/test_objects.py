"""Objects: ``ray.get``, ``ray.put`` and ``ray.wait``.

Mirrors Ray's test_basic.py / test_basic_2.py object tests and test_wait.py, plus the argument
type rules of the reference (ray-api.md §1.3).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from compat_tests._backend import exceptions, ray
from compat_tests.helpers import SignalActor, wait_for_condition


@ray.remote(num_cpus=0)
def _wait_then_return(signal, value):
    ray.get(signal.wait.remote())
    return value


@ray.remote
def _identity(value):
    return value


def _is_subsequence(part, whole):
    position = 0
    for item in part:
        while position < len(whole) and whole[position] != item:
            position += 1
        if position == len(whole):
            return False
        position += 1
    return True


# --- put ------------------------------------------------------------------------------------


def test_basic__ray_recursive_objects(ray_start_regular_shared):
    recursive_list = [1]
    recursive_list.append(recursive_list)
    recursive_dict = {"k": 1}
    recursive_dict["self"] = recursive_dict

    class Node:
        pass

    node = Node()
    node.me = node

    got_list = ray.get(ray.put(recursive_list))
    assert got_list[0] == 1 and got_list[1] is got_list
    got_dict = ray.get(ray.put(recursive_dict))
    assert got_dict["self"] is got_dict
    got_node = ray.get(ray.put(node))
    assert got_node.me is got_node


def test_basic__putting_object_that_closes_over_object_ref(ray_start_regular_shared):
    inner = ray.put("inner value")

    class Holder:
        def __init__(self, ref):
            self.ref = ref

    holder = ray.get(ray.put(Holder(inner)))
    assert isinstance(holder.ref, ray.ObjectRef)
    assert ray.get(holder.ref) == "inner value"

    wrapped = ray.get(ray.put([inner, {"again": inner}]))
    assert ray.get(wrapped[0]) == "inner value"
    assert ray.get(wrapped[1]["again"]) == "inner value"


def test_put__object_ref_raises_type_error(ray_start_regular_shared):
    ref = ray.put(1)
    with pytest.raises(TypeError):
        ray.put(ref)
    # Wrapping it in a container is the documented way.
    assert ray.get(ray.get(ray.put([ref]))[0]) == 1


def test_put__value_is_a_snapshot(ray_start_regular_shared):
    original = [1, 2, {"a": 3}]
    ref = ray.put(original)
    original.append(4)
    original[2]["a"] = 99
    assert ray.get(ref) == [1, 2, {"a": 3}]

    array = np.zeros(1000)
    array_ref = ray.put(array)
    array[0] = 5.0
    assert ray.get(array_ref)[0] == 0.0


def test_put__numpy_result_is_read_only_or_a_copy(ray_start_regular_shared):
    ref = ray.put(np.arange(100_000, dtype=np.int64))
    got = ray.get(ref)
    try:
        got[0] = -1
    except ValueError:
        assert not got.flags.writeable  # read-only view of the stored value
    # Whatever happened to ``got``, the stored value is unchanged.
    assert ray.get(ref)[0] == 0
    np.testing.assert_array_equal(ray.get(ref)[1:10], np.arange(1, 10))


def test_put__get_round_trip_of_common_types(ray_start_regular_shared):
    values = [
        None, True, 0, -7, 2**70, 3.5, float("inf"), 1 + 2j, "", "text", b"\x00\xff",
        (), (1, "a"), [], [[1], [2]], {}, {"k": [1, {"n": None}]}, set(),
        {1, 2}, np.int32(5), np.array([[1.5, 2.5]]), np.zeros(0), range(3),
    ]
    refs = [ray.put(v) for v in values]
    for expected, got in zip(values, ray.get(refs)):
        if isinstance(expected, np.ndarray):
            np.testing.assert_array_equal(got, expected)
            assert got.dtype == expected.dtype
        else:
            assert got == expected and type(got) is type(expected)


# --- get ------------------------------------------------------------------------------------


def test_basic_2__get_multiple(ray_start_regular_shared):
    refs = [ray.put(i) for i in range(20)]
    assert ray.get(refs) == list(range(20))
    assert ray.get([refs[3], refs[1], refs[3], refs[3]]) == [3, 1, 3, 3]
    assert ray.get([]) == []
    task_ref = _identity.remote("t")
    assert ray.get([task_ref, task_ref, refs[0]]) == ["t", "t", 0]


def test_basic_2__get_with_timeout(ray_start_regular_shared):
    signal = SignalActor.remote()
    ref = _wait_then_return.remote(signal, "done")
    start = time.monotonic()
    with pytest.raises(exceptions.GetTimeoutError):
        ray.get(ref, timeout=0.3)
    assert time.monotonic() - start >= 0.25
    with pytest.raises(TimeoutError):  # GetTimeoutError is also a builtin TimeoutError
        ray.get([ref], timeout=0.1)
    signal.send.remote()
    assert ray.get(ref, timeout=60) == "done"


def test_get__timeout_error_type(ray_start_regular_shared):
    assert issubclass(exceptions.GetTimeoutError, exceptions.RayError)
    assert issubclass(exceptions.GetTimeoutError, TimeoutError)


def test_get__timeout_zero(ray_start_regular_shared):
    ready = ray.put("ready")
    assert ray.get(ready, timeout=0) == "ready"
    assert ray.get([ready, ready], timeout=0) == ["ready", "ready"]

    signal = SignalActor.remote()
    pending = _wait_then_return.remote(signal, 1)
    start = time.monotonic()
    with pytest.raises(exceptions.GetTimeoutError):
        ray.get(pending, timeout=0)
    assert time.monotonic() - start < 5
    signal.send.remote()
    assert ray.get(pending) == 1


def test_get__invalid_argument_types(ray_start_regular_shared):
    ref = ray.put(1)
    with pytest.raises(ValueError):
        ray.get((ref,))
    with pytest.raises(ValueError):
        ray.get({"k": ref})
    with pytest.raises(ValueError):
        ray.get(1)
    with pytest.raises(ValueError):
        ray.get(None)
    with pytest.raises(TypeError):
        ray.get([ref, 1])
    with pytest.raises(TypeError):
        ray.get([[ref]])


def test_basic__get_throws_quickly_when_found_exception(ray_start_regular_shared):
    signal = SignalActor.remote()

    @ray.remote
    def fail():
        raise ValueError("found")

    blocked = _wait_then_return.remote(signal, 1)
    failed = fail.remote()
    try:
        with pytest.raises(ValueError, match="found"):
            ray.get([blocked, failed], timeout=60)
    finally:
        signal.send.remote()
    assert ray.get(blocked) == 1


# --- wait ---------------------------------------------------------------------------------


def test_wait__num_returns_and_timeout(ray_start_regular_shared):
    signal = SignalActor.remote()
    ready = [ray.put(i) for i in range(3)]
    blocked = [_wait_then_return.remote(signal, i) for i in range(2)]
    refs = [ready[0], blocked[0], ready[1], blocked[1], ready[2]]

    found, rest = ray.wait(refs, num_returns=2)
    assert len(found) == 2 and len(rest) == 3
    assert set(found) <= set(ready)
    assert set(found) | set(rest) == set(refs)

    found, rest = ray.wait(refs, num_returns=5, timeout=0.5)
    assert found == ready  # the ready subset, in input order
    assert rest == blocked

    found, rest = ray.wait(refs, num_returns=1, timeout=0)
    assert len(found) == 1 and found[0] in ready

    signal.send.remote()
    found, rest = ray.wait(refs, num_returns=5, timeout=60)
    assert found == refs and rest == []
    assert ray.get(found) == [0, 0, 1, 1, 2]


def test_wait__default_num_returns_is_one(ray_start_regular_shared):
    refs = [ray.put(i) for i in range(4)]
    found, rest = ray.wait(refs)
    assert len(found) == 1 and len(rest) == 3


def test_wait__preserves_input_order(ray_start_regular_shared):
    refs = [ray.put(i) for i in range(6)][::-1]
    found, rest = ray.wait(refs, num_returns=4)
    assert _is_subsequence(found, refs)
    assert _is_subsequence(rest, refs)
    assert sorted(ray.get(found + rest)) == list(range(6))


def test_wait__empty_list(ray_start_regular_shared):
    assert ray.wait([]) == ([], [])


def test_wait__invalid_arguments(ray_start_regular_shared):
    ref = ray.put(1)
    other = ray.put(2)
    with pytest.raises(ValueError):
        ray.wait([ref, ref])  # duplicates
    with pytest.raises(ValueError):
        ray.wait([ref, other], num_returns=3)  # more than given
    with pytest.raises(TypeError):
        ray.wait(1)
    with pytest.raises(TypeError):
        ray.wait([1])
    with pytest.raises(TypeError):
        ray.wait(ref)  # a single ref, not a list
    with pytest.raises(TypeError):
        ray.wait((ref, other))


def test_wait__timing(ray_start_regular_shared):
    signal = SignalActor.remote()
    blocked = _wait_then_return.remote(signal, 1)
    start = time.monotonic()
    found, rest = ray.wait([blocked], timeout=0.2)
    elapsed = time.monotonic() - start
    assert (found, rest) == ([], [blocked])
    assert 0.15 <= elapsed < 10  # generous upper bound for a loaded machine

    start = time.monotonic()
    ray.wait([blocked], timeout=0)
    assert time.monotonic() - start < 5
    signal.send.remote()
    wait_for_condition(lambda: ray.wait([blocked], timeout=0)[0] == [blocked])


def test_wait__returns_as_soon_as_enough_are_ready(ray_start_regular_shared):
    signal = SignalActor.remote()
    blocked = _wait_then_return.remote(signal, 1)
    quick = _identity.remote(2)
    found, rest = ray.wait([blocked, quick], num_returns=1, timeout=60)
    assert found == [quick] and rest == [blocked]
    signal.send.remote()
    assert ray.get(blocked) == 1


def test_wait__errored_objects_count_as_ready(ray_start_regular_shared):
    @ray.remote
    def fail():
        raise ValueError("boom")

    ref = fail.remote()
    found, rest = ray.wait([ref], timeout=60)
    assert found == [ref] and rest == []
    with pytest.raises(ValueError):
        ray.get(found[0])
