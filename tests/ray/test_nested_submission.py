"""Tasks that tasks submit: `.remote()` in a worker tells the driver and returns at once, as
Ray's does, so a worker submits a batch without a round trip per task. The worker's later
frames reach the driver after the submission, and a ref that leaves the worker for another
process (a direct actor call, a result) waits for the driver to have it. A task the driver
cannot take fails its results rather than leaving them pending."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import fray_ray
from fray_ray._private.core import runtime_state
from fray_ray.cluster_utils import Cluster
from fray_ray.exceptions import RaySystemError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from held_frames import held_back  # noqa: E402

#: How long a held-back submission waits for the task to end before it is let go: the task
#: ends within it only if its direct call did not wait for the driver to have the submission.
HOLD_S = 2.0


@fray_ray.remote(num_cpus=0, resources={"a": 0.01})
def square(value: int) -> int:
    return value * value


@fray_ray.remote(num_cpus=0, resources={"a": 0.01})
class Reader:
    def read(self, boxed: list[fray_ray.ObjectRef]) -> int:
        return fray_ray.get(boxed[0])


@fray_ray.remote(num_cpus=0, resources={"b": 0.01})
def submit_batch(count: int) -> list[int]:
    refs = [square.remote(i) for i in range(count)]
    return fray_ray.get(refs)


@fray_ray.remote(num_cpus=0, resources={"b": 0.01})
def pass_on_at_once(reader: Any) -> tuple[int, int, list[fray_ray.ObjectRef]]:
    """Refs of tasks just submitted leave at once: to an actor's direct call, inside another
    task's arguments, and in this task's result."""
    from fray_ray._private.core import runtime_slot

    fray_ray.get(reader.read.remote([fray_ray.put(0)]))  # the route to the actor's host is known
    direct = runtime_slot.current().direct
    sent = direct.sent if direct is not None else 0
    to_actor = fray_ray.get(reader.read.remote([square.remote(3)]))
    assert direct is not None and direct.sent == sent + 1  # straight to the host, not via the driver
    to_task = fray_ray.get(read_boxed.remote([square.remote(4)]))
    return to_actor, to_task, [square.remote(5)]


@fray_ray.remote(num_cpus=0, resources={"a": 0.01})
def read_boxed(boxed: list[fray_ray.ObjectRef]) -> int:
    return fray_ray.get(boxed[0])


def test_a_worker_submits_a_batch_of_tasks_and_gets_every_result(hosts: Cluster) -> None:
    assert fray_ray.get(submit_batch.remote(300), timeout=120) == [i * i for i in range(300)]


def test_refs_of_tasks_just_submitted_can_leave_the_worker_at_once(hosts: Cluster) -> None:
    reader = Reader.remote()
    to_actor, to_task, (returned,) = fray_ray.get(pass_on_at_once.remote(reader), timeout=120)
    assert (to_actor, to_task, fray_ray.get(returned, timeout=60)) == (9, 16, 25)


@fray_ray.remote(num_cpus=0, resources={"b": 0.01})
def call_with_a_fresh_ref(reader: Any) -> int:
    fray_ray.get(reader.read.remote([fray_ray.put(0)]))  # the route to the actor's host is known
    return fray_ray.get(reader.read.remote([square.remote(6)]))


def test_a_direct_call_waits_for_the_driver_to_have_the_submission_it_names(hosts: Cluster) -> None:
    reader = Reader.remote()
    fray_ray.get(reader.read.remote([fray_ray.put(0)]))
    with held_back("submit") as (arrived, let_go):
        task = call_with_a_fresh_ref.remote(reader)
        assert arrived.wait(60)
        ready, _ = fray_ray.wait([task], timeout=HOLD_S)  # the call waits behind the submission
        assert not ready
        let_go.set()
        assert fray_ray.get(task, timeout=60) == 36


def test_a_task_the_driver_cannot_take_fails_its_results(hosts: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    driver = runtime_state.current()
    route = driver.route_task

    def refuse_squares(spec: Any) -> None:
        if spec.function_name.endswith("square"):
            raise ValueError("no room for squares")
        route(spec)

    monkeypatch.setattr(driver, "route_task", refuse_squares)
    with pytest.raises(RaySystemError, match="could not take task .*square.*no room for squares"):
        fray_ray.get(submit_batch.remote(2), timeout=120)
