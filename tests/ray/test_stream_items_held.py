"""A streaming task's large items stay in its executor on its simulated host, as its results do:
the driver records where each is, and readers on any host fetch it there. When that process
dies, the items it held are made again by the task's next run, which replays them: its retry
if it was still running, a rerun within `max_retries` if it had ended. An item no run can make
again fails with `ObjectLostError`, never a hang."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import fray_ray
from fray_ray._private.core import runtime_state
from fray_ray._private.objects.serialization import INLINE_LIMIT
from fray_ray.cluster_utils import Cluster
from fray_ray.exceptions import ObjectLostError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from latches import Latch  # noqa: E402
from waiting import pid_alive, wait_for  # noqa: E402

SIZE = 4 << 20  # well above the inline limit


@fray_ray.remote(resources={"a": 1}, num_returns="streaming")
def numbers(count: int, pause_at: int = -1, latch: fray_ray.actor.ActorHandle | None = None,
            runs: fray_ray.actor.ActorHandle | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """Items `(pid, array of i)`; waits on `latch` before item `pause_at`; counts its runs."""
    if runs is not None:
        fray_ray.get(runs.add.remote())
    for value in range(count):
        if value == pause_at and latch is not None:
            fray_ray.get(latch.wait.remote())
        yield os.getpid(), np.full(SIZE, value, np.uint8)


@fray_ray.remote(resources={"a": 1}, num_returns="streaming")
def fewer_each_run(runs: fray_ray.actor.ActorHandle) -> Iterator[np.ndarray]:
    """Three items on its first run, one on any later one: a generator that is not deterministic."""
    count = 3 if fray_ray.get(runs.add.remote()) == 1 else 1
    for value in range(count):
        yield np.full(SIZE, value, np.uint8)


@fray_ray.remote(num_cpus=0, resources={"head": 0.1})
class Runs:
    def __init__(self) -> None:
        self.count = 0

    def add(self) -> int:
        self.count += 1
        return self.count

    def get(self) -> int:
        return self.count


@fray_ray.remote(resources={"b": 1})
def total_on_b(item: tuple[int, np.ndarray]) -> int:
    return int(item[1].sum())


def _holder(ref: fray_ray.ObjectRef) -> str | None:
    return runtime_state.current().objects.holders([ref.binary()]).get(ref.binary())


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid), what="the executor holding the items to die")


def test_large_items_stay_in_the_executor_and_any_host_reads_them_there(hosts: Cluster) -> None:
    driver = runtime_state.current()
    stored_before = driver.objects.store.used
    refs = list(numbers.remote(3))
    assert all(_holder(ref) is not None for ref in refs)
    assert driver.objects.store.used - stored_before < SIZE  # the driver stored none of them
    assert fray_ray.get(total_on_b.remote(refs[2])) == 2 * SIZE  # fetched by host b from host a
    pids = {pid for pid, _ in fray_ray.get(refs)}
    assert len(pids) == 1 and [int(array[0]) for _, array in fray_ray.get(refs)] == [0, 1, 2]


def test_small_items_still_travel_to_the_driver(hosts: Cluster) -> None:
    @fray_ray.remote(resources={"a": 1}, num_returns="streaming")
    def small() -> Iterator[bytes]:
        yield b"x" * (INLINE_LIMIT // 2)

    (ref,) = list(small.remote())
    assert _holder(ref) is None and fray_ray.get(ref) == b"x" * (INLINE_LIMIT // 2)


def test_items_of_a_finished_task_are_made_again_by_a_rerun_when_their_holder_dies(hosts: Cluster) -> None:
    runs = Runs.remote()
    refs = list(numbers.remote(3, runs=runs))
    pid = fray_ray.get(refs[0])[0]
    _kill(pid)
    again = fray_ray.get(refs, timeout=120)
    assert [int(array[0]) for _, array in again] == [0, 1, 2]
    assert {item_pid for item_pid, _ in again} != {pid}  # made by a new process
    assert fray_ray.get(runs.get.remote()) == 2
    assert fray_ray.get(total_on_b.remote(refs[1]), timeout=120) == SIZE


def test_items_lost_while_the_task_runs_are_made_again_by_its_retry(hosts: Cluster) -> None:
    latch, runs = Latch.options(num_cpus=0, resources={"head": 0.1}).remote(), Runs.remote()
    generator = numbers.remote(4, pause_at=2, latch=latch, runs=runs)
    first, second = next(generator), next(generator)  # refs only: the values stay on host a
    pid = fray_ray.get(first)[0]
    _kill(pid)  # mid-stream: the task is retried and replays items 0 and 1
    fray_ray.get(latch.open.remote())
    rest = list(generator)
    values = fray_ray.get([first, second, *rest], timeout=120)
    assert [int(array[0]) for _, array in values] == [0, 1, 2, 3]
    assert pid not in {item_pid for item_pid, _ in values}
    assert fray_ray.get(runs.get.remote()) == 2  # the retry alone: no second rerun for the lost items


def test_items_of_a_task_that_may_not_run_again_are_lost_with_their_reason(hosts: Cluster) -> None:
    refs = list(numbers.options(max_retries=0).remote(2))
    _kill(fray_ray.get(refs[0])[0])
    with pytest.raises(ObjectLostError, match="max_retries=0"):
        fray_ray.get(refs[1], timeout=120)
    with pytest.raises(ObjectLostError):  # a task reading it fails the same way, without hanging
        fray_ray.get(total_on_b.remote(refs[1]), timeout=120)


def test_an_item_the_rerun_does_not_yield_again_fails_instead_of_hanging(hosts: Cluster) -> None:
    runs = Runs.remote()
    refs = list(fewer_each_run.remote(runs))
    assert len(refs) == 3
    fray_ray.get(refs[0])

    @fray_ray.remote(resources={"a": 1})
    def pid_on_a() -> int:
        return os.getpid()

    _kill(fray_ray.get(pid_on_a.remote()))  # the same warm executor: it holds the three items
    assert int(fray_ray.get(refs[0], timeout=120)[0]) == 0
    with pytest.raises(ObjectLostError, match="did not yield it again"):
        fray_ray.get(refs[2], timeout=120)


@fray_ray.remote(resources={"a": 1}, num_returns="streaming", retry_exceptions=True, max_retries=1)
def fails_once(runs: fray_ray.actor.ActorHandle) -> Iterator[np.ndarray]:
    """Two items, then an error on its first run only: the retry replays them in this process."""
    first_run = fray_ray.get(runs.add.remote()) == 1
    for value in range(2):
        yield np.full(SIZE, value, np.uint8)
    if first_run:
        raise ValueError("once")


@fray_ray.remote(resources={"a": 1})
def held_on_a() -> tuple[int, list[bytes], int]:
    from fray_ray._private.workers.held_results import WORKER_HOLDER

    held = WORKER_HOLDER.held
    return os.getpid(), [] if held is None else held.held(), 0 if held is None else held.memory_used


def test_a_replay_by_the_same_process_keeps_one_copy_of_each_item(hosts: Cluster) -> None:
    runs = Runs.remote()
    refs = list(fails_once.remote(runs))
    assert fray_ray.get(runs.get.remote()) == 2 and len(refs) == 2
    assert [int(array[0]) for array in fray_ray.get(refs)] == [0, 1]
    _, held, used = fray_ray.get(held_on_a.remote())
    assert sorted(held) == sorted(ref.binary() for ref in refs)
    assert used < 3 * SIZE  # two items held, not the first run's copies as well


def test_items_nobody_reads_are_let_go_in_the_executor(hosts: Cluster) -> None:
    generator = numbers.remote(3)
    del generator  # before its items come: each is let go as it arrives, or as the stream is dropped
    wait_for(lambda: fray_ray.get(held_on_a.remote())[1] == [], what="the executor to let the unread items go")
    refs = list(numbers.remote(2))
    assert len(fray_ray.get(held_on_a.remote())[1]) == 2
    del refs  # read by nobody, then dropped
    wait_for(lambda: fray_ray.get(held_on_a.remote())[1] == [], what="the executor to let the dropped items go")
