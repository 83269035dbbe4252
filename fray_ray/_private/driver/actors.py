"""Actors in the driver: creation through Fray, call routing, names, death and restarts.

Each actor is a Fray actor group of one (an Iris job) hosting a RayActorHost, which connects
back to this session. Calls are sent on that connection in submission order, so each caller's
calls run in order; calls made before the actor is up wait in its queue. When the host goes
away the actor restarts (if `max_restarts` allows: Iris reruns the job) or dies; what its calls
become then follows Ray's rules, written down in `actor_restarts`. Sending calls, their
results and cancelling them is in `actor_calls`; looking names up, and calling another
driver's named actors, in `named_actors`.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cloudpickle

from fray_ray._private import messages
from fray_ray._private.core.task_spec import ActorCreationSpec, CallArguments, gang_member_id
from fray_ray._private.driver import actor_restarts as restarts
from fray_ray._private.driver.actor_calls import ActorCalls
from fray_ray._private.driver.actor_records import ActorRecord, ActorState
from fray_ray._private.driver.actor_reservations import ActorReservations
from fray_ray._private.driver.actor_restarts import CallFate, died_error
from fray_ray._private.driver.cluster_ledger import ClusterLedger
from fray_ray._private.driver.direct_routes import DirectRoutes
from fray_ray._private.driver.idle_workers import LentWorker, may_use_idle_worker
from fray_ray._private.driver.named_actors import NamedActors
from fray_ray._private.driver.streams import StreamTable
from fray_ray._private.messages import CreateInstance, Die, HostActor, InstanceOptions
from fray_ray._private.objects.object_table import ObjectTable
from fray_ray._private.objects.serialization import SerializedValue, deserialize, serialize_error
from fray_ray._private.observe.task_events import TaskEvents, TaskStatus, actor_creation_task_id, creation_event
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray.exceptions import ActorAlreadyExistsError, ActorDiedError, RayTaskError

if TYPE_CHECKING:
    from fray_ray._private.driver.cluster_view import ClusterView
    from fray_ray._private.driver.launcher import WorkerLauncher
    from fray_ray._private.driver.timers import TimerQueue

logger = logging.getLogger(__name__)


class ActorManager(ActorCalls, NamedActors, DirectRoutes):  # ActorCalls first: its _complete_call is the one that runs
    #: hand_off(connection): before an actor's process ends on purpose, the driver takes what it holds
    hand_off: Callable[[Connection], None] | None = None

    def __init__(
        self,
        objects: ObjectTable,
        ledger: ClusterLedger,
        launcher: WorkerLauncher,
        streams: StreamTable,
        *,
        namespace: str,
        session_id: str,
        placement_groups: Any = None,
        timers: TimerQueue | None = None,
        view: ClusterView | None = None,
        events: TaskEvents | None = None,
    ) -> None:
        self._events = events or TaskEvents()  # creation tasks and calls, for the state API
        self._placement_groups = placement_groups
        self._reservations = ActorReservations(ledger, view)  # what actors hold, who waits for room
        self._timers = timers
        #: retries left per pending call (max_task_retries)
        self._retries = restarts.RetryBudget()
        self._streams = streams
        self._objects = objects
        self._launcher = launcher
        self._namespace = namespace
        self._session_id = session_id
        self._lock = threading.Lock()
        self._actors: dict[bytes, ActorRecord] = {}
        self._by_connection: dict[Connection, ActorRecord] = {}
        self._names: dict[tuple[str, str], bytes] = {}
        #: calls cancelled while running: their results are dropped when they arrive
        self._cancelled: set[bytes] = set()
        self._closed = False
        #: called after an actor's resources return to the ledger (so tasks can use them)
        self.on_resources_released: Callable[[], None] | None = None
        #: hands an idle executor to a new actor, or None (the scheduler's; unset: never lend)
        self.lend_worker: Callable[[ActorCreationSpec], LentWorker | None] | None = None

    # ---- creation ------------------------------------------------------------------------

    def create(self, spec: ActorCreationSpec) -> bytes:
        """Register and launch an actor; returns its id (an existing one for get_if_exists)."""
        namespace = spec.namespace or self._namespace
        with self._lock:
            if spec.name:
                existing = self._names.get((namespace, spec.name))
                if existing is not None and self._actors[existing].state is not ActorState.DEAD:
                    if spec.get_if_exists:
                        return existing
                    raise ActorAlreadyExistsError(
                        f"The name {spec.name} (namespace={namespace}) is already taken. Please use a different name "
                        "or get the existing actor using ray.get_actor('{spec.name}', namespace='{namespace}')"
                    )
        if spec.name:
            # Another driver of the cluster may hold the name.
            found = self._launcher.lookup_named(namespace, spec.name)
            if found is not None:
                if spec.get_if_exists:
                    return self._adopt_remote(namespace, spec.name, *found)
                raise ActorAlreadyExistsError(
                    f"The name {spec.name} (namespace={namespace}) is already taken by an actor of another "
                    f"driver. Please use a different name or get the existing actor using "
                    f"ray.get_actor('{spec.name}', namespace='{namespace}')"
                )
        with self._lock:
            record = ActorRecord(spec)
            self._actors[spec.actor_id] = record
            if spec.name:
                self._names[(namespace, spec.name)] = spec.actor_id
        if spec.task_events:
            self._events.submitted(creation_event(spec))
        # What the constructor's arguments refer to stays alive until the constructor has run.
        self._objects.incref(spec.arguments.value.contained_refs)
        group, bundle = getattr(spec.scheduling_strategy, "placement_group", None), None
        if group is not None and self._placement_groups is not None:
            index = int(getattr(spec.scheduling_strategy, "placement_group_bundle_index", -1))
            found = self._placement_groups.bundle_ledger(group.id.binary(), index, spec.shape.as_dict())
            bundle = found[0] if found is not None else None
            record.placement_group = group.id.hex()
        problem = None if record.placement_group else self._reservations.problem(spec)
        if problem is not None:
            from fray_ray.exceptions import ActorUnschedulableError

            self._mark_dead(record, serialize_error(ActorUnschedulableError(
                f"Actor {spec.class_name} cannot run: it asks for {problem}; the cluster will never have that."
            )))
            return spec.actor_id
        if spec.name:
            group_name = self._launcher.named_group(namespace, spec.name)  # findable from other drivers
        else:
            group_name = f"{self._session_id}-{spec.class_name}-{spec.actor_id.hex()[:8]}"
            group_name = "".join(c if c.isalnum() or c in "-_." else "-" for c in group_name)

        def launched(group: Any, error: BaseException | None) -> None:
            if error is not None:
                self._mark_dead(record, self._death_error(record, "process_died", f"its worker could not be started: {error}"))
                return
            with self._lock:
                record.group = group
                dead = record.state is ActorState.DEAD
            if dead:
                self._launcher.terminate(group)

        lend = None
        if self.lend_worker is not None and may_use_idle_worker(spec):
            lend = lambda: self._start_in_lent_worker(record, group_name)  # noqa: E731
        # It starts once what it holds is free somewhere (now, or when a release makes room).
        self._reservations.reserve(spec, lambda cpu: self._launcher.launch_actor(
            spec.actor_id, group_name, spec.shape, env_vars=spec.env_vars,
            max_restarts=restarts.iris_restart_budget(spec.max_restarts), accelerator=spec.accelerator,
            callback=launched, runtime_env=spec.runtime_env, cpu=cpu, pins=self._reservations.pins(spec.actor_id),
            identity=self._reservations.identity(spec.actor_id),
            started=lambda: record.state is not ActorState.STARTING,
            start_failed=lambda problem: self._mark_dead(
                record, self._death_error(record, "process_died", f"its worker could not start: {problem}")
            ),
            detached=spec.detached,
            named=bool(spec.name),
        ), bundle=bundle, in_group=record.placement_group is not None, lend=lend)
        return spec.actor_id

    def _start_in_lent_worker(self, record: ActorRecord, group_name: str) -> bool:
        """Start the actor in an idle executor's process if one can take it (`idle_workers`);
        False if none can. Its job is the executor's from then on."""
        assert self.lend_worker is not None
        spec = record.spec
        lent = self.lend_worker(spec)
        if lent is None:
            return False
        self._reservations.adopt_process(spec.actor_id, lent.executor_id)
        with self._lock:
            record.group = lent.job
            dead = record.state is ActorState.DEAD
        if dead:
            self._launcher.terminate(lent.job)
            return True
        try:
            messages.notify(lent.connection, HostActor(spec.actor_id, group_name))
        except ConnectionClosed:
            pass  # it died meanwhile: its job's end is reported below
        self._launcher.startup.watch(
            lent.job,
            started=lambda: record.state is not ActorState.STARTING,
            failed=lambda problem: self._mark_dead(
                record, self._death_error(record, "process_died", f"its worker could not host it: {problem}")
            ),
        )
        return True

    def create_gang(self, spec: ActorCreationSpec) -> list[bytes]:
        """One actor per host of a TPU slice, placed together: returns their ids in host order."""
        if spec.name:
            raise ValueError("A gang of actors (tpu=...) cannot be named; name a coordinator actor instead.")
        gang = spec.gang
        if gang.slices != 1:
            raise ValueError("Actor gangs span one TPU slice; use num_slices with remote functions.")
        members = [dataclasses.replace(spec, actor_id=gang_member_id(spec.actor_id, i), gang=None) for i in range(gang.size)]
        records = [ActorRecord(member) for member in members]
        with self._lock:
            for record in records:
                self._actors[record.spec.actor_id] = record
        for record in records:
            self._objects.incref(record.spec.arguments.value.contained_refs)
        group_name = f"{self._session_id}-{spec.class_name}-gang-{spec.actor_id.hex()[:8]}"
        group_name = "".join(c if c.isalnum() or c in "-_." else "-" for c in group_name)

        def launched(group: Any, error: BaseException | None) -> None:
            if error is not None:
                for record in records:
                    self._mark_dead(record, self._death_error(record, "process_died", f"the gang could not start: {error}"))
                return
            with self._lock:
                for record in records:
                    record.group = group

        self._launcher.launch_actor(
            spec.actor_id, group_name, spec.shape, env_vars=spec.env_vars,
            max_restarts=restarts.iris_restart_budget(spec.max_restarts),
            accelerator=None, callback=launched, gang=gang, runtime_env=spec.runtime_env,
        )
        return [record.spec.actor_id for record in records]

    def host_connected(self, actor_id: bytes, connection: Connection, pid: int | None, host: str | None = None) -> bool:
        """A host said hello (from cluster host `host`): send it the class and every queued call."""
        with self._lock:
            record = self._actors.get(actor_id)
            if record is None or record.state is ActorState.DEAD:
                return False
        self._reservations.placed(actor_id, host)
        with record.send_lock:
            with self._lock:
                if record.state is ActorState.DEAD:
                    return False
                restarting = record.state is ActorState.RESTARTING
                if not restarting:  # a restarting actor is back once its constructor has run
                    record.state = ActorState.ALIVE
                record.connection = connection
                record.pid = pid
                record.host = host
                self._by_connection[connection] = record
                resend = list(record.in_flight.values()) if restarting else []
                queued, record.queued = record.queued, []
                for call in queued:
                    record.in_flight[call.call_id] = call
                record.waiting = collections.deque(itertools.islice(record.in_flight, record.spec.max_concurrency, None))
                now = time.time()
                for call in itertools.islice(record.in_flight.values(), record.spec.max_concurrency):
                    call.started_at = call.started_at or now
            connection.add_close_callback(self._host_disconnected)
            creation = self._events.live(actor_creation_task_id(actor_id))
            if creation is not None:
                self._events.placed(creation, TaskStatus.RUNNING, host, None, pid)
            self._send_create(record, connection)
            for call in [*resend, *queued]:
                self._send_call(connection, call)
        return True

    def _send_create(self, record: ActorRecord, connection: Connection) -> None:
        spec = record.spec
        message = CreateInstance(
            code=spec.cls.payload,
            class_name=spec.class_name,
            qualified_name=spec.qualified_name,
            methods=cloudpickle.dumps(dict(spec.methods)),
            args=CallArguments(spec.arguments.value, list(spec.arguments.top_level), stored=spec.arguments.stored),
            env=dict(spec.env_vars),
            resources=spec.shape.as_dict(),
            placement_group=record.placement_group,
            capture_child_tasks=getattr(spec.scheduling_strategy, "placement_group_capture_child_tasks", None) is True,
            options=InstanceOptions(
                name=spec.name,
                detached=spec.detached,
                is_async=spec.is_async,
                max_concurrency=spec.max_concurrency,
                concurrency_groups=dict(spec.concurrency_groups),
                restarted=record.restarts > 0,
            ),
        )
        try:
            messages.notify(connection, message)
        except ConnectionClosed:
            pass

    def ready(self, actor_id: bytes, pid: int | None) -> None:
        with self._lock:
            record = self._actors.get(actor_id)
        if record is not None:
            with self._lock:
                record.pid = pid or record.pid
                if record.state is ActorState.RESTARTING and record.connection is not None:
                    record.state = ActorState.ALIVE
            self._events.finished_by_id(actor_creation_task_id(actor_id), None)
            self._creation_finished(record)

    def _creation_finished(self, record: ActorRecord, *, final: bool = False) -> None:
        """The constructor ran (or never will again): wake waiters, release its arguments.

        A restartable actor keeps its arguments until it dies: a restart runs the constructor again.
        """
        with self._lock:
            record.ready.set()
            release = not record.args_released and (final or record.spec.max_restarts == 0)
            record.args_released = record.args_released or release
        if release:
            self._objects.decref(record.spec.arguments.value.contained_refs)

    def creation_failed(self, actor_id: bytes, error: SerializedValue) -> None:
        with self._lock:
            record = self._actors.get(actor_id)
        if record is None:
            return
        try:
            cause = deserialize(error)
        except Exception:  # noqa: BLE001 - still report a death
            cause = None
        if isinstance(cause, RayTaskError):
            death = serialize_error(ActorDiedError(cause))
        else:
            death = self._death_error(record, "process_died", f"its creation task failed: {cause}")
        self._mark_dead(record, death, terminate=True)

    # ---- handles -------------------------------------------------------------------------

    def incref(self, actor_ids: list[bytes]) -> None:
        with self._lock:
            for actor_id in actor_ids:
                record = self._actors.get(actor_id)
                if record is not None:
                    record.handles += 1

    def decref(self, actor_ids: list[bytes]) -> None:
        """When the last handle to a non-detached actor goes, it ends after its pending calls."""
        retire = []
        with self._lock:
            for actor_id in actor_ids:
                record = self._actors.get(actor_id)
                if record is None:
                    continue
                record.handles -= 1
                if record.handles > 0 or record.spec.detached or record.state is ActorState.DEAD:
                    continue
                record.out_of_scope = True
                if not record.in_flight and not record.queued:
                    retire.append(record)
        for record in retire:
            self._mark_dead(record, self._death_error(record, "out_of_scope"), terminate=True)

    # ---- death ---------------------------------------------------------------------------

    def _host_disconnected(self, connection: Connection) -> None:
        with self._lock:
            record = self._by_connection.pop(connection, None)
            if record is None or self._closed:
                return
            record.connection = None
            if record.state is ActorState.DEAD:
                return
            can_restart = restarts.can_restart(record.spec.max_restarts, record.restarts, stopped=record.killed)
            if can_restart:
                record.restarts += 1
                record.state = ActorState.RESTARTING
                self._forget_cancelled_locked(record)
                # Calls in flight go to the next instance while their retries last.
                dropped = [call for call in record.in_flight.values()
                           if restarts.fate_at_death(self._retries, call.call_id, restarting=True) is not CallFate.SEND]
                for call in dropped:
                    del record.in_flight[call.call_id]
                attempt = record.restarts
                again = list(record.in_flight.values())
        if can_restart:
            self._attempts_ended(record, [(call, None) for call in again], running=False, error_kind="ACTOR_DIED")
            error = restarts.unavailable_error(record.spec.actor_id, restarts.DIED_IN_FLIGHT_REASON)
            for call in dropped:
                self._fail_call(call, error)
            self._watch_restart(record, attempt)
            return
        self._mark_dead(record, self._death_error(record, "process_died"), terminate=True)

    def _watch_restart(self, record: ActorRecord, attempt: int) -> None:
        """Check now and then that a restarting actor's job still runs; if it ended (Iris gave
        up on it), the actor is dead and its waiting calls fail instead of waiting forever."""
        if self._timers is None:
            return

        def check() -> None:
            with self._lock:
                waiting = record.state is ActorState.RESTARTING and record.restarts == attempt and not self._closed
                group = record.group
            if not waiting:
                return
            problem = self._launcher.group_failure(group) if group is not None else None
            if problem is None:
                self._timers.call_later(restarts.RESTART_CHECK_S, check)
                return
            with self._lock:
                still = record.state is ActorState.RESTARTING and record.restarts == attempt
            if still:
                self._mark_dead(record, self._death_error(record, "process_died", f"it could not be restarted: {problem}"))

        self._timers.call_later(restarts.RESTART_CHECK_S, check)

    def _death_error(self, record: ActorRecord, reason: str, detail: str = "") -> SerializedValue:
        return serialize_error(died_error(record.spec.class_name, record.spec.actor_id, reason, detail, record.pid,
                                     record.spec.namespace or self._namespace))

    def _mark_dead(self, record: ActorRecord, death: SerializedValue, *, terminate: bool = False) -> None:
        with self._lock:
            if record.state is ActorState.DEAD:
                return
            record.state = ActorState.DEAD
            record.death = death
            record.ended = time.time()
            self._forget_cancelled_locked(record)
            calls = [*record.queued, *record.in_flight.values()]
            record.queued = []
            record.in_flight = {}
            group = record.group
            connection = record.connection
            namespace = record.spec.namespace or self._namespace
            if record.spec.name and self._names.get((namespace, record.spec.name)) == record.spec.actor_id:
                del self._names[(namespace, record.spec.name)]
        self._events.finished_by_id(actor_creation_task_id(record.spec.actor_id), death)  # if it never came up
        self._ledger_release(record)
        self._creation_finished(record, final=True)
        for call in calls:
            self._fail_call(call, death)
        if terminate:
            self._after_hand_off(connection, lambda: self._end_process(connection, group))

    def _after_hand_off(self, connection: Connection | None, end: Callable[[], None]) -> None:
        """Run `end`, which ends an actor's process, once the driver holds what that process
        held: objects an actor returned outlive it, as in Ray's object store."""
        hand_off = self.hand_off
        if hand_off is None or connection is None or connection.closed or "holder" not in connection.peer_info:
            end()
            return

        def run() -> None:
            try:
                hand_off(connection)
            except Exception:  # noqa: BLE001 - what it could not hand over is lost with it
                logger.warning("could not take the values an actor's process holds", exc_info=True)
            end()

        threading.Thread(target=run, name="actor-hand-off", daemon=True).start()

    def _end_process(self, connection: Connection | None, group: Any, *, restart: bool = False) -> None:
        if connection is not None:
            try:
                messages.notify(connection, Die(restart=restart))
            except ConnectionClosed:
                pass
        if group is not None:
            self._launcher.terminate(group)

    def _ledger_release(self, record: ActorRecord) -> None:
        if self._reservations.release(record.spec.actor_id) and self.on_resources_released is not None:
            self.on_resources_released()

    def retry_waiting(self) -> None:
        """Start the actors waiting for room that fit now."""
        self._reservations.retry()

    def kill(self, actor_id: bytes, no_restart: bool) -> None:
        with self._lock:
            record = self._actors.get(actor_id)
            if record is None:
                raise ValueError(f"no actor with id {actor_id.hex()} in this session")
            if record.state is ActorState.DEAD:
                return
            connection = record.connection
        if record.remote is not None:
            record.remote.kill(restart=not no_restart)
            self._mark_dead(record, self._death_error(record, "killed"))
            return
        with self._lock:
            restartable = not no_restart and (record.spec.max_restarts < 0 or record.restarts < record.spec.max_restarts)
            if not restartable:
                record.killed = True
        if restartable and connection is not None:
            self._after_hand_off(connection, lambda: self._end_process(connection, None, restart=True))
            return
        self._mark_dead(record, self._death_error(record, "killed"), terminate=True)

    def exiting(self, actor_id: bytes, call_id: bytes | None) -> None:
        """The actor called exit_actor(): it is done, cleanly."""
        with self._lock:
            record = self._actors.get(actor_id)
            if record is not None:
                record.killed = True
        if record is None:
            return
        self._mark_dead(record, self._death_error(record, "exited"), terminate=False)

    # ---- lookup --------------------------------------------------------------------------

    def spec(self, actor_id: bytes) -> ActorCreationSpec | None:
        with self._lock:
            record = self._actors.get(actor_id)
            return None if record is None else record.spec

    def pid(self, actor_id: bytes) -> int | None:
        with self._lock:
            record = self._actors.get(actor_id)
            return None if record is None else record.pid

    def argument_refs(self) -> set[bytes]:
        """The refs held by the arguments of every queued or running call (for the state API)."""
        with self._lock:
            calls = [c for r in self._actors.values() for c in (*r.queued, *r.in_flight.values())]
        return {ref for call in calls for ref in call.arguments.value.contained_refs}

    def records(self) -> list[ActorRecord]:
        """This session's actors, dead ones included (for the state API; read, never change)."""
        with self._lock:
            return [r for r in self._actors.values() if r.remote is None]

    def wait_ready(self, actor_id: bytes, timeout: float | None) -> bool:
        with self._lock:
            record = self._actors.get(actor_id)
        return record is not None and record.ready.wait(timeout)

    def close(self) -> list[Any]:
        """Forget every actor (detached ones keep running); returns groups to terminate."""
        with self._lock:
            self._closed = True
            records = list(self._actors.values())
            self._reservations.close()
            self._actors.clear()
            self._by_connection.clear()
            self._names.clear()
        groups = []
        for record in records:
            if record.remote is not None:
                record.remote.stop()
                continue
            if record.connection is not None and not record.spec.detached:
                try:
                    messages.notify(record.connection, Die(restart=False))
                except ConnectionClosed:
                    pass
            if record.group is not None and not record.spec.detached:
                groups.append(record.group)
        return groups
