"""Task scheduling in the driver: dependencies, logical resources, warm executor pools.

A task waits until its top-level ref arguments are ready, then queues in the pool for its resource
shape. An executor takes a lease on the ledger for its shape when it gets work (on the node it runs
on, when that node has room) and holds it while it has work; it runs one task at a time, and a few
more wait in its own queue so it never idles between tasks (more for short tasks, see `prefetch`);
queued tasks are taken back when the task ahead of them runs long while another executor idles
(`withdrawals`). The tasks a scheduling round gives one executor leave in one frame, and answers
that arrive together are handled together (`tasks_done`). When no executor is idle, a new one is
launched (an Iris job through the Fray client), up to what the cluster's nodes have room for. A
task blocked in `get` lends its lease back and its executor hands its queued tasks back, so a
parent waiting on its children never starves them. Executors idle too long are retired.

One lock guards all scheduler state; messages to executors and Fray calls happen after it is
released. Launching, admitting and retiring executors is in `executor_pool`.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fray_ray._private import messages
from fray_ray._private.core.retry_policy import retries_user_exception, within_retries
from fray_ray._private.core.task_spec import PoolKey, TaskSpec
from fray_ray._private.driver.cluster_ledger import ClusterLedger
from fray_ray._private.driver.executor_pool import (
    IDLE_TIMEOUT_S,
    ExecutorRecord,
    ExecutorState,
    TaskRecord,
    TaskState,
)
from fray_ray._private.driver.prefetch import PrefetchDepth
from fray_ray._private.driver.resources import Ledger, lent_while_blocked
from fray_ray._private.driver.timers import TimerQueue
from fray_ray._private.driver.withdrawals import TaskWithdrawals
from fray_ray._private.driver.worker_exits import ExitReports
from fray_ray._private.messages import CancelTask, Exit
from fray_ray._private.objects.object_table import ObjectTable
from fray_ray._private.objects.serialization import SerializedValue
from fray_ray._private.observe.task_events import TaskEvent, TaskEvents, TaskStatus, TaskType
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray.exceptions import RaySystemError, TaskCancelledError, WorkerCrashedError

if TYPE_CHECKING:
    from fray_ray._private.driver.launcher import WorkerLauncher

logger = logging.getLogger(__name__)


class TaskScheduler(TaskWithdrawals):
    def __init__(
        self,
        objects: ObjectTable,
        ledger: ClusterLedger,
        launcher: WorkerLauncher,
        timers: TimerQueue,
        *,
        judge: Callable[[Any, dict[str, float]], str | None],
        before_schedule: Callable[[], None] = lambda: None,
        error_for: Callable[[str, Any], SerializedValue],
        stream_finished: Callable[[bytes, SerializedValue | None], None],
        stream_released: Callable[[bytes], None],
        failed_generator: Callable[[bytes, SerializedValue], SerializedValue] | None = None,
        warm_executors: int = 1,
        placement_groups: Any = None,
        events: TaskEvents | None = None,
    ) -> None:
        self._placement_groups = placement_groups
        self._events = events or TaskEvents()
        self._judge = judge  # why a task with this strategy and demand can never run, or None
        self._before_schedule = before_schedule  # freed resources go to waiting groups and actors first
        self._objects = objects
        self._ledger = ledger
        self._launcher = launcher
        self._exits = ExitReports(launcher.terminate)  # how a dead executor's process ended
        self._timers = timers
        self._error_for = error_for
        self._stream_finished = stream_finished
        self._stream_released = stream_released
        self._failed_generator = failed_generator  # a dynamic generator's items, then its error
        self._warm = warm_executors
        self._lock = threading.Lock()
        self._tasks: dict[bytes, TaskRecord] = {}
        self._ready: dict[PoolKey, collections.deque[TaskRecord]] = collections.defaultdict(collections.deque)
        self._executors: dict[bytes, ExecutorRecord] = {}
        self._by_connection: dict[Connection, ExecutorRecord] = {}
        self._launch_holds = {}
        self._prefetch = PrefetchDepth()  # how many tasks an executor of each pool may hold queued
        self._closed = False
        self._maintenance = timers.call_later(IDLE_TIMEOUT_S / 3, self._maintain)

    def spec_of(self, task_id: bytes) -> TaskSpec | None:
        """The spec of a task not finished yet (None if unknown or done)."""
        with self._lock:
            return record.spec if (record := self._tasks.get(task_id)) is not None else None

    # ---- submission ----------------------------------------------------------------------

    def submit(self, spec: TaskSpec) -> None:
        """Queue a task whose return objects already exist (pending) in the object table."""
        demand = spec.pool.shape.as_dict()
        problem = None if spec.placement else self._judge(spec.scheduling_strategy, demand)
        self._objects.incref(spec.arguments.value.contained_refs)
        record = TaskRecord(spec, demand, event=self._events.submitted(TaskEvent(
            spec.task_id, spec.name, spec.function_name or spec.name, TaskType.NORMAL_TASK,
            TaskStatus.PENDING_ARGS_AVAIL, parent_task_id=spec.parent_task_id, resources=demand,
            attempt=self._events.next_attempt(spec.task_id) if spec.rebuilding else 0,
        )) if spec.task_events else None)
        if problem is not None:
            from fray_ray.exceptions import TaskUnschedulableError

            error = TaskUnschedulableError(f"Task {spec.name} cannot run: it asks for {problem}; the cluster will never have that.")
            self._finish(record, self._error_for("unschedulable", error))
            return
        with self._lock:
            self._tasks[spec.task_id] = record
            top_level = spec.arguments.top_level
            if top_level:
                waiting = {oid for oid in top_level if not self._objects.is_done(oid)}
                if waiting:
                    record.waiting_on = waiting
            if not record.waiting_on:
                self._make_ready_locked(record)
        if record.waiting_on:
            for object_id in list(record.waiting_on):
                self._objects.add_done_callback(object_id, lambda oid, r=record: self._dependency_done(r, oid))
        self._check_failed_dependencies(record)
        self.schedule(queue_behind=False)

    def _dependency_done(self, record: TaskRecord, object_id: bytes) -> None:
        with self._lock:
            if record.state is not TaskState.WAITING:
                return
            record.waiting_on.discard(object_id)  # type: ignore[union-attr]  # a task that waits has its own set
            ready = not record.waiting_on
            if ready:
                self._make_ready_locked(record)
        if not self._check_failed_dependencies(record) and ready:
            self.schedule()

    def _check_failed_dependencies(self, record: TaskRecord) -> bool:
        """A task whose argument failed fails with that error, without running."""
        for object_id in record.spec.arguments.top_level:
            value = self._objects.value(object_id)
            if value is not None and value.is_error:
                with self._lock:
                    if record.state in (TaskState.RUNNING, TaskState.DONE):
                        return False
                    self._remove_queued_locked(record)
                self._finish(record, value)
                return True
        return False

    def _make_ready_locked(self, record: TaskRecord) -> None:
        record.state = TaskState.READY
        if record.event is not None:
            record.event.state = TaskStatus.PENDING_NODE_ASSIGNMENT
        self._ready[record.spec.pool].append(record)

    def _remove_queued_locked(self, record: TaskRecord) -> None:
        if record.state is TaskState.READY:
            try:
                self._ready[record.spec.pool].remove(record)
            except ValueError:
                pass
        record.state = TaskState.DONE

    # ---- dispatch ------------------------------------------------------------------------

    def _ledger_for(self, record: TaskRecord) -> Ledger | ClusterLedger | None:
        """The ledger the task draws from now; None while its placement group is not placed."""
        placement = record.spec.placement
        if placement is None:
            return self._ledger
        group_id, index = placement
        found = self._placement_groups.bundle_ledger(group_id, index, record.demand)
        if found is None:
            return None
        ledger, position = found
        record.placement = (group_id, position)
        return ledger

    def schedule(self, *, queue_behind: bool = True) -> None:
        """Match ready tasks with idle executors; launch executors where the ledger allows.
        `queue_behind`: busy executors may take tasks into their queues too. A submission does
        not ask that: the answers of busy executors top their queues up, several tasks in one
        frame, where each submission would send one."""
        self._before_schedule()
        dispatches: list[tuple[ExecutorRecord, TaskRecord]] = []
        launches: list[ExecutorRecord] = []
        failures: list[tuple[TaskRecord, BaseException]] = []
        with self._lock:
            if self._closed:
                return
            for pool, queue in self._ready.items():
                if queue:
                    launches += self._schedule_pool_locked(pool, queue, dispatches, failures, queue_behind)
            withdrawals = self._steal_for_idle_locked()
        for record, error in failures:
            self._finish(record, self._error_for("system", error))
        if dispatches:
            self._send_tasks(dispatches)
        if withdrawals:
            self._send_withdrawals(withdrawals)
        for executor in launches:
            self._launch(executor)

    def _schedule_pool_locked(
        self,
        pool: PoolKey,
        queue: collections.deque[TaskRecord],
        dispatches: list[tuple[ExecutorRecord, TaskRecord]],
        failures: list[tuple[TaskRecord, BaseException]],
        queue_behind: bool = True,
    ) -> list[ExecutorRecord]:
        """Assign a pool's ready tasks to its executors; returns executors to launch.

        The scan stops as soon as no executor can take more work, so a long queue costs
        nothing per event (the cost of scheduling stays linear in the number of tasks).
        """
        # One pass over the pool's executors: who is idle, starting, blocked, and how many more
        # tasks the busy ones may queue.
        members: list[ExecutorRecord] = []
        idle: list[ExecutorRecord] = []
        starting = blocked = prefetch_slots = 0
        depth = self._prefetch.depth(pool)
        for executor in self._executors.values():
            if executor.pool is not pool and executor.pool != pool:
                continue
            members.append(executor)
            state, tasks = executor.state, executor.tasks
            if state is ExecutorState.IDLE:
                idle.append(executor)
            elif state is ExecutorState.STARTING:
                starting += 1
            elif tasks and tasks[0].blocked:
                blocked += 1
            elif state is ExecutorState.BUSY and executor.lease is not None and tasks:
                prefetch_slots += depth + 1 - len(tasks)
        if starting or not queue_behind:
            prefetch_slots = 0
        # Live processes are capped at the ledger's CPUs plus those lent by blocked tasks.
        cap = max(1, int(self._ledger.total("CPU", 1.0))) + blocked
        room = cap - len(members)
        set_aside: list[TaskRecord] = []  # scanned but not placeable now; they keep their place
        while queue and (idle or prefetch_slots > 0):
            record = queue.popleft()
            ledger = self._ledger_for(record)
            if ledger is None:
                placement = record.spec.placement
                if placement and self._placement_groups.is_removed(placement[0]):
                    from fray_ray.exceptions import TaskPlacementGroupRemoved

                    record.state = TaskState.DONE
                    failures.append((record, TaskPlacementGroupRemoved()))
                    continue
                set_aside.append(record)  # its placement group is not placed yet
                continue
            problem = ledger.infeasible(record.demand) if ledger is not self._ledger else None
            if problem:
                from fray_ray.exceptions import TaskUnschedulableError

                record.state = TaskState.DONE
                failures.append((record, TaskUnschedulableError(
                    f"Task {record.spec.name} cannot run in its placement group bundle: it asks for {problem}."
                )))
                continue
            holding = ledger.try_acquire(record.demand, prefer=idle[-1].host) if idle else None
            if holding is not None:
                executor = idle.pop()
                executor.lease = (ledger, holding)
                executor.state = ExecutorState.BUSY
                self._assign_locked(executor, record, ledger)
                dispatches.append((executor, record))
                continue
            # With room for it and for another process, a new executor could run it at once: the
            # first `room` tasks wait for one (queued behind a long task, one would wait for all
            # of it); those beyond them may queue behind busy executors meanwhile.
            fits_now = room > 0 and ledger is self._ledger and self._ledger.count_fits(record.demand, 1) > 0
            for_new_processes = room if fits_now else 0
            feeder = (self._prefetch_target_locked(members, record, ledger, depth)
                      if prefetch_slots > 0 and len(queue) >= for_new_processes else None)
            if feeder is not None:
                self._assign_locked(feeder, record, ledger)
                dispatches.append((feeder, record))
                prefetch_slots -= 1
                continue
            set_aside.append(record)
            if ledger is self._ledger:
                break  # the session's ledger is full: the rest of the pool (same shape) waits too
        queue.extendleft(reversed(set_aside))
        if not queue or idle:
            return []
        # Tasks wait for executors: launch as many as could run now, within the cap above.
        if room <= 0:
            return []  # at the cap already (the common case while a long queue drains)
        if self._launch_holds and self._launch_held_locked(pool):
            return []  # the cluster refused its last executor: asked again later
        # Room is counted where the first task draws from: the session's ledger, or its placement
        # group's bundle (whose resources the session's ledger counts as taken).
        head_ledger = self._ledger_for(queue[0])
        if head_ledger is None:
            return []  # its placement group is not placed yet
        wanted = min(head_ledger.count_fits(queue[0].demand, len(queue)) - starting, room)
        launches = []
        for _ in range(max(0, wanted)):
            executor = ExecutorRecord(uuid.uuid4().bytes, pool)
            self._executors[executor.executor_id] = executor
            launches.append(executor)
        return launches

    def _assign_locked(self, executor: ExecutorRecord, record: TaskRecord, ledger: Ledger | ClusterLedger) -> None:
        record.state = TaskState.RUNNING if not executor.tasks else TaskState.ASSIGNED
        if record.event is not None:
            status = TaskStatus.RUNNING if not executor.tasks else TaskStatus.SUBMITTED_TO_WORKER
            self._events.placed(record.event, status, executor.host, executor.executor_id, executor.pid)
            record.event.placement_group_id = record.placement[0].hex() if record.placement else None
        record.executor = executor
        record.withdrawing_from = None
        record.ledger = ledger
        if not executor.tasks:
            executor.head_started = time.monotonic()
        executor.tasks.append(record)

    def _executor_failed_to_start(self, executor: ExecutorRecord, problem: str) -> None:
        """An executor died before connecting: fail the tasks that were waiting for it."""
        with self._lock:
            if executor.state is not ExecutorState.STARTING:
                return
            executor.state = ExecutorState.DEAD
            self._drop_locked(executor)
            queue = self._ready.get(executor.pool)
            victims = list(queue) if queue else []
            still_starting = any(
                e.pool == executor.pool and e.state is ExecutorState.STARTING for e in self._executors.values()
            )
            if still_starting or not victims:
                victims = []
            else:
                queue.clear()
                for record in victims:
                    record.state = TaskState.DONE
        message = f"A worker process for these tasks could not start: {problem}"
        logger.error(message)
        for record in victims:
            self._finish(record, self._error_for("system", RaySystemError(message)))

    # ---- executors -----------------------------------------------------------------------

    def _connection_closed(self, connection: Connection) -> None:
        with self._lock:
            executor = self._by_connection.pop(connection, None)
            if executor is None:
                return
            executor.state = ExecutorState.DEAD
            self._drop_locked(executor)
            if executor.lease is not None and executor.tasks and executor.tasks[0].blocked:
                executor.lease[0].retake(lent_while_blocked(executor.lease[1]))  # lent: released once, in full
            self._release_lease_locked(executor)
            tasks = list(executor.tasks)
            executor.tasks.clear()
            record = tasks[0] if tasks else None
            # Tasks queued behind it never started (those being withdrawn included: the answer
            # will never be read): they go back to the front of the queue, or end if cancelled.
            cancelled_queued = [queued for queued in tasks[1:] if queued.cancelled]
            for queued in reversed(tasks[1:]):
                if queued.cancelled:
                    queued.state = TaskState.DONE
                else:
                    self._requeue_first_locked(queued)
            retry = False
            if record is not None and record.state is TaskState.RUNNING:
                record.blocked = False
                record.withdrawing_from = None
                record.executor = None
                record.system_failures += 1
                max_retries = record.spec.max_retries
                retry = not record.cancelled and (max_retries < 0 or record.system_failures <= max_retries)
                if retry:
                    record.state = TaskState.READY
                    attempt = (record.event.attempt if record.event is not None else 0, record.system_failures)
                    record.event = self._events.retried(record.event, self._error_for("system", WorkerCrashedError(
                        f"The process running task {record.spec.name} died (attempt {attempt[1]}); retried.")), "WORKER_DIED")
                    self._ready[record.spec.pool].appendleft(record)  # retried work goes first
                else:
                    record.state = TaskState.DONE
            job = executor.job
        failed = record if record is not None and not retry and record.state is TaskState.DONE else None
        if failed is not None and not failed.cancelled:
            # OutOfMemoryError or WorkerCrashedError, once the cluster said how the process ended
            self._exits.explain(None if self._closed else job, failed.spec.name, failed.system_failures,
                                failed.spec.max_retries + 1, lambda e: self._finish(failed, self._error_for("system", e)))
        elif retry and record is not None and not self._closed:  # said as Ray says it; then the job ends
            task_id, spec = record.spec.task_id, record.spec
            self._exits.announce_retry(job, spec.name, attempt[1], spec.max_retries, lambda e: self._events.amend_error(
                task_id, attempt[0], self._error_for("system", e)))
        elif job is not None and not self._closed:
            self._launcher.terminate(job)
        if failed is not None and failed.cancelled:
            cancelled_queued.append(failed)
        for ended in cancelled_queued:
            self._finish(ended, self._error_for("system", TaskCancelledError(ended.spec.task_id.hex())))
        self.schedule()

    def tasks_done(
        self, connection: Connection,
        answers: Sequence[tuple[bytes, Sequence[SerializedValue], bool, float | None, bool]],
    ) -> None:
        """Answers from one executor, in the order it sent them: (task id, results, whether the
        task failed, how long it ran, whether a dynamic generator raised); then one scheduling
        round for whatever they freed."""
        finished: list[tuple[TaskRecord, Sequence[SerializedValue]]] = []
        with self._lock:
            executor = self._by_connection.get(connection)
            for task_id, results, user_error, ran_s, generator_failed in answers:
                record = self._task_done_locked(connection, executor, task_id, results, user_error)
                if record is not None:
                    record.generator_failed = generator_failed
                    finished.append((record, results))
                if executor is not None and isinstance(ran_s, (int, float)):
                    self._prefetch.ran(executor.pool, float(ran_s))
        for record, results in finished:
            self._finish(record, results)
        self.schedule()

    def _task_done_locked(
        self, connection: Connection, executor: ExecutorRecord | None, task_id: bytes,
        results: Sequence[SerializedValue], user_error: bool,
    ) -> TaskRecord | None:
        """Take one answer into the executor's and the task's state; the task if it is done."""
        record = self._tasks.get(task_id)
        if executor is not None and record is not None and record in executor.tasks:
            was_running = executor.tasks[0] is record
            executor.tasks.remove(record)
            record.withdrawing_from = None  # answered: a `Withdrawn` about it says `kept`
            if was_running:
                executor.calls += 1
                if record.blocked:  # its lease was lent out; take it back for the next task
                    record.blocked = False
                    if executor.lease is not None:
                        executor.lease[0].retake(lent_while_blocked(executor.lease[1]))
                self._next_head_locked(executor)  # a queued task's answer (cancelled there) changes no head
        if record is None or record.state not in (TaskState.RUNNING, TaskState.ASSIGNED):
            return None
        record.executor = None
        if user_error and not record.cancelled and self._should_retry_exception(record, results):
            record.user_failures += 1
            record.event = self._events.retried(record.event, results)
            self._make_ready_locked(record)
            return None
        record.state = TaskState.DONE
        return record

    @staticmethod
    def _should_retry_exception(record: TaskRecord, results: Sequence[SerializedValue]) -> bool:
        failures = record.user_failures + record.system_failures
        return within_retries(record.spec.max_retries, failures) and retries_user_exception(
            record.spec.retry_exceptions, results
        )

    def _finish(self, record: TaskRecord, results: SerializedValue | Sequence[SerializedValue]) -> None:
        """Complete the task's return objects and drop its hold on its arguments."""
        with self._lock:
            self._tasks.pop(record.spec.task_id, None)
            record.state = TaskState.DONE
        self._events.finished(record.event, results)
        results = self._dynamic_results(record, results)
        values = [results] * len(record.spec.return_ids) if isinstance(results, SerializedValue) else list(results)
        if len(values) < len(record.spec.return_ids):
            values += [values[-1] if values else self._error_for("system", RuntimeError("missing result"))] * (
                len(record.spec.return_ids) - len(values)
            )
        for object_id, value in zip(record.spec.return_ids, values):
            self._objects.fulfil(object_id, value)
        if record.spec.num_returns == "streaming":
            error = results if isinstance(results, SerializedValue) else next((r for r in results if r.is_error), None)
            self._stream_finished(record.spec.task_id, error)
        elif record.spec.num_returns == "dynamic":
            # The items are held by the DynamicObjectRefGenerator value; the stream is done.
            self._stream_finished(record.spec.task_id, None)
            self._stream_released(record.spec.task_id)
        self._objects.decref(record.spec.arguments.value.contained_refs)

    def _dynamic_results(
        self, record: TaskRecord, results: SerializedValue | Sequence[SerializedValue]
    ) -> SerializedValue | Sequence[SerializedValue]:
        """As in Ray, a dynamic generator that raised an error `retry_exceptions` does not cover
        returns its items and one that raises it; a retryable one fails the task's ref itself."""
        if record.spec.num_returns != "dynamic" or not record.generator_failed or self._failed_generator is None:
            return results
        error = results if isinstance(results, SerializedValue) else next((r for r in results if r.is_error), None)
        if error is None or retries_user_exception(record.spec.retry_exceptions, [error]):
            return results
        return self._failed_generator(record.spec.task_id, error)

    # ---- blocking inside tasks -----------------------------------------------------------

    def task_blocked(self, task_id: bytes | None) -> None:
        """The task waits in `get`: lend its lease to others and take back its queued tasks."""
        if task_id is None:
            return
        with self._lock:
            record = self._tasks.get(task_id)
            if record is None or record.state is not TaskState.RUNNING or record.blocked:
                return
            executor = record.executor
            if executor is None or executor.lease is None:
                return
            record.blocked = True
            executor.lease[0].release(lent_while_blocked(executor.lease[1]))
            withdrawals = self._withdraw_locked(executor, list(executor.tasks)[1:])
        self._send_withdrawals(withdrawals)
        self.schedule()

    def task_unblocked(self, task_id: bytes | None) -> None:
        if task_id is None:
            return
        with self._lock:
            record = self._tasks.get(task_id)
            if record is None or not record.blocked:
                return
            record.blocked = False
            executor = record.executor
            if record.state is TaskState.RUNNING and executor is not None and executor.lease is not None:
                executor.lease[0].retake(lent_while_blocked(executor.lease[1]))

    # ---- cancel --------------------------------------------------------------------------

    def cancel(self, task_id: bytes, force: bool) -> bool:
        """Cancel a queued or running task; returns False if it already finished."""
        with self._lock:
            record = self._tasks.get(task_id)
            if record is None or record.state is TaskState.DONE:
                return False
            record.cancelled = True
            if record.state in (TaskState.WAITING, TaskState.READY):
                self._remove_queued_locked(record)
                queued = True
            else:  # running, or queued on an executor: the executor drops or interrupts it
                queued = False
                executor = record.executor
        if queued:
            self._finish(record, self._error_for("system", TaskCancelledError(task_id.hex())))
            self.schedule()
            return True
        if executor is not None and executor.connection is not None:
            try:
                messages.notify(executor.connection, CancelTask(task_id, force))
            except ConnectionClosed:
                pass
        return True

    def argument_refs(self) -> list[Sequence[bytes]]:
        """The refs held by the arguments of every unfinished task (for the state API)."""
        with self._lock:
            return [r.spec.arguments.value.contained_refs for r in self._tasks.values()]

    def children_of(self, task_id: bytes) -> list[bytes]:
        with self._lock:
            return [t for t, r in self._tasks.items() if r.spec.parent_task_id == task_id]

    # ---- maintenance ---------------------------------------------------------------------

    def close(self) -> tuple[list[Any], list[Any]]:
        """Stop scheduling; tell executors to exit. Returns their Fray jobs: idle executors'
        (they exit by themselves) and busy ones' (to be stopped at once, not after their task)."""
        self._exits.close()
        with self._lock:
            self._closed = True
            executors = list(self._executors.values())
            busy = {id(executor) for executor in executors if executor.tasks}
            self._executors.clear()
            self._by_connection.clear()
            self._ready.clear()
            self._maintenance.cancel()
        idle_jobs, busy_jobs = [], []
        for executor in executors:
            if executor.connection is not None:
                try:
                    messages.notify(executor.connection, Exit())
                except ConnectionClosed:
                    pass
            if executor.job is not None:
                (busy_jobs if id(executor) in busy else idle_jobs).append(executor.job)
        return idle_jobs, busy_jobs

    def about_to_run(self) -> int:
        """How many submitted tasks have not begun running while an executor is starting for
        them: they run in a moment. Tasks that wait only for a busy executor count for nothing."""
        with self._lock:
            if not any(executor.state is ExecutorState.STARTING for executor in self._executors.values()):
                return 0
            return sum(1 for record in self._tasks.values() if record.state in (TaskState.READY, TaskState.ASSIGNED))
