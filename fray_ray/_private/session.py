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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import cloudpickle

from fray_ray._private.protocol import Connection, ConnectionClosed
from fray_ray._private.stream_server import HELLO, GateStats, StreamServer
from fray_ray._private.serialization import WireBatch, unpack_values
from fray_ray._private.worker import unpack_spec

if TYPE_CHECKING:
    from fray_ray._private.driver import DriverRuntime

logger = logging.getLogger(__name__)


class SessionService:
    """Accepts worker connections for one driver and serves their requests."""

    def __init__(self, driver: DriverRuntime, *, host: str, token: str, advertise_host: str | None = None) -> None:
        """Listens on `host`; workers are told to connect to `advertise_host` (default `host`)."""
        self._driver = driver
        self._advertise_host = advertise_host or host
        self._lock = threading.Lock()  # guards _borrows and _connections
        self._borrows: dict[Connection, collections.Counter[bytes]] = {}
        self._connections: set[Connection] = set()
        self._server = StreamServer(self._accept, token=token, host=host, name="session")
        self._handlers = {
            HELLO: self._hello,
            "task_done": self._task_done,
            "call_done": self._call_done,
            "actor_ready": self._actor_ready,
            "actor_failed": self._actor_failed,
            "actor_exiting": self._actor_exiting,
            "get": self._get,
            "get_abandoned": self._get_abandoned,
            "wait": self._wait,
            "put": self._put,
            "submit": self._submit,
            "create_actor": self._create_actor,
            "actor_call": self._actor_call,
            "kill_actor": self._kill_actor,
            "cancel": self._cancel,
            "get_actor": self._get_actor,
            "list_actors": self._list_actors,
            "resources": self._resources,
            "nodes": self._nodes,
            "borrow": self._borrow,
            "release": self._release,
            "log": self._log,
            "yield": self._yield,
            "stream_next": self._stream_next,
            "stream_ready": self._stream_ready,
            "placement_group": self._placement_group,
            "gang": self._gang,
            "tasks_returned": self._tasks_returned,
        }

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

    def _hello(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        if connection.peer_info:  # the gate authenticated the first hello; there is no second
            connection.reply_error(message_id, "ValueError", "this connection has already introduced itself")
            return
        kind, worker_id, pid = body.get("kind"), body.get("id"), body.get("pid")
        host = body.get("host") if isinstance(body.get("host"), str) else None
        connection.peer_info = {"kind": kind, "id": worker_id, "pid": pid}
        connection.reply(message_id, self._driver.worker_info(worker_id, host))
        if kind == "executor":
            accepted = self._driver.scheduler.executor_connected(worker_id, connection, pid, host)
        elif kind == "actor":
            accepted = self._driver.actors.host_connected(worker_id, connection, pid, host)
        elif kind == "gang":
            accepted = self._driver.gangs.member_connected(worker_id, body.get("index", 0), connection, body.get("ip", ""))
        elif kind == "lease":
            if not self._driver.launcher.lease.holder_connected(connection):
                connection.close()  # a holder this session does not know: it ends, as it should
            return
        else:
            accepted = False
        if not accepted:
            try:
                connection.notify("exit" if kind == "executor" else "die", {"restart": False})
            except ConnectionClosed:
                pass

    # ---- results -------------------------------------------------------------------------

    def _task_done(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        results = unpack_values(body["results"], buffers)
        if connection.peer_info.get("kind") == "gang":
            self._driver.gangs.task_done(connection, body["task"], results, body["user_error"])
        else:
            self._driver.scheduler.task_done(connection, body["task"], results, body["user_error"])

    def _tasks_returned(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        self._driver.scheduler.tasks_returned(connection, body["tasks"])

    def _call_done(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        results = unpack_values(body["results"], buffers)
        self._driver.actors.call_done(connection, body["call"], results)

    def _actor_ready(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        self._driver.actors.ready(body["actor"], body.get("pid"))

    def _actor_failed(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        (error,) = unpack_values(body["error"], buffers)
        self._driver.actors.creation_failed(body["actor"], error)

    def _actor_exiting(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        self._driver.actors.exiting(body["actor"], body.get("call"))

    # ---- objects -------------------------------------------------------------------------

    def _get(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        object_ids: list[bytes] = body["ids"]
        task_id = body.get("task")
        objects = self._driver.objects
        state = {"remaining": set(), "replied": False}
        lock = threading.Lock()

        def reply() -> None:
            batch = WireBatch()
            ids = []
            for object_id in object_ids:
                value = objects.value(object_id)
                if value is None:
                    continue
                ids.append(object_id)
                batch.add(value)
            connection.reply(message_id, {"ids": ids, "values": batch.descriptions}, batch.buffers)

        def done(object_id: bytes) -> None:
            value = objects.value(object_id)
            with lock:
                if state["replied"]:
                    return
                state["remaining"].discard(object_id)
                failed = value is not None and value.is_error
                if state["remaining"] and not failed:
                    return
                state["replied"] = True
            reply()
            self._driver.scheduler.task_unblocked(task_id)

        missing = [oid for oid in object_ids if not objects.is_done(oid)]
        unknown = [oid for oid in missing if not objects.known(oid)]
        if unknown:
            connection.reply_error(
                message_id, "ObjectLostError",
                f"Object {unknown[0].hex()} is not known to the driver (it was freed or never existed).",
            )
            return
        if not missing or any((v := objects.value(oid)) is not None and v.is_error for oid in object_ids):
            reply()
            return
        with lock:
            state["remaining"] = set(missing)
        self._driver.scheduler.task_blocked(task_id)
        for object_id in missing:
            objects.add_done_callback(object_id, done)

    def _get_abandoned(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        self._driver.scheduler.task_unblocked(body.get("task"))

    def _wait(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None

        def answer(ready: list[bytes]) -> None:
            connection.reply(message_id, {"ready": ready})

        streams = {stream_id: index for stream_id, index in body.get("streams") or ()}
        self._driver.wait_async(body["ids"], body["num_returns"], body.get("timeout"), answer, streams)

    def _put(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        (value,) = unpack_values([body["value"]], buffers)
        try:
            object_id = self._driver.store(value, copy=False)  # the frame's buffers are ours
        except Exception as exc:  # noqa: BLE001 - ObjectStoreFullError, raised at the worker's put
            connection.reply_error(message_id, type(exc).__name__, str(exc.args[0] if exc.args else exc))
            return
        self._count_borrow(connection, [object_id])
        connection.reply(message_id, {"id": object_id})

    # ---- tasks and actors ----------------------------------------------------------------

    def _submit(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        spec = unpack_spec(body, buffers)
        spec.parent_task_id = body.get("parent")
        self._driver.objects.create_pending(spec.return_ids, producer=spec.task_id)
        self._count_borrow(connection, list(spec.return_ids))
        if spec.num_returns in ("streaming", "dynamic"):
            self._driver.streams.open(spec.task_id)
        self._driver.route_task(spec)
        connection.reply(message_id, {"returns": list(spec.return_ids)})

    def _create_actor(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        spec = unpack_spec(body, buffers)
        try:
            actor_id = self._driver.create_actor(spec)
        except ValueError as exc:
            connection.reply_error(message_id, type(exc).__name__, str(exc))
            return
        connection.reply(message_id, {"actor_id": actor_id})

    def _actor_call(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        spec = unpack_spec(body, buffers)
        self._driver.objects.create_pending(spec.return_ids, producer=spec.call_id)
        self._count_borrow(connection, list(spec.return_ids))
        if spec.num_returns == "streaming":
            self._driver.streams.open(spec.call_id)
        self._driver.actors.submit_call(spec)
        connection.reply(message_id, {"returns": list(spec.return_ids)})

    def _kill_actor(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        self._driver.actors.kill(body["actor_id"], body["no_restart"])
        connection.reply(message_id, {})

    def _cancel(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        try:
            self._driver.cancel_by_id(body["id"], body["force"], body["recursive"])
        except ValueError as exc:
            connection.reply_error(message_id, "ValueError", str(exc))
            return
        connection.reply(message_id, {})

    def _get_actor(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        try:
            info = self._driver.get_named_actor(body["name"], body.get("namespace"))
        except ValueError as exc:
            connection.reply_error(message_id, "ValueError", str(exc))
            return
        connection.reply(message_id, {"info": cloudpickle.dumps(info)})

    def _list_actors(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        connection.reply(message_id, {"actors": self._driver.list_named_actors(body["all_namespaces"])})

    def _resources(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        if body["kind"] == "cluster":
            resources = self._driver.cluster_resources()
        else:
            resources = self._driver.available_resources()
        connection.reply(message_id, {"resources": resources})

    def _nodes(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        connection.reply(message_id, {"nodes": cloudpickle.dumps(self._driver.nodes())})

    # ---- references and logs -------------------------------------------------------------

    def _borrow(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        self._count_borrow(connection, body["ids"])

    def _release(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        object_ids: list[bytes] = body["ids"]
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

    def _yield(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        (value,) = unpack_values([body["value"]], buffers)
        self._driver.streams.add_item(body["stream"], body["index"], value)

    def _stream_next(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        stream_id, index = body["stream"], body["index"]
        streams = self._driver.streams

        def check() -> None:
            from fray_ray._private.streams import END

            object_id = streams.poll(stream_id, index)
            if object_id is None:
                streams.on_change(stream_id, check)
                return
            if object_id != END:
                self._count_borrow(connection, [object_id])
                streams.taken(stream_id, index)
            connection.reply(message_id, {"id": object_id})

        check()

    def _stream_ready(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        connection.reply(message_id, {"state": self._driver.stream_ready(body["stream"], body["index"])})

    def _placement_group(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        arguments = cloudpickle.loads(body["args"])
        operation = body["op"]

        def run() -> None:  # wait() blocks, so it cannot run on the reader thread
            try:
                result = self._driver.placement_group(operation, **arguments)
            except ValueError as exc:
                connection.reply_error(message_id, "ValueError", str(exc))
                return
            connection.reply(message_id, {"result": cloudpickle.dumps(result)})

        if operation == "wait":
            threading.Thread(target=run, name="placement-group-wait", daemon=True).start()
        else:
            run()

    def _gang(self, connection: Connection, message_id: int | None, body: Any, buffers: list[bytearray]) -> None:
        assert message_id is not None
        arguments = cloudpickle.loads(body["args"])

        def run() -> None:  # reserving blocks until the hosts are up
            try:
                result = self._driver.gang(body["op"], **arguments)
            except (ValueError, TimeoutError, RuntimeError) as exc:
                connection.reply_error(message_id, type(exc).__name__, str(exc))
                return
            connection.reply(message_id, {"result": cloudpickle.dumps(result)})

        threading.Thread(target=run, name="gang-request", daemon=True).start()

    def _log(self, connection: Connection, message_id: int | None, body: Mapping[str, Any], buffers: list[bytearray]) -> None:
        self._driver.print_worker_output(body)
