"""Workers whose task or call thread reads the session while it waits (`read_lending`): a
synchronous actor keeps one thread for `__init__` and all its calls, and whatever has to reach
a worker while its thread is busy (the answer to a nested `get`, a cancellation, a kill) still
does, from the standby reader."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import cloudpickle
import pytest

import fray_ray
from fray_ray.exceptions import RayActorError, TaskCancelledError
from fray_ray.util.state import get_task

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import wait_for  # noqa: E402

# This module's functions travel by value: the workers' bundle is a temp dir, not this checkout.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMEOUT = 120


@fray_ray.remote
def add_one(x: int) -> int:
    return x + 1


@fray_ray.remote
def nested_sum(n: int) -> int:
    """A task whose own `get`s are answered while its thread (the one that reads) waits."""
    return sum(fray_ray.get([add_one.remote(i) for i in range(n)], timeout=TIMEOUT))


@fray_ray.remote
class Recorder:
    def __init__(self) -> None:
        self.threads = [threading.get_ident()]

    def record(self) -> int:
        self.threads.append(threading.get_ident())
        return len(self.threads)

    def nested(self, ref_list: list) -> int:
        self.threads.append(threading.get_ident())
        return fray_ray.get(ref_list[0], timeout=TIMEOUT) + fray_ray.get(add_one.remote(10), timeout=TIMEOUT)

    def until_cancelled(self) -> str:
        deadline = time.monotonic() + TIMEOUT
        while not fray_ray.get_runtime_context().is_canceled():
            if time.monotonic() > deadline:
                return "never cancelled"
            time.sleep(0.01)
        return "cancelled"

    def spin(self) -> None:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            pass

    def threads_seen(self) -> list[int]:
        return self.threads


def test_a_sync_actor_runs_init_and_every_call_on_one_thread(cluster_session) -> None:
    actor = Recorder.remote()
    for _ in range(20):
        fray_ray.get(actor.record.remote(), timeout=TIMEOUT)
    fray_ray.get([actor.record.remote() for _ in range(50)], timeout=TIMEOUT)  # pipelined too
    assert fray_ray.get(actor.nested.remote([fray_ray.put(1)]), timeout=TIMEOUT) == 12
    fray_ray.get(actor.record.remote(), timeout=TIMEOUT)
    assert len(set(fray_ray.get(actor.threads_seen.remote(), timeout=TIMEOUT))) == 1
    fray_ray.kill(actor)


def test_a_task_gets_the_results_of_tasks_it_submitted(cluster_session) -> None:
    assert fray_ray.get(nested_sum.remote(20), timeout=TIMEOUT) == sum(range(1, 21))
    assert fray_ray.get([nested_sum.remote(3) for _ in range(4)], timeout=TIMEOUT) == [6] * 4


def test_a_running_sync_call_sees_its_cancellation(cluster_session) -> None:
    actor = Recorder.remote()
    fray_ray.get(actor.record.remote(), timeout=TIMEOUT)
    ref = actor.until_cancelled.remote()
    wait_for(lambda: getattr(get_task(ref), "state", None) == "RUNNING", what="the call to run")
    fray_ray.cancel(ref)
    with pytest.raises(TaskCancelledError):
        fray_ray.get(ref, timeout=TIMEOUT)
    assert fray_ray.get(actor.record.remote(), timeout=TIMEOUT) == 3  # the actor goes on
    fray_ray.kill(actor)


def test_kill_ends_an_actor_whose_thread_is_busy(cluster_session) -> None:
    actor = Recorder.remote()
    fray_ray.get(actor.record.remote(), timeout=TIMEOUT)
    busy = actor.spin.remote()  # never yields to its reader
    fray_ray.kill(actor)
    with pytest.raises(RayActorError):
        fray_ray.get(busy, timeout=TIMEOUT)


def test_a_get_that_reads_its_calls_connection_still_times_out(cluster_session) -> None:
    actor = Recorder.remote()
    fray_ray.get(actor.record.remote(), timeout=TIMEOUT)
    ref = actor.until_cancelled.remote()  # alone in flight: this thread's get reads the actor's stream
    with pytest.raises(fray_ray.exceptions.GetTimeoutError):
        fray_ray.get(ref, timeout=0.2)
    fray_ray.cancel(ref)
    fray_ray.kill(actor)


def test_a_get_that_reads_its_calls_connection_ends_when_the_result_comes_another_way(cluster_session) -> None:
    """Cancelling a call fails its ref in the driver, not over the actor's stream: the get that
    reads that stream must still wake."""
    actor = Recorder.remote()
    fray_ray.get(actor.record.remote(), timeout=TIMEOUT)
    ref = actor.until_cancelled.remote()

    def cancel_once_running() -> None:
        wait_for(lambda: getattr(get_task(ref), "state", None) == "RUNNING", what="the call to run")
        fray_ray.cancel(ref)

    canceller = threading.Thread(target=cancel_once_running)
    canceller.start()
    with pytest.raises(TaskCancelledError):
        fray_ray.get(ref, timeout=TIMEOUT)
    canceller.join()
    fray_ray.kill(actor)


def test_kill_after_cancelling_a_running_call(cluster_session) -> None:
    """The cancelled call's ref failed at the cancel: the actor's death does not fail it again."""
    actor = Recorder.remote()
    ref = actor.spin.remote()
    wait_for(lambda: getattr(get_task(ref), "state", None) == "RUNNING", what="the call to run")
    fray_ray.cancel(ref)
    fray_ray.kill(actor)
    with pytest.raises(TaskCancelledError):
        fray_ray.get(ref, timeout=TIMEOUT)
