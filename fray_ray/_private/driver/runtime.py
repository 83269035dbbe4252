"""The driver runtime: the session that owns objects, schedules tasks and runs actors.

Lifecycle: `DriverRuntime(...)` builds the parts, `start()` opens the session service, starts
reading the cluster's workers (in the background) and pre-starts one executor, `shutdown()`
stops everything it started in reverse order (executors and actors, the cluster view, the
session service, the Fray client, and the embedded cluster if it owns one).
Only one driver runtime exists per process; `fray_ray.init()` creates it. Reading objects
(`get`, `wait`, futures, stream items) is its base `DriverReads` (`driver_reads.py`).
"""

from __future__ import annotations

import enum
import logging
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from fray_ray._private.core.generators import ObjectRefGenerator
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.core.placement_group_handle import PlacementGroupInfo
from fray_ray._private.core.runtime_env import RuntimeEnv
from fray_ray._private.core.task_spec import (
    ActorCallSpec,
    ActorCreationSpec,
    Arguments,
    PoolKey,
    ResourceShape,
    TaskSpec,
    canonical_pool,
)
from fray_ray._private.driver.actors import ActorManager
from fray_ray._private.driver.cluster_ledger import ClusterLedger
from fray_ray._private.driver.cluster_view import ClusterView
from fray_ray._private.driver.dashboard_feed import DashboardFeed, DashboardSettings, start_session_feed
from fray_ray._private.driver.driver_reads import DriverReads
from fray_ray._private.driver.gangs import GangScheduler, slice_shape
from fray_ray._private.driver.held_lineage import HeldLineage
from fray_ray._private.driver.idle_workers import lending_enabled, pool_can_host
from fray_ray._private.driver.launcher import WorkerEntryPoints, WorkerLauncher
from fray_ray._private.driver.nodes import node_id_for
from fray_ray._private.driver.placement_groups import PlacementGroupManager
from fray_ray._private.driver.scheduler import TaskScheduler
from fray_ray._private.driver.session import SessionService
from fray_ray._private.driver.streams import StreamTable, failed_generator_value
from fray_ray._private.driver.timers import TimerQueue
from fray_ray._private.objects import ids
from fray_ray._private.objects import ids as ids_module
from fray_ray._private.objects.holder_clients import HolderClients
from fray_ray._private.objects.object_store import ObjectStore, ObjectStoreConfig
from fray_ray._private.objects.object_table import ObjectTable
from fray_ray._private.objects.refcount import LocalReferenceCounter
from fray_ray._private.objects.relays import RelayPlan
from fray_ray._private.objects.serialization import SerializedValue, serialize, serialize_error
from fray_ray._private.objects.shared_memory import (
    BorrowedBlocks,
    LentBlocks,
    host_identity,
    remove_stale_files,
    shared_memory_dir,
)
from fray_ray._private.objects.spilling import remove_orphaned_spill_dirs
from fray_ray._private.observe.metrics import process_registry
from fray_ray._private.observe.output_folding import FoldSettings, OutputFolder, print_line
from fray_ray._private.observe.progress_bars import driver_bars
from fray_ray._private.observe.task_events import TaskEvents
from fray_ray._private.stream import spin_wait
from fray_ray._private.stream.buffers import MIN_POOLED
from fray_ray.exceptions import RaySystemError
from fray_ray.fray.hosts import this_machine

logger = logging.getLogger(__name__)

REFERENCE_FLUSH_S = 0.1
#: Task arguments with at least this many bytes of out-of-band buffers are stored as an object.
STORED_ARGUMENTS_BYTES = MIN_POOLED


class DriverState(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    STOPPED = "stopped"


class DriverRuntime(DriverReads):
    """The CoreRuntime of a driver process."""

    is_driver = True

    def __init__(
        self,
        client: Any,
        worker_entry_points: WorkerEntryPoints,
        *,
        host_id: str | None = None,
        namespace: str,
        session_name: str,
        log_to_driver: bool = True,
        host: str = "127.0.0.1",
        owned: Sequence[Any] = (),
        node_ip: str = "127.0.0.1",
        address_info: Mapping[str, Any] | None = None,
        warm_executors: int = 1,
        object_store: ObjectStoreConfig | None = None,
        runtime_env: RuntimeEnv | None = None,
        advertise_host: str | None = None,
        output_folding: FoldSettings | None = None,
        dashboard: DashboardSettings | None = None,
    ) -> None:
        """`host` is what the session service binds, `advertise_host` (default `host`) the
        address workers connect to; `host_id` the cluster host this driver runs on, if any
        (its node is then the driver's node and the head); `dashboard`, how the session shows
        on the cluster's dashboard (None: not at all)."""
        self.state = DriverState.CREATED
        self.started_at = time.time()  # wall clock, for the state API's job row
        self.runtime_env = runtime_env or RuntimeEnv()  # the job's: every task and actor inherits it
        self.client = client
        self.namespace = namespace
        self.session_name = session_name
        self.job_id = ids.JOB_ID_HEX
        self.host_id = host_id
        self.node_id = node_id_for(host_id) if host_id else ids.new_node_id()
        self.node_ip = node_ip
        self.address_info = dict(address_info or {})
        self._log_to_driver = log_to_driver
        self._owned = list(owned)  # things to stop after the client (the embedded cluster)
        self._token = secrets.token_hex(16)
        if object_store is None:
            object_store = ObjectStoreConfig(1 << 30)
        shared_dir = self._shared_dir = shared_memory_dir()
        self.objects = ObjectTable(ObjectStore(object_store, session_name=session_name, shared_dir=shared_dir))
        #: workers whose hello names this identity read large objects from shared memory
        self.shared_memory_identity = host_identity(shared_dir)
        self.lent_blocks = LentBlocks()
        #: values workers hold are fetched from them (mapped when they share this host's directory)
        self.holders = HolderClients(self._token, BorrowedBlocks())
        self.holders.borrows.use_directory(shared_dir)
        self.references = LocalReferenceCounter(self.objects.incref, self.objects.decref)
        self.ledger = ClusterLedger()
        self.view = ClusterView(
            client, self.ledger, head_host=host_id, head_resources={"object_store_memory": float(object_store.limit)},
            on_change=self._resources_released, fallback=_this_machine,
        )
        self.timers = TimerQueue("driver-timers")
        # Workers' lines, with repeats folded as Ray folds them.
        self.worker_output = OutputFolder(output_folding or FoldSettings(), print_line, self.timers.call_later)
        self.session = SessionService(self, host=host, token=self._token, advertise_host=advertise_host)
        self._dashboard = dashboard
        self.dashboard_feed: DashboardFeed | None = None  # serving from start() to shutdown()
        self.launcher = WorkerLauncher(
            client, self.session.address, self._token, worker_entry_points, job_prefix=session_name, owns_cluster=bool(self._owned),
            session_job=dashboard is not None and dashboard.session_job, slices=self.ledger.slice_names,
        )
        spin_wait.workers_are_threads_here(self.launcher.in_process)  # then they share this process's GIL
        self.streams = StreamTable(self.objects)
        self.task_events = TaskEvents()  # every task attempt and actor call, for the state API and timeline
        self.placement_groups = PlacementGroupManager(self.ledger, self.objects, on_released=self._resources_released)
        self.scheduler = TaskScheduler(
            self.objects,
            self.ledger,
            self.launcher,
            self.timers,
            judge=lambda strategy, demand: self.view.judge(strategy, demand, self.node_id),
            before_schedule=self._before_schedule,
            error_for=self._error_value,
            stream_finished=self.streams.finish,
            stream_released=self.streams.release,
            failed_generator=lambda task_id, error: failed_generator_value(self.streams, task_id, error),
            warm_executors=warm_executors,
            placement_groups=self.placement_groups,
            events=self.task_events,
        )
        self.lineage = HeldLineage(self.objects, self.holders, self.route_task, self.scheduler.spec_of,
                                   self.streams.refill, self.streams.running)
        self.objects.on_remote_freed = self._remote_freed
        #: large objects many hosts read: which workers keep copies to serve onward
        self.relays = RelayPlan()
        self.objects.on_values_dropped = self._values_dropped
        self.holders.on_unreachable = self.lineage.unreachable
        self.scheduler.hand_off = self.lineage.hand_off
        self.actors = ActorManager(
            self.objects,
            self.ledger,
            self.launcher,
            self.streams,
            namespace=namespace,
            session_id=session_name,
            placement_groups=self.placement_groups,
            timers=self.timers,
            view=self.view,
            events=self.task_events,
        )
        self.gangs = GangScheduler(self.objects, self.launcher, self.timers, error_for=self._error_value)
        self.actors.on_resources_released = self._resources_released
        self.actors.hand_off = self.lineage.actor_ending
        self.task_events.add_live_source(self.actors.live_call_events)
        self.task_events.add_live_source(self.actors.direct_call_events)  # workers' calls straight to hosts
        if not self.launcher.in_process and lending_enabled():  # new actors may take idle executors
            self.actors.lend_worker = lambda spec: self.scheduler.lend_idle(lambda pool: pool_can_host(pool, spec))
        self.ledger.make_room = self.scheduler.make_room  # idle executors give way to new processes
        self.scheduler.on_launch_refused = self.view.nudge  # a lost node's replacement may be joining
        self.objects.foreign = _ReferenceRouter(self.actors, self.streams)
        self._flush_timer = None
        self._warm_executors = warm_executors
        self.address_info["node_id"] = self.node_id.hex()

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> DriverRuntime:
        remove_orphaned_spill_dirs(self.objects.store.config.spill_parent)
        self.launcher.prepare(self.runtime_env)  # the job's code, as it is at init
        self.session.start()
        self.view.start()  # the cluster's workers are read meanwhile: init does not wait for them
        self.launcher.start()  # the lease job, ahead of every job of the session
        if self._dashboard is not None:
            self.dashboard_feed = start_session_feed(self, self._dashboard)
        self.state = DriverState.RUNNING
        self._flush_timer = self.timers.call_later(REFERENCE_FLUSH_S, self._flush_references)
        if self._warm_executors:
            self.scheduler.prestart(default_pool(self.runtime_env), self._warm_executors)
        return self

    def _flush_references(self) -> None:
        if self.state is not DriverState.RUNNING:
            return
        self.references.flush()
        self._flush_timer = self.timers.call_later(REFERENCE_FLUSH_S, self._flush_references)

    def shutdown(self) -> None:
        """Stop executors and actors, the session, the client and what this driver owns."""
        if self.state is DriverState.STOPPED:
            return
        self.state = DriverState.STOPPED

        if self.dashboard_feed is not None:
            self.dashboard_feed.close()
        idle_executors, busy_executors = self.scheduler.close()
        jobs = idle_executors + self.actors.close() + self.gangs.close()
        self.view.stop()
        self.objects.fail_all_pending(lambda _: serialize_error(RaySystemError("The session was shut down.")))
        self.launcher.shutdown(jobs, wait=True, exiting=self.session.workers_connected, busy=busy_executors)
        self.session.close()
        spin_wait.workers_are_threads_here(False)
        self.worker_output.close()
        self.timers.stop()
        try:
            self.client.shutdown(wait=False)
        except Exception:  # noqa: BLE001 - shutting down must not fail half-way
            logger.debug("client shutdown failed", exc_info=True)
        for resource in reversed(self._owned):
            try:
                resource.stop()
            except Exception:  # noqa: BLE001 - keep releasing the rest
                logger.debug("stopping %r failed", resource, exc_info=True)
        self.holders.close()
        self.objects.store.close()
        if self._shared_dir is not None:  # blocks of this session's processes that were killed
            remove_stale_files(self._shared_dir)

    def _remote_freed(self, held: list[tuple[str, bytes]]) -> None:
        self.holders.release(held)
        self.lineage.freed([object_id for _, object_id in held])

    def _values_dropped(self, object_ids: list[bytes]) -> None:
        copies = self.relays.forget(object_ids)
        if copies:
            self.holders.release(copies)

    def worker_info(self, worker_id: bytes | None, host_id: str | None = None) -> dict[str, Any]:
        """What a worker learns when it says hello: its node is the host it runs on."""
        return {
            "namespace": self.namespace,
            "job_id": self.job_id,
            "node_id": node_id_for(host_id) if host_id else self.node_id,
            "worker_id": worker_id or b"",
            "session_address": self.session.address,
            "object_store_memory": self.objects.store.config.limit,
            "session_name": self.session_name,
        }

    # ---- objects -------------------------------------------------------------------------

    @staticmethod
    def _error_value(kind: str, error: BaseException) -> SerializedValue:
        return serialize_error(error)

    def store(self, value: SerializedValue, *, copy: bool = True) -> bytes:
        """Keep `value` under a new put id (a copy, unless its buffers are frames we own);
        ObjectStoreFullError if it fits nowhere."""
        object_id = ids.new_put_id()
        self.objects.put(object_id, value, copy=copy)
        return object_id

    def _own_arguments(self, arguments: Arguments) -> Arguments:
        """The call's own copy of its arguments' buffers, made now as Ray makes it: the caller may
        change its arrays once `.remote()` returns, while the task or call waits in a queue.
        Large ones become an object of their own, which workers on this host read from shared
        memory; the task or call holds a ref to it until it ends (its retries resend it)."""
        value = arguments.value
        if arguments.stored is not None or not value.buffers:
            return arguments
        if sum(memoryview(b).nbytes for b in value.buffers) < STORED_ARGUMENTS_BYTES:
            copied = [bytes(b) for b in value.buffers]
            return Arguments(SerializedValue(value.payload, copied, value.contained_refs), arguments.top_level)
        object_id = self.store(value)
        holder = SerializedValue(b"", (), (object_id, *value.contained_refs))
        return Arguments(holder, arguments.top_level, stored=object_id)

    def put(self, value: Any) -> ObjectRef:
        if isinstance(value, ObjectRef):
            raise TypeError(
                "Calling 'put' on an ray.ObjectRef is not allowed. If you really want to do this, you can wrap "
                "the ray.ObjectRef in a list and call 'put' on it."
            )
        self.references.flush()
        object_id = self.store(serialize(value))
        return ObjectRef(object_id)

    # ---- tasks and actors ----------------------------------------------------------------

    def submit_task(self, spec: TaskSpec) -> list[Any]:
        self.launcher.prepare(spec.pool.runtime_env)  # raises if its code cannot be shipped
        self.references.flush()
        spec.arguments = self._own_arguments(spec.arguments)
        self.objects.create_pending(spec.return_ids, producer=spec.task_id, referenced=True)
        refs: list[Any] = [ObjectRef(oid, _announced=True) for oid in spec.return_ids]  # counted before the task can finish
        if spec.num_returns in ("streaming", "dynamic"):
            self.streams.open(spec.task_id)
            if spec.num_returns == "streaming":
                refs = [ObjectRefGenerator(spec.task_id)]
        self.route_task(spec)
        return refs

    def route_task(self, spec: TaskSpec) -> None:
        """Gang calls go to the gang scheduler, everything else to the task scheduler."""
        if spec.gang is not None or spec.gang_id is not None:
            self.gangs.submit(spec, spec.gang, spec.gang_id)
        else:
            self.scheduler.submit(spec)

    def reserve_gang(self, *, tpu: str, num_slices: int, timeout: float | None) -> bytes:
        """Reserve a gang of hosts (SlicePlacementGroup)."""
        return self.gangs.reserve(slice_shape(tpu, num_slices), timeout)

    def release_gang(self, gang_id: bytes) -> None:
        self.gangs.release(gang_id)

    def gang_size(self, gang_id: bytes) -> int:
        return self.gangs.size(gang_id)

    def create_actor(self, spec: ActorCreationSpec) -> bytes | list[bytes]:
        """An actor's id; for a gang (spec.gang), the members' ids in host order."""
        self.launcher.prepare(spec.runtime_env)  # raises if its code cannot be shipped
        self.references.flush()
        spec.arguments = self._own_arguments(spec.arguments)  # restarts build the instance again from it
        if spec.gang is not None:
            return self.actors.create_gang(spec)
        return self.actors.create(spec)

    def submit_actor_call(self, spec: ActorCallSpec) -> list[Any]:
        self.references.flush()
        spec.arguments = self._own_arguments(spec.arguments)
        self.objects.create_pending(spec.return_ids, producer=spec.call_id, referenced=True)
        refs: list[Any] = [ObjectRef(oid, _announced=True) for oid in spec.return_ids]
        if spec.num_returns == "streaming":
            self.streams.open(spec.call_id)
            refs = [ObjectRefGenerator(spec.call_id)]
        self.actors.submit_call(spec)
        return refs

    def kill_actor(self, actor_id: bytes, no_restart: bool) -> None:
        self.actors.kill(actor_id, no_restart)

    def cancel_by_id(self, object_id: bytes, force: bool, recursive: bool) -> None:
        # a worker names a generator by its stream, which is its task's (or call's) id
        task_id = object_id if self.streams.is_stream(object_id) else self.objects.producer(object_id)
        if task_id is None:
            return
        if self.actors.owns_call(task_id):
            if force:
                raise ValueError("force=True is not supported for actor tasks.")
            self.actors.cancel_call(task_id)
            return
        targets = [task_id]
        while targets:
            current = targets.pop()
            self.scheduler.cancel(current, force)
            if recursive:
                targets.extend(self.scheduler.children_of(current))

    def cancel(self, ref: Any, force: bool, recursive: bool) -> None:
        if isinstance(ref, ObjectRefGenerator) and self.actors.owns_call(ref._stream_id):
            if force:
                raise ValueError("force=True is not supported for actor tasks.")
            self.actors.cancel_call(ref._stream_id)
            return
        if isinstance(ref, ObjectRefGenerator):
            targets = [ref._stream_id]
            while targets:
                current = targets.pop()
                self.scheduler.cancel(current, force)
                if recursive:
                    targets.extend(self.scheduler.children_of(current))
            return
        self.cancel_by_id(ref.binary(), force, recursive)

    def get_named_actor(self, name: str, namespace: str | None) -> Mapping[str, Any]:
        spec = self.actors.named(name, namespace)
        if spec is None:
            raise ValueError(
                f"Failed to look up actor with name '{name}'. This could because 1. You are trying to look up a "
                "named actor you didn't create. 2. The named actor died. 3. You did not use a namespace matching "
                "the namespace of the actor."
            )
        return {"actor_id": spec.actor_id, "class_name": spec.class_name, "methods": spec.methods, "is_async": spec.is_async}

    def list_named_actors(self, all_namespaces: bool) -> list[Any]:
        return self.actors.list_named(all_namespaces)

    # ---- cluster -------------------------------------------------------------------------

    def cluster_resources(self) -> dict[str, float]:
        """The sum of the live workers' resources (a view at most a second old)."""
        return self.view.current().capacity()

    def available_resources(self) -> dict[str, float]:
        """What the live workers have free by this session's accounting."""
        return self.view.current().available()

    def available_resources_per_node(self) -> dict[str, dict[str, float]]:
        """What each live worker has free by this session's accounting, keyed by node id hex."""
        ledger = self.view.current()
        return {
            node.node_id_hex: {name: amount for name, amount in ledger.available_on(node.host_id).items() if amount > 0}
            for node in ledger.nodes()
            if node.alive
        }

    def nodes(self) -> list[dict[str, Any]]:
        """One entry per worker the cluster reports, lost ones with Alive=False."""
        return [node.ray_entry() for node in self.view.nodes()]

    def context_info(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "node_id": self.node_id,
            "worker_id": b"\xff" * 28,
            "namespace": self.namespace,
            "task_id": None,
            "task_name": None,
            "task_function_name": None,
            "actor_id": None,
            "actor_name": None,
            "actor_given_name": None,
            "resources": {},
            "placement_group_id": None,
            "cancelled": False,
            "is_driver": True,
            "session_address": self.session.address,
        }

    # ---- placement groups ----------------------------------------------------------------

    def _resources_released(self) -> None:
        """Resources were freed or the cluster changed: waiting groups, actors, then tasks, look again."""
        self.scheduler.schedule()

    def _before_schedule(self) -> None:
        self.placement_groups.try_reserve()  # freed resources may complete pending groups
        self.actors.retry_waiting()  # and start actors that wait for room, before more tasks run

    # ---- placement groups (see util.placement_group) -------------------------------------

    def create_placement_group(
        self, bundles: list[dict[str, float]], strategy: str, name: str, detached: bool
    ) -> PlacementGroupInfo:
        group_id = ids.new_placement_group_id()
        ready_id = ids.new_put_id()
        self.placement_groups.create(group_id, bundles, strategy, name, ready_id, detached)
        return PlacementGroupInfo(group_id, bundles, ready_id)

    def remove_placement_group(self, group_id: bytes) -> None:
        self.placement_groups.remove(group_id)
        self.scheduler.schedule()

    def wait_placement_group(self, group_id: bytes, timeout: float | None) -> bool:
        record = self.placement_groups.get(group_id)
        if record is None:
            return False
        event = threading.Event()
        self.objects.add_done_callback(record.ready_id, lambda _: event.set())
        return event.wait(timeout) and record.state.value == "CREATED"

    def placement_group_info(self, group_id: bytes) -> PlacementGroupInfo | None:
        record = self.placement_groups.get(group_id)
        return None if record is None else PlacementGroupInfo(record.group_id, record.bundles, record.ready_id)

    def placement_group_by_name(self, name: str) -> PlacementGroupInfo:
        record = self.placement_groups.by_name(name)
        if record is None:
            raise ValueError(f"Failed to look up placement group with name: {name}")
        return PlacementGroupInfo(record.group_id, record.bundles, record.ready_id)

    def placement_group_table(self, group_id: bytes | None) -> dict[str, Any]:
        return self.placement_groups.table(group_id)

    # ---- output --------------------------------------------------------------------------

    def report_metrics(self, points: list[list[Any]]) -> None:
        process_registry().merge(points)

    def print_worker_output(self, pid: int | None, lines: Sequence[Sequence[str]]) -> None:
        if self._log_to_driver:
            self.worker_output.add(pid, driver_bars().take(pid, lines))


class _ReferenceRouter:
    """Sends reference counts for actor handles and generators to their owners."""

    def __init__(self, actors: ActorManager, streams: StreamTable) -> None:
        self._actors = actors
        self._streams = streams

    def incref(self, ids: list[bytes]) -> None:
        self._actors.incref([i for i in ids if len(i) == ids_module.ACTOR_ID_SIZE])
        self._streams.incref([i for i in ids if len(i) == ids_module.TASK_ID_SIZE])

    def decref(self, ids: list[bytes]) -> None:
        self._actors.decref([i for i in ids if len(i) == ids_module.ACTOR_ID_SIZE])
        self._streams.decref([i for i in ids if len(i) == ids_module.TASK_ID_SIZE])


def _this_machine() -> Any:
    return this_machine()


def default_pool(runtime_env: RuntimeEnv) -> PoolKey:
    """The pool of a task with default options, in a job whose runtime env is `runtime_env`."""
    return canonical_pool(PoolKey(ResourceShape(cpu=1.0), env_vars=runtime_env.env_vars, runtime_env=runtime_env))
