"""``ray.util.multiprocessing.Pool``: ``multiprocessing.Pool``'s methods on a pool of actors.

Each test states what Ray 2.60's pool does, including where it differs from the standard
library's (``maxtasksperchild`` counts batches, ``imap`` yields a failed call as a
``PoolTaskError``, ``error_callback`` receives the ``PoolTaskError``).
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

from compat_tests._backend import LazyModule, exceptions, ray, util
from compat_tests.helpers import SignalActor

util_multiprocessing = LazyModule("util.multiprocessing")
util_multiprocessing_pool = LazyModule("util.multiprocessing.pool")


def square(value):
    return value * value


def add(left, right):
    return left + right


def fail_on_three(value):
    if value == 3:
        raise KeyError(f"bad {value}")
    return value


def wait_then_return(signal, value):
    ray.get(signal.wait.remote())
    return value


def wait_for_signal(signal):
    ray.get(signal.wait.remote())
    return "released"


def process_id(_value=None):
    return os.getpid()


def remember_tag(tag):
    # The initializer and the mapped function are pickled apart, so they share the process's
    # environment, not module globals.
    os.environ["POOL_TEST_TAG"] = tag
    os.environ["POOL_TEST_INITS"] = str(int(os.environ.get("POOL_TEST_INITS", "0")) + 1)


def tag_of_process(_value):
    return os.getpid(), os.environ.get("POOL_TEST_TAG"), os.environ.get("POOL_TEST_INITS")


def fail_to_start():
    raise RuntimeError("initializer failed")


def assigned_resources(_value=None):
    return ray.get_runtime_context().get_assigned_resources()


@pytest.fixture
def pool(ray_start_regular_shared):
    pool = util_multiprocessing.Pool(processes=2)
    yield pool
    pool.terminate()


# ---- the module ----------------------------------------------------------------------------


def test_pool__module_names(ray_start_regular_shared):
    pool_class = util_multiprocessing.Pool  # imports the module, which Ray's ray.util does not itself
    assert util.multiprocessing.Pool is pool_class
    assert util_multiprocessing.TimeoutError is multiprocessing.TimeoutError
    assert util_multiprocessing_pool.Pool is util_multiprocessing.Pool
    assert issubclass(util_multiprocessing_pool.PoolTaskError, Exception)


# ---- starting ------------------------------------------------------------------------------


def test_pool__starts_a_cluster_of_its_size_when_none_runs(shutdown_only):
    assert not ray.is_initialized()
    with util_multiprocessing.Pool(processes=2) as pool:
        assert ray.is_initialized()
        assert ray.cluster_resources()["CPU"] == 2
        assert pool.map(square, range(4)) == [0, 1, 4, 9]


def test_pool__ray_address_local_starts_a_cluster(shutdown_only):
    with util_multiprocessing.Pool(processes=1, ray_address="local") as pool:
        assert ray.cluster_resources()["CPU"] == 1
        assert pool.apply(square, (5,)) == 25


@pytest.mark.parametrize("processes", [0, -1])
def test_pool__processes_below_one_is_an_error(ray_start_regular_shared, processes):
    with pytest.raises(ValueError, match="must be >0"):
        util_multiprocessing.Pool(processes=processes)


def test_pool__more_processes_than_cpus_is_an_error(ray_start_regular_shared):
    cpus = int(ray.cluster_resources()["CPU"])
    with pytest.raises(ValueError, match=f"only {cpus} CPUs"):
        util_multiprocessing.Pool(processes=cpus + 1)


def test_pool__processes_default_to_the_cluster_cpus(ray_start_regular_shared):
    with util_multiprocessing.Pool() as pool:
        pids = set(pool.map(process_id, range(40), chunksize=1))
    assert 1 <= len(pids) <= int(ray.cluster_resources()["CPU"])


def test_pool__initializer_runs_once_in_each_process(ray_start_regular_shared):
    with util_multiprocessing.Pool(processes=2, initializer=remember_tag, initargs=("hello",)) as pool:
        seen = set(pool.map(tag_of_process, range(20), chunksize=1))
    assert {(tag, inits) for _, tag, inits in seen} == {("hello", "1")}
    assert len({pid for pid, _, _ in seen}) == 2


def test_pool__failing_initializer_fails_the_pool(ray_start_regular_shared):
    with pytest.raises(exceptions.RayActorError, match="initializer failed"):
        util_multiprocessing.Pool(processes=1, initializer=fail_to_start)


def test_pool__maxtasksperchild_replaces_a_process_after_that_many_batches(ray_start_regular_shared):
    with util_multiprocessing.Pool(processes=1, maxtasksperchild=2) as pool:
        pids = pool.map(process_id, range(6), chunksize=1)
    assert len(set(pids)) == 3
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4] == pids[5]


def test_pool__ray_remote_args_are_the_actors_options(ray_start_regular_shared):
    with util_multiprocessing.Pool(processes=1, ray_remote_args={"num_cpus": 1}) as pool:
        assert pool.apply(assigned_resources) == {"CPU": 1.0}


def test_pool__invalid_ray_remote_args_are_an_error(ray_start_regular_shared):
    with pytest.raises(ValueError, match="Invalid option keyword bogus"):
        util_multiprocessing.Pool(processes=1, ray_remote_args={"bogus": 1})


# ---- running work --------------------------------------------------------------------------


def test_pool__map_in_a_with_block(ray_start_regular_shared):
    with util_multiprocessing.Pool(processes=2) as pool:
        assert pool.map(square, range(10)) == [value * value for value in range(10)]


def test_pool__map_with_chunksize_and_a_generator(pool):
    assert pool.map(square, (value for value in range(7)), chunksize=2) == [0, 1, 4, 9, 16, 25, 36]
    assert pool.map(square, []) == []


def test_pool__starmap_and_apply(pool):
    assert pool.starmap(add, [(1, 2), (3, 4)]) == [3, 7]
    assert pool.starmap(add, iter([(5, 5)]), chunksize=1) == [10]
    assert pool.apply(add, (1, 2)) == 3
    assert pool.apply(add, kwargs={"left": 1, "right": 5}) == 6


def test_pool__imap_keeps_input_order(pool):
    assert list(pool.imap(square, iter(range(9)))) == [value * value for value in range(9)]
    assert list(pool.imap(square, range(9), chunksize=4)) == [value * value for value in range(9)]


def test_pool__imap_unordered_yields_every_result(pool):
    assert sorted(pool.imap_unordered(square, (value for value in range(9)))) == [v * v for v in range(9)]
    assert sorted(pool.imap_unordered(square, range(9), chunksize=3)) == [v * v for v in range(9)]


def test_pool__imap_next_times_out_with_multiprocessing_timeout_error(pool):
    signal = SignalActor.remote()
    results = pool.imap(wait_for_signal, [signal])
    with pytest.raises(multiprocessing.TimeoutError):
        results.next(timeout=0.1)
    ray.get(signal.send.remote())
    assert results.next(timeout=60) == "released"
    with pytest.raises(StopIteration):
        results.next()


def test_pool__apply_async_get_timeout_ready_successful(pool):
    signal = SignalActor.remote()
    result = pool.apply_async(wait_then_return, (signal, 7))
    with pytest.raises(multiprocessing.TimeoutError):
        result.get(timeout=0.1)
    result.wait(timeout=0.1)  # returns without an error
    assert not result.ready()
    with pytest.raises(ValueError, match="not ready"):
        result.successful()
    ray.get(signal.send.remote())
    assert result.get(timeout=60) == 7
    assert result.ready() and result.successful()


def test_pool__callbacks_run_before_get_returns(pool):
    received = []
    assert pool.apply_async(square, (4,), callback=received.append).get(timeout=60) == 16
    assert pool.map_async(square, [1, 2, 3], callback=received.append).get(timeout=60) == [1, 4, 9]
    assert pool.starmap_async(add, [(1, 2)], received.append).get(timeout=60) == [3]
    assert received[0] == 16
    assert sorted(received[1]) == [1, 4, 9]
    assert received[2] == [3]


# ---- errors --------------------------------------------------------------------------------


def test_pool__a_call_s_exception_is_raised_as_itself(pool):
    with pytest.raises(KeyError, match="bad 3"):
        pool.map(fail_on_three, range(5))
    with pytest.raises(KeyError, match="bad 3"):
        pool.apply(fail_on_three, (3,))
    with pytest.raises(KeyError, match="bad 3"):
        pool.starmap(fail_on_three, [(1,), (3,)])


def test_pool__failed_async_result_and_error_callback(pool):
    errors, results = [], []
    result = pool.map_async(fail_on_three, range(5), callback=results.append, error_callback=errors.append)
    result.wait(timeout=60)
    assert result.ready() and not result.successful()
    with pytest.raises(KeyError):
        result.get()
    assert results == []
    assert len(errors) == 1
    assert isinstance(errors[0], util_multiprocessing_pool.PoolTaskError)
    assert isinstance(errors[0].underlying, KeyError)


def test_pool__imap_yields_a_failed_call_as_pool_task_error(pool):
    results = list(pool.imap(fail_on_three, range(5)))
    assert results[:3] == [0, 1, 2] and results[4] == 4
    assert isinstance(results[3], util_multiprocessing_pool.PoolTaskError)
    assert isinstance(results[3].underlying, KeyError)


# ---- ending --------------------------------------------------------------------------------


def test_pool__use_after_close_is_an_error(ray_start_regular_shared):
    pool = util_multiprocessing.Pool(processes=1)
    with pytest.raises(ValueError, match="Pool is still running"):
        pool.join()
    pool.close()
    for use in (
        lambda: pool.map(square, [1]),
        lambda: pool.apply_async(square, (1,)),
        lambda: pool.imap(square, [1]),
        lambda: pool.imap_unordered(square, [1]),
        pool.__enter__,
    ):
        with pytest.raises(ValueError, match="Pool not running"):
            use()
    pool.join()
    pool.terminate()


def test_pool__close_lets_given_work_finish(ray_start_regular_shared):
    pool = util_multiprocessing.Pool(processes=1)
    signal = SignalActor.remote()
    result = pool.apply_async(wait_then_return, (signal, "done"))
    pool.close()
    ray.get(signal.send.remote())
    assert result.get(timeout=60) == "done"
    pool.join()


def test_pool__terminate_fails_unfinished_work(ray_start_regular_shared):
    pool = util_multiprocessing.Pool(processes=1)
    signal = SignalActor.remote()
    result = pool.apply_async(wait_then_return, (signal, 1))
    pool.terminate()
    with pytest.raises(exceptions.RayActorError):
        result.get(timeout=60)
    assert result.ready() and not result.successful()
    pool.join()
