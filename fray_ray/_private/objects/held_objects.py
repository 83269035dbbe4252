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

- `fetch_held` {"ids": [...]}: the values held here among `ids` ("values": wire descriptions,
  "missing": ids not held here, "shared": [buffer index, file name, size, lease] entries).
- `release_held` {"ids": [...]} (notification): the owner freed these objects.
- `return_leases` {"leases": [...]} (notification): the peer no longer reads these files.
"""

from __future__ import annotations

import logging
import threading
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


class HeldObjects:
    """This process's held values, by object id. Thread-safe (the table's lock)."""

    def __init__(self, limit: int, *, shared_dir: str | None, session_name: str = "held") -> None:
        self._table = ObjectTable(ObjectStore(ObjectStoreConfig(limit), session_name=session_name, shared_dir=shared_dir))
        self.served_bytes = 0  # bytes sent to readers, for tests and benchmarks
        self.lent_bytes = 0  # bytes lent as shared-memory files

    def hold(self, object_id: bytes, value: SerializedValue) -> None:
        """Keep a copy of `value` (its buffers may alias memory the caller still uses).
        Raises ObjectStoreFullError when it fits neither in memory nor on disk."""
        self._table.put(object_id, value, copy=True)
        self._table.incref([object_id])  # held until the owner releases it

    def values(self, object_ids: list[bytes]) -> list[SerializedValue | None]:
        found = self._table.values(object_ids)
        assert found is not None
        return found

    def release(self, object_ids: list[bytes]) -> None:
        self._table.decref([oid for oid in object_ids if self._table.known(oid)])

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
        found = self.held.values(ids)
        present = [(oid, value) for oid, value in zip(ids, found) if value is not None]
        values = [value for _, value in present]
        shared: list[list[Any]] = []
        if shares and values:
            values, lent = self._lent.lend(connection, values)
            shared = [entry.to_wire() for entry in lent]
            self.held.lent_bytes += sum(entry.size for entry in lent)
        batch = WireBatch()
        for value in values:
            batch.add(value)
        self.held.served_bytes += sum(value.size for value in values)
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
