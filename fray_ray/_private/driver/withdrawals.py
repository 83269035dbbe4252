"""Taking queued tasks back from an executor: the claim protocol, and when the driver uses it.

An executor may hold tasks queued behind the one it runs (`prefetch`): that hides the round
trip between two tasks. A queued task must not wait there while its executor's running task
is blocked in `get`, nor while that task turns out long and another executor of the pool sits
idle with room on the ledger (Ray starts a queued task on the first worker that can take it).
The driver then sends `Withdraw` naming the queued tasks it wants back.

The executor decides, under the lock its main thread takes its next task under: a task still
in its queue leaves it and is returned (it will never run there); one already taken stays and
is answered by `TaskDone` as usual; `Withdrawn` lists both. Until that answer the task keeps
its place in the driver's books, marked `withdrawing_from`: a cancel meanwhile still goes to
that executor, and if the executor dies first, its queue goes back to the ready queue as on
any death (the answer is then never read). A returned task goes back to the front of its
pool's ready queue, or ends if it was cancelled meanwhile. So a task runs exactly once: on the
executor that kept it, or wherever it is scheduled after it was returned.

Queues of short tasks keep their gains: only tasks behind a running task the driver has seen
run `LONG_RUNNING_S` are taken back, and only as many as the idle executors can hold.

`TaskWithdrawals` sits between `ExecutorPool` and `TaskScheduler` (`scheduler.py`), sharing
their state and their one lock.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from typing import Any

from fray_ray._private import messages
from fray_ray._private.core.task_spec import PoolKey
from fray_ray._private.driver.executor_pool import ExecutorPool, ExecutorRecord, ExecutorState, TaskRecord, TaskState
from fray_ray._private.driver.prefetch import LONG_RUNNING_S, PrefetchDepth
from fray_ray._private.messages import Withdraw
from fray_ray._private.objects.serialization import SerializedValue
from fray_ray._private.observe.task_events import TaskStatus
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray.exceptions import TaskCancelledError

#: (the executor's connection, the message) for each withdrawal decided under the lock
Withdrawals = list[tuple[Connection, Withdraw]]


class TaskWithdrawals(ExecutorPool):
    """Withdraws queued tasks from executors and takes their answers; `TaskScheduler` sets
    the state below."""

    _tasks: dict[bytes, TaskRecord]
    _ready: dict[PoolKey, collections.deque[TaskRecord]]
    _prefetch: PrefetchDepth
    #: when a scheduling round is due to look again at tasks queued behind young running tasks
    _steal_check_at: float | None = None

    def _finish(self, record: TaskRecord, results: SerializedValue | Sequence[SerializedValue]) -> None:
        """Complete a task's return objects (TaskScheduler's)."""
        raise NotImplementedError

    def _error_for(self, kind: str, error: Any) -> SerializedValue:
        """A system error as a stored value (TaskScheduler's)."""
        raise NotImplementedError

    # ---- deciding ------------------------------------------------------------------------

    def _withdraw_locked(self, executor: ExecutorRecord, records: Sequence[TaskRecord]) -> Withdrawals:
        """Ask `executor` for those of its queued `records` not already being withdrawn."""
        chosen = [r for r in records if r.withdrawing_from is None and r is not executor.tasks[0]]
        if not chosen or executor.connection is None:
            return []
        for record in chosen:
            record.withdrawing_from = executor
        return [(executor.connection, Withdraw([record.spec.task_id for record in chosen]))]

    def _steal_for_idle_locked(self) -> Withdrawals:
        """Idle executors of a pool with room on the ledger take over tasks queued behind
        other executors' long-running tasks: withdraw as many as they can hold. Tasks queued
        behind running tasks still young get a look again once those have run long."""
        queueing = [e for e in self._executors.values() if e.state is ExecutorState.BUSY and len(e.tasks) > 1]
        if not queueing:  # the usual case: nothing waits behind a running task
            return []
        idle: dict[PoolKey, int] = {}
        for executor in self._executors.values():
            if executor.state is ExecutorState.IDLE and executor.connection is not None:
                idle[executor.pool] = idle.get(executor.pool, 0) + 1
        if not idle:
            return []
        now = time.monotonic()
        long_since = now - LONG_RUNNING_S
        sources: dict[PoolKey, list[ExecutorRecord]] = {}
        for executor in queueing:
            if executor.pool in idle:
                sources.setdefault(executor.pool, []).append(executor)
        withdrawals: Withdrawals = []
        recheck: float | None = None
        for pool, busy in sources.items():
            takers = self._ledger.count_fits(pool.shape.as_dict(), idle[pool])
            wanted = takers * (self._prefetch.depth(pool) + 1)
            wanted -= sum(1 for e in busy for r in e.tasks if r.withdrawing_from is not None)
            for executor in sorted(busy, key=lambda e: e.head_started):  # the longest-running first
                if wanted <= 0:
                    break
                queued = [r for r in list(executor.tasks)[1:] if r.withdrawing_from is None]
                if not queued:
                    continue
                if executor.head_started > long_since and not executor.tasks[0].blocked:
                    due = executor.head_started + LONG_RUNNING_S
                    recheck = due if recheck is None else min(recheck, due)
                    continue
                withdrawals += self._withdraw_locked(executor, queued[:wanted])
                wanted -= len(queued[:wanted])
        if recheck is not None:
            self._recheck_steals_at_locked(recheck)
        return withdrawals

    def _recheck_steals_at_locked(self, when: float) -> None:
        if self._steal_check_at is not None and self._steal_check_at <= when:
            return  # a round is due earlier already
        self._steal_check_at = when
        self._timers.call_later(when - time.monotonic(), self._recheck_steals)

    def _recheck_steals(self) -> None:
        with self._lock:
            self._steal_check_at = None
        self.schedule()

    @staticmethod
    def _send_withdrawals(withdrawals: Withdrawals) -> None:
        for connection, withdraw in withdrawals:
            try:
                messages.notify(connection, withdraw)
            except ConnectionClosed:
                pass  # the close callback puts its queue back

    # ---- the answer ----------------------------------------------------------------------

    def tasks_withdrawn(self, connection: Connection, returned: Sequence[bytes], kept: Sequence[bytes]) -> None:
        """An executor's `Withdrawn`: `returned` never started there and go back to the front
        of the ready queue (cancelled ones end); `kept` it runs (or ran) and answers itself."""
        cancelled: list[TaskRecord] = []
        with self._lock:
            executor = self._by_connection.get(connection)
            if executor is None:
                return  # gone: its queue went back to the ready queue when it closed
            for task_id in kept:
                record = self._tasks.get(task_id)
                if record is not None and record.withdrawing_from is executor:
                    record.withdrawing_from = None
            back: list[TaskRecord] = []
            for task_id in returned:
                record = self._tasks.get(task_id)
                if record is None or record.executor is not executor or record not in executor.tasks:
                    continue
                record.withdrawing_from = None
                # The driver may already count it as running (the task before it answered
                # first): the executor never started it, so the next one runs instead.
                was_head = executor.tasks[0] is record
                executor.tasks.remove(record)
                record.executor = None
                if was_head:
                    self._next_head_locked(executor)
                if record.cancelled:
                    record.state = TaskState.DONE
                    cancelled.append(record)
                else:
                    back.append(record)
            for record in reversed(back):
                self._requeue_first_locked(record)
        for record in cancelled:
            self._finish(record, self._error_for("system", TaskCancelledError(record.spec.task_id.hex())))
        self.schedule()

    def _requeue_first_locked(self, record: TaskRecord) -> None:
        """A task that never started goes back to the front of its pool's ready queue."""
        record.state = TaskState.READY
        record.executor = None
        record.withdrawing_from = None
        if record.event is not None:
            record.event.state = TaskStatus.PENDING_NODE_ASSIGNMENT
        self._ready[record.spec.pool].appendleft(record)
