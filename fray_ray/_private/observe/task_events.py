"""Task events: what the driver records of each task attempt, for the state API and the timeline.

The scheduler and the actor manager call the hooks below as a task (or an actor's creation)
moves on; each hook is a few attribute writes, and a lock is taken only when an attempt starts
or ends, to move it between the live table and the history. Actor calls, the most frequent,
keep no event while they are live: the actor manager describes them from its own table of
calls when asked (a live source), and each finished call adds one record to the history.
Finished attempts are kept in a bounded history (oldest dropped first), as Ray's GCS bounds
its task events; `RAY_task_events_max_num_task_in_gcs` sets the bound, as in Ray.

Times are wall-clock seconds as the driver sees them: a task is RUNNING from the moment its
executor has it at the head of its queue (or an actor call is among the calls the actor may run
at once) until its result reaches the driver.
"""

from __future__ import annotations

import collections
import enum
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fray_ray._private.objects.serialization import SerializedValue

if TYPE_CHECKING:
    from fray_ray._private.core.task_spec import ActorCallSpec, ActorCreationSpec

#: Describes live attempts kept elsewhere (the actor manager's calls), when asked.
LiveSource = Callable[[], list["TaskEvent"]]

#: Finished attempts kept when `RAY_task_events_max_num_task_in_gcs` is not set.
DEFAULT_HISTORY = 10_000


def history_limit() -> int:
    """How many finished attempts the driver keeps (Ray's variable; at least 1)."""
    raw = os.environ.get("RAY_task_events_max_num_task_in_gcs", "")
    try:
        return max(1, int(raw)) if raw.strip() else DEFAULT_HISTORY
    except ValueError:
        return DEFAULT_HISTORY


class TaskStatus(enum.StrEnum):
    """Ray's task states (the subset the driver can tell apart)."""

    PENDING_ARGS_AVAIL = "PENDING_ARGS_AVAIL"  # waiting for its arguments
    PENDING_NODE_ASSIGNMENT = "PENDING_NODE_ASSIGNMENT"  # waiting for a worker with room
    SUBMITTED_TO_WORKER = "SUBMITTED_TO_WORKER"  # queued on an executor behind its running task
    PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY = "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY"  # behind earlier calls
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"


class TaskType(enum.StrEnum):
    NORMAL_TASK = "NORMAL_TASK"
    ACTOR_CREATION_TASK = "ACTOR_CREATION_TASK"
    ACTOR_TASK = "ACTOR_TASK"


class TaskEvent:
    """One attempt of one task; mutable, written by the hooks without a lock (single writes)."""

    __slots__ = (
        "task_id", "attempt", "name", "func_name", "kind", "actor_id", "parent_task_id", "state",
        "created", "started", "ended", "host", "worker_id", "worker_pid", "error", "error_kind",
        "resources", "placement_group_id",
    )

    def __init__(
        self,
        task_id: bytes,
        name: str,
        func_name: str,
        kind: TaskType,
        state: TaskStatus,
        *,
        attempt: int = 0,
        actor_id: bytes | None = None,
        parent_task_id: bytes | None = None,
        resources: Mapping[str, float] | None = None,
    ) -> None:
        self.task_id = task_id
        self.attempt = attempt
        self.name = name
        self.func_name = func_name
        self.kind = kind
        self.actor_id = actor_id
        self.parent_task_id = parent_task_id
        self.state = state
        self.created = time.time()
        self.started: float | None = None
        self.ended: float | None = None
        self.host: str | None = None  # the cluster host it ran on (None: not placed yet)
        self.worker_id: bytes | None = None
        self.worker_pid: int | None = None
        self.error: SerializedValue | None = None  # deserialized only when listed
        self.error_kind: str | None = None  # Ray's error type when the driver knows it without the value
        self.resources = resources
        self.placement_group_id: str | None = None

    def record(self) -> tuple[Any, ...]:
        """The attempt as a tuple of plain values, as the history keeps finished ones: unlike
        an object, such a tuple leaves the garbage collector's lists at its first collection, so
        a full history costs the collector nothing (it costs one object per attempt otherwise,
        examined at every full collection)."""
        return (self.task_id, self.attempt, self.name, self.func_name, self.kind.value, self.actor_id,
                self.parent_task_id, self.state.value, self.created, self.started, self.ended, self.host,
                self.worker_id, self.worker_pid, self.error, self.error_kind, self.resources, self.placement_group_id)

    @classmethod
    def from_record(cls, record: tuple[Any, ...]) -> TaskEvent:
        event = cls.__new__(cls)
        (event.task_id, event.attempt, event.name, event.func_name, kind, event.actor_id, event.parent_task_id,
         state, event.created, event.started, event.ended, event.host, event.worker_id, event.worker_pid,
         event.error, event.error_kind, event.resources, event.placement_group_id) = record
        event.kind = TaskType(kind)
        event.state = TaskStatus(state)
        return event


def first_error(results: SerializedValue | Sequence[SerializedValue] | None) -> SerializedValue | None:
    if results is None:
        return None
    if isinstance(results, SerializedValue):
        return results if results.is_error else None
    for value in results:
        if value.is_error:
            return value
    return None


class TaskEvents:
    """The session's task attempts: live ones by task id, finished ones in a bounded history."""

    def __init__(self, history: int | None = None) -> None:
        self._lock = threading.Lock()  # guards _live and _finished (membership, not the events)
        self._live: dict[bytes, TaskEvent] = {}
        #: finished attempts as `TaskEvent.record()` tuples, oldest first
        self._finished: collections.deque[tuple[Any, ...]] = collections.deque(maxlen=history or history_limit())
        self.dropped = 0  # finished attempts pushed out of the history
        self._live_sources: list[LiveSource] = []

    # ---- hooks ---------------------------------------------------------------------------

    def submitted(self, event: TaskEvent) -> TaskEvent:
        with self._lock:
            self._live[event.task_id] = event
        return event

    @staticmethod
    def placed(event: TaskEvent, state: TaskStatus, host: str | None, worker_id: bytes | None, pid: int | None) -> None:
        """The attempt went to a worker: RUNNING at once, or queued there."""
        event.host = host
        event.worker_id = worker_id
        event.worker_pid = pid
        event.state = state
        if state is TaskStatus.RUNNING:
            event.started = time.time()

    @staticmethod
    def running(event: TaskEvent) -> None:
        if event.state is not TaskStatus.RUNNING:
            event.state = TaskStatus.RUNNING
            event.started = time.time()

    def finished(
        self, event: TaskEvent | None, results: SerializedValue | Sequence[SerializedValue] | None,
        error_kind: str | None = None,
    ) -> None:
        """The attempt ended: FINISHED, or FAILED with the first error among its results."""
        if event is None:
            return
        event.ended = time.time()
        event.error = first_error(results)
        event.error_kind = error_kind
        event.state = TaskStatus.FAILED if event.error is not None or error_kind else TaskStatus.FINISHED
        record = event.record()
        with self._lock:
            if self._live.get(event.task_id) is event:
                del self._live[event.task_id]
            if len(self._finished) == self._finished.maxlen:
                self.dropped += 1
            self._finished.append(record)

    def finished_by_id(self, task_id: bytes, results: SerializedValue | Sequence[SerializedValue] | None,
                       error_kind: str | None = None) -> None:
        self.finished(self._live.get(task_id), results, error_kind)

    def retried(self, event: TaskEvent | None, results: SerializedValue | Sequence[SerializedValue] | None,
                error_kind: str | None = None) -> TaskEvent | None:
        """This attempt failed and the task runs again: a new attempt, waiting for a worker."""
        if event is None:
            return None
        if error_kind is None and first_error(results) is None:
            error_kind = "WORKER_DIED"
        self.finished(event, results, error_kind)
        again = TaskEvent(
            event.task_id, event.name, event.func_name, event.kind, TaskStatus.PENDING_NODE_ASSIGNMENT,
            attempt=event.attempt + 1, actor_id=event.actor_id, parent_task_id=event.parent_task_id,
            resources=event.resources,
        )
        again.placement_group_id = event.placement_group_id
        return self.submitted(again)

    def amend_error(self, task_id: bytes, attempt: int, error: SerializedValue) -> None:
        """Give a finished attempt the error learnt after it ended (how its worker died)."""
        error_field = 14  # `TaskEvent.record`'s position of `error`
        with self._lock:
            for index in range(len(self._finished) - 1, -1, -1):
                record = self._finished[index]
                if record[0] == task_id and record[1] == attempt:
                    self._finished[index] = (*record[:error_field], error, *record[error_field + 1:])
                    return

    def add_finished(self, records: Sequence[tuple[Any, ...]]) -> None:
        """Attempts a live source kept, as they end: their records join the history."""
        with self._lock:
            history = self._finished
            room = history.maxlen - len(history) if history.maxlen is not None else len(records)
            self.dropped += max(0, len(records) - room)
            history.extend(records)

    def next_attempt(self, task_id: bytes) -> int:
        """The number a new attempt of `task_id` gets after those recorded (a rebuild's run;
        rare, so the history is searched)."""
        with self._lock:
            live = self._live.get(task_id)
            if live is not None:
                return live.attempt + 1
            for record in reversed(self._finished):
                if record[0] == task_id:
                    return record[1] + 1
        return 0

    def live(self, task_id: bytes) -> TaskEvent | None:
        return self._live.get(task_id)

    def add_live_source(self, source: LiveSource) -> None:
        self._live_sources.append(source)

    # ---- reading -------------------------------------------------------------------------

    def live_events(self) -> list[TaskEvent]:
        """Every attempt that has not ended, its own and its sources'."""
        with self._lock:
            live = list(self._live.values())
        for source in self._live_sources:
            live.extend(source())
        return live

    def snapshot(self) -> list[TaskEvent]:
        """Every recorded attempt: the finished history (oldest first), then the live ones."""
        live = self.live_events()
        with self._lock:
            finished = list(self._finished)
        # An attempt that ended after its source described it is listed once, as ended.
        ended = {(record[0], record[1]) for record in finished} if live else set()
        return [*map(TaskEvent.from_record, finished), *(e for e in live if (e.task_id, e.attempt) not in ended)]


def actor_creation_task_id(actor_id: bytes) -> bytes:
    """The id of an actor's creation task (24 bytes: padding, then the actor id)."""
    return bytes(24 - len(actor_id)) + actor_id


def describe(event: TaskEvent) -> dict[str, Any]:
    """The error type and message of a failed attempt (deserializing its error once)."""
    if event.error is None:
        return {"error_type": event.error_kind, "error_message": None}
    from fray_ray._private.objects.serialization import deserialize

    try:
        error = deserialize(event.error)
    except Exception as exc:  # noqa: BLE001 - a value that cannot be read still says why
        return {"error_type": event.error_kind or "TASK_EXECUTION_EXCEPTION", "error_message": f"(unreadable error: {exc})"}
    return {"error_type": event.error_kind or ray_error_type(error), "error_message": str(error)}


def ray_error_type(error: BaseException) -> str:
    """Ray's ErrorType name for an exception."""
    import fray_ray.exceptions as ex

    for cls, name in (
        (ex.TaskCancelledError, "TASK_CANCELLED"),
        (ex.OutOfMemoryError, "OUT_OF_MEMORY"),
        (ex.WorkerCrashedError, "WORKER_DIED"),
        (ex.ActorUnavailableError, "ACTOR_UNAVAILABLE"),
        (ex.RayActorError, "ACTOR_DIED"),
        (ex.TaskUnschedulableError, "TASK_UNSCHEDULABLE_ERROR"),
        (ex.ActorUnschedulableError, "ACTOR_UNSCHEDULABLE_ERROR"),
        (ex.TaskPlacementGroupRemoved, "TASK_PLACEMENT_GROUP_REMOVED"),
        (ex.ObjectLostError, "OBJECT_LOST"),
        (ex.RuntimeEnvSetupError, "RUNTIME_ENV_SETUP_FAILED"),
        (ex.RayTaskError, "TASK_EXECUTION_EXCEPTION"),
    ):
        if isinstance(error, cls):
            return name
    return "TASK_EXECUTION_EXCEPTION"


def creation_event(spec: ActorCreationSpec) -> TaskEvent:
    """The event of an actor's creation task, waiting for a worker."""
    name = f"{spec.class_name}.__init__"
    return TaskEvent(
        actor_creation_task_id(spec.actor_id), name, name, TaskType.ACTOR_CREATION_TASK,
        TaskStatus.PENDING_NODE_ASSIGNMENT, actor_id=spec.actor_id, resources=spec.shape.as_dict(),
    )


def call_event(call: ActorCallSpec, class_name: str, host: str | None, pid: int | None) -> TaskEvent:
    """A live actor call as an event: RUNNING once it began (as far as the driver can tell),
    waiting behind earlier calls once sent, waiting for its actor before that."""
    func_name = f"{class_name}.{call.method}"
    if call.started_at is not None:
        state = TaskStatus.RUNNING
    elif host is not None:
        state = TaskStatus.PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY
    else:
        state = TaskStatus.PENDING_NODE_ASSIGNMENT
    event = TaskEvent(call.call_id, call.name or func_name, func_name, TaskType.ACTOR_TASK, state,
                      attempt=call.attempt, actor_id=call.actor_id)
    event.created = call.submitted_at or event.created
    event.started = call.started_at
    if host is not None:
        event.host, event.worker_pid = host, pid
    return event


def finished_call_record(
    call: ActorCallSpec, class_name: str, host: str | None, pid: int | None,
    results: SerializedValue | Sequence[SerializedValue] | None, ended: float, error_kind: str | None = None,
) -> tuple[Any, ...]:
    """The history's record of an attempt of an actor call that ended (the fields of
    `TaskEvent.record`, in its order), made without an event."""
    func_name = f"{class_name}.{call.method}"
    error = first_error(results)
    state = TaskStatus.FAILED if error is not None or error_kind else TaskStatus.FINISHED
    return (call.call_id, call.attempt, call.name or func_name, func_name, TaskType.ACTOR_TASK.value, call.actor_id,
            None, state.value, call.submitted_at, call.started_at, ended, host, None, pid, error, error_kind, None, None)
