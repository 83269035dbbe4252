"""A task's large result stays in the executor that made it, on its simulated host: the driver
records where it is, readers fetch it from there, freeing it releases it there, the holder
spills under pressure, a killed holder's results are rebuilt from lineage (or fail with
ObjectLostError), and an executor retired while idle hands its values over first."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

import fray_ray
from fray_ray._private.core import runtime_state
from fray_ray._private.driver import executor_pool
from fray_ray._private.objects.serialization import INLINE_LIMIT
from fray_ray.cluster_utils import Cluster
from fray_ray.exceptions import ObjectLostError, ObjectReconstructionFailedError
from fray_ray.util.state import list_tasks

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import pid_alive, wait_for  # noqa: E402

SIZE = 8 << 20  # well above the inline limit


@fray_ray.remote(resources={"a": 1})
def make(value: int) -> np.ndarray:
    return np.full(SIZE, value, np.uint8)


@fray_ray.remote(resources={"a": 1})
def holder_state() -> dict[str, object]:
    """What this executor process (the one on host a) holds; same pool as `make`."""
    from fray_ray._private.workers.held_results import WORKER_HOLDER

    held = WORKER_HOLDER.held
    return {"pid": os.getpid(), "held": [] if held is None else held.held(),
            "spilled": [] if held is None else held.spilled(),
            "served": 0 if held is None else held.served_bytes}


@fray_ray.remote(resources={"b": 1})
def total_on_b(array: np.ndarray) -> int:
    return int(array.sum())


def test_a_large_result_stays_on_its_host_and_readers_fetch_it_there(hosts: Cluster) -> None:
    driver = runtime_state.current()
    stored_before = driver.objects.store.used
    ref = make.remote(3)
    assert fray_ray.get(total_on_b.remote(ref)) == 3 * SIZE  # b fetched it from a
    holder = driver.objects.holders([ref.binary()])[ref.binary()]
    assert holder.startswith("127.0.0.") and not holder.startswith("127.0.0.1:")  # host a's address
    assert driver.objects.store.used - stored_before < INLINE_LIMIT  # the driver never stored it
    assert driver.holders.fetched_bytes == 0  # nor relayed it to b
    state = fray_ray.get(holder_state.remote())
    assert ref.binary() in state["held"] and state["served"] >= SIZE

    array = fray_ray.get(ref)  # the driver fetches it from a: one stream transfer
    assert int(array.sum()) == 3 * SIZE and not array.flags.writeable
    assert driver.holders.fetched_bytes >= SIZE
    assert driver.objects.store.used - stored_before < INLINE_LIMIT

    del array, ref  # the owner frees it: the holder lets it go
    wait_for(lambda: fray_ray.get(holder_state.remote())["held"] == [], what="the holder to release it")


def test_small_results_still_travel_with_the_completion(hosts: Cluster) -> None:
    @fray_ray.remote(resources={"a": 1})
    def small() -> bytes:
        return b"x" * 1000

    ref = small.remote()
    assert fray_ray.get(ref) == b"x" * 1000
    assert runtime_state.current().objects.holders([ref.binary()]) == {}


def test_a_task_on_the_holders_own_host_reads_it_there(hosts: Cluster) -> None:
    @fray_ray.remote(resources={"a": 1})
    def total_on_a(array: np.ndarray) -> int:
        return int(array.sum())

    ref = make.remote(5)
    assert fray_ray.get(total_on_a.remote(ref)) == 5 * SIZE
    assert runtime_state.current().holders.fetched_bytes == 0


def test_the_holder_spills_what_does_not_fit_in_its_memory(hosts: Cluster) -> None:
    env = {"env_vars": {"FRAY_RAY_HELD_OBJECT_MEMORY": str(2 * SIZE + SIZE // 2)}}
    tight_make = make.options(runtime_env=env)
    refs = [tight_make.remote(value) for value in (1, 2, 3, 4)]
    fray_ray.wait(refs, num_returns=len(refs))
    state = fray_ray.get(holder_state.options(runtime_env=env).remote())
    assert len(state["held"]) == 4 and len(state["spilled"]) >= 2
    assert [int(array[0]) for array in fray_ray.get(refs)] == [1, 2, 3, 4]


def test_a_killed_holders_result_is_rebuilt_from_its_lineage(hosts: Cluster) -> None:
    ref = make.options(max_retries=1).remote(7)
    fray_ray.wait([ref])
    pid = fray_ray.get(holder_state.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid), what="the holder to die")
    assert int(fray_ray.get(total_on_b.remote(ref))) == 7 * SIZE
    assert int(fray_ray.get(ref, timeout=120)[0]) == 7
    # the state API lists the rebuilding run as the task's next attempt, as Ray does
    attempts = list_tasks(filters=[("task_id", "=", ref.task_id().hex())])
    assert sorted((t.attempt_number, t.state) for t in attempts) == [(0, "FINISHED"), (1, "FINISHED")]


def test_a_killed_holders_result_without_retries_is_lost_with_its_reason(hosts: Cluster) -> None:
    ref = make.options(max_retries=0).remote(9)
    fray_ray.wait([ref])
    pid = fray_ray.get(holder_state.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid), what="the holder to die")
    with pytest.raises(ObjectLostError) as lost:
        fray_ray.get(ref, timeout=120)
    assert isinstance(lost.value, ObjectReconstructionFailedError)
    assert "max_retries=0" in str(lost.value)
    with pytest.raises(ObjectLostError):  # a task reading it fails the same way, without hanging
        fray_ray.get(total_on_b.remote(ref), timeout=120)


def test_an_idle_executor_hands_its_values_over_before_it_is_retired(hosts: Cluster,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    driver = runtime_state.current()
    ref = make.remote(11)
    fray_ray.wait([ref])
    pid = fray_ray.get(holder_state.remote())["pid"]
    assert driver.objects.holders([ref.binary()])
    fray_ray.get(total_on_b.remote(np.ones(8, np.uint8)))  # b's executor is now the warm one kept
    monkeypatch.setattr(executor_pool, "IDLE_TIMEOUT_S", 0.3)
    driver.scheduler._maintain()
    wait_for(lambda: not pid_alive(pid), what="the idle executor on host a to be retired")
    assert driver.objects.holders([ref.binary()]) == {}  # the driver holds it now
    assert int(fray_ray.get(ref)[0]) == 11


def test_a_workers_large_put_stays_in_that_worker(hosts: Cluster) -> None:
    @fray_ray.remote(resources={"a": 1})
    def put_there(value: int) -> list[fray_ray.ObjectRef]:
        return [fray_ray.put(np.full(SIZE, value, np.uint8))]

    driver = runtime_state.current()
    stored_before = driver.objects.store.used
    (ref,) = fray_ray.get(put_there.remote(4))
    assert driver.objects.holders([ref.binary()])  # held on host a, not in the driver
    assert driver.objects.store.used - stored_before < INLINE_LIMIT
    assert fray_ray.get(total_on_b.remote(ref)) == 4 * SIZE
    assert int(fray_ray.get(ref)[0]) == 4

    pid = fray_ray.get(holder_state.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid), what="the holder to die")
    with pytest.raises(ObjectReconstructionFailedError, match="ray.put"):  # a put has no lineage
        fray_ray.get(ref, timeout=120)


def test_a_value_held_on_the_drivers_host_is_mapped_not_sent(fresh_shutdown: None) -> None:
    """One host: the executor shares the driver's shared-memory directory, so the driver maps
    the held value's file instead of receiving its bytes."""
    fray_ray.init(num_cpus=1)

    @fray_ray.remote
    def here() -> np.ndarray:
        return np.full(SIZE, 6, np.uint8)

    driver = runtime_state.current()
    ref = here.remote()
    array = fray_ray.get(ref)
    assert driver.objects.holders([ref.binary()])  # held by the executor
    assert int(array.sum()) == 6 * SIZE and not array.flags.writeable
    assert driver.holders.fetched_bytes == 0  # lent as a file, mapped here
    base: object = array
    while isinstance(base, np.ndarray):
        base = base.base
    while isinstance(base, memoryview):
        base = base.obj
    assert type(base).__name__.startswith("c_char_Array")


def test_a_borrower_keeps_a_held_value_alive_after_the_driver_drops_it(hosts: Cluster) -> None:
    @fray_ray.remote(resources={"b": 1}, num_cpus=0)
    class Keeper:
        def keep(self, refs: list[fray_ray.ObjectRef]) -> None:
            self.refs = refs  # borrowed: the ref lives on in this actor

        def total(self) -> int:
            return int(fray_ray.get(self.refs[0]).sum())

        def drop(self) -> None:
            self.refs = []

    keeper = Keeper.remote()
    ref = make.remote(2)
    fray_ray.get(keeper.keep.remote([ref]))
    object_id = ref.binary()
    del ref  # the driver's last ref: the borrower still counts
    assert object_id in fray_ray.get(holder_state.remote())["held"]
    assert fray_ray.get(keeper.total.remote()) == 2 * SIZE
    fray_ray.get(keeper.drop.remote())
    fray_ray.kill(keeper)  # its process ends: nothing borrows the object any more
    wait_for(lambda: object_id not in fray_ray.get(holder_state.remote())["held"], what="the holder to release it")
