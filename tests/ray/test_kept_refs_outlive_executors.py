"""An actor keeps refs to a task's direct results past the call that lent them, borrowing them
from the task's process (`workers/lent_refs.py`). In Ray that worker, their owner, would stay
alive while anything refers to them; fray_ray retires idle executors, so an executor hands
such objects to the driver before it ends, and the actor borrows them from there. Simulated
hosts: the lender on host "a", the actors on the head, each with memory of its own."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

import fray_ray
from fray_ray._private.core import runtime_slot, runtime_state
from fray_ray._private.driver import executor_pool
from fray_ray.cluster_utils import Cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import pid_alive, wait_for  # noqa: E402

LARGE = 1 << 20  # over the inline limit: never sent with a call
HUGE = 9 << 20  # over what a lender sends in its answer to `ReadLent`: fetched from its holder


@fray_ray.remote(num_cpus=0, resources={"head": 0.01})
class Source:
    def make(self, size: int) -> bytes:
        return b"x" * size


@fray_ray.remote(num_cpus=0, resources={"head": 0.01})
class Buffer:
    """Keeps the refs it is given, as a replay buffer does."""

    def __init__(self) -> None:
        self.kept: list[Any] = []

    def keep(self, refs: list[Any]) -> int:
        self.kept.extend(refs)
        return len(self.kept)

    def sizes(self) -> list[int]:
        return [len(fray_ray.get(ref, timeout=60)) for ref in self.kept]

    def served_from(self) -> list[bool]:
        """Whether it knows which holder serves each kept value (its lender said, as it read it)."""
        lent = runtime_slot.current().direct.lent
        return [lent.holder_of(ref.binary()) is not None for ref in self.kept]

    def pass_kept_to(self, other: Any) -> Any:
        fray_ray.get(other.read.remote([]), timeout=60)  # the way is known
        return fray_ray.get(other.read.remote(self.kept), timeout=60)

    def read(self, refs: list[Any]) -> Any:
        try:
            return [len(fray_ray.get(ref, timeout=60)) for ref in refs]
        except Exception as exc:  # noqa: BLE001 - what the read raised is the answer
            return type(exc.cause if isinstance(exc, fray_ray.exceptions.RayTaskError) else exc).__name__


@fray_ray.remote(resources={"a": 1})
def lend_to(source: Any, buffer: Any, sizes: list[int]) -> int:
    """Lends results of its own (one of each size, ready) to `buffer`, drops its refs; its pid."""
    fray_ray.get([source.make.remote(0), buffer.keep.remote([])])  # the ways to both are known
    direct = runtime_slot.current().direct
    sent = direct.sent
    refs = [source.make.remote(size) for size in sizes]
    fray_ray.wait(refs, num_returns=len(refs))
    fray_ray.get(buffer.keep.remote(refs), timeout=60)
    assert direct.sent == sent + len(sizes) + 1, "the calls went through the driver: it owns their results"
    return os.getpid()


def running_pair() -> tuple[Any, Any]:
    """A source and a buffer, both running (a task's calls to an actor still starting go
    through the driver)."""
    source, buffer = Source.remote(), Buffer.remote()
    fray_ray.get([source.make.remote(0), buffer.keep.remote([])], timeout=60)
    return source, buffer


@fray_ray.remote(resources={"b": 1})
def nothing() -> None:
    return None


def test_refs_an_actor_keeps_outlive_the_retired_executor_that_lent_them(hosts: Cluster,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    driver = runtime_state.current()
    source, buffer = running_pair()
    pid = fray_ray.get(lend_to.remote(source, buffer, [8, LARGE]), timeout=60)
    fray_ray.get(nothing.remote(), timeout=60)  # b's executor is now the warm one kept
    monkeypatch.setattr(executor_pool, "IDLE_TIMEOUT_S", 0.3)
    driver.scheduler._maintain()
    wait_for(lambda: not pid_alive(pid), what="the idle executor on host a to be retired")
    assert fray_ray.get(buffer.sizes.remote(), timeout=60) == [8, LARGE]


def test_refs_an_actor_keeps_fail_as_owner_died_when_the_lender_crashes(hosts: Cluster) -> None:
    source, buffer = running_pair()
    pid = fray_ray.get(lend_to.remote(source, buffer, [LARGE]), timeout=60)
    os.kill(pid, 9)
    wait_for(lambda: not pid_alive(pid), what="the lender's process gone")
    with pytest.raises(fray_ray.exceptions.OwnerDiedError):
        fray_ray.get(buffer.sizes.remote(), timeout=60)


def test_a_value_lent_on_with_its_holder_whose_lender_crashed_fails_as_owner_died(hosts: Cluster) -> None:
    """The buffer read a value over 8 MiB from the lender's holder, so lending it on it says
    where that holder is; the lender is gone by the time the next actor fetches it there."""
    source, buffer = running_pair()
    sink = Buffer.remote()
    fray_ray.get(sink.read.remote([]), timeout=60)
    pid = fray_ray.get(lend_to.remote(source, buffer, [HUGE]), timeout=60)
    assert fray_ray.get(buffer.sizes.remote(), timeout=60) == [HUGE]
    assert fray_ray.get(buffer.served_from.remote(), timeout=60) == [True]
    os.kill(pid, 9)
    wait_for(lambda: not pid_alive(pid), what="the lender's process gone")
    assert fray_ray.get(buffer.pass_kept_to.remote(sink), timeout=60) == "OwnerDiedError"
