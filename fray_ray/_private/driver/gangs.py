"""Gangs: tasks that run on every host of a TPU slice (or a group of GPU hosts) at once.

A gang call becomes one Iris job per slice whose replicas are the slice's hosts, coscheduled
by the cluster: all hosts start together or none do. Each host runs an executor that
connects back here; when every member is connected the task goes to all of them, each with
its host index (and the MEGASCALE_* variables for multi-slice), and the call's refs are the
hosts' results in host order. If a host dies, the whole gang is torn down and the call is
retried on a fresh gang (up to max_retries), never on a partial one.

A reserved gang (SlicePlacementGroup) keeps its members between calls.
"""

from __future__ import annotations

import enum
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fray_ray._private import messages
from fray_ray._private.core.retry_policy import retries_user_exception, within_retries
from fray_ray._private.core.runtime_env import RuntimeEnv
from fray_ray._private.core.runtime_state import effective_runtime_env
from fray_ray._private.core.task_spec import TaskSpec
from fray_ray._private.driver.timers import TimerQueue
from fray_ray._private.messages import ExecuteTask, Exit
from fray_ray._private.objects.object_table import ObjectTable
from fray_ray._private.objects.serialization import SerializedValue
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray.exceptions import TaskUnschedulableError, WorkerCrashedError

if TYPE_CHECKING:
    from fray_ray._private.driver.launcher import WorkerLauncher
    from fray_ray._private.options import ActorOptions, TaskOptions

logger = logging.getLogger(__name__)

STARTUP_CHECK_S = 0.5
MEGASCALE_PORT = "8081"


@dataclass(frozen=True)
class GangShape:
    """What one gang needs: `slices` × `hosts` members, each with a TPU slice host or GPUs."""

    tpu: str | None = None  # TPU variant, e.g. "v5p-16"
    slices: int = 1
    hosts: int = 1  # members per slice
    gpu: str | None = None
    gpus_per_host: int = 0
    env_vars: tuple[tuple[str, str], ...] = ()
    runtime_env: RuntimeEnv = field(default_factory=RuntimeEnv)

    @property
    def size(self) -> int:
        return self.slices * self.hosts


class GangState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    BUSY = "busy"
    DEAD = "dead"


@dataclass(eq=False)
class GangTask:
    spec: TaskSpec
    attempts: int = 0
    results: dict[int, SerializedValue] = field(default_factory=dict)
    waiting_on: set[bytes] = field(default_factory=set)


@dataclass(eq=False)
class Gang:
    gang_id: bytes
    shape: GangShape
    reserved: bool
    state: GangState = GangState.STARTING
    members: dict[int, Connection] = field(default_factory=dict)
    member_ips: dict[int, str] = field(default_factory=dict)
    jobs: list[Any] = field(default_factory=list)
    queue: deque[GangTask] = field(default_factory=deque)
    running: GangTask | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    failure: str | None = None


class GangScheduler:
    """Creates gangs, runs gang calls on them, and retries a call when a host fails."""

    def __init__(
        self,
        objects: ObjectTable,
        launcher: WorkerLauncher,
        timers: TimerQueue,
        *,
        error_for: Callable[[str, BaseException], SerializedValue],
    ) -> None:
        self._objects = objects
        self._launcher = launcher
        self._timers = timers
        self._error_for = error_for
        self._lock = threading.Lock()
        self._gangs: dict[bytes, Gang] = {}
        self._by_connection: dict[Connection, tuple[Gang, int]] = {}
        self._closed = False

    # ---- gangs ---------------------------------------------------------------------------

    def reserve(self, shape: GangShape, timeout: float | None) -> bytes:
        """Start a gang that stays up for repeated calls; blocks until ready (or timeout)."""
        gang = self._start(shape, reserved=True)
        if not gang.ready.wait(timeout):
            self.release(gang.gang_id)
            raise TimeoutError(f"the {shape.tpu or shape.gpu} hosts could not be reserved within {timeout} s")
        if gang.failure:
            raise RuntimeError(gang.failure)
        return gang.gang_id

    def release(self, gang_id: bytes) -> None:
        with self._lock:
            gang = self._gangs.pop(gang_id, None)
        if gang is not None:
            self._tear_down(gang, "the reservation was released")

    def _start(self, shape: GangShape, *, reserved: bool) -> Gang:
        gang = Gang(uuid.uuid4().bytes, shape, reserved)
        with self._lock:
            self._gangs[gang.gang_id] = gang

        def launched(jobs: list[Any], error: BaseException | None) -> None:
            if error is not None:
                self._fail_gang(gang, f"its job could not be started: {error}", unschedulable=True)
                return
            with self._lock:
                gang.jobs = list(jobs)

        self._launcher.launch_gang(gang.gang_id, shape, 0 if reserved else 1, launched)
        self._timers.call_later(STARTUP_CHECK_S, lambda: self._check_startup(gang))
        return gang

    def _check_startup(self, gang: Gang) -> None:
        with self._lock:
            if gang.state is not GangState.STARTING or self._closed:
                return
            jobs = list(gang.jobs)
        for job in jobs:
            problem = self._launcher.job_failure(job)
            if problem is not None:
                self._fail_gang(gang, problem)
                return
        self._timers.call_later(STARTUP_CHECK_S, lambda: self._check_startup(gang))

    def member_connected(self, gang_id: bytes, index: int, connection: Connection, ip: str) -> bool:
        with self._lock:
            gang = self._gangs.get(gang_id)
            if gang is None or gang.state is not GangState.STARTING or index in gang.members:
                return False
            gang.members[index] = connection
            gang.member_ips[index] = ip
            self._by_connection[connection] = (gang, index)
            complete = len(gang.members) == gang.shape.size
            if complete:
                gang.state = GangState.READY
        connection.add_close_callback(self._member_lost)
        if complete:
            gang.ready.set()
            self._dispatch(gang)
        return True

    # ---- calls ---------------------------------------------------------------------------

    def submit(self, spec: TaskSpec, shape: GangShape | None, gang_id: bytes | None) -> None:
        """Run `spec` on a reserved gang (gang_id) or on a new gang of `shape`."""
        task = GangTask(spec)
        self._objects.incref(spec.arguments.value.contained_refs)
        task.waiting_on = {oid for oid in spec.arguments.top_level if not self._objects.is_done(oid)}
        if gang_id is not None:
            with self._lock:
                gang = self._gangs.get(gang_id)
            if gang is None or gang.state is GangState.DEAD:
                self._finish(task, self._error_for("system", RuntimeError("the reserved TPU slice is gone")))
                return
        else:
            assert shape is not None
            gang = None
        pending = list(task.waiting_on)
        if not pending:
            self._enqueue(task, gang, shape)
            return
        lock = threading.Lock()

        def done(object_id: bytes) -> None:
            with lock:
                task.waiting_on.discard(object_id)
                if task.waiting_on:
                    return
            self._enqueue(task, gang, shape)

        for object_id in pending:
            self._objects.add_done_callback(object_id, done)

    def _enqueue(self, task: GangTask, gang: Gang | None, shape: GangShape | None) -> None:
        for object_id in task.spec.arguments.top_level:
            value = self._objects.value(object_id)
            if value is not None and value.is_error:
                self._finish(task, value)
                return
        if gang is None:
            gang = self._start(shape, reserved=False)  # type: ignore[arg-type]
        with self._lock:
            gang.queue.append(task)
        self._dispatch(gang)

    def _dispatch(self, gang: Gang) -> None:
        with self._lock:
            if gang.state is not GangState.READY or not gang.queue:
                return
            task = gang.queue.popleft()
            gang.running = task
            gang.state = GangState.BUSY
            members = dict(gang.members)
            ips = dict(gang.member_ips)
        spec = task.spec
        for index, connection in sorted(members.items()):
            env = dict(spec.pool.env_vars)
            env.update(_member_env(gang.shape, index, ips.get(0, "127.0.0.1")))
            message = ExecuteTask.of(
                spec, self._objects.value, returns=[spec.return_ids[index]], num_returns=1, env=env,
                resources=spec.pool.shape.as_dict(),
            )
            try:
                messages.notify(connection, message)
            except ConnectionClosed:
                pass  # _member_lost handles it

    def task_done(self, connection: Connection, task_id: bytes, results: Sequence[SerializedValue], user_error: bool) -> None:
        finished: GangTask | None = None
        with self._lock:
            found = self._by_connection.get(connection)
            if found is None:
                return
            gang, index = found
            task = gang.running
            if task is None or task.spec.task_id != task_id:
                return
            task.results[index] = results[0] if results else self._error_for("system", RuntimeError("no result"))
            if len(task.results) == gang.shape.size:
                finished = task
                gang.running = None
                gang.state = GangState.READY if gang.reserved else GangState.DEAD
        if finished is None:
            return
        if not gang.reserved:
            with self._lock:
                self._gangs.pop(gang.gang_id, None)
                for member in gang.members.values():
                    self._by_connection.pop(member, None)
        if any(v.is_error for v in finished.results.values()) and self._retry_exception(finished):
            finished.results.clear()
            finished.attempts += 1
            self._enqueue(finished, gang if gang.reserved else None, gang.shape)
            return
        self._finish(finished, [finished.results[i] for i in range(gang.shape.size)])
        if gang.reserved:
            self._dispatch(gang)

    @staticmethod
    def _retry_exception(task: GangTask) -> bool:
        return within_retries(task.spec.max_retries, task.attempts) and retries_user_exception(
            task.spec.retry_exceptions, list(task.results.values())
        )

    # ---- failures ------------------------------------------------------------------------

    def _member_lost(self, connection: Connection) -> None:
        with self._lock:
            found = self._by_connection.pop(connection, None)
            if found is None or self._closed:
                return
            gang, index = found
            if gang.state is GangState.DEAD:
                return
            # A one-call gang's members exit once they have delivered their result.
            delivered = not gang.reserved and gang.running is not None and index in gang.running.results
        if not delivered:
            self._fail_gang(gang, f"host {index} of the gang died")

    def _fail_gang(self, gang: Gang, why: str, *, unschedulable: bool = False) -> None:
        """Tear the whole gang down; retry its calls on a new gang while max_retries allows."""
        with self._lock:
            if gang.state is GangState.DEAD and gang.running is None and not gang.queue:
                return
            gang.state = GangState.DEAD
            gang.failure = why
            tasks = ([gang.running] if gang.running else []) + list(gang.queue)
            gang.running = None
            gang.queue.clear()
            self._gangs.pop(gang.gang_id, None)
            for member in gang.members.values():
                self._by_connection.pop(member, None)
        gang.ready.set()
        self._tear_down(gang, why)
        for task in tasks:
            task.results.clear()
            task.attempts += 1
            max_retries = task.spec.max_retries
            if not unschedulable and not gang.reserved and (max_retries < 0 or task.attempts <= max_retries):
                self._enqueue(task, None, gang.shape)
                continue
            error: BaseException = (
                TaskUnschedulableError(f"Task {task.spec.name} cannot run: {why}")
                if unschedulable
                else WorkerCrashedError(f"The gang running task {task.spec.name} failed: {why}.")
            )
            self._finish(task, self._error_for("system", error))

    def _tear_down(self, gang: Gang, why: str) -> None:
        for connection in list(gang.members.values()):
            try:
                messages.notify(connection, Exit())
            except ConnectionClosed:
                pass
        for job in gang.jobs:
            self._launcher.terminate(job)

    def _finish(self, task: GangTask, results: SerializedValue | Sequence[SerializedValue]) -> None:
        values = [results] * len(task.spec.return_ids) if isinstance(results, SerializedValue) else list(results)
        for object_id, value in zip(task.spec.return_ids, values):
            self._objects.fulfil(object_id, value)
        self._objects.decref(task.spec.arguments.value.contained_refs)

    def size(self, gang_id: bytes) -> int:
        with self._lock:
            gang = self._gangs.get(gang_id)
            if gang is None:
                raise ValueError("the reserved TPU slice is gone (released or failed)")
            return gang.shape.size

    def owns(self, connection: Connection) -> bool:
        with self._lock:
            return connection in self._by_connection

    def close(self) -> list[Any]:
        with self._lock:
            self._closed = True
            gangs = list(self._gangs.values())
            self._gangs.clear()
            self._by_connection.clear()
        jobs = []
        for gang in gangs:
            for connection in gang.members.values():
                try:
                    messages.notify(connection, Exit())
                except ConnectionClosed:
                    pass
            jobs.extend(gang.jobs)
        return jobs


def shape_for(options: TaskOptions | ActorOptions) -> GangShape | None:
    """The gang a call with these options needs, or None for an ordinary call.

    `tpu="v5p-16"` (with `num_slices`) asks for every host of a slice; `gpu="H100"` with
    `num_hosts > 1` asks for a group of GPU hosts. Ray's resources are never a gang: as in Ray,
    `resources={"TPU-v5p-16-head": 1}` is one call on host 0 of a slice.
    """
    tpu = options.tpu
    if tpu is not None:
        return slice_shape(tpu, options.num_slices, options.runtime_env)
    hosts = options.num_hosts
    if options.gpu and hosts > 1:
        gpus = int(options.num_gpus or 1)
        env = effective_runtime_env(options.runtime_env)
        return GangShape(gpu=options.gpu, hosts=hosts, gpus_per_host=gpus, env_vars=env.env_vars, runtime_env=env)
    return None


def slice_shape(tpu: str, num_slices: int, runtime_env: Mapping[str, Any] | None = None) -> GangShape:
    """The gang of every host of `num_slices` slices of the TPU variant `tpu`."""
    from fray_ray.fray import get_tpu_topology

    info = get_tpu_topology(tpu)
    env = effective_runtime_env(runtime_env)
    return GangShape(tpu=tpu, slices=num_slices, hosts=info.vm_count, env_vars=env.env_vars, runtime_env=env)


def _member_env(shape: GangShape, index: int, coordinator_ip: str) -> dict[str, str]:
    """What member `index` needs beyond its host's own environment."""
    env = {"FRAY_RAY_GANG_INDEX": str(index), "FRAY_RAY_GANG_SIZE": str(shape.size)}
    if shape.tpu and shape.slices > 1:
        env.update(
            {
                "MEGASCALE_COORDINATOR_ADDRESS": f"{coordinator_ip}:{MEGASCALE_PORT}",
                "MEGASCALE_NUM_SLICES": str(shape.slices),
                "MEGASCALE_SLICE_ID": str(index // shape.hosts),
                "MEGASCALE_PORT": MEGASCALE_PORT,
            }
        )
    return env
