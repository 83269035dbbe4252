"""The driver's half of taking queued tasks back: when an executor's running task turns out long
and another executor of its pool is idle, the scheduler withdraws the tasks queued behind it;
whatever the executor answers, each task runs once, and cancels, deaths and the ledger stay
right. Unit tests of the scheduler alone: executors are fake connections whose messages are
recorded, and their answers are handed to the scheduler as the session service would."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

import fray_ray.exceptions as exceptions
from fray_ray._private import messages
from fray_ray._private.core.task_spec import Arguments, CodeBlob, PoolKey, ResourceShape, TaskSpec, canonical_pool
from fray_ray._private.driver.cluster_ledger import ClusterLedger
from fray_ray._private.driver.executor_pool import ExecutorRecord, ExecutorState, TaskState
from fray_ray._private.driver.prefetch import LONG_RUNNING_S
from fray_ray._private.driver.scheduler import TaskScheduler
from fray_ray._private.messages import CancelTask, ExecuteTask, Withdraw
from fray_ray._private.objects import ids
from fray_ray._private.objects.object_store import ObjectStore, ObjectStoreConfig
from fray_ray._private.objects.object_table import ObjectTable
from fray_ray._private.objects.serialization import deserialize, serialize, serialize_error

POOL = canonical_pool(PoolKey(shape=ResourceShape(cpu=1.0)))


class FakeConnection:
    """An executor's end as the scheduler sees it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self._on_close: list[Any] = []

    def add_close_callback(self, callback: Any) -> None:
        self._on_close.append(callback)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True
        for callback in self._on_close:
            callback(self)

    def __repr__(self) -> str:
        return f"<{self.name}>"


class FakeLauncher:
    def __init__(self) -> None:
        self.launched: list[bytes] = []

    def launch_executor(self, executor_id: bytes, pool: PoolKey, callback: Any, *, cpu: float | None = None,
                        pins: Any = None, identity: Any = None) -> None:
        self.launched.append(executor_id)
        callback(SimpleNamespace(job_id=executor_id), None)

    def job_failure(self, job: Any) -> str | None:
        return None

    def terminate(self, job: Any) -> None:
        pass


class ManualTimers:
    """Timers that fire only when the test says so."""

    def __init__(self) -> None:
        self.pending: list[tuple[float, Any]] = []

    def call_later(self, delay: float, callback: Any) -> Any:
        self.pending.append((delay, callback))
        return SimpleNamespace(cancel=lambda: None)


@dataclass
class Cluster:
    """A scheduler on a ledger of two CPUs, its executors as fake connections."""

    scheduler: TaskScheduler
    objects: ObjectTable
    ledger: ClusterLedger
    launcher: FakeLauncher
    timers: ManualTimers
    sent: list[tuple[Any, Any]]
    connections: dict[bytes, FakeConnection] = field(default_factory=dict)

    def submit(self, name: str) -> TaskSpec:
        task_id = ids.new_task_id()
        spec = TaskSpec(task_id=task_id, function=CodeBlob.of(len, "len"), name=name,
                        arguments=Arguments.pack((), {}), return_ids=(ids.object_id_for(task_id, 1),),
                        num_returns=1, max_retries=0, pool=POOL)
        self.objects.create_pending(spec.return_ids, producer=task_id, referenced=True)  # the caller's ref
        self.scheduler.submit(spec)
        self.connect_launched()
        return spec

    def connect_launched(self) -> None:
        for executor_id in self.launcher.launched:
            if executor_id not in self.connections:
                connection = self.connections[executor_id] = FakeConnection(f"executor-{len(self.connections)}")
                assert self.scheduler.executor_connected(executor_id, connection, pid=1, host="local")

    def executor_of(self, spec: TaskSpec) -> ExecutorRecord:
        executor = self.scheduler._tasks[spec.task_id].executor
        assert executor is not None
        return executor

    def sent_to(self, executor: ExecutorRecord, kind: type) -> list[Any]:
        return [m for c, m in self.sent if c is executor.connection and isinstance(m, kind)]

    def executed(self, spec: TaskSpec) -> list[Any]:
        """The connections `spec` was sent to run on."""
        return [c for c, m in self.sent if isinstance(m, ExecuteTask) and m.task == spec.task_id]

    def done(self, executor: ExecutorRecord, spec: TaskSpec, value: Any = "ok") -> None:
        self.scheduler.tasks_done(executor.connection, [(spec.task_id, [serialize(value)], False, 0.5, False)])  # type: ignore[arg-type]

    def result(self, spec: TaskSpec) -> Any:
        value = self.objects.value(spec.return_ids[0])
        assert value is not None, f"{spec.name} has no result"
        if value.is_error:
            raise deserialize(value)
        return deserialize(value)

    def cpus_free(self) -> float:
        return self.ledger.available().get("CPU", 0.0)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    sent: list[tuple[Any, Any]] = []
    monkeypatch.setattr(messages, "notify", lambda connection, message, **kw: sent.append((connection, message)))
    objects = ObjectTable(ObjectStore(ObjectStoreConfig(limit=64 * 1024 * 1024, spilling=False)))
    ledger = ClusterLedger.of_one_node({"CPU": 2.0})
    launcher, timers = FakeLauncher(), ManualTimers()
    scheduler = TaskScheduler(objects, ledger, launcher, timers,  # type: ignore[arg-type]
                              judge=lambda strategy, demand: None, error_for=lambda kind, error: serialize_error(error),
                              stream_finished=lambda *a: None, stream_released=lambda *a: None)
    yield Cluster(scheduler, objects, ledger, launcher, timers, sent)
    scheduler.close()


def _queued_behind_a_long_task(cluster: Cluster) -> tuple[TaskSpec, TaskSpec, TaskSpec, ExecutorRecord, ExecutorRecord]:
    """Two executors busy; a third task queued behind one of them (the holder), whose running
    task has run long; the other (the thief) then finishes its own and idles.
    Returns (the holder's running task, the queued task, the thief's task, holder, thief)."""
    first, second = cluster.submit("first"), cluster.submit("second")
    queued = cluster.submit("queued")
    cluster.scheduler.schedule()  # a busy executor's answer tops its queue up so
    holder = cluster.executor_of(queued)
    assert holder.state is ExecutorState.BUSY and holder.tasks[1].spec is queued
    running, thief_task = (first, second) if cluster.executor_of(first) is holder else (second, first)
    thief = cluster.executor_of(thief_task)
    assert thief is not holder
    holder.head_started -= 10 * LONG_RUNNING_S  # its running task has run long by now
    cluster.done(thief, thief_task)
    return running, queued, thief_task, holder, thief


def test_an_idle_executor_takes_over_a_task_queued_behind_a_long_one(cluster: Cluster) -> None:
    running, queued, _, holder, thief = _queued_behind_a_long_task(cluster)
    [withdraw] = cluster.sent_to(holder, Withdraw)
    assert withdraw.tasks == [queued.task_id]
    assert cluster.executed(queued) == [holder.connection]  # nothing moves before the holder answers
    cluster.scheduler.tasks_withdrawn(holder.connection, [queued.task_id], [])  # type: ignore[arg-type]
    assert cluster.executed(queued) == [holder.connection, thief.connection]
    cluster.done(thief, queued, "moved")
    assert cluster.result(queued) == "moved"
    cluster.done(holder, running)
    assert holder.state is ExecutorState.IDLE and thief.state is ExecutorState.IDLE
    assert cluster.cpus_free() == 2.0
    assert not cluster.scheduler._tasks


def test_a_task_the_holder_already_started_stays_there(cluster: Cluster) -> None:
    running, queued, _, holder, thief = _queued_behind_a_long_task(cluster)
    # The holder's running task ended and it took the queued one before the withdrawal came.
    cluster.done(holder, running)
    cluster.scheduler.tasks_withdrawn(holder.connection, [], [queued.task_id])  # type: ignore[arg-type]
    assert cluster.executed(queued) == [holder.connection]  # never sent elsewhere
    assert cluster.scheduler._tasks[queued.task_id].withdrawing_from is None
    cluster.done(holder, queued, "stayed")
    assert cluster.result(queued) == "stayed"
    assert cluster.cpus_free() == 2.0


def test_a_task_returned_after_the_driver_counted_it_running_moves_and_frees_its_executor(cluster: Cluster) -> None:
    """The holder's running task answers first, so the driver counts the queued one as running
    there; then the holder says it returned it unstarted: it runs on the thief, and the holder
    idles with its lease given back."""
    running, queued, _, holder, thief = _queued_behind_a_long_task(cluster)
    cluster.done(holder, running)
    record = cluster.scheduler._tasks[queued.task_id]
    assert record.state is TaskState.RUNNING and holder.tasks[0] is record
    cluster.scheduler.tasks_withdrawn(holder.connection, [queued.task_id], [])  # type: ignore[arg-type]
    assert holder.state is ExecutorState.IDLE and holder.lease is None
    assert cluster.executed(queued)[-1] is thief.connection
    cluster.done(thief, queued, "moved")
    assert cluster.result(queued) == "moved"
    assert cluster.cpus_free() == 2.0


def test_an_executor_that_dies_while_a_withdrawal_is_in_flight_loses_nothing(cluster: Cluster) -> None:
    running, queued, _, holder, thief = _queued_behind_a_long_task(cluster)
    holder.connection.close()  # type: ignore[union-attr]
    assert cluster.executed(queued)[-1] is thief.connection  # the queued task never started: it goes on
    cluster.scheduler.tasks_withdrawn(holder.connection, [queued.task_id], [])  # type: ignore[arg-type]  # too late: ignored
    assert len(cluster.executed(queued)) == 2
    cluster.done(thief, queued, "moved")
    assert cluster.result(queued) == "moved"


def test_a_task_cancelled_while_being_withdrawn_ends_cancelled(cluster: Cluster) -> None:
    _, queued, _, holder, thief = _queued_behind_a_long_task(cluster)
    assert cluster.scheduler.cancel(queued.task_id, force=False)
    assert [m.task for m in cluster.sent_to(holder, CancelTask)] == [queued.task_id]
    cluster.scheduler.tasks_withdrawn(holder.connection, [queued.task_id], [])  # type: ignore[arg-type]
    assert cluster.executed(queued) == [holder.connection]  # not sent anywhere else
    with pytest.raises(exceptions.TaskCancelledError):
        cluster.result(queued)
    assert thief.state is ExecutorState.IDLE


def test_tasks_queued_behind_a_young_task_are_looked_at_again_once_it_has_run_long(cluster: Cluster) -> None:
    first, second = cluster.submit("first"), cluster.submit("second")
    queued = cluster.submit("queued")
    cluster.scheduler.schedule()
    holder = cluster.executor_of(queued)
    thief_task = first if cluster.executor_of(first) is not holder else second
    thief = cluster.executor_of(thief_task)
    cluster.timers.pending.clear()
    holder.head_started = time.monotonic() + 60.0  # young for a minute, however slow this machine is
    cluster.done(thief, thief_task)
    assert not cluster.sent_to(holder, Withdraw), "a young running task may be short: its queue stays"
    [(delay, recheck)] = [(d, cb) for d, cb in cluster.timers.pending if 60.0 < d <= 60.0 + LONG_RUNNING_S]
    holder.head_started = time.monotonic() - 10 * LONG_RUNNING_S  # the time passed, and it still runs
    recheck()
    [withdraw] = cluster.sent_to(holder, Withdraw)
    assert withdraw.tasks == [queued.task_id]


def test_a_task_blocked_in_get_hands_back_its_queue_through_the_same_protocol(cluster: Cluster) -> None:
    for name in ("first", "second"):
        cluster.submit(name)
    queued = cluster.submit("queued")
    cluster.scheduler.schedule()
    holder = cluster.executor_of(queued)
    blocked = holder.tasks[0].spec
    cluster.scheduler.task_blocked(blocked.task_id)
    [withdraw] = cluster.sent_to(holder, Withdraw)
    assert withdraw.tasks == [queued.task_id]
    cluster.scheduler.tasks_withdrawn(holder.connection, [queued.task_id], [])  # type: ignore[arg-type]
    # Its CPU is lent out: the queued task waits for an executor of its own (launched now).
    assert cluster.scheduler._tasks[queued.task_id].state in (TaskState.READY, TaskState.RUNNING)
    cluster.connect_launched()
    [elsewhere] = [c for c in cluster.executed(queued) if c is not holder.connection]
    assert elsewhere is not holder.connection
