"""Where the scheduler sends a ready task when no executor is idle: to a new executor while the
cluster has room for one, never into the queue of an executor busy with a long task (and out of
it again when that task turns out long while another executor is free)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pytest

import fray_ray
from fray_ray.util.state import list_tasks

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import wait_for  # noqa: E402

# This module's functions travel by value: the workers' bundle is a temp dir, not this checkout.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SPIN_S = 90.0


@pytest.fixture
def four_cpus(fresh_shutdown: None) -> Iterator[None]:
    fray_ray.init(num_cpus=4)
    yield


@fray_ray.remote
def spin() -> int:
    """Busy for SPIN_S seconds without ever blocking in `get` (which would hand its queue back)."""
    deadline = time.time() + SPIN_S
    while time.time() < deadline:
        pass
    return os.getpid()


@fray_ray.remote
def quick() -> int:
    return os.getpid()


def test_a_task_does_not_wait_behind_a_long_one_while_the_cluster_has_room(four_cpus: None) -> None:
    fray_ray.get(quick.remote(), timeout=120)  # an executor is up
    long_running = spin.remote()
    wait_for(lambda: list_tasks(filters=[("name", "=", "spin"), ("state", "=", "RUNNING")]),
             what="the long task to run")
    started = time.monotonic()
    short = quick.remote()
    ready, _ = fray_ray.wait([short], timeout=SPIN_S / 2)
    assert ready == [short], "the short task waited behind the long one"
    assert time.monotonic() - started < SPIN_S / 2
    done, _ = fray_ray.wait([long_running], timeout=0)
    assert not done  # it still runs: the short task had a process of its own
    fray_ray.cancel(long_running, force=True)


@fray_ray.remote
def spin_for(seconds: float) -> int:
    deadline = time.time() + seconds
    while time.time() < deadline:
        pass
    return os.getpid()


def test_short_tasks_queue_deep_but_not_behind_a_long_one(fresh_shutdown: None) -> None:
    from fray_ray._private.core import runtime_state
    from fray_ray._private.driver.prefetch import DEPTH

    fray_ray.init(num_cpus=2)  # two executors at most: queues are where work waits
    fray_ray.get([quick.remote() for _ in range(200)], timeout=120)
    scheduler = runtime_state.current().scheduler
    pool = next(iter(scheduler._executors.values())).pool
    assert scheduler._prefetch.depth(pool) > DEPTH, "executors report run times, and short tasks queue deeper"
    long_running = spin_for.remote(SPIN_S)
    wait_for(lambda: list_tasks(filters=[("name", "=", "spin_for"), ("state", "=", "RUNNING")]),
             what="the long task to run")
    short = [quick.remote() for _ in range(40)]
    # Every one finishes while the long one runs: those an executor took into its queue behind
    # the long task are taken back for the executor that is free (`withdrawals`).
    ready, _ = fray_ray.wait(short, num_returns=len(short), timeout=SPIN_S / 2)
    assert len(ready) == len(short)
    done, _ = fray_ray.wait([long_running], timeout=0)
    assert not done
    fray_ray.cancel(long_running, force=True)


@fray_ray.remote
def one(_: int) -> int:
    return 1


@fray_ray.remote
def parent(children: int) -> int:
    return sum(fray_ray.get([one.remote(i) for i in range(children)]))


def test_parents_blocked_in_get_hand_back_the_tasks_queued_behind_them(fresh_shutdown: None) -> None:
    """More parents than CPUs: a parent waiting for its children lends its CPU and its executor
    hands back the parents queued behind it (a `Withdraw` of its whole queue), so every parent
    and child runs."""
    fray_ray.init(num_cpus=2)
    fray_ray.get([quick.remote() for _ in range(50)], timeout=120)  # short tasks: executors queue deep
    assert fray_ray.get([parent.remote(3) for _ in range(12)], timeout=120) == [3] * 12


@fray_ray.remote(max_calls=1, max_retries=0)
def one_call_per_process(i: int) -> int:
    return i


def test_an_executor_at_max_calls_is_given_no_task_to_queue(fresh_shutdown: None) -> None:
    # Each process runs one call and exits: a task queued behind that call would go down with
    # the process as though its worker had died running it (and, with no retries, fail).
    fray_ray.init(num_cpus=2)
    refs = [one_call_per_process.remote(i) for i in range(24)]
    assert fray_ray.get(refs) == list(range(24))
