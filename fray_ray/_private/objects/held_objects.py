"""The values a worker process made and keeps for others to fetch: its store and its server.

A task's large result stays where it was made, as in Ray, instead of crossing to the driver:
`HeldObjects` keeps it in this process, within a memory limit of its own, in blocks of this
host's shared-memory directory (so readers on this host can map it), spilled to a file of this
process when room is needed (the same `ObjectStore` the driver uses). `HolderServer` serves
those values to the session's other processes over a stream server of its own: a peer must
prove it holds the session token in its first frame, before anything is parsed (the gate of
`stream_server`); a peer whose greeting names this host's shared-memory directory is lent the
blocks' file names, any other one gets the bytes.

Requests (raw frames, answered in order):

- `fetch_held` {"ids": [...], "wait": bool}: the values held here among `ids` ("values": wire
  descriptions, "missing": ids not held here, "shared": [buffer index, file name, size, lease]
  entries). With "wait", a relay's reader (`relays`) is answered once each id is held, or has
  been given up, or was never expected here within `UNEXPECTED_WAIT` seconds.
- `release_held` {"ids": [...]} (notification): the owner freed these objects.
- `return_leases` {"leases": [...]} (notification): the peer no longer reads these files.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from fray_ray._private.objects.object_store import ObjectStore, ObjectStoreConfig
from fray_ray._private.objects.object_table import ObjectTable
from fray_ray._private.objects.serialization import SerializedValue, WireBatch
from fray_ray._private.objects.shared_memory import LentBlocks, host_identity
from fray_ray._private.stream.protocol import Connection
from fray_ray._private.stream.stream_server import StreamServer

logger = logging.getLogger(__name__)

FETCH = "fetch_held"
RELEASE = "release_held"
RETURN_LEASES = "return_leases"
#: Ids one request may name (a bad peer must not make this process build a huge answer list).
MAX_IDS = 100_000
#: How long a waiting fetch waits for an id this process was never told to expect (its owner
#: may have sent a reader here an instant before telling this process to keep a copy).
UNEXPECTED_WAIT = 30.0
#: Waiting fetches at once; beyond it a fetch is answered with what is held now.
MAX_WAITERS = 1_000
#: Released ids remembered, so a reader asking for one is answered at once instead of waiting.
RELEASED_KEPT = 10_000


class _Waiter:
    """A waiting fetch: `ready()` runs once none of `pending` is still to come."""

    __slots__ = ("pending", "ready", "timer")

    def __init__(self, pending: set[bytes], ready: Callable[[], None]) -> None:
        self.pending = pending
        self.ready = ready
        self.timer: threading.Timer | None = None


class HeldObjects:
    """This process's held values, by object id. Thread-safe (the table's lock)."""

    def __init__(self, limit: int, *, shared_dir: str | None, session_name: str = "held",
                 unexpected_wait: float = UNEXPECTED_WAIT) -> None:
        self._table = ObjectTable(ObjectStore(ObjectStoreConfig(limit), session_name=session_name, shared_dir=shared_dir))
        self.served_bytes = 0  # bytes sent to readers, for tests and benchmarks
        self.lent_bytes = 0  # bytes lent as shared-memory files
        self._unexpected_wait = unexpected_wait
        self._waiting = threading.Lock()  # guards the counters, _expected, _released and _waiters
        self._expected: set[bytes] = set()  # copies this process is fetching to serve onward
        self._released: OrderedDict[bytes, None] = OrderedDict()  # the last ids let go, oldest first
        self._waiters: list[_Waiter] = []

    def hold(self, object_id: bytes, value: SerializedValue, *, copy: bool = True) -> None:
        """Keep `value`: a copy if its buffers may alias memory the caller still uses, else
        the buffers themselves (`copy=False`: they arrived in a frame and are this process's).
        Raises ObjectStoreFullError when it fits neither in memory nor on disk."""
        self._table.put(object_id, value, copy=copy)
        self._table.incref([object_id])  # held until the owner releases it
        self._arrived([object_id])

    def count(self, *, served: int = 0, lent: int = 0) -> None:
        """Add to the byte counters (answers are sent from several threads at once)."""
        with self._waiting:
            self.served_bytes += served
            self.lent_bytes += lent

    def holds(self, object_id: bytes) -> bool:
        return self._table.known(object_id)

    def expect(self, object_ids: Iterable[bytes]) -> None:
        """This process is fetching these to keep and serve: readers sent here wait for them."""
        with self._waiting:
            for object_id in object_ids:
                self._expected.add(object_id)
                self._released.pop(object_id, None)

    def abandon(self, object_ids: Iterable[bytes]) -> None:
        """The expected copies that will not come: their waiting readers are answered now."""
        self._arrived(list(object_ids))

    def wait_for(self, object_ids: list[bytes], ready: Callable[[], None]) -> None:
        """Run `ready()` (on another thread, or here at once) when each of `object_ids` is held,
        abandoned or released, or was not expected within `unexpected_wait` seconds."""
        with self._waiting:
            pending = {oid for oid in object_ids if not self._table.known(oid) and oid not in self._released}
            if len(self._waiters) >= MAX_WAITERS:  # a flood of waiting fetches gets answers, not threads
                pending = set()
            waiter = _Waiter(pending, ready) if pending else None
            if waiter is not None:
                self._waiters.append(waiter)
                self._arm(waiter)
        if waiter is None:
            ready()

    def _arm(self, waiter: _Waiter) -> None:
        waiter.timer = threading.Timer(self._unexpected_wait, self._timed_out, (waiter,))
        waiter.timer.daemon = True
        waiter.timer.start()

    def _timed_out(self, waiter: _Waiter) -> None:
        with self._waiting:
            if waiter not in self._waiters:
                return
            if waiter.pending & self._expected:  # still coming: a large copy takes its time
                self._arm(waiter)
                return
            self._waiters.remove(waiter)
        waiter.ready()

    def _arrived(self, object_ids: list[bytes]) -> None:
        done: list[_Waiter] = []
        with self._waiting:
            self._expected.difference_update(object_ids)
            if not self._waiters:
                return
            for waiter in self._waiters:
                waiter.pending.difference_update(object_ids)
                if not waiter.pending:
                    done.append(waiter)
            for waiter in done:
                self._waiters.remove(waiter)
                if waiter.timer is not None:
                    waiter.timer.cancel()
        for waiter in done:  # answering may send a large value: not on the thread that brought it
            threading.Thread(target=waiter.ready, name="held-waiter", daemon=True).start()

    def values(self, object_ids: list[bytes]) -> list[SerializedValue | None]:
        found = self._table.values(object_ids)
        assert found is not None
        return found

    def release(self, object_ids: list[bytes]) -> None:
        self._table.decref([oid for oid in object_ids if self._table.known(oid)])
        with self._waiting:  # a reader sent here for one of these later is answered at once
            for object_id in object_ids:
                self._released[object_id] = None
            while len(self._released) > RELEASED_KEPT:
                self._released.popitem(last=False)

    def held(self) -> list[bytes]:
        """Ids held now."""
        return [summary.object_id for summary in self._table.snapshot()]

    def spilled(self) -> list[bytes]:
        """Ids held now in a spill file rather than in memory."""
        return self._table.spilled_ids()

    @property
    def memory_used(self) -> int:
        return self._table.store.used

    def close(self) -> None:
        with self._waiting:
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if waiter.timer is not None:
                waiter.timer.cancel()
        self._table.store.close()


class HolderServer:
    """Serves this process's `HeldObjects` to the session (see the module docstring)."""

    def __init__(self, held: HeldObjects, *, token: str, bind_host: str, advertise_host: str,
                 shared_dir: str | None) -> None:
        self.held = held
        self._identity = host_identity(shared_dir)
        self._lent = LentBlocks()
        self._server = StreamServer(self._connected, token=token, host=bind_host, name="holder")
        self.address = f"[{advertise_host}]:{self._server.port}" if ":" in advertise_host else \
            f"{advertise_host}:{self._server.port}"
        self._lock = threading.Lock()  # guards _connections
        self._connections: set[Connection] = set()

    def start(self) -> HolderServer:
        self._server.start()
        return self

    def close(self) -> None:
        self._server.close()
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            connection.close()

    def lent(self) -> int:
        """Leases of shared files not yet returned."""
        return self._lent.outstanding()

    def _connected(self, connection: Connection, greeting: list[Any]) -> None:
        body = greeting[3] if isinstance(greeting[3], dict) else {}
        identity = body.get("shared_memory")
        shares = bool(self._identity) and identity == self._identity
        with self._lock:
            self._connections.add(connection)
        connection.add_close_callback(self._closed)
        handlers = {
            "hello": lambda c, message_id, b, buffers: c.reply(message_id, {"holder": self.address}),
            FETCH: lambda c, message_id, b, buffers: self._fetch(c, message_id, b, shares),
            RELEASE: lambda c, message_id, b, buffers: self.held.release(_ids(b)),
            RETURN_LEASES: lambda c, message_id, b, buffers: self._lent.returned(c, _leases(b)),
        }
        connection.start(handlers, first_frame=greeting)

    def _closed(self, connection: Connection) -> None:
        self._lent.connection_closed(connection)
        with self._lock:
            self._connections.discard(connection)

    def _fetch(self, connection: Connection, message_id: int | None, body: Any, shares: bool) -> None:
        if message_id is None:
            return
        ids = _ids(body)
        if body.get("wait") is True:  # a relay's reader: answered once the copies are in
            self.held.wait_for(ids, lambda: self._answer_later(connection, message_id, ids, shares))
        else:
            self._answer(connection, message_id, ids, shares)

    def _answer_later(self, connection: Connection, message_id: int, ids: list[bytes], shares: bool) -> None:
        try:
            self._answer(connection, message_id, ids, shares)
        except Exception as exc:  # noqa: BLE001 - off the connection's thread: answered here
            logger.warning("answering a fetch of held values failed", exc_info=True)
            connection.reply_error(message_id, type(exc).__name__, str(exc))

    def _answer(self, connection: Connection, message_id: int, ids: list[bytes], shares: bool) -> None:
        if connection.closed:
            return
        found = self.held.values(ids)
        present = [(oid, value) for oid, value in zip(ids, found) if value is not None]
        values = [value for _, value in present]
        shared: list[list[Any]] = []
        if shares and values:
            values, lent = self._lent.lend(connection, values)
            shared = [entry.to_wire() for entry in lent]
            self.held.count(lent=sum(entry.size for entry in lent))
        batch = WireBatch()
        for value in values:
            batch.add(value)
        self.held.count(served=sum(value.size for value in values))
        connection.reply(message_id, {
            "ids": [oid for oid, _ in present],
            "values": batch.descriptions,
            "missing": [oid for oid, value in zip(ids, found) if value is None],
            "shared": shared,
        }, batch.buffers)


def _ids(body: Any) -> list[bytes]:
    """The object ids a request names; ValueError (answered as an error) for anything else."""
    ids = body.get("ids") if isinstance(body, dict) else None
    if not isinstance(ids, list) or len(ids) > MAX_IDS or not all(isinstance(i, bytes) for i in ids):
        raise ValueError("a request must name a list of object ids")
    return ids


def _leases(body: Any) -> list[int]:
    leases = body.get("leases") if isinstance(body, dict) else None
    if not isinstance(leases, list):
        raise ValueError("a lease return must name a list of leases")
    return [lease for lease in leases if isinstance(lease, int)]
