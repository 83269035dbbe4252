"""An actor method's large result, called from the driver, stays in the actor's process on its
simulated host, as a task's does: the driver records where it is and readers on other hosts
fetch it from there. An actor that ends on purpose (`ray.kill`, with or without a restart,
`exit_actor`, its handles gone) hands what it holds to the driver first, so the objects it
returned outlive it as in Ray's object store; a crashed actor's held results fail with
`ObjectReconstructionFailedError`, never a hang. A cancelled call's held result is let go. A
generator method the driver calls keeps its large items the same way; those lost with a crash
are made again by the call's retry when the actor restarts, else fail the same way."""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fray_ray
from fray_ray._private.core import runtime_state
from fray_ray._private.objects.serialization import INLINE_LIMIT
from fray_ray.cluster_utils import Cluster
from fray_ray.exceptions import ObjectReconstructionFailedError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from latches import Latch  # noqa: E402
from waiting import pid_alive, wait_for  # noqa: E402

SIZE = 8 << 20  # well above the inline limit


@fray_ray.remote(num_cpus=0, resources={"a": 0.1}, max_restarts=1)
class Maker:
    def make(self, value: int, size: int = SIZE) -> np.ndarray:
        return np.full(size, value, np.uint8)

    def items(self, count: int, size: int = SIZE) -> Iterator[np.ndarray]:
        for value in range(count):
            yield np.full(size, value, np.uint8)

    def items_waiting(self, count: int, pause_at: int, latch: fray_ray.actor.ActorHandle) -> Iterator[Any]:
        """Items `(pid, array of i)`, waiting on `latch` before item `pause_at`."""
        for value in range(count):
            if value == pause_at:
                fray_ray.get(latch.wait.remote())
            yield os.getpid(), np.full(SIZE, value, np.uint8)

    def make_after(self, started: fray_ray.actor.ActorHandle, go: fray_ray.actor.ActorHandle, value: int) -> np.ndarray:
        fray_ray.get(started.open.remote())
        fray_ray.get(go.wait.remote())
        return np.full(SIZE, value, np.uint8)

    def make_and_leave(self, value: int) -> fray_ray.ObjectRef:
        ref = self.make(value)
        fray_ray.actor.exit_actor()
        return ref  # never reached

    def state(self) -> dict[str, object]:
        from fray_ray._private.workers.held_results import WORKER_HOLDER

        held = WORKER_HOLDER.held
        return {"pid": os.getpid(), "held": [] if held is None else held.held(),
                "served": 0 if held is None else held.served_bytes,
                "released": [] if held is None else list(held._released)}


@fray_ray.remote(num_cpus=0, resources={"b": 0.1})
class Reader:
    def total(self, array: np.ndarray) -> int:
        return int(array.sum())


def _holder(ref: fray_ray.ObjectRef) -> str | None:
    return runtime_state.current().objects.holders([ref.binary()]).get(ref.binary())


def test_a_large_result_stays_in_the_actor_and_another_actor_fetches_it_there(hosts: Cluster) -> None:
    driver = runtime_state.current()
    maker, reader = Maker.remote(), Reader.remote()
    stored_before = driver.objects.store.used
    ref = maker.make.remote(3)
    assert fray_ray.get(reader.total.remote(ref)) == 3 * SIZE  # the driver passed the ref on, unread
    assert _holder(ref) is not None
    assert driver.objects.store.used - stored_before < INLINE_LIMIT  # the driver never stored it
    assert driver.holders.fetched_bytes == 0  # nor carried it to b
    state = fray_ray.get(maker.state.remote())
    assert ref.binary() in state["held"] and state["served"] >= SIZE

    array = fray_ray.get(ref)  # the driver reads it from the actor's host
    assert int(array.sum()) == 3 * SIZE and not array.flags.writeable
    assert driver.holders.fetched_bytes >= SIZE

    del array, ref  # the owner frees it: the actor lets it go
    gc.collect()
    wait_for(lambda: fray_ray.get(maker.state.remote())["held"] == [], what="the actor to release it")


def test_small_results_and_errors_still_travel_with_the_answer(hosts: Cluster) -> None:
    maker = Maker.remote()
    small = maker.make.remote(2, 1000)
    assert fray_ray.get(small).tolist() == [2] * 1000
    failing = maker.make.remote(1, -1)  # numpy refuses a negative size
    with pytest.raises(ValueError):
        fray_ray.get(failing)
    assert _holder(small) is None and _holder(failing) is None
    assert fray_ray.get(maker.state.remote())["held"] == []


@pytest.mark.parametrize("no_restart", [True, False])
def test_ray_kill_hands_the_actors_values_to_the_driver_first(hosts: Cluster, no_restart: bool) -> None:
    maker = Maker.options(max_task_retries=-1).remote()  # a call made while it restarts waits for it
    ref = maker.make.remote(5)
    fray_ray.wait([ref])
    pid = fray_ray.get(maker.state.remote())["pid"]
    assert _holder(ref) is not None
    fray_ray.kill(maker, no_restart=no_restart)
    wait_for(lambda: not pid_alive(pid), what="the actor's process to end")
    assert _holder(ref) is None  # the driver holds it now
    assert int(fray_ray.get(ref, timeout=60)[0]) == 5
    if not no_restart:  # the restarted actor serves again, holding nothing of before
        assert fray_ray.get(maker.state.remote(), timeout=120)["held"] == []


def test_exit_actor_hands_the_actors_values_to_the_driver_first(hosts: Cluster) -> None:
    maker = Maker.remote()
    kept = maker.make.remote(6)
    fray_ray.wait([kept])
    pid = fray_ray.get(maker.state.remote())["pid"]
    with pytest.raises(fray_ray.exceptions.RayActorError):
        fray_ray.get(maker.make_and_leave.remote(1))
    wait_for(lambda: not pid_alive(pid), what="the actor's process to end")
    assert _holder(kept) is None
    assert int(fray_ray.get(kept, timeout=60)[0]) == 6


def test_an_actor_whose_handles_are_gone_hands_its_values_over(hosts: Cluster) -> None:
    maker = Maker.remote()
    ref = maker.make.remote(8)
    pid = fray_ray.get(maker.state.remote())["pid"]
    del maker
    gc.collect()
    wait_for(lambda: not pid_alive(pid), what="the out-of-scope actor to end")
    assert _holder(ref) is None
    assert int(fray_ray.get(ref, timeout=60)[0]) == 8


def test_a_crashed_actors_held_result_fails_with_its_reason(hosts: Cluster) -> None:
    maker = Maker.options(max_restarts=0).remote()
    ref = maker.make.remote(9)
    fray_ray.wait([ref])
    pid = fray_ray.get(maker.state.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid), what="the actor to die")
    with pytest.raises(ObjectReconstructionFailedError, match="actor method") as lost:
        fray_ray.get(ref, timeout=120)
    assert lost.value.reason == "OBJECT_UNRECONSTRUCTABLE_RETRIES_DISABLED"
    with pytest.raises(ObjectReconstructionFailedError):  # a reader elsewhere fails the same way
        fray_ray.get(Reader.remote().total.remote(ref), timeout=120)


def test_a_cancelled_calls_held_result_is_let_go(hosts: Cluster) -> None:
    maker, started, go = Maker.remote(), Latch.remote(), Latch.remote()
    ref = maker.make_after.remote(started, go, 4)
    fray_ray.get(started.wait.remote())  # the call runs
    fray_ray.cancel(ref)  # a running call of a threaded actor is not interrupted: its answer is dropped
    with pytest.raises(fray_ray.exceptions.TaskCancelledError):
        fray_ray.get(ref)
    fray_ray.get(go.open.remote())
    wait_for(lambda: ref.binary() in fray_ray.get(maker.state.remote())["released"],
             what="the actor to let the dropped result go")
    assert fray_ray.get(maker.state.remote())["held"] == []


def test_a_generators_large_items_stay_in_the_actor(hosts: Cluster) -> None:
    driver = runtime_state.current()
    maker, reader = Maker.remote(), Reader.remote()
    stored_before = driver.objects.store.used
    items = list(maker.items.remote(3))
    assert all(_holder(item) is not None for item in items)
    assert driver.objects.store.used - stored_before < INLINE_LIMIT
    assert fray_ray.get([reader.total.remote(item) for item in items]) == [0, SIZE, 2 * SIZE]
    assert driver.holders.fetched_bytes == 0
    assert [int(array[0]) for array in fray_ray.get(items)] == [0, 1, 2]
    assert all(_holder(item) is None for item in maker.items.remote(2, 1000))  # small: with the item
    retried = Maker.options(max_task_retries=1).remote()
    assert all(_holder(item) is not None for item in retried.items.remote(2))  # a retry's replay refills lost ones


def test_items_lost_with_a_crashed_actor_are_made_again_by_the_calls_retry(hosts: Cluster) -> None:
    latch = Latch.options(num_cpus=0, resources={"head": 0.1}).remote()
    maker = Maker.options(max_restarts=1, max_task_retries=1).remote()
    stream = maker.items_waiting.remote(4, 2, latch)
    first, second = next(stream), next(stream)  # refs only: the values stay in the actor's process
    assert _holder(first) is not None
    pid = fray_ray.get(first)[0]
    os.kill(pid, signal.SIGKILL)  # mid-call: the actor restarts and the call runs again
    wait_for(lambda: not pid_alive(pid), what="the actor's process to die")
    fray_ray.get(latch.open.remote())
    values = fray_ray.get([first, second, *stream], timeout=120)
    assert [int(array[0]) for _, array in values] == [0, 1, 2, 3]
    assert pid not in {item_pid for item_pid, _ in values}  # the lost items came from the retry


def test_items_of_a_generator_nobody_reads_are_let_go(hosts: Cluster) -> None:
    maker = Maker.remote()
    released_before = len(fray_ray.get(maker.state.remote())["released"])
    stream = maker.items.remote(3)
    del stream  # before its items come: each is let go as it arrives
    wait_for(lambda: len(fray_ray.get(maker.state.remote())["released"]) - released_before >= 3,
             what="the actor to let the unread items go")
    assert fray_ray.get(maker.state.remote())["held"] == []


def test_a_generators_items_outlive_ray_kill_and_fail_with_a_crash(hosts: Cluster) -> None:
    killed, crashed = Maker.options(max_restarts=0).remote(), Maker.options(max_restarts=0).remote()
    kept, lost = next(killed.items.remote(1)), next(crashed.items.remote(1))
    fray_ray.wait([kept, lost], num_returns=2)
    killed_pid, crashed_pid = fray_ray.get([killed.state.remote(), crashed.state.remote()])
    fray_ray.kill(killed)
    os.kill(crashed_pid["pid"], signal.SIGKILL)
    wait_for(lambda: not pid_alive(killed_pid["pid"]) and not pid_alive(crashed_pid["pid"]), what="both actors to end")
    assert int(fray_ray.get(kept, timeout=60)[0]) == 0 and _holder(kept) is None
    with pytest.raises(ObjectReconstructionFailedError, match="generator"):
        fray_ray.get(lost, timeout=120)


def test_small_items_of_a_dropped_generator_are_not_kept_by_the_driver(hosts: Cluster) -> None:
    from fray_ray._private.objects.ids import object_id_for

    maker = Maker.remote()
    stream = maker.items.remote(3, 1000)
    stream_id = stream._stream_id
    del stream
    fray_ray.get(maker.state.remote())  # its calls run in order: the generator has ended
    objects = runtime_state.current().objects
    wait_for(lambda: not any(objects.known(object_id_for(stream_id, i)) for i in (1, 2, 3)),
             what="the dropped generator's items to be gone from the driver")


@fray_ray.remote(num_cpus=0, resources={"a": 0.1})
class AsyncMaker:
    async def make(self, value: int) -> np.ndarray:
        return np.full(SIZE, value, np.uint8)

    async def items(self, count: int) -> Any:
        for value in range(count):
            yield np.full(SIZE, value, np.uint8)


def test_an_async_actor_keeps_its_large_results_and_items_too(hosts: Cluster) -> None:
    maker, reader = AsyncMaker.remote(), Reader.remote()
    ref, (item,) = maker.make.remote(2), list(maker.items.remote(1))
    fray_ray.wait([ref], timeout=120)  # an async actor may finish the items first; wait reads nothing
    assert _holder(ref) is not None and _holder(item) is not None
    assert fray_ray.get([reader.total.remote(ref), reader.total.remote(item)]) == [2 * SIZE, 0]
    assert runtime_state.current().holders.fetched_bytes == 0
