"""The executor half of the task scheduler: launching warm executor processes, taking their
hello, retiring the idle ones.

`ExecutorPool` is a base of `TaskScheduler` (`scheduler.py`) and shares its state and its one
lock: the scheduler decides which task goes where, this part keeps the processes that run them.
"""

from __future__ import annotations

import collections
import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fray_ray._private import messages
from fray_ray._private.core.task_spec import PoolKey, TaskSpec
from fray_ray._private.driver.cluster_ledger import ClusterLedger
from fray_ray._private.driver.idle_workers import LentWorker
from fray_ray._private.driver.nodes import placement_needs
from fray_ray._private.driver.prefetch import DEPTH, LONG_RUNNING_S
from fray_ray._private.driver.resources import Holding, Ledger
from fray_ray._private.driver.timers import TimerQueue
from fray_ray._private.driver.tpu_identity import tpu_identity
from fray_ray._private.driver.tpu_nodes import host_pins, needs_tpu_host
from fray_ray._private.messages import ExecuteTask, Exit
from fray_ray._private.observe.task_events import TaskEvent, TaskEvents
from fray_ray._private.stream import read_hints
from fray_ray._private.stream.frames import MessageTooLarge
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray.exceptions import RaySystemError
from fray_ray.fray.iris_backend import JobUnschedulable

if TYPE_CHECKING:
    from fray_ray._private.driver.launcher import WorkerLauncher
    from fray_ray._private.objects.object_table import ObjectTable
    from fray_ray._private.objects.serialization import SerializedValue

#: Idle executors above the warm set are retired after this many seconds.
IDLE_TIMEOUT_S = 30.0
#: How often executors that have not said hello are checked on.
STARTUP_CHECK_S = 0.5
#: After the cluster refuses a pool's executor as unschedulable, the pool asks again after this
#: long, doubling up to LAUNCH_HOLD_MAX_S, or as soon as the cluster's nodes change.
LAUNCH_HOLD_S = 0.25
LAUNCH_HOLD_MAX_S = 8.0

logger = logging.getLogger(__name__)


class TaskState(enum.Enum):
    WAITING = "waiting"  # for its arguments
    READY = "ready"  # queued for an executor
    ASSIGNED = "assigned"  # sent to an executor, queued behind its running task
    RUNNING = "running"
    DONE = "done"


_WAITING_ON_NOTHING: frozenset[bytes] = frozenset()


@dataclass(eq=False)
class TaskRecord:
    """A task as the scheduler tracks it; here, below `TaskScheduler`, since executors hold them."""

    spec: TaskSpec
    demand: dict[str, float]
    state: TaskState = TaskState.WAITING
    #: where the task's resources come from: the session's ledger or a placement group bundle's
    ledger: Ledger | ClusterLedger | None = None
    placement: tuple[bytes, int] | None = None  # (group id, bundle index) it runs in
    #: the arguments it still waits for; most tasks wait for none and share one empty set
    #: (an empty set per queued task would be a sixth of what a million of them cost the driver)
    waiting_on: set[bytes] | frozenset[bytes] = _WAITING_ON_NOTHING
    executor: ExecutorRecord | None = None
    blocked: bool = False
    system_failures: int = 0
    user_failures: int = 0
    cancelled: bool = False
    generator_failed: bool = False  # its last attempt: a dynamic generator raised (see TaskDone)
    event: TaskEvent | None = None  # what the state API and the timeline show of this attempt
    #: the executor asked to hand this queued task back, until it answers (`withdrawals`)
    withdrawing_from: ExecutorRecord | None = None


class ExecutorState(enum.Enum):
    STARTING = "starting"  # launched, not yet connected
    IDLE = "idle"
    BUSY = "busy"
    DEAD = "dead"


@dataclass(eq=False)
class ExecutorRecord:
    executor_id: bytes
    pool: PoolKey
    state: ExecutorState = ExecutorState.STARTING
    connection: Connection | None = None
    job: Any = None  # the Fray JobHandle
    #: tasks sent to it, in order; the first is running, the rest wait in its queue
    tasks: collections.deque[TaskRecord] = field(default_factory=collections.deque)
    #: the ledger and holding of its lease (None while it holds none)
    lease: tuple[Ledger | ClusterLedger, Holding] | None = None
    sent_code: set[bytes] = field(default_factory=set)
    calls: int = 0
    idle_since: float = 0.0
    head_started: float = 0.0  # monotonic time its running task started, as far as the driver knows
    launched_at: float = field(default_factory=time.monotonic)
    pid: int | None = None
    host: str | None = None  # the cluster host it runs on, once it said


@dataclass(frozen=True)
class LaunchHold:
    """A pool whose last executor the cluster could not place: it waits before asking again."""

    until: float  # monotonic time
    delay: float  # the wait that led here (the next one doubles it)
    generation: int  # the ledger's node generation then: any change of the nodes ends the hold


class ExecutorPool:
    """Launches, admits and retires executors; `TaskScheduler` sets the state below."""

    _lock: threading.Lock
    _executors: dict[bytes, ExecutorRecord]
    _by_connection: dict[Connection, ExecutorRecord]
    _ledger: ClusterLedger
    _launcher: WorkerLauncher
    _timers: TimerQueue
    _objects: ObjectTable
    _error_for: Callable[[str, Any], SerializedValue]
    _warm: int
    _closed: bool
    _maintenance: Any
    _launch_holds: dict[PoolKey, LaunchHold]
    _events: TaskEvents
    #: called when the cluster refuses an executor as unschedulable (the driver looks at the
    #: cluster again soon: the node it lost is gone, its replacement may be joining)
    on_launch_refused: Callable[[], None] | None = None

    def schedule(self) -> None:
        """Hand ready tasks to executors (TaskScheduler's)."""
        raise NotImplementedError

    def _executor_failed_to_start(self, executor: ExecutorRecord, problem: str) -> None:
        """Fail the tasks waiting for an executor that died before connecting (TaskScheduler's)."""
        raise NotImplementedError

    def tasks_done(self, connection: Connection,
                   answers: Sequence[tuple[bytes, Sequence[SerializedValue], bool, float | None, bool]]) -> None:
        """Take executors' answers (TaskScheduler's)."""
        raise NotImplementedError

    def _prefetch_target_locked(
        self, members: list[ExecutorRecord], record: TaskRecord, ledger: Ledger | ClusterLedger, depth: int
    ) -> ExecutorRecord | None:
        """A busy executor that can queue `record` behind its work, or None.

        Only plain tasks (the session's ledger) are queued so, and not while executors of the
        pool are still starting (they will want the work).
        """
        if ledger is not self._ledger or any(e.state is ExecutorState.STARTING for e in members):
            return None
        long_since = time.monotonic() - LONG_RUNNING_S  # a head task started before this is a long one
        candidates = [
            e for e in members
            if e.state is ExecutorState.BUSY and e.lease is not None and e.tasks and not e.tasks[0].blocked
            and len(e.tasks) <= (depth if e.head_started > long_since else DEPTH)
            # never past `max_calls`: the executor exits then, and a task queued there would
            # count as one its worker died running
            and (not e.pool.max_calls or e.calls + len(e.tasks) < e.pool.max_calls)
        ]
        # Executors whose running task is still young first: one stuck in a long task takes work
        # only when the others are full.
        return min(candidates, key=lambda e: (e.head_started <= long_since, len(e.tasks)), default=None)

    def _send_tasks(self, dispatches: list[tuple[ExecutorRecord, TaskRecord]]) -> None:
        """Send the tasks of a scheduling round; each executor's leave together, in one frame."""
        counts = collections.Counter(executor.executor_id for executor, _ in dispatches)
        for executor, record in dispatches:
            self._send_task(executor, record, hold=counts[executor.executor_id] > 1)
        for executor in {executor.executor_id: executor for executor, _ in dispatches}.values():
            if counts[executor.executor_id] > 1 and executor.connection is not None:
                executor.connection.flush()

    def _send_task(self, executor: ExecutorRecord, record: TaskRecord, hold: bool = False) -> None:
        """Send a task assigned to `executor` (its code the first time this executor sees it);
        `hold`: queued until the caller flushes the connection."""
        spec = record.spec
        message = ExecuteTask.of(
            spec,
            self._objects.value,
            send_code=spec.function.code_id not in executor.sent_code,
            resources=record.demand,
            placement_group=record.placement[0].hex() if record.placement else None,
        )
        try:
            assert executor.connection is not None
            messages.notify(executor.connection, message, hold=hold)
            executor.sent_code.add(spec.function.code_id)
            read_hints.after_send(spec.return_ids, executor.connection, alone=len(executor.tasks) == 1)
        except ConnectionClosed:
            pass  # the close callback requeues the task
        except MessageTooLarge as exc:
            # Nothing was sent: the task fails as if its executor had answered so (no retry
            # would be any smaller), once this scheduling round has sent the rest.
            error = self._error_for("system", RaySystemError(f"task {spec.name} cannot be sent to a worker: {exc}"))
            connection = executor.connection
            if connection is not None:
                self._timers.call_later(0, lambda: self.tasks_done(connection, [(spec.task_id, [error], False, None, False)]))

    def _drop_locked(self, executor: ExecutorRecord) -> None:
        """Forget an executor that is gone or going (and what it asked the cluster for)."""
        self._executors.pop(executor.executor_id, None)
        self._ledger.forget(executor.executor_id)

    def _launch(self, executor: ExecutorRecord) -> None:
        def launched(job: Any, error: BaseException | None) -> None:
            if isinstance(error, JobUnschedulable):
                self._launch_refused(executor, error)
                return
            if error is not None:
                self._executor_failed_to_start(executor, f"launching it failed: {error}")
                return
            with self._lock:
                executor.job = job
                closed = self._closed
            if closed:  # launched after the session ended: it would find no driver, and fail
                self._launcher.terminate(job)
        shape = executor.pool.shape
        cpu = self._ledger.ask(executor.executor_id, shape.cpu, placement_needs(shape.custom))
        pins: tuple[tuple[str, str | int], ...] = ()
        identity: dict[str, str] = {}
        if needs_tpu_host(shape.custom, self._ledger.slice_names()):
            # A TPU host's own resources (its slice's name, the head) are one task's at a time:
            # start the process on a host where they are free, not on any host of the slice.
            node = self._ledger.aim(executor.executor_id, shape.as_dict(), placement_needs(shape.custom))
            if node is not None:
                pins, identity = host_pins(node.labels), tpu_identity(node, self._ledger.nodes())
        self._launcher.launch_executor(executor.executor_id, executor.pool, launched, cpu=cpu, pins=pins,
                                       identity=identity)
        self._timers.call_later(STARTUP_CHECK_S, lambda: self._check_startup(executor))

    def _launch_refused(self, executor: ExecutorRecord, error: JobUnschedulable) -> None:
        """No live worker can place the executor now, though the tasks waiting for it were
        feasible when submitted (their node went; a replacement may join). As in Ray, they
        wait for a node that fits rather than fail; the pool asks the cluster again later."""
        with self._lock:
            if executor.state is not ExecutorState.STARTING or self._closed:
                return
            executor.state = ExecutorState.DEAD
            self._drop_locked(executor)
            previous = self._launch_holds.get(executor.pool)
            delay = LAUNCH_HOLD_S if previous is None else min(previous.delay * 2, LAUNCH_HOLD_MAX_S)
            self._launch_holds[executor.pool] = LaunchHold(time.monotonic() + delay, delay, self._ledger.generation)
        if previous is None:
            logger.warning("tasks wait for a worker the cluster can place (%s); they start once one that fits joins",
                           error)
        if self.on_launch_refused is not None:
            self.on_launch_refused()
        self._timers.call_later(delay, self.schedule)

    def _launch_held_locked(self, pool: PoolKey) -> bool:
        """Whether the pool waits before asking the cluster for another executor."""
        hold = self._launch_holds.get(pool)
        if hold is None:
            return False
        return time.monotonic() < hold.until and hold.generation == self._ledger.generation

    def _check_startup(self, executor: ExecutorRecord) -> None:
        with self._lock:
            if executor.state is not ExecutorState.STARTING or self._closed:
                return
            job = executor.job
        problem = self._launcher.job_failure(job) if job is not None else None
        if problem is not None:
            self._executor_failed_to_start(executor, problem)
        else:
            self._timers.call_later(STARTUP_CHECK_S, lambda: self._check_startup(executor))

    def executor_connected(
        self, executor_id: bytes, connection: Connection, pid: int | None, host: str | None = None
    ) -> bool:
        with self._lock:
            executor = self._executors.get(executor_id)
            if executor is None or executor.state is not ExecutorState.STARTING:
                return False
            executor.connection, executor.pid, executor.host = connection, pid, host
            self._launch_holds.pop(executor.pool, None)  # the cluster places this pool's executors again
            self._ledger.placed(executor_id, host)
            executor.state = ExecutorState.IDLE
            executor.idle_since = time.monotonic()
            self._by_connection[connection] = executor
        connection.add_close_callback(self._connection_closed)
        self.schedule()
        return True

    def _next_head_locked(self, executor: ExecutorRecord) -> None:
        """The executor's running task left its books (answered, or handed back unstarted):
        the next queued one runs now, or the executor is idle (or, at `max_calls`, gone)."""
        if executor.tasks:
            executor.head_started = time.monotonic()
            head = executor.tasks[0]
            head.state = TaskState.RUNNING
            if head.event is not None:
                self._events.running(head.event)
            return
        self._release_lease_locked(executor)
        if executor.pool.max_calls and executor.calls >= executor.pool.max_calls:
            executor.state = ExecutorState.DEAD  # it exits by itself
            self._drop_locked(executor)
            if executor.connection is not None:
                self._by_connection.pop(executor.connection, None)
        else:
            executor.state = ExecutorState.IDLE
            executor.idle_since = time.monotonic()

    def _release_lease_locked(self, executor: ExecutorRecord) -> None:
        if executor.lease is not None:
            ledger, holding = executor.lease
            ledger.release(holding)
            executor.lease = None

    def _maintain(self) -> None:
        retire: list[ExecutorRecord] = []
        now = time.monotonic()
        with self._lock:
            if self._closed:
                return
            idle = sorted(
                (e for e in self._executors.values() if e.state is ExecutorState.IDLE), key=lambda e: e.idle_since
            )
            keep = self._warm
            for executor in reversed(idle):
                if keep > 0 and not executor.pool.max_calls:
                    keep -= 1
                    continue
                if now - executor.idle_since >= IDLE_TIMEOUT_S:
                    retire.append(self._retire_locked(executor))
        for executor in retire:
            self._retire(executor)
        self._maintenance = self._timers.call_later(IDLE_TIMEOUT_S / 3, self._maintain)

    def make_room(self, cpu: float) -> None:
        """Retire idle executors that hold CPU at the cluster, longest idle first, until `cpu`
        is freed there: a new process needs that room (Ray's idle workers hold nothing)."""
        retire: list[ExecutorRecord] = []
        with self._lock:
            idle = sorted((e for e in self._executors.values() if e.state is ExecutorState.IDLE), key=lambda e: e.idle_since)
            for executor in idle:
                held = self._ledger.asked(executor.executor_id)
                if cpu > 0 and held > 0:
                    cpu -= held
                    retire.append(self._retire_locked(executor))
        for executor in retire:
            self._retire(executor)

    def _retire_locked(self, executor: ExecutorRecord) -> ExecutorRecord:
        executor.state = ExecutorState.DEAD
        self._drop_locked(executor)
        if executor.connection is not None:
            self._by_connection.pop(executor.connection, None)
        return executor

    #: hand_off(connection): before an executor is retired, what it holds moves elsewhere
    hand_off: Callable[[Connection], None] | None = None

    def _retire(self, executor: ExecutorRecord) -> None:
        if executor.connection is not None:
            if self.hand_off is not None:
                self.hand_off(executor.connection)
            try:
                messages.notify(executor.connection, Exit())
            except ConnectionClosed:
                pass

    def lend_idle(self, accepts: Callable[[PoolKey], bool]) -> LentWorker | None:
        """Hand an idle, connected executor of a pool `accepts` to a new actor, or None.

        The executor leaves the pool at once (nothing more is sent to it); its connection, job
        and what it asked the cluster for are the caller's from now on (see `idle_workers`)."""
        with self._lock:
            if self._closed:
                return None
            candidates = [
                e for e in self._executors.values()
                if e.state is ExecutorState.IDLE and e.connection is not None and e.job is not None
                and not e.tasks and e.lease is None and accepts(e.pool)
            ]
            if not candidates:
                return None
            executor = max(candidates, key=lambda e: e.idle_since)  # the warmest: its caches are fresh
            executor.state = ExecutorState.DEAD
            self._executors.pop(executor.executor_id, None)
            self._by_connection.pop(executor.connection, None)
        return LentWorker(executor.executor_id, executor.connection, executor.job, executor.host, executor.pid)

    def prestart(self, pool: PoolKey, count: int) -> None:
        """Launch executors ahead of demand (so the first task finds one warm)."""
        launches = []
        with self._lock:
            existing = sum(1 for e in self._executors.values() if e.pool == pool)
            for _ in range(max(0, count - existing)):
                executor = ExecutorRecord(uuid.uuid4().bytes, pool)
                self._executors[executor.executor_id] = executor
                launches.append(executor)
        for executor in launches:
            self._launch(executor)
