"""The session service: the driver's end of every worker connection.

Workers (executors and actor hosts) connect here and introduce themselves with `hello`, the
first frame, which carries the session token: the `StreamServer` in front refuses every
connection whose greeting does not, so no handler here ever sees an unauthenticated peer. The
driver then pushes work down the same connection, and answers the worker's own requests:
fetch objects (`get`), `wait`, `put`, submit tasks, create and call actors, and the
reference-counting notices `borrow`/`release`. Handlers never block the connection's reader:
a `get` on pending objects is answered later, from the callback that completes them.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from fray_ray._private import messages
from fray_ray._private.core.placement_group_handle import PlacementGroupInfo
from fray_ray._private.core.task_spec import ActorCreationSpec, TaskSpec
from fray_ray._private.driver.actors import ActorManager
from fray_ray._private.driver.direct_session import direct_call_handlers
from fray_ray._private.driver.gangs import GangScheduler
from fray_ray._private.driver.held_lineage import ACTOR_RESULT
from fray_ray._private.driver.launcher import WorkerLauncher
from fray_ray._private.driver.object_gets import answer_get
from fray_ray._private.driver.scheduler import TaskScheduler
from fray_ray._private.driver.streams import END, StreamTable
from fray_ray._private.messages import (
    ActorCreated,
    ActorExiting,
    ActorFailed,
    ActorReady,
    Borrow,
    CallDone,
    Cancel,
    CreateActor,
    CreatePlacementGroup,
    DescribePlacementGroup,
    Die,
    Done,
    Exit,
    FindPlacementGroup,
    GangSize,
    GetAbandoned,
    GetAvailablePerNode,
    GetNamedActor,
    GetNodes,
    GetObjects,
    GetResources,
    HandOffHeld,
    Hello,
    HolderUnreachable,
    KillActor,
    ListNamedActors,
    Log,
    MetricsReport,
    NextItem,
    PlacementGroupTable,
    Put,
    Ready,
    Release,
    ReleaseGang,
    RemovePlacementGroup,
    ReserveGang,
    ResourceAmounts,
    Result,
    Returns,
    ReturnShared,
    Stored,
    StreamNext,
    StreamReady,
    StreamState,
    SubmitActorCall,
    SubmitTask,
    Sync,
    TaskDone,
    TaskWaits,
    Wait,
    WaitPlacementGroup,
    Welcome,
    Withdrawn,
    Yield,
)
from fray_ray._private.objects.ids import object_id_for
from fray_ray._private.objects.object_table import ObjectState, ObjectTable
from fray_ray._private.objects.relays import RelayPlan
from fray_ray._private.objects.remote_values import with_remote_results
from fray_ray._private.objects.serialization import SerializedValue, serialize_error
from fray_ray._private.objects.shared_memory import LentBlocks
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray._private.stream.stream_server import GateStats, StreamServer
from fray_ray.exceptions import RaySystemError

logger = logging.getLogger(__name__)


class SessionDriver(Protocol):
    """What the session asks of its driver (`runtime.DriverRuntime`): the driver's parts that
    workers' requests reach, and the operations they call. The driver builds the session, so
    the session names the driver only through this."""

    objects: ObjectTable
    scheduler: TaskScheduler
    actors: ActorManager
    gangs: GangScheduler
    streams: StreamTable
    launcher: WorkerLauncher
    lent_blocks: LentBlocks
    shared_memory_identity: str
    relays: RelayPlan

    def worker_info(self, worker_id: bytes | None, host_id: str | None = None) -> dict[str, Any]: ...
    def store(self, value: SerializedValue, *, copy: bool = True) -> bytes: ...
    def wait_async(
        self, object_ids: Sequence[bytes], num_returns: int, timeout: float | None,
        callback: Callable[[list[bytes]], None], stream_indices: Mapping[bytes, int] | None = None,
    ) -> None: ...
    def stream_ready(self, stream_id: bytes, index: int) -> str: ...
    def route_task(self, spec: TaskSpec) -> None: ...
    def create_actor(self, spec: ActorCreationSpec) -> bytes | list[bytes]: ...
    def cancel_by_id(self, object_id: bytes, force: bool, recursive: bool) -> None: ...
    def get_named_actor(self, name: str, namespace: str | None) -> Mapping[str, Any]: ...
    def list_named_actors(self, all_namespaces: bool) -> list[Any]: ...
    def cluster_resources(self) -> dict[str, float]: ...
    def available_resources(self) -> dict[str, float]: ...
    def available_resources_per_node(self) -> dict[str, dict[str, float]]: ...
    def nodes(self) -> list[dict[str, Any]]: ...
    def create_placement_group(
        self, bundles: list[dict[str, float]], strategy: str, name: str, detached: bool
    ) -> PlacementGroupInfo: ...
    def remove_placement_group(self, group_id: bytes) -> None: ...
    def wait_placement_group(self, group_id: bytes, timeout: float | None) -> bool: ...
    def placement_group_info(self, group_id: bytes) -> PlacementGroupInfo | None: ...
    def placement_group_by_name(self, name: str) -> PlacementGroupInfo: ...
    def placement_group_table(self, group_id: bytes | None) -> dict[str, Any]: ...
    def reserve_gang(self, *, tpu: str, num_slices: int, timeout: float | None) -> bytes: ...
    def release_gang(self, gang_id: bytes) -> None: ...
    def gang_size(self, gang_id: bytes) -> int: ...
    def report_metrics(self, points: list[list[Any]]) -> None: ...
    def print_worker_output(self, pid: int | None, lines: Sequence[Sequence[str]]) -> None: ...


class SessionService:
    """Accepts worker connections for one driver and serves their requests."""

    def __init__(self, driver: SessionDriver, *, host: str, token: str, advertise_host: str | None = None) -> None:
        """Listens on `host`; workers are told to connect to `advertise_host` (default `host`)."""
        self._driver = driver
        self._advertise_host = advertise_host or host
        self._lock = threading.Lock()  # guards _borrows and _connections
        self._borrows: dict[Connection, collections.Counter[bytes]] = {}
        self._connections: set[Connection] = set()
        self._server = StreamServer(self._accept, token=token, host=host, name="session")
        self._handlers = messages.handlers({
            Hello: self._hello,
            ActorReady: self._actor_ready,
            ActorFailed: self._actor_failed,
            ActorExiting: self._actor_exiting,
            HandOffHeld: self._hand_off_held,
            GetObjects: lambda connection, message_id, get: answer_get(self._driver, connection, message_id, get),
            HolderUnreachable: lambda connection, message_id, report: self._driver.lineage.suspect(
                report.holder, lambda: messages.reply(connection, message_id, Done())),
            GetAbandoned: self._get_abandoned,
            TaskWaits: lambda connection, message_id, waits: self._driver.scheduler.task_blocked(waits.task),
            Wait: self._wait,
            Put: self._put,
            SubmitTask: self._submit,
            CreateActor: self._create_actor,
            SubmitActorCall: self._actor_call,
            KillActor: self._kill_actor,
            Cancel: self._cancel,
            GetNamedActor: self._get_actor,
            ListNamedActors: self._list_actors,
            GetResources: self._resources,
            GetAvailablePerNode: self._available_per_node,
            GetNodes: self._nodes,
            Borrow: self._borrow,
            Release: self._release,
            Sync: self._sync,
            ReturnShared: self._return_shared,
            Log: self._log,
            MetricsReport: self._metrics,
            Yield: self._yield,
            StreamNext: self._stream_next,
            StreamReady: self._stream_ready,
            CreatePlacementGroup: self._create_placement_group,
            RemovePlacementGroup: self._remove_placement_group,
            WaitPlacementGroup: self._wait_placement_group,
            DescribePlacementGroup: self._describe_placement_group,
            FindPlacementGroup: self._find_placement_group,
            PlacementGroupTable: self._placement_group_table,
            ReserveGang: self._reserve_gang,
            ReleaseGang: self._release_gang,
            GangSize: self._gang_size,
            Withdrawn: self._withdrawn,
            **direct_call_handlers(driver, self._count_borrow, self._worker_connection),
        }, batched={CallDone: self._calls_done, TaskDone: self._tasks_done})

    @property
    def address(self) -> str:
        """`host:port` as workers on other hosts reach it."""
        host = self._advertise_host
        return f"[{host}]:{self._server.port}" if ":" in host else f"{host}:{self._server.port}"

    def gate_stats(self) -> GateStats:
        """Counters of the connections accepted, refused, evicted and timed out."""
        return self._server.stats()

    def start(self) -> SessionService:
        self._server.start()
        return self

    def workers_connected(self) -> bool:
        """Whether an executor, actor or gang member is still connected (each closes its
        connection as its process exits); the lease holder does not count."""
        with self._lock:
            return any((connection.peer_info or {}).get("kind") != "lease" for connection in self._connections)

    def close(self) -> None:
        self._server.close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.close()

    def _accept(self, connection: Connection, greeting: list[Any]) -> None:
        """An authenticated worker: its reader thread answers the greeting, then everything else."""
        with self._lock:
            self._connections.add(connection)
            self._borrows[connection] = collections.Counter()
        connection.add_close_callback(self._closed)
        connection.start(self._handlers, first_frame=greeting)

    def _closed(self, connection: Connection) -> None:
        self._driver.lent_blocks.connection_closed(connection)
        with self._lock:
            self._connections.discard(connection)
            borrowed = self._borrows.pop(connection, None)
        if borrowed:
            self._driver.objects.decref(list(borrowed.elements()))

    def _count_borrow(self, connection: Connection, object_ids: list[bytes]) -> None:
        with self._lock:
            counter = self._borrows.get(connection)
            if counter is None:
                return
            counter.update(object_ids)
        self._driver.objects.incref(object_ids)

    # ---- introductions -------------------------------------------------------------------

    def _hello(self, connection: Connection, message_id: int | None, hello: Hello) -> None:
        assert message_id is not None
        if connection.peer_info:  # the gate authenticated the first hello; there is no second
            connection.reply_error(message_id, "ValueError", "this connection has already introduced itself")
            return
        kind, worker_id = hello.kind, hello.id
        host = hello.host if isinstance(hello.host, str) else None
        identity = self._driver.shared_memory_identity
        host_memory = hello.shared_memory if isinstance(hello.shared_memory, str) else ""
        connection.peer_info = {"kind": kind, "id": worker_id, "pid": hello.pid, "host": host_memory,
                                "shared_memory": bool(identity) and host_memory == identity}
        messages.reply(connection, message_id, Welcome(**self._driver.worker_info(worker_id, host)))
        if kind in ("executor", "actor"):
            # Items it holds of the generator it runs wait for that run's retry (`process_gone`).
            connection.add_close_callback(self._driver.lineage.process_gone)
        if kind == "executor":
            accepted = self._driver.scheduler.executor_connected(worker_id, connection, hello.pid, host)
        elif kind == "actor":
            accepted = self._driver.actors.host_connected(worker_id, connection, hello.pid, host)
        elif kind == "gang":
            accepted = self._driver.gangs.member_connected(worker_id, hello.index, connection, hello.ip)
        elif kind == "lease":
            if not self._driver.launcher.lease.holder_connected(connection):
                connection.close()  # a holder this session does not know: it ends, as it should
            return
        else:
            accepted = False
        if not accepted:
            try:
                messages.notify(connection, Exit() if kind == "executor" else Die(restart=False))
            except ConnectionClosed:
                pass

    # ---- results -------------------------------------------------------------------------

    def _tasks_done(self, connection: Connection, answers: list[TaskDone]) -> None:
        for done in answers:
            if done.held:  # large results the executor keeps: recorded by where they are
                self._driver.lineage.results_held(connection, done.task, done.held)
                _record_held(done, "executor")
        if connection.peer_info.get("kind") == "gang":
            for done in answers:
                self._driver.gangs.task_done(connection, done.task, done.results, done.user_error)
        else:
            self._driver.scheduler.tasks_done(
                connection, [(d.task, d.results, d.user_error, d.ran_s, d.generator_failed) for d in answers]
            )

    def _worker_connection(self, worker_id: bytes) -> Connection | None:
        with self._lock:
            return next((c for c in self._connections if (c.peer_info or {}).get("id") == worker_id), None)

    def _withdrawn(self, connection: Connection, message_id: int | None, withdrawn: Withdrawn) -> None:
        self._driver.scheduler.tasks_withdrawn(connection, withdrawn.returned, withdrawn.kept)

    def _calls_done(self, connection: Connection, answers: list[CallDone]) -> None:
        for done in answers:
            if done.held:  # large results the actor's process keeps: recorded by where they are
                return_ids = self._driver.actors.return_ids(connection, done.call)
                self._driver.lineage.kept_without_lineage(connection, done.held, return_ids, ACTOR_RESULT)
                _record_held(done, "actor")
        self._driver.actors.calls_done(connection, [(done.call, done.results) for done in answers])

    def _actor_ready(self, connection: Connection, message_id: int | None, ready: ActorReady) -> None:
        self._driver.actors.ready(ready.actor, ready.pid)

    def _actor_failed(self, connection: Connection, message_id: int | None, failed: ActorFailed) -> None:
        self._driver.actors.creation_failed(failed.actor, failed.error)

    def _actor_exiting(self, connection: Connection, message_id: int | None, exiting: ActorExiting) -> None:
        self._driver.actors.exiting(exiting.actor, exiting.call)

    def _hand_off_held(self, connection: Connection, message_id: int | None, asked: HandOffHeld) -> None:
        assert message_id is not None
        try:  # its process waits until the driver has what it holds
            self._driver.lineage.actor_ending(connection)
        finally:
            messages.reply(connection, message_id, Done())

    # ---- objects -------------------------------------------------------------------------

    def _get_abandoned(self, connection: Connection, message_id: int | None, abandoned: GetAbandoned) -> None:
        self._driver.scheduler.task_unblocked(abandoned.task)

    def _wait(self, connection: Connection, message_id: int | None, wait: Wait) -> None:
        assert message_id is not None

        def answer(ready: list[bytes]) -> None:
            messages.reply(connection, message_id, Ready(ready))

        streams = {stream_id: index for stream_id, index in wait.streams or ()}
        self._driver.wait_async(wait.ids, wait.num_returns, wait.timeout, answer, streams)

    def _put(self, connection: Connection, message_id: int | None, put: Put) -> None:
        assert message_id is not None
        try:
            if put.held:  # the worker keeps it: recorded by where it is
                object_id = self._driver.lineage.put_held(connection, put.id, put.value, put.held)
            else:
                object_id = self._driver.store(put.value, copy=False)  # the frame's buffers are ours
        except Exception as exc:  # noqa: BLE001 - ObjectStoreFullError, raised at the worker's put
            connection.reply_error(message_id, type(exc).__name__, str(exc.args[0] if exc.args else exc))
            return
        self._count_borrow(connection, [object_id])
        messages.reply(connection, message_id, Stored(object_id))

    # ---- tasks and actors ----------------------------------------------------------------

    def _submit(self, connection: Connection, message_id: int | None, submit: SubmitTask) -> None:
        """A task a worker submits, as a notification (it goes on at once, as Ray's `.remote()`
        does): a task the driver cannot take fails its results. A request is answered."""
        spec = submit.spec
        spec.parent_task_id = submit.parent
        objects = self._driver.objects
        try:
            objects.create_pending(spec.return_ids, producer=spec.task_id)
            self._count_borrow(connection, list(spec.return_ids))
            if spec.num_returns in ("streaming", "dynamic"):
                self._driver.streams.open(spec.task_id)
            self._driver.route_task(spec)
        except Exception as exc:
            if message_id is not None:
                raise
            logger.warning("could not take task %s from a worker", spec.name, exc_info=True)
            error = serialize_error(RaySystemError(f"the driver could not take task {spec.name}: {exc}"))
            for object_id in spec.return_ids:
                if objects.state(object_id) is ObjectState.PENDING:
                    objects.fulfil(object_id, error)
            if spec.num_returns == "streaming" and self._driver.streams.is_stream(spec.task_id):
                self._driver.streams.finish(spec.task_id, error)
            return
        if message_id is not None:
            messages.reply(connection, message_id, Returns(list(spec.return_ids)))

    def _create_actor(self, connection: Connection, message_id: int | None, create: CreateActor) -> None:
        assert message_id is not None
        try:
            actor_id = self._driver.create_actor(create.spec)
        except ValueError as exc:
            connection.reply_error(message_id, type(exc).__name__, str(exc))
            return
        messages.reply(connection, message_id, ActorCreated(actor_id))

    def _actor_call(self, connection: Connection, message_id: int | None, submit: SubmitActorCall) -> None:
        assert message_id is not None
        spec = submit.spec
        self._driver.objects.create_pending(spec.return_ids, producer=spec.call_id)
        self._count_borrow(connection, list(spec.return_ids))
        if spec.num_returns == "streaming":
            self._driver.streams.open(spec.call_id)
        self._driver.actors.submit_call(spec)
        messages.reply(connection, message_id, Returns(list(spec.return_ids)))

    def _kill_actor(self, connection: Connection, message_id: int | None, kill: KillActor) -> None:
        assert message_id is not None
        self._driver.actors.kill(kill.actor_id, kill.no_restart)
        messages.reply(connection, message_id, Done())

    def _cancel(self, connection: Connection, message_id: int | None, cancel: Cancel) -> None:
        assert message_id is not None
        try:
            self._driver.cancel_by_id(cancel.id, cancel.force, cancel.recursive)
        except ValueError as exc:
            connection.reply_error(message_id, "ValueError", str(exc))
            return
        messages.reply(connection, message_id, Done())

    def _get_actor(self, connection: Connection, message_id: int | None, get: GetNamedActor) -> None:
        assert message_id is not None
        try:
            info = self._driver.get_named_actor(get.name, get.namespace)
        except ValueError as exc:
            connection.reply_error(message_id, "ValueError", str(exc))
            return
        messages.reply(connection, message_id, Result(info))

    def _list_actors(self, connection: Connection, message_id: int | None, listing: ListNamedActors) -> None:
        assert message_id is not None
        messages.reply(connection, message_id, Result(self._driver.list_named_actors(listing.all_namespaces)))

    def _resources(self, connection: Connection, message_id: int | None, asked: GetResources) -> None:
        assert message_id is not None
        if asked.available:
            resources = self._driver.available_resources()
        else:
            resources = self._driver.cluster_resources()
        messages.reply(connection, message_id, ResourceAmounts(resources))

    def _available_per_node(self, connection: Connection, message_id: int | None, asked: GetAvailablePerNode) -> None:
        assert message_id is not None
        messages.reply(connection, message_id, Result(self._driver.available_resources_per_node()))

    def _nodes(self, connection: Connection, message_id: int | None, asked: GetNodes) -> None:
        assert message_id is not None
        messages.reply(connection, message_id, Result(self._driver.nodes()))

    # ---- references and logs -------------------------------------------------------------

    def _borrow(self, connection: Connection, message_id: int | None, borrow: Borrow) -> None:
        self._count_borrow(connection, borrow.ids)

    def _sync(self, connection: Connection, message_id: int | None, sync: Sync) -> None:
        """Handlers run in the order their frames came, so answering says all before it is handled."""
        if message_id is not None:
            messages.reply(connection, message_id, Done())

    def _return_shared(self, connection: Connection, message_id: int | None, returned: ReturnShared) -> None:
        if isinstance(returned.leases, list):
            self._driver.lent_blocks.returned(connection, returned.leases)

    def _release(self, connection: Connection, message_id: int | None, release: Release) -> None:
        object_ids = release.ids
        with self._lock:
            counter = self._borrows.get(connection)
            if counter is None:
                return
            released = [oid for oid in object_ids if counter[oid] > 0]
            counter.subtract(released)
            for oid in released:
                if counter[oid] <= 0:
                    del counter[oid]
        self._driver.objects.decref(released)

    def _yield(self, connection: Connection, message_id: int | None, item: Yield) -> None:
        value = item.value
        if item.held and isinstance(item.stream, bytes) and isinstance(item.index, int):  # kept by its producer
            item_id = object_id_for(item.stream, item.index)
            self._driver.lineage.item_held(connection, item.stream, item_id, item.held)
            try:
                (value,) = with_remote_results([value], item.held)
            except ValueError as exc:
                value = serialize_error(RaySystemError(f"the generator's item was malformed: {exc}"))
        self._driver.streams.add_item(item.stream, item.index, value)

    def _stream_next(self, connection: Connection, message_id: int | None, asked: StreamNext) -> None:
        assert message_id is not None
        stream_id, index = asked.stream, asked.index
        streams = self._driver.streams

        def check() -> None:
            object_id = streams.poll(stream_id, index)
            if object_id is None:
                streams.on_change(stream_id, check)
                return
            if object_id != END:
                self._count_borrow(connection, [object_id])
                streams.taken(stream_id, index)
            messages.reply(connection, message_id, NextItem(object_id))

        check()

    def _stream_ready(self, connection: Connection, message_id: int | None, asked: StreamReady) -> None:
        assert message_id is not None
        messages.reply(connection, message_id, StreamState(self._driver.stream_ready(asked.stream, asked.index)))

    @staticmethod
    def _answer_later(connection: Connection, message_id: int, name: str, compute: Callable[[], Any],
                      refused: tuple[type[Exception], ...] = (ValueError,)) -> None:
        """Answer with `compute()` from a thread of its own: it blocks (a wait, a reservation),
        and the connection's reader must not."""

        def run() -> None:
            try:
                result = compute()
            except refused as exc:
                connection.reply_error(message_id, type(exc).__name__, str(exc))
                return
            messages.reply(connection, message_id, Result(result))

        threading.Thread(target=run, name=name, daemon=True).start()

    def _create_placement_group(self, connection: Connection, message_id: int | None, create: CreatePlacementGroup) -> None:
        assert message_id is not None
        info = self._driver.create_placement_group(create.bundles, create.strategy, create.name, create.detached)
        messages.reply(connection, message_id, Result(info))

    def _remove_placement_group(self, connection: Connection, message_id: int | None, remove: RemovePlacementGroup) -> None:
        assert message_id is not None
        self._driver.remove_placement_group(remove.id)
        messages.reply(connection, message_id, Done())

    def _wait_placement_group(self, connection: Connection, message_id: int | None, wait: WaitPlacementGroup) -> None:
        assert message_id is not None
        self._answer_later(connection, message_id, "placement-group-wait",
                           lambda: self._driver.wait_placement_group(wait.id, wait.timeout))

    def _describe_placement_group(self, connection: Connection, message_id: int | None,
                                  describe: DescribePlacementGroup) -> None:
        assert message_id is not None
        messages.reply(connection, message_id, Result(self._driver.placement_group_info(describe.id)))

    def _find_placement_group(self, connection: Connection, message_id: int | None, find: FindPlacementGroup) -> None:
        assert message_id is not None
        try:
            info = self._driver.placement_group_by_name(find.name)
        except ValueError as exc:
            connection.reply_error(message_id, "ValueError", str(exc))
            return
        messages.reply(connection, message_id, Result(info))

    def _placement_group_table(self, connection: Connection, message_id: int | None, table: PlacementGroupTable) -> None:
        assert message_id is not None
        messages.reply(connection, message_id, Result(self._driver.placement_group_table(table.id)))

    def _reserve_gang(self, connection: Connection, message_id: int | None, reserve: ReserveGang) -> None:
        assert message_id is not None
        self._answer_later(
            connection, message_id, "gang-request",
            lambda: self._driver.reserve_gang(tpu=reserve.tpu, num_slices=reserve.num_slices, timeout=reserve.timeout),
            refused=(ValueError, TimeoutError, RuntimeError),
        )

    def _release_gang(self, connection: Connection, message_id: int | None, release: ReleaseGang) -> None:
        assert message_id is not None
        try:
            self._driver.release_gang(release.gang_id)
        except (ValueError, RuntimeError) as exc:
            connection.reply_error(message_id, type(exc).__name__, str(exc))
            return
        messages.reply(connection, message_id, Done())

    def _gang_size(self, connection: Connection, message_id: int | None, size: GangSize) -> None:
        assert message_id is not None
        try:
            hosts = self._driver.gang_size(size.gang_id)
        except (ValueError, RuntimeError) as exc:
            connection.reply_error(message_id, type(exc).__name__, str(exc))
            return
        messages.reply(connection, message_id, Result(hosts))

    def _log(self, connection: Connection, message_id: int | None, log: Log) -> None:
        self._driver.print_worker_output(log.pid, log.lines)

    def _metrics(self, connection: Connection, message_id: int | None, report: MetricsReport) -> None:
        self._driver.report_metrics(report.points)


def _record_held(done: TaskDone | CallDone, sender: str) -> None:
    """`done`'s results with each one its sender keeps recorded by where it is; all failed if
    the sender's message was malformed."""
    try:
        done.results = with_remote_results(done.results, done.held)
    except ValueError as exc:
        failed = serialize_error(RaySystemError(f"the {sender}'s answer was malformed: {exc}"))
        done.results, done.user_error = [failed] * len(done.results), True
