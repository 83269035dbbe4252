"""Fray actors on the embedded cluster with real replica processes: the actor contract (as
test_actor.py checks it on LocalClient) plus the Iris backend's own behaviours: discovery,
constructor failures, `fail()` restarts, clean exits, pickled handles, hosted actors."""

from __future__ import annotations

import json
import os
import pickle
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest

from fray_ray.cluster import EmbeddedCluster, WorkerSpec, cpu_worker, gpu_host
from fray_ray.fray import (
    ActorConfig,
    ActorGroup,
    ActorHandle,
    ActorUnavailableError,
    Entrypoint,
    EnvironmentConfig,
    FrayIrisClient,
    GpuConfig,
    IrisActorGroup,
    IrisActorHandle,
    JobRejected,
    JobRequest,
    JobStatus,
    LocalClient,
    ResourceConfig,
    current_actor,
    host_actor,
    set_current_client,
)

DEADLINE = 60.0
SMALL = ResourceConfig(cpu=0, ram="64m", disk="0")


# -- actor classes (pickled by value: this is a test module) ----------------------------------------


class Counter:
    def __init__(self, start: int = 0) -> None:
        self.value = start
        self.label = "not a method"

    def increment(self, by: int = 1) -> int:
        self.value += by
        return self.value

    def get(self) -> int:
        return self.value

    def add(self, a: int, b: int = 0) -> int:
        return a + b

    def boom(self) -> None:
        raise ValueError("actor method failed")

    def pid(self) -> int:
        return os.getpid()


class Aware:
    """Keeps its context; can stop itself cleanly or fail."""

    def __init__(self) -> None:
        self.ctx = current_actor()
        self.calls = 0

    def describe(self) -> tuple[int, str, str]:
        return self.ctx.index, self.ctx.group_name, self.ctx.handle.endpoint

    def bump(self) -> int:
        self.calls += 1
        return self.calls

    def pid(self) -> int:
        return os.getpid()

    def stop(self) -> str:
        self.ctx.shutdown_event.set()
        return "stopping"

    def die(self) -> str:
        self.ctx.fail(RuntimeError("lost my marbles"))
        return "dying"


class BrokenConfig(Exception):
    """A constructor error type of the test's own, to check the type survives the trip."""


class Broken:
    def __init__(self) -> None:
        raise BrokenConfig("no config")


class BrokenSecond:
    def __init__(self) -> None:
        if current_actor().index == 1:
            raise BrokenConfig("replica 1 cannot start")

    def ping(self) -> str:
        return "pong"


class Meeting:
    """Two calls meet at a barrier: only possible when they may run at the same time."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=30)

    def meet(self) -> int:
        return self.barrier.wait()


class Patient:
    def __init__(self) -> None:
        self.cancelled = threading.Event()

    def wait_until_cancelled(self) -> str:
        from fray_ray.iris.actor_server import operation_cancelled

        while not operation_cancelled():
            time.sleep(0.01)
        self.cancelled.set()
        return "cancelled"

    def slow_square(self, x: int) -> int:
        time.sleep(0.1)
        return x * x

    def was_cancelled(self) -> bool:
        return self.cancelled.is_set()


class Logger:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, line: str) -> int:
        self.lines.append(line)
        return len(self.lines)

    def read(self) -> list[str]:
        return list(self.lines)


class SessionHost:
    """Shaped like the Ray layer's actor host: four positional arguments, a quick constructor."""

    def __init__(self, address: str, token: str, actor_id: bytes, in_process: bool) -> None:
        self.seen = (address, token, actor_id.hex(), in_process)

    def arguments(self) -> tuple:
        return self.seen


# -- task bodies -----------------------------------------------------------------------------------


def _call_from_a_job(handle: IrisActorHandle, report: str) -> None:
    value = handle.increment.remote(5).result(timeout=60)
    with open(report, "w") as f:
        json.dump({"value": value, "direct": handle.get()}, f)


def _host_and_find_logger(report: str) -> None:
    """Task 0 hosts a logger with `host_actor`; task 1 finds it through the registry and logs."""
    from fray_ray.fray import ActorUnavailableError, FrayIrisClient, host_actor
    from fray_ray.fray.iris_backend import IrisActorHandle
    from fray_ray.iris.job_info import get_job_info

    info = get_job_info()
    endpoint = f"{info.job_id.wire}/logger-0"
    if info.task_index == 0:
        try:
            host_actor(Broken, name="broken")
        except BrokenConfig as exc:
            constructor_error = str(exc)
        with host_actor(Logger, name="logger") as hosted:
            deadline = time.monotonic() + 60
            while not hosted.handle.read():
                assert time.monotonic() < deadline, "nobody logged"
                time.sleep(0.01)
            lines = hosted.handle.read()
        try:
            hosted.handle.read()
            after_shutdown = "still served"
        except ActorUnavailableError:
            after_shutdown = "unavailable"
        with open(report, "w") as f:
            json.dump(
                {
                    "endpoint": hosted.endpoint,
                    "lines": lines,
                    "after_shutdown": after_shutdown,
                    "constructor_error": constructor_error,
                },
                f,
            )
    else:
        controller = FrayIrisClient.from_job_info()._controller
        deadline = time.monotonic() + 60
        while not controller.list_endpoints(endpoint, exact=True):
            assert time.monotonic() < deadline, "the logger never registered"
            time.sleep(0.01)
        IrisActorHandle(endpoint).log(f"hello from task {info.task_index}")


# -- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster_workers() -> tuple[WorkerSpec, ...]:
    return (cpu_worker("cpu-0", cpu=4, memory="8g", disk="20g"), gpu_host("A10", 1, worker_id="gpu-0"))


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _group(iris: FrayIrisClient, cls: type, *args: object, count: int = 1, **kwargs: object) -> IrisActorGroup:
    kwargs.setdefault("resources", SMALL)
    return iris.create_actor_group(cls, *args, name=_name(cls.__name__.lower()), count=count, **kwargs)  # type: ignore[arg-type]


# -- handles and calls -----------------------------------------------------------------------------


def test_create_actor_and_call_remote(iris: FrayIrisClient) -> None:
    actor = iris.create_actor(Counter, name=_name("echo"), resources=SMALL)
    assert isinstance(actor, ActorHandle)
    future = actor.add.remote(2, b=3)
    assert isinstance(future, Future)
    assert future.result(timeout=DEADLINE) == 5


def test_synchronous_calls_positional_and_keyword_constructor_arguments(iris: FrayIrisClient) -> None:
    by_kwarg = iris.create_actor(Counter, name=_name("kw"), resources=SMALL, start=10)
    assert by_kwarg.get() == 10 and by_kwarg.increment() == 11
    by_position = iris.create_actor(Counter, 7, name=_name("pos"), resources=SMALL)
    assert by_position.add(a=3, b=4) == 7 and by_position.get() == 7


def test_actor_class_by_keyword(iris: FrayIrisClient) -> None:
    actor = iris.create_actor(actor_class=Counter, name=_name("kwcls"), resources=SMALL, start=3)
    assert actor.get() == 3
    group = iris.create_actor_group(actor_class=Counter, name=_name("kwgroup"), count=2, resources=SMALL, start=4)
    assert [h.get() for h in group.wait_ready(timeout=DEADLINE)] == [4, 4]


def test_submit_runs_as_an_operation(iris: FrayIrisClient) -> None:
    actor = iris.create_actor(Patient, name=_name("op"), resources=SMALL)
    assert actor.slow_square.submit(7).result(timeout=DEADLINE) == 49


def test_submit_timeout_cancels_the_operation(iris: FrayIrisClient, eventually) -> None:
    actor = iris.create_actor(Patient, name=_name("cancel"), resources=SMALL)
    future = actor.wait_until_cancelled.submit()
    with pytest.raises(TimeoutError):
        future.result(timeout=0.3)
    eventually(actor.was_cancelled, "the method to see the cancellation")
    with pytest.raises(TimeoutError):
        future.result(timeout=DEADLINE)  # the future stays failed


def test_method_exception_keeps_its_type_and_the_actor_survives(iris: FrayIrisClient) -> None:
    actor = iris.create_actor(Counter, name=_name("boom"), resources=SMALL)
    with pytest.raises(ValueError, match="actor method failed"):
        actor.boom.remote().result(timeout=DEADLINE)
    with pytest.raises(ValueError, match="actor method failed") as info:
        actor.boom()
    assert "boom" in info.value.remote_traceback
    with pytest.raises(ValueError, match="actor method failed"):
        actor.boom.submit().result(timeout=DEADLINE)
    assert actor.increment() == 1


def test_private_and_missing_methods_raise_attribute_error(iris: FrayIrisClient) -> None:
    actor = iris.create_actor(Counter, name=_name("strict"), resources=SMALL)
    with pytest.raises(AttributeError):
        actor._secret
    with pytest.raises(AttributeError, match="no method 'missing'"):
        actor.missing()
    with pytest.raises(AttributeError, match="no method 'label'"):  # not callable: not served as a method
        actor.label.remote().result(timeout=DEADLINE)


def test_calls_run_one_at_a_time_by_default(iris: FrayIrisClient) -> None:
    actor = iris.create_actor(Counter, name=_name("shared"), resources=SMALL)
    futures = [actor.increment.remote() for _ in range(20)]
    results = sorted(f.result(timeout=DEADLINE) for f in futures)
    assert results == list(range(1, 21))
    assert actor.get() == 20


def test_max_concurrency_lets_calls_overlap(iris: FrayIrisClient) -> None:
    actor = iris.create_actor(Meeting, name=_name("meet"), resources=SMALL, actor_config=ActorConfig(max_concurrency=2))
    first, second = actor.meet.remote(), actor.meet.remote()
    assert sorted([first.result(timeout=DEADLINE), second.result(timeout=DEADLINE)]) == [0, 1]


# -- groups ----------------------------------------------------------------------------------------


def test_group_returns_at_once_then_becomes_ready(iris: FrayIrisClient) -> None:
    group = _group(iris, Counter, count=3)
    assert isinstance(group, ActorGroup)
    assert group.ready_count < 3  # create_actor_group does not wait for the replicas
    handles = group.wait_ready(timeout=DEADLINE)
    assert [h.endpoint for h in handles] == [f"{group.job_id}/{group.name}-{i}" for i in range(3)]
    assert group.ready_count == 3
    handles[0].increment(5)
    handles[1].increment(1)
    assert [h.get() for h in handles] == [5, 1, 0]  # each actor has its own state


def test_wait_ready_partial_and_discover_new(iris: FrayIrisClient, eventually) -> None:
    group = _group(iris, Counter, count=3)
    first = group.wait_ready(count=1, timeout=DEADLINE)
    assert len(first) == 1
    with pytest.raises(ValueError, match="count"):
        group.wait_ready(count=4)
    eventually(lambda: group.ready_count == 3, "all replicas ready")
    rest = group.discover_new()
    assert len(rest) == 2 and set(rest).isdisjoint(first)
    assert group.discover_new() == []


def test_shutdown_ends_the_group(iris: FrayIrisClient) -> None:
    group = _group(iris, Counter, count=2)
    handles = group.wait_ready(timeout=DEADLINE)
    assert not group.is_done()
    group.shutdown()
    assert group.is_done()
    assert group.status() is JobStatus.STOPPED
    with pytest.raises(ActorUnavailableError):
        handles[0].increment.remote().result(timeout=DEADLINE)
    with pytest.raises(ActorUnavailableError):
        handles[1].get()
    with pytest.raises(ActorUnavailableError, match="shut down"):
        group.wait_ready(timeout=DEADLINE)
    group.shutdown()  # idempotent


def test_current_actor_inside_init(iris: FrayIrisClient) -> None:
    group = _group(iris, Aware, count=2)
    handles = group.wait_ready(timeout=DEADLINE)
    assert [h.describe() for h in handles] == [(i, group.name, handles[i].endpoint) for i in range(2)]


def test_the_ray_layers_call_shape(iris: FrayIrisClient) -> None:
    group = iris.create_actor_group(
        SessionHost,
        "127.0.0.1:1234",
        "tok",
        b"\x01\x02",
        False,
        name=_name("session-abcd-Counter"),
        count=1,
        resources=SMALL,
        environment=EnvironmentConfig(workspace=os.getcwd(), env_vars={}),
        actor_config=ActorConfig(max_concurrency=1_000_000, max_restarts=2),
    )
    (handle,) = group.wait_ready(timeout=DEADLINE)
    assert handle.arguments() == ("127.0.0.1:1234", "tok", "0102", False)
    group.shutdown()
    assert group.is_done()


# -- failures and restarts -------------------------------------------------------------------------


def test_constructor_failure_reaches_wait_ready_and_create_actor_with_its_type(iris: FrayIrisClient) -> None:
    group = _group(iris, Broken)
    with pytest.raises(BrokenConfig, match="no config") as info:
        group.wait_ready(timeout=DEADLINE)
    assert any(group.job_id in note for note in info.value.__notes__)
    assert group.is_done()
    name = _name("broken-single")
    with pytest.raises(BrokenConfig, match="no config"):
        iris.create_actor(Broken, name=name, resources=SMALL)
    assert iris.create_actor(Counter, name=name, resources=SMALL).get() == 0  # the name is free again


def test_constructor_is_retried_under_max_task_retries(iris: FrayIrisClient, cluster: EmbeddedCluster) -> None:
    group = _group(iris, Broken, actor_config=ActorConfig(max_task_retries=1))
    with pytest.raises(BrokenConfig):
        group.wait_ready(timeout=DEADLINE)
    with cluster.client() as controller:
        (task,) = controller.list_tasks(group.job_id)
    assert len(task.attempts) == 2


def test_one_replica_failing_leaves_its_siblings_serving(iris: FrayIrisClient) -> None:
    group = _group(iris, BrokenSecond, count=2)
    (survivor,) = group.wait_ready(count=1, timeout=DEADLINE)
    with pytest.raises(BrokenConfig, match="replica 1 cannot start"):
        group.wait_ready(timeout=DEADLINE)
    assert survivor.endpoint.endswith("-0") and survivor.ping() == "pong"
    assert not group.is_done()


def test_fail_restarts_the_replica_with_fresh_state(iris: FrayIrisClient, eventually) -> None:
    group = _group(iris, Aware, actor_config=ActorConfig(max_restarts=1))
    (actor,) = group.wait_ready(timeout=DEADLINE)
    assert (actor.bump(), actor.bump()) == (1, 2)
    first_pid = actor.pid()
    assert actor.die() == "dying"
    eventually(lambda: _try(actor.pid) not in (None, first_pid), "the replica to restart")
    assert actor.bump() == 1  # a new process: fresh state
    actor.die()  # the restart budget is spent: the group ends
    # die() answers before the replica exits; until then wait_ready could still see it serving.
    eventually(group.is_done, "the group to end")
    with pytest.raises(RuntimeError, match="lost my marbles"):
        group.wait_ready(timeout=DEADLINE)
    assert group.status() is JobStatus.FAILED


def _try(call: Callable[[], object]) -> object:
    try:
        return call()
    except ActorUnavailableError:
        return None


def test_clean_exit_through_the_shutdown_event(iris: FrayIrisClient, eventually) -> None:
    group = _group(iris, Aware)
    (actor,) = group.wait_ready(timeout=DEADLINE)
    assert actor.stop() == "stopping"
    eventually(group.is_done, "the replica to exit")
    assert group.status() is JobStatus.SUCCEEDED
    with pytest.raises(ActorUnavailableError):
        actor.bump()


def test_never_satisfiable_resources_are_rejected_at_creation(iris: FrayIrisClient) -> None:
    with pytest.raises(JobRejected, match="memory"):
        _group(iris, Counter, resources=ResourceConfig(cpu=0, ram="1000t", disk="0"))


def test_wait_ready_times_out_while_resources_are_busy(iris: FrayIrisClient) -> None:
    gpu = ResourceConfig(cpu=0, ram="64m", disk="0", device=GpuConfig("A10", 1))
    holder = _group(iris, Counter, resources=gpu)
    holder.wait_ready(timeout=DEADLINE)
    waiting = _group(iris, Counter, resources=gpu)
    with pytest.raises(TimeoutError, match="waiting for"):
        waiting.wait_ready(timeout=0.5)
    holder.shutdown()
    assert len(waiting.wait_ready(timeout=DEADLINE)) == 1  # it gets the GPU once freed


# -- handles across processes ----------------------------------------------------------------------


def test_handle_passed_to_a_job_reaches_the_same_actor(iris: FrayIrisClient, tmp_path: Path) -> None:
    actor = iris.create_actor(Counter, name=_name("shared-with-job"), resources=SMALL, start=1)
    report = tmp_path / "report.json"
    job = iris.submit(
        JobRequest(
            name=_name("caller"),
            entrypoint=Entrypoint.from_callable(_call_from_a_job, args=(actor, str(report))),
            resources=SMALL,
        )
    )
    assert job.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    assert json.loads(report.read_text()) == {"value": 6, "direct": 6}
    assert actor.get() == 6


def test_unpickled_handles_and_groups_resolve_through_the_open_client(iris: FrayIrisClient) -> None:
    group = _group(iris, Counter, count=2)
    copy = pickle.loads(pickle.dumps(group))
    handles = copy.wait_ready(timeout=DEADLINE)
    handle = pickle.loads(pickle.dumps(handles[1]))
    assert handle.increment(3) == 3
    assert handles[1].get() == 3


def test_module_level_host_actor_hosts_through_the_current_client() -> None:
    with LocalClient() as local, set_current_client(local), host_actor(Counter, 2, name="hosted") as hosted:
        assert hosted.handle.increment() == 3


def test_host_actor_outside_a_task_is_refused(iris: FrayIrisClient) -> None:
    with pytest.raises(RuntimeError, match="inside an Iris task"):
        iris.host_actor(Logger, name="nowhere")


def test_host_actor_in_a_task_is_found_from_a_sibling_task(iris: FrayIrisClient, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    job = iris.submit(
        JobRequest(
            name=_name("hosting"),
            entrypoint=Entrypoint.from_callable(_host_and_find_logger, args=(str(report),)),
            resources=SMALL,
            replicas=2,
        )
    )
    assert job.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    assert json.loads(report.read_text()) == {
        "endpoint": f"{job.job_id}/logger-0",
        "lines": ["hello from task 1"],
        "after_shutdown": "unavailable",
        "constructor_error": "no config",
    }


def test_an_actor_whose_allocated_port_is_taken_serves_on_another(iris: FrayIrisClient, monkeypatch) -> None:
    """Iris finds a task's ports free and the task binds them a moment later; a process that
    takes the port in between (a neighbouring worker's task) must not kill the actor."""
    import socket

    from fray_ray.cluster import _worker

    taken = socket.create_server(("0.0.0.0", 0))  # every simulated host's address
    taken_port = taken.getsockname()[1]
    handed_out: list[int] = []
    free_port = _worker.free_port

    def hand_out_the_taken_port_once(host: str = "127.0.0.1") -> int:
        if not handed_out:
            handed_out.append(taken_port)
            return taken_port
        return free_port(host)

    monkeypatch.setattr(_worker, "free_port", hand_out_the_taken_port_once)
    try:
        actor = iris.create_actor(Counter, 5, name=_name("taken"), resources=SMALL)
        assert actor.increment() == 6
        assert handed_out == [taken_port]  # the actor was given the taken port
        [endpoint] = iris._controller.list_endpoints(actor.endpoint, exact=True)
        assert not endpoint.address.endswith(f":{taken_port}")
    finally:
        taken.close()
