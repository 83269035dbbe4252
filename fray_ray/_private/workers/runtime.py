"""Worker processes: the runtime seen by task and actor code.

A worker (an executor or an actor host) opens one session connection to its driver. Over it
the driver pushes work, and the worker's `ray.get`/`put`/`remote` calls go back as requests:
the driver owns every object. Values fetched by `get` are cached here by object id while a
ref to them is alive, so a large argument crosses the wire once per worker.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import fray_ray.exceptions as exceptions
from fray_ray._private import messages
from fray_ray._private.core.execution import node_ip, too_large_for_store
from fray_ray._private.core.generators import ObjectRefGenerator
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.core.placement_group_handle import PlacementGroupInfo
from fray_ray._private.core.runtime_env import process_runtime_env
from fray_ray._private.core.task_context import current_task
from fray_ray._private.core.task_spec import ActorCallSpec, ActorCreationSpec, TaskSpec
from fray_ray._private.messages import (
    AdoptLent,
    Cancel,
    CreateActor,
    CreatePlacementGroup,
    DescribePlacementGroup,
    FindPlacementGroup,
    GangSize,
    GetAbandoned,
    GetAvailablePerNode,
    GetNamedActor,
    GetNodes,
    GetObjects,
    GetResources,
    Hello,
    HolderUnreachable,
    KillActor,
    ListNamedActors,
    Message,
    MetricsReport,
    Objects,
    PlacementGroupTable,
    Put,
    ReleaseGang,
    RemovePlacementGroup,
    ReserveGang,
    ReturnShared,
    StreamNext,
    StreamReady,
    SubmitActorCall,
    SubmitTask,
    TaskWaits,
    Wait,
    WaitPlacementGroup,
    Welcome,
)
from fray_ray._private.objects.holder_clients import HolderLost
from fray_ray._private.objects.refcount import LocalReferenceCounter
from fray_ray._private.objects.serialization import SerializedValue, deserialize, deserialize_all, serialize
from fray_ray._private.objects.shared_memory import WORKER_BORROWS, shared_memory_dir
from fray_ray._private.observe.metrics import stop_reporting
from fray_ray._private.stream.buffers import WORKER_BLOCKS
from fray_ray._private.stream.protocol import Connection, ConnectionClosed, RemoteError
from fray_ray._private.stream.stream_server import introduce
from fray_ray._private.workers.direct_calls import DirectCalls
from fray_ray._private.workers.driver_notices import DriverNotices
from fray_ray._private.workers.held_results import WORKER_HOLDER
from fray_ray._private.workers.task_interrupts import wait_for_reply
from fray_ray.exceptions import GetTimeoutError

logger = logging.getLogger(__name__)

#: Fetched values kept per worker (bytes); least recently used go first.
CACHE_BYTES = 512 * 1024 * 1024


class WorkerRuntime:
    """The CoreRuntime inside a worker: every operation is a request to the driver."""

    is_driver = False

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.namespace = ""
        self.job_id = "01000000"
        self.node_id = b""
        self.worker_id = b""
        self.session_address = ""
        self.runtime_env = process_runtime_env()  # what tasks and actors submitted here inherit
        self.references = LocalReferenceCounter(self._on_first_ref, self._on_last_ref)
        #: what the driver has heard of this process's refs, before another process acts on them
        self.notices = DriverNotices(connection, self.references.flush)
        self._cache_lock = threading.Lock()
        self._cache: OrderedDict[bytes, SerializedValue] = OrderedDict()
        self._cache_bytes = 0
        self.object_store_memory = 0  # the driver's limit (0: not told)
        self.session_name = "session"  # the driver's, once it says (get_session_name())
        #: large fetched buffers may come as the driver's shared-memory files (`shared_memory`)
        self.reads_shared_memory = False
        #: this process may keep copies of large objects to serve other hosts (`objects/relays.py`)
        self.serves_copies = False
        #: actor calls sent straight to actor hosts, and their results (None: all go through the driver)
        self.direct: DirectCalls | None = None

    def report_metrics(self, points: list[list[Any]]) -> None:
        messages.notify(self.connection, MetricsReport(points))

    def set_info(self, info: Welcome) -> None:
        """Session facts from the driver's reply to hello."""
        self.namespace = info.namespace
        self.job_id = info.job_id
        self.node_id = info.node_id
        self.worker_id = info.worker_id
        self.session_address = info.session_address
        self.object_store_memory = int(info.object_store_memory or 0)
        self.session_name = info.session_name or self.session_name

    # ---- references ----------------------------------------------------------------------

    def _on_first_ref(self, object_ids: list[bytes]) -> None:
        direct = self.direct
        if direct is not None and direct.lent.borrows_any():  # borrowed from their lenders, not the driver
            object_ids = [oid for oid in object_ids if not direct.lent.borrowed_here(oid)]
            if not object_ids:
                return
        self.notices.borrowed(object_ids)

    def _on_last_ref(self, object_ids: list[bytes]) -> None:
        with self._cache_lock:
            for object_id in object_ids:
                value = self._cache.pop(object_id, None)
                if value is not None:
                    self._cache_bytes -= value.size
        if self.direct is not None:
            object_ids = self.direct.forget(object_ids)
        if object_ids:
            self.notices.released(object_ids)

    # ---- objects -------------------------------------------------------------------------

    def put(self, value: Any) -> ObjectRef:
        if isinstance(value, ObjectRef):
            raise TypeError(
                "Calling 'put' on an ray.ObjectRef is not allowed. If you really want to do this, you can wrap "
                "the ray.ObjectRef in a list and call 'put' on it."
            )
        self.references.flush()
        serialized = serialize(value)
        too_large = too_large_for_store(serialized, self.object_store_memory, "The object put")
        if too_large is not None:
            raise too_large
        kept = WORKER_HOLDER.keep_put(serialized)  # a large value stays in this process
        if kept is not None:
            object_id, held = kept
            serialized = SerializedValue(b"", (), serialized.contained_refs, False)
        try:
            stored = messages.call(self.connection, Put(serialized, object_id, held) if kept else Put(serialized))
        except RemoteError as exc:
            if kept is not None and WORKER_HOLDER.held is not None:
                WORKER_HOLDER.held.release([kept[0]])
            raise _rebuild_remote_error(exc) from None
        return ObjectRef(stored.id, _announced=True)

    def _remember(self, object_id: bytes, value: SerializedValue) -> None:
        if value.is_error or self.references.count(object_id) == 0:
            return
        with self._cache_lock:
            if object_id in self._cache:
                return
            self._cache[object_id] = value
            self._cache_bytes += value.size
            while self._cache_bytes > CACHE_BYTES and self._cache:
                _, old = self._cache.popitem(last=False)
                self._cache_bytes -= old.size

    def fetch(self, object_ids: Sequence[bytes], timeout: float | None, _lost_again: int = 0,
              _failed: Sequence[list[Any]] = ()) -> dict[bytes, SerializedValue]:
        """The stored values (or errors) of `object_ids`, from the cache, the driver or their
        holders. `_failed`: [object id, relay] pairs a previous try could not fetch."""
        self.references.flush()
        found: dict[bytes, SerializedValue] = {}
        direct = self.direct
        if direct is not None and any(direct.holds(oid) for oid in object_ids):
            try:
                found.update(direct.values([oid for oid in object_ids if direct.holds(oid)], timeout,
                                           self._task_waits()))
            except concurrent.futures.TimeoutError:
                raise GetTimeoutError(f"Get timed out: some object(s) not ready after {timeout} seconds.") from None
        with self._cache_lock:
            for object_id in object_ids:
                value = self._cache.get(object_id)
                if value is not None:
                    self._cache.move_to_end(object_id)
                    found[object_id] = value
        missing = [oid for oid in dict.fromkeys(object_ids) if oid not in found]
        if missing and self.serves_copies:  # made here, or a copy this process keeps for its host
            kept = WORKER_HOLDER.kept(missing)
            found.update(kept)
            missing = [oid for oid in missing if oid not in kept]
        if not missing:
            return found
        context = current_task.get()
        shared = self.reads_shared_memory
        if shared:
            self.return_shared()  # the driver may reuse what was read last for what comes now
        relay = WORKER_HOLDER.relay_address() if self.serves_copies else None
        asked = GetObjects(missing, context.task_id if context else None, shared, relay, list(_failed))
        if direct is not None:
            direct.lending.borrowers.away_from(self.connection)  # its borrowers' reads are answered meanwhile
        request = messages.request(self.connection, asked)
        try:
            answer = messages.reply_of(asked, wait_for_reply(request, timeout))
        except concurrent.futures.TimeoutError:
            self._notify_quietly(GetAbandoned(context.task_id if context else None))
            raise GetTimeoutError(f"Get timed out: some object(s) not ready after {timeout} seconds.") from None
        except KeyboardInterrupt:  # cancelled while it waited: it no longer waits
            self._notify_quietly(GetAbandoned(context.task_id if context else None))
            raise
        except ConnectionClosed as exc:
            from fray_ray.exceptions import RaySystemError

            raise RaySystemError(f"lost the connection to the driver: {exc}") from exc
        except RemoteError as exc:  # an object the driver does not know
            raise _rebuild_remote_error(exc) from None
        keep = answer.relays  # copies to keep for other hosts (`objects/relays.py`)
        WORKER_HOLDER.expect(keep)
        try:
            return {**found, **self._read_answer(missing, answer, timeout, _lost_again)}
        finally:
            WORKER_HOLDER.abandon(keep)  # those it did not keep: their readers ask again

    def _read_answer(self, asked: list[bytes], answer: Objects, timeout: float | None,
                     lost_again: int) -> dict[bytes, SerializedValue]:
        """The values of `asked` the driver's answer gives or says where to fetch."""
        values = answer.found
        failed: list[list[Any]] = []
        if answer.held:  # held by other processes: fetched from each holder, not through the driver
            try:
                values, failed = _fetched_from_holders(answer.ids, values, answer.held, answer.copies)
            except HolderLost:
                if lost_again > 2:
                    raise
                return self.fetch(asked, timeout, lost_again + 1)  # the driver dealt with it
        if answer.shared:
            try:
                values = WORKER_BORROWS.attach(self.connection, values, answer.shared, _return_leases)
            except OSError as exc:
                logger.warning("%s; large objects come over the session stream from now on", exc)
                self.reads_shared_memory = False
                return self.fetch(asked, timeout)
        found = dict(zip(answer.ids, values))
        if failed and lost_again <= 2:  # a relay could not serve them: the driver routes them again
            found.update(self.fetch([oid for oid, _ in failed], timeout, lost_again + 1, failed))
        if answer.relays:  # kept for other hosts, and read from the copy (the arrival buffers can go)
            found.update(WORKER_HOLDER.keep_copies({oid: found[oid] for oid in answer.relays if oid in found}))
        for object_id, value in found.items():
            self._remember(object_id, value)
        return found

    def _task_waits(self) -> _TaskWaits | None:
        """What tells the driver that the running task waits for direct results (None: no task runs)."""
        context = current_task.get()
        return _TaskWaits(self, context.task_id) if context is not None and context.task_id else None

    def return_shared(self) -> None:
        """Give the driver back the shared-memory leases nothing here uses any more."""
        WORKER_BORROWS.return_free(_return_leases)

    def get(self, refs: Sequence[ObjectRef], timeout: float | None) -> list[Any]:
        values = self.fetch([r.binary() for r in refs], timeout)
        ordered = [values[ref.binary()] for ref in refs]
        for value in ordered:
            if value.is_error:
                raise deserialize(value)
        return deserialize_all(ordered)

    def wait(
        self, refs: Sequence[Any], num_returns: int, timeout: float | None, fetch_local: bool
    ) -> tuple[list[Any], list[Any]]:
        self.references.flush()
        keys = [r._stream_id if isinstance(r, ObjectRefGenerator) else r.binary() for r in refs]
        direct = self.direct
        held = [key for key in keys if direct is not None and direct.holds(key)]
        if direct is not None and held:
            ready_here = direct.wait(keys, num_returns, timeout, self._task_waits()) if len(held) == len(keys) else None
            if ready_here is not None:  # all made here: answered here
                ready_refs = [r for r, k in zip(refs, keys) if k in ready_here][:num_returns]
                chosen = {id(r) for r in ready_refs}
                return ready_refs, [r for r in refs if id(r) not in chosen]
            direct.hand_over(held)  # the driver waits for them with the rest
        streams = [[r._stream_id, r._next_index] for r in refs if isinstance(r, ObjectRefGenerator)]
        asked = Wait(keys, num_returns, timeout, streams)
        if direct is not None:
            direct.lending.borrowers.away_from(self.connection)
        ready = set(messages.reply_of(asked, wait_for_reply(messages.request(self.connection, asked), None)).ready)
        ready_refs = [r for r, k in zip(refs, keys) if k in ready][:num_returns]
        chosen = {id(r) for r in ready_refs}
        return ready_refs, [r for r in refs if id(r) not in chosen]

    def stream_next_future(self, stream_id: bytes, index: int) -> concurrent.futures.Future:
        direct = self.direct
        if direct is not None:  # a generator method called straight on its host: its items come here
            future = direct.stream_next(stream_id, index, lambda: self._stream_next_from_driver(stream_id, index))
            if future is not None:
                return future
        return self._stream_next_from_driver(stream_id, index)

    def _stream_next_from_driver(self, stream_id: bytes, index: int) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        asked = StreamNext(stream_id, index)
        request = messages.request(self.connection, asked)

        def done(reply: concurrent.futures.Future) -> None:
            try:
                item = messages.reply_of(asked, reply.result())
            except BaseException as exc:  # noqa: BLE001 - delivered through the future
                future.set_exception(exc)
                return
            future.set_result(ObjectRef(item.id, _announced=True) if item.id else None)

        request.add_done_callback(done)
        return future

    def stream_ready(self, stream_id: bytes, index: int) -> str:
        state = self.direct.stream_ready(stream_id) if self.direct is not None else None
        return state if state is not None else self._simple(StreamReady(stream_id, index)).state

    def reserve_gang(self, *, tpu: str, num_slices: int, timeout: float | None) -> bytes:
        return self._simple(ReserveGang(tpu, num_slices, timeout)).value

    def release_gang(self, gang_id: bytes) -> None:
        self._simple(ReleaseGang(gang_id))

    def gang_size(self, gang_id: bytes) -> int:
        return self._simple(GangSize(gang_id)).value

    def create_placement_group(
        self, bundles: list[dict[str, float]], strategy: str, name: str, detached: bool
    ) -> PlacementGroupInfo:
        return self._simple(CreatePlacementGroup(bundles, strategy, name, detached)).value

    def remove_placement_group(self, group_id: bytes) -> None:
        self._simple(RemovePlacementGroup(group_id))

    def wait_placement_group(self, group_id: bytes, timeout: float | None) -> bool:
        return self._simple(WaitPlacementGroup(group_id, timeout)).value

    def placement_group_info(self, group_id: bytes) -> PlacementGroupInfo | None:
        return self._simple(DescribePlacementGroup(group_id)).value

    def placement_group_by_name(self, name: str) -> PlacementGroupInfo:
        return self._simple(FindPlacementGroup(name)).value

    def placement_group_table(self, group_id: bytes | None) -> dict[str, Any]:
        return self._simple(PlacementGroupTable(group_id)).value

    def object_future(self, ref: ObjectRef) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()

        def resolve() -> None:
            try:
                future.set_result(self.get([ref], None)[0])
            except BaseException as exc:  # noqa: BLE001 - delivered through the future
                future.set_exception(exc)

        threading.Thread(target=resolve, name="object-future", daemon=True).start()
        return future

    # ---- tasks and actors ----------------------------------------------------------------

    def _parent(self) -> bytes | None:
        context = current_task.get()
        return context.task_id if context else None

    def submit_task(self, spec: TaskSpec) -> list[Any]:
        """Tell the driver and go on without waiting, as Ray's `.remote()` does: this
        connection's later frames (a `get`, a release) reach the driver after it, and a ref
        that leaves for another process first waits for the driver to have it (`notices`)."""
        self.references.flush()
        self.notices.tell(SubmitTask(spec, self._parent()))
        if spec.num_returns == "streaming":
            return [ObjectRefGenerator(spec.task_id)]
        return [ObjectRef(oid, _announced=True) for oid in spec.return_ids]

    def create_actor(self, spec: ActorCreationSpec) -> bytes:
        return self._simple(CreateActor(spec, self._parent())).actor_id

    def submit_actor_call(self, spec: ActorCallSpec) -> list[Any]:
        if self.direct is not None:
            return self.direct.submit(spec, lambda: self._submit_actor_call(spec))
        return self._submit_actor_call(spec)

    def _submit_actor_call(self, spec: ActorCallSpec) -> list[Any]:
        reply = self._simple(SubmitActorCall(spec, self._parent()))
        if spec.num_returns == "streaming":
            return [ObjectRefGenerator(spec.call_id)]
        return [ObjectRef(oid, _announced=True) for oid in reply.returns]

    def _simple(self, message: Message) -> Any:
        """Send a request and return its reply; the driver's refusal as the error users expect."""
        self.references.flush()
        try:
            return messages.call(self.connection, message)
        except RemoteError as exc:
            raise _rebuild_remote_error(exc) from None

    def kill_actor(self, actor_id: bytes, no_restart: bool) -> None:
        self._simple(KillActor(actor_id, no_restart))

    def cancel(self, ref: ObjectRef | ObjectRefGenerator, force: bool, recursive: bool) -> None:
        key = ref._stream_id if isinstance(ref, ObjectRefGenerator) else ref.binary()
        if self.direct is not None and self.direct.cancel(key, force):
            return
        self._simple(Cancel(key, force, recursive))

    def get_named_actor(self, name: str, namespace: str | None) -> Mapping[str, Any]:
        return self._simple(GetNamedActor(name, namespace)).value

    def list_named_actors(self, all_namespaces: bool) -> list[Any]:
        return self._simple(ListNamedActors(all_namespaces)).value

    def cluster_resources(self) -> dict[str, float]:
        return self._simple(GetResources(available=False)).resources

    def available_resources(self) -> dict[str, float]:
        return self._simple(GetResources(available=True)).resources

    def available_resources_per_node(self) -> dict[str, dict[str, float]]:
        return self._simple(GetAvailablePerNode()).value

    def nodes(self) -> list[dict[str, Any]]:
        return self._simple(GetNodes()).value

    def context_info(self) -> dict[str, Any]:
        context = current_task.get()
        return {
            "job_id": self.job_id,
            "node_id": self.node_id,
            "worker_id": self.worker_id,
            "namespace": self.namespace,
            "task_id": context.task_id if context else None,
            "task_name": context.function_name if context else None,
            "task_function_name": (context.qualified_name or context.function_name) if context else None,
            "actor_id": context.actor_id if context else None,
            "actor_name": context.actor_name if context else None,
            "actor_given_name": context.actor_given_name if context else None,
            "resources": dict(context.resources) if context else {},
            "placement_group_id": context.placement_group_id if context else None,
            "cancelled": context.cancelled.is_set() if context else False,
            "is_driver": False,
            "session_address": self.session_address,
        }

    def _notify_quietly(self, message: Message) -> None:
        try:
            messages.notify(self.connection, message)
        except ConnectionClosed:
            pass

    def shutdown(self, hand_off: bool = False) -> None:
        """`hand_off`: what other processes keep of this one's objects goes to the driver first
        (`DirectCalls.close`)."""
        stop_reporting(self)  # what tasks recorded reaches the driver before the session closes
        if self.direct is not None:
            self.direct.close(hand_off=hand_off and not self.connection.closed)
            self.references.flush()  # its releases go before the session closes
        self.connection.close()


def _rebuild_remote_error(error: RemoteError) -> BaseException:
    """Errors the driver reports for worker requests, as the exception types users expect."""
    kind = error.kind
    if kind == "ValueError":
        return ValueError(error.message)
    if kind == "TypeError":
        return TypeError(error.message)
    if kind == "ObjectFreedError":  # the message is the object's id
        return exceptions.ObjectFreedError(error.message, None, "")
    if hasattr(exceptions, kind) and isinstance(getattr(exceptions, kind), type):
        try:
            return getattr(exceptions, kind)(error.message)
        except TypeError:
            pass
    return exceptions.RaySystemError(f"{kind}: {error.message}")


class _TaskWaits:
    """Tells the driver that a task waits for direct results (`DirectCalls.values`), so that it
    lends the task's CPU meanwhile, and when it no longer waits."""

    def __init__(self, runtime: WorkerRuntime, task_id: bytes) -> None:
        self._runtime = runtime
        self._task_id = task_id

    def began(self) -> None:
        self._runtime._notify_quietly(TaskWaits(self._task_id))

    def ended(self) -> None:
        self._runtime._notify_quietly(GetAbandoned(self._task_id))


def _fetched_from_holders(ids: list[bytes], values: list[SerializedValue], held: list[list[Any]],
                          copies: list[bytes]) -> tuple[list[SerializedValue], list[list[Any]]]:
    """`values` with each held one fetched from its holder, and the [object id, relay] pairs
    of the copies a relay could not serve."""
    wanted = [(ids[index], holder) for index, holder, _ in held]
    fetched = WORKER_HOLDER.fetch(wanted, set(copies))
    failed = [[oid, holder] for oid, holder in wanted if oid in copies and fetched[oid].is_error]
    return [fetched.get(object_id, value) for object_id, value in zip(ids, values)], failed


def _report_unreachable(runtime: WorkerRuntime, holder: str) -> bool:
    """Tell the driver a holder did not answer; it has dealt with that once it replies."""
    try:
        messages.call(runtime.connection, HolderUnreachable(holder))
    except (ConnectionClosed, RemoteError):
        return False
    return True


def _return_leases(connection: Connection, leases: list[int]) -> None:
    try:
        messages.notify(connection, ReturnShared(leases))
    except ConnectionClosed:
        pass


def open_session(
    session_address: str,
    token: str,
    kind: str,
    worker_id: bytes,
    handlers: Mapping[str, Any],
    on_runtime: Any = None,
    *,
    index: int = 0,
    in_process: bool = False,
) -> WorkerRuntime:
    """Connect to the driver, introduce this worker (and its cluster host), return its runtime.

    The introduction (carrying the session token) is the first frame on the connection and is
    answered before anything else is sent or read. `on_runtime(runtime)` runs before any
    message is handled, so handlers can rely on the runtime existing. A worker in a process of
    its own (not `in_process`) reads large buffers into reused blocks (`buffers`).
    """
    identity = "" if in_process else WORKER_BORROWS.use_directory(shared_memory_dir())
    hello = Hello(kind=kind, id=worker_id, token=token, pid=os.getpid(), host=os.environ.get("IRIS_WORKER_ID"),
                  ip=node_ip(), index=index, shared_memory=identity)
    greeting, _ = messages.encode(hello)
    blocks = None if in_process else WORKER_BLOCKS
    connection, info = introduce(session_address, greeting, name=f"{kind}-session", received_blocks=blocks)
    runtime = WorkerRuntime(connection)
    runtime.reads_shared_memory = bool(identity)
    if not in_process:  # one process, one runtime: its refs' escapes are this runtime's
        runtime.direct = DirectCalls(connection, runtime.references, runtime.notices, worker_id)
        # a host whose gate connection to this process broke asks for what it was lent this way;
        # answered off the session's reader, which must read the driver's confirmation meanwhile
        adopt = runtime.direct.lending.handlers()[AdoptLent]
        handlers = {**handlers, **messages.handlers({AdoptLent: lambda *asked: threading.Thread(
            target=adopt, args=asked, name="adopt-lent", daemon=True).start()})}
    runtime.set_info(messages.reply_of(hello, (info, [])))
    if not in_process:
        WORKER_HOLDER.configure(token, runtime.object_store_memory, lambda holder: _report_unreachable(runtime, holder))
        runtime.serves_copies = True
    if on_runtime is not None:
        on_runtime(runtime)
    connection.start(dict(handlers))
    return runtime
