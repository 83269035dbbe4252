"""The owner's side of values held by workers: lineage, loss, and hand-off on retirement.

A task's result that its executor keeps (`objects/remote_values.py`) lives only in that process.
So the driver, as Ray's owner does, keeps the task's spec (its lineage) while such a result
may still be read, with the task's arguments alive. When the holder's process exits:

- each of its values whose task may run again (`max_retries`, counted per task as Ray counts
  reconstructions) is made pending again and the task resubmitted: readers wait for the rerun;
- any other one fails with `ObjectReconstructionFailedError` (an `ObjectLostError`) saying why
  (retries disabled, or used up), never a hang;
- a direct call's result its caller handed over and keeps (`kept_by_owner`) fails with
  `OwnerDiedError`: in Ray that caller is its owner, and nothing can make it again;
- an item of a streaming task is made pending again and taken from the replay of the task's
  next run: its retry if it was still running, or a rerun (counted as above) if it had ended;
- an actor method's result its actor's process keeps (`kept_without_lineage`) fails with
  `ObjectReconstructionFailedError` saying so: an actor method is never run again to rebuild
  a value. Items of a generator call still running are the exception: the call's retry on the
  restarted actor, if it has one, replays them.

An executor retired while idle hands its values over first: the driver fetches them from it
and holds them itself (`hand_off`), so retirement never loses an object. An actor that ends on
purpose (`ray.kill`, `exit_actor`, its handles gone) hands over the values it holds for the
driver (`actor_ending`), which in Ray live on in the node's store; what the actor owns in Ray's
terms (its puts, its own direct calls' results) ends with it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from fray_ray._private.core.retry_policy import within_retries
from fray_ray._private.core.task_spec import TaskSpec
from fray_ray._private.objects.holder_clients import HolderClients, lost
from fray_ray._private.objects.ids import OBJECT_ID_SIZE
from fray_ray._private.objects.object_table import ObjectTable
from fray_ray._private.objects.remote_values import with_remote_results
from fray_ray._private.objects.serialization import SerializedValue, serialize_error
from fray_ray._private.stream.protocol import Connection
from fray_ray.exceptions import OwnerDiedError

logger = logging.getLogger(__name__)

#: Why an actor method's result, or an item of its generator, that its actor's process held
#: cannot be had again.
ACTOR_RESULT = "it was returned by an actor method, which is not run again to rebuild it"
GENERATOR_ITEM = "it was an item of an actor method's generator, which is not run again to rebuild it"
#: Why a lost item was not made again by the run that followed (a retry, or a rerun).
TASK_ITEM_NOT_REPLAYED = "the run of its generator task that followed did not yield it again"
CALL_ITEM_NOT_REPLAYED = "it was an item of an actor method's generator, and no retry of the call yielded it again"


class HeldLineage:
    """Specs of the tasks whose results workers hold, and what to do when a holder goes."""

    def __init__(self, objects: ObjectTable, holders: HolderClients, resubmit: Callable[[TaskSpec], None],
                 spec_of: Callable[[bytes], TaskSpec | None], refill: Callable[[bytes, list[bytes], str, str], None],
                 stream_running: Callable[[bytes], bool]) -> None:
        self._objects = objects
        self._holders = holders
        self._resubmit = resubmit
        self._spec_of = spec_of  # a running task's spec
        self._refill = refill  # StreamTable.refill: lost items of a stream come from its next run
        self._stream_running = stream_running  # StreamTable.running: a run of its producer has not ended
        self._lock = threading.Lock()  # guards the maps below
        self._specs: dict[bytes, TaskSpec] = {}  # object id -> the task that makes it
        self._rebuilds: dict[bytes, int] = {}  # task id -> times it ran again to rebuild
        self._live: dict[bytes, int] = {}  # task id -> its objects still kept here
        self._hosts: dict[str, str] = {}  # holder address -> its host's shared-memory identity
        self._kept_by_owner: set[bytes] = set()  # objects held by the process Ray would call their owner
        self._no_lineage: dict[bytes, str] = {}  # held values nothing can make again -> why
        #: holder address -> (set once its values are rebuilt or failed, the thread doing it)
        self._handling: dict[str, tuple[threading.Event, int]] = {}

    def put_held(self, connection: Connection, object_id: bytes | None, value: SerializedValue,
                 held: list[list[Any]]) -> bytes:
        """A worker's `ray.put` it keeps itself under `object_id`: record where (no lineage: a
        put cannot be rebuilt). ValueError for an id that is no fresh put id."""
        if not isinstance(object_id, bytes) or len(object_id) != OBJECT_ID_SIZE or object_id[-4:] != bytes(4):
            raise ValueError("a held put must name a put id")
        if self._objects.known(object_id):
            raise ValueError(f"object {object_id.hex()} exists already")
        (remote,) = with_remote_results([value], held)
        self._note_holder(connection, held)
        self._objects.put(object_id, remote)
        return object_id

    def _note_holder(self, connection: Connection, held: list[list[Any]]) -> None:
        """Learn of the end of the holder an executor speaks for from its connection's."""
        holder = held[0][1] if held and isinstance(held[0], list) and len(held[0]) == 3 else None
        if isinstance(holder, str) and connection.peer_info.get("holder") != holder:
            connection.peer_info["holder"] = holder
            with self._lock:
                self._hosts[holder] = connection.peer_info.get("host") or ""
                self._handling.pop(holder, None)  # a new process at an address a dead one had
            self._holders.holder_started(holder)
            connection.add_close_callback(lambda _closed: self.holder_gone(holder))

    def host_of(self, holder: str) -> str:
        """The shared-memory identity of `holder`'s host ("" if unknown)."""
        with self._lock:
            return self._hosts.get(holder, "")

    def results_held(self, connection: Connection, task_id: bytes, held: list[list[Any]]) -> None:
        """An executor says it holds these results of `task_id` ([index, holder, size] each):
        keep the task's lineage, and learn of the holder's end from its connection's."""
        self._note_holder(connection, held)
        spec = None if connection.peer_info.get("kind") == "gang" else self._spec_of(task_id)
        if spec is not None:
            self.keep(spec, _named(held, spec.return_ids))

    def item_held(self, connection: Connection, stream_id: bytes, item_id: bytes, held: list[list[Any]]) -> None:
        """A worker keeps this item of a stream (`held` names it as index 0): a streaming
        task's can be made again by running the task again, an actor method's cannot."""
        spec = self._spec_of(stream_id)
        if spec is None or spec.num_returns != "streaming" or connection.peer_info.get("kind") != "executor":
            self.kept_without_lineage(connection, held, [item_id], GENERATOR_ITEM)
            return
        self._note_holder(connection, held)
        if _named(held, [item_id]):
            self.keep(spec, [item_id])

    def kept_by_owner(self, connection: Connection, held: list[list[Any]], object_ids: Sequence[bytes]) -> None:
        """A worker handed over these results of its direct calls and keeps their values
        (`held`): learn of its end from its connection's."""
        self._note_holder(connection, held)
        with self._lock:
            self._kept_by_owner.update(object_ids)

    def kept_without_lineage(self, connection: Connection, held: list[list[Any]], object_ids: Sequence[bytes],
                             why: str) -> None:
        """The process on `connection` keeps these values (`held` indexes `object_ids`), which
        nothing can make again (`why`, for the error): learn of its end from its connection's."""
        self._note_holder(connection, held)
        with self._lock:
            self._no_lineage.update((object_id, why) for object_id in _named(held, object_ids))

    def keep(self, spec: TaskSpec, object_ids: Sequence[bytes]) -> None:
        """`object_ids` (some returns of `spec`) are held by a worker: remember how to make them."""
        fresh = []
        with self._lock:
            for object_id in object_ids:
                if object_id not in self._specs:
                    self._specs[object_id] = spec
                    fresh.append(object_id)
            if fresh:
                first = spec.task_id not in self._live
                self._live[spec.task_id] = self._live.get(spec.task_id, 0) + len(fresh)
            else:
                first = False
        if first:
            self._objects.incref(spec.arguments.value.contained_refs)  # rebuilding needs them

    def freed(self, object_ids: Sequence[bytes]) -> None:
        """These objects were freed: their lineage is no longer needed."""
        done: list[TaskSpec] = []
        with self._lock:
            if self._kept_by_owner:
                self._kept_by_owner.difference_update(object_ids)
            if self._no_lineage:
                for object_id in object_ids:
                    self._no_lineage.pop(object_id, None)
            for object_id in object_ids:
                spec = self._specs.pop(object_id, None)
                if spec is None:
                    continue
                left = self._live.get(spec.task_id, 0) - 1
                if left > 0:
                    self._live[spec.task_id] = left
                else:
                    self._live.pop(spec.task_id, None)
                    self._rebuilds.pop(spec.task_id, None)
                    done.append(spec)
        for spec in done:
            self._objects.decref(spec.arguments.value.contained_refs)

    def suspect(self, holder: str, then: Callable[[], None] = lambda: None) -> bool:
        """A reader could not reach `holder`: if this process cannot either, its values are
        rebuilt or failed now (True). `then` runs after, on a thread of its own (the check
        may take a moment and must not hold up the caller's stream)."""
        def check() -> None:
            if not self._holders.reachable(holder):
                self.holder_gone(holder)
            then()

        threading.Thread(target=check, name="holder-check", daemon=True).start()
        return True

    def unreachable(self, holder: str) -> bool:
        """The driver's own read could not reach `holder` (see `HolderClients.on_unreachable`)."""
        if self._holders.reachable(holder):
            return False
        self.holder_gone(holder)
        return True

    def process_gone(self, connection: Connection) -> None:
        """The executor or actor on `connection` exited. Before the streaming task or generator
        call it was running is retried, make the items of it that it held pending: the retry's
        replay must find them waiting. The rest of what it held waits for `holder_gone`, after
        the scheduler has let the process go (a rerun sent earlier would go to it)."""
        holder = (connection.peer_info or {}).get("holder")
        if not isinstance(holder, str):
            return
        items: dict[bytes, tuple[TaskSpec, list[bytes]]] = {}
        with self._lock:
            held = self._objects.held_by(holder)
            for object_id in held:
                spec = self._specs.get(object_id)
                if spec is not None and spec.num_returns == "streaming" and spec.max_retries != 0:
                    items.setdefault(spec.task_id, (spec, []))[1].append(object_id)
        running = [(spec, ids) for spec, ids in items.values() if self._spec_of(spec.task_id) is not None]
        if running:
            self._stream_items_lost(holder, running, [])  # no rerun: the scheduler retries it
        self._call_items_lost(holder, held)

    def holder_gone(self, holder: str) -> None:
        """The process at `holder` exited: rebuild or fail each value it held. Its connection's
        close and readers that cannot reach it may all say so at once: the first does it, the
        others return once it is done, so a reader told to read again finds the new state."""
        with self._lock:
            handling = self._handling.get(holder)
            if handling is None:
                handling = self._handling[holder] = (threading.Event(), threading.get_ident())
                first = True
            else:
                first = False
        if not first:
            if handling[1] != threading.get_ident():  # not from within the first one's own work
                handling[0].wait()
            return
        try:
            self._values_lost(holder)
        finally:
            self._holders.holder_gone(holder)  # reads of it fail at once from now on, once the table says why
            handling[0].set()

    def _values_lost(self, holder: str) -> None:
        """Make pending again (and resubmit the task of) each value of `holder` that may be
        rebuilt; fail the others, saying why."""
        with self._lock:
            self._hosts.pop(holder, None)
        rerun: dict[bytes, TaskSpec] = {}
        failed: list[tuple[bytes, str, str]] = []
        owner_died: list[bytes] = []
        stream_items: dict[bytes, tuple[TaskSpec, list[bytes]]] = {}  # streaming task id -> its lost items
        call_items: list[bytes] = []  # items of actors' generator calls
        with self._lock:
            for object_id in self._objects.held_by(holder):
                if object_id in self._kept_by_owner:
                    self._kept_by_owner.discard(object_id)
                    owner_died.append(object_id)
                    continue
                spec = self._specs.get(object_id)
                if spec is None and object_id[-4:] == bytes(4):  # index 0: a put
                    failed.append((object_id, "OBJECT_UNRECONSTRUCTABLE_PUT", "it was made by ray.put()"))
                    continue
                if (why := self._no_lineage.get(object_id)) is not None:
                    if why == GENERATOR_ITEM:
                        call_items.append(object_id)  # its call's retry may replay it (below)
                        continue
                    del self._no_lineage[object_id]
                    failed.append((object_id, "OBJECT_UNRECONSTRUCTABLE_RETRIES_DISABLED", why))
                    continue
                if spec is None:
                    failed.append((object_id, "OBJECT_UNRECONSTRUCTABLE_LINEAGE_EVICTED", "its lineage was not kept"))
                    continue
                if spec.num_returns == "streaming":
                    stream_items.setdefault(spec.task_id, (spec, []))[1].append(object_id)
                    continue
                if spec.task_id in rerun:
                    continue
                done = self._rebuilds.get(spec.task_id, 0)
                if spec.max_retries == 0:
                    failed.append((object_id, "OBJECT_UNRECONSTRUCTABLE_RETRIES_DISABLED",
                                   "its task was created with max_retries=0"))
                elif not within_retries(spec.max_retries, done):
                    failed.append((object_id, "OBJECT_UNRECONSTRUCTABLE_MAX_ATTEMPTS_EXCEEDED",
                                   f"its task ran again {done} times already (max_retries={spec.max_retries})"))
                else:
                    self._rebuilds[spec.task_id] = done + 1
                    rerun[spec.task_id] = spec
        replayed = self._call_items_lost(holder, call_items)
        with self._lock:
            for object_id in call_items:
                if object_id not in replayed and self._no_lineage.pop(object_id, None) is not None:
                    failed.append((object_id, "OBJECT_UNRECONSTRUCTABLE_RETRIES_DISABLED", GENERATOR_ITEM))
        reruns = self._stream_items_lost(holder, stream_items.values(), failed)
        for object_id, reason, why in failed:
            self._objects.fail_lost(object_id, lost(object_id, holder, f"its worker process exited; {why}", reason))
        for spec in reruns:
            logger.info("rebuilding the items of generator task %s: the worker holding some exited", spec.name)
            self._resubmit(dataclasses.replace(spec, rebuilding=True))
        for object_id in owner_died:
            self._objects.fail_lost(object_id, serialize_error(OwnerDiedError(object_id.hex(), None, "")))
        for spec in rerun.values():
            logger.info("rebuilding the results of task %s: the worker holding them exited", spec.name)
            if self._objects.rebuild(spec.return_ids):
                self._resubmit(dataclasses.replace(spec, rebuilding=True))

    def _stream_items_lost(self, holder: str, lost_items: Iterable[tuple[TaskSpec, list[bytes]]],
                           failed: list[tuple[bytes, str, str]]) -> list[TaskSpec]:
        """Make the lost items of streaming tasks pending again, to be taken from the replay of
        each task's next run: its retry if it is still running, else a rerun (returned, to be
        resubmitted) within its `max_retries`. Those that cannot be made again join `failed`."""
        reruns: list[TaskSpec] = []
        for spec, item_ids in lost_items:
            if spec.max_retries == 0:
                failed += [(i, "OBJECT_UNRECONSTRUCTABLE_RETRIES_DISABLED", "its task was created with max_retries=0")
                           for i in item_ids]
                continue
            if self._spec_of(spec.task_id) is None:  # it ended: run it again
                with self._lock:
                    done = self._rebuilds.get(spec.task_id, 0)
                    allowed = within_retries(spec.max_retries, done)
                    if allowed:
                        self._rebuilds[spec.task_id] = done + 1
                if not allowed:
                    failed += [(i, "OBJECT_UNRECONSTRUCTABLE_MAX_ATTEMPTS_EXCEEDED",
                                f"its task ran again {done} times already (max_retries={spec.max_retries})")
                               for i in item_ids]
                    continue
                reruns.append(spec)
            pending = self._objects.rebuild(item_ids)
            self._refill(spec.task_id, pending, holder, TASK_ITEM_NOT_REPLAYED)
        return reruns

    def _call_items_lost(self, holder: str, object_ids: Sequence[bytes]) -> set[bytes]:
        """Make pending again those of `object_ids` that are items an actor's generator call
        still running kept: its retry (if the actor restarts and the call may run again)
        replays them. Returns them; an item no retry yields again fails as the call ends."""
        streams: dict[bytes, list[bytes]] = {}
        with self._lock:
            for object_id in object_ids:
                if self._no_lineage.get(object_id) == GENERATOR_ITEM:
                    streams.setdefault(object_id[:-4], []).append(object_id)
        taken: set[bytes] = set()
        for stream_id, ids in streams.items():
            if not self._stream_running(stream_id):
                continue
            with self._lock:
                for object_id in ids:
                    self._no_lineage.pop(object_id, None)
            pending = self._objects.rebuild(ids)
            self._refill(stream_id, pending, holder, CALL_ITEM_NOT_REPLAYED)
            taken.update(ids)
        return taken

    def hand_off(self, connection: Connection) -> None:
        """Before the executor on `connection` is retired: hold here what it holds."""
        holder = (connection.peer_info or {}).get("holder")
        if isinstance(holder, str):
            self._take_over(holder, self._objects.held_by(holder))

    def actor_ending(self, connection: Connection) -> None:
        """Before the actor on `connection` ends on purpose: hold here what its process holds
        for the driver. What it owns in Ray's terms (its puts, its own calls' results) ends
        with it, as in Ray."""
        holder = (connection.peer_info or {}).get("holder")
        if isinstance(holder, str):
            held = self._objects.held_by(holder)
            with self._lock:
                ids = [object_id for object_id in held
                       if object_id not in self._kept_by_owner and object_id[-4:] != bytes(4)]  # index 0: a put
            self._take_over(holder, ids)

    def _take_over(self, holder: str, ids: list[bytes]) -> None:
        if not ids:
            return
        fetched = self._holders.fetch([(object_id, holder) for object_id in ids])
        taken = []
        for object_id, value in fetched.items():
            if value.is_error:
                continue  # it could not be fetched: its loss is handled when the holder goes
            try:
                if self._objects.take_over(object_id, value):
                    taken.append(object_id)
            except Exception:  # noqa: BLE001 - ObjectStoreFullError: it stays (and may be lost) there
                logger.warning("could not take over object %s from %s", object_id.hex(), holder, exc_info=True)
        del fetched
        self._holders.release([(holder, object_id) for object_id in taken])
        self.freed(taken)  # held here now: no rebuild needed


def _named(held: list[list[Any]], object_ids: Sequence[bytes]) -> list[bytes]:
    """The ids among `object_ids` that `held`'s entries ([index, holder, size]) name."""
    indices = [entry[0] for entry in held if isinstance(entry, list) and entry and isinstance(entry[0], int)]
    return [object_ids[i] for i in indices if 0 <= i < len(object_ids)]
