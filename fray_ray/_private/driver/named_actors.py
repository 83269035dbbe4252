"""Named actors in the driver: looking a name up (this driver's actors, or another driver's,
which are then called as remote actors: `remote_actors.py`) and listing the names.

`NamedActors` is a base of `ActorManager` (`actors.py`) and shares its state and its lock.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import cloudpickle

from fray_ray._private.core.task_spec import ActorCallSpec, ActorCreationSpec, Arguments, CodeBlob, ResourceShape
from fray_ray._private.driver.actor_records import ActorRecord, ActorState
from fray_ray._private.driver.remote_actors import RemoteActor
from fray_ray._private.objects.ids import new_actor_id
from fray_ray._private.objects.object_table import ObjectTable
from fray_ray._private.objects.serialization import SerializedValue, deserialize

if TYPE_CHECKING:
    from fray_ray._private.driver.launcher import WorkerLauncher


class NamedActors:
    """Name lookup and remote actors; `ActorManager` sets the state below."""

    _lock: threading.Lock
    _actors: dict[bytes, ActorRecord]
    _names: dict[tuple[str, str], bytes]
    _namespace: str
    _launcher: WorkerLauncher
    _objects: ObjectTable

    def _complete_call(self, call: ActorCallSpec, results: SerializedValue | Sequence[SerializedValue]) -> None:
        """Fulfil a call's return objects (ActorManager's)."""
        raise NotImplementedError

    def complete_remote_call(self, call: ActorCallSpec, results: Sequence[SerializedValue]) -> None:
        self._complete_call(call, results)

    def resolve_values(self, object_ids: Sequence[bytes]) -> dict[bytes, Any]:
        """Wait for this session's objects and return their values (raising their errors)."""
        out = {}
        for object_id, value in self.resolve_stored(object_ids).items():
            if value.is_error:
                raise deserialize(value)
            out[object_id] = deserialize(value)
        return out

    def resolve_stored(self, object_ids: Sequence[bytes]) -> dict[bytes, SerializedValue]:
        """Wait for this session's objects and return their stored values (errors included)."""
        out = {}
        for object_id in object_ids:
            event = threading.Event()
            self._objects.add_done_callback(object_id, lambda _oid, e=event: e.set())
            event.wait()
            value = self._objects.value(object_id)
            if value is None:
                raise RuntimeError(f"object {object_id.hex()} was freed before it could be sent")
            out[object_id] = value
        return out

    def named(self, name: str, namespace: str | None) -> ActorCreationSpec | None:
        """The live actor named `name` in `namespace`: this driver's, or another driver's."""
        namespace = namespace or self._namespace
        with self._lock:
            actor_id = self._names.get((namespace, name))
            record = self._actors.get(actor_id) if actor_id else None
            if record is not None and record.state is not ActorState.DEAD:
                return record.spec
        found = self._launcher.lookup_named(namespace, name)
        if found is None:
            return None
        actor_id = self._adopt_remote(namespace, name, *found)
        with self._lock:
            return self._actors[actor_id].spec

    def _adopt_remote(self, namespace: str, name: str, handle: Any, description: dict[str, Any]) -> bytes:
        """Track another driver's named actor so this driver can call it."""
        with self._lock:
            existing = self._names.get((namespace, name))
            if existing is not None and self._actors[existing].state is not ActorState.DEAD:
                return existing
            spec = ActorCreationSpec(
                actor_id=new_actor_id(),
                cls=CodeBlob(b"", b"", description["class_name"]),
                class_name=description["class_name"],
                arguments=Arguments(SerializedValue(b"")),
                shape=ResourceShape(cpu=0.0),
                methods=cloudpickle.loads(description["methods"]),
                is_async=bool(description["is_async"]),
                name=name,
                namespace=namespace,
                detached=True,  # its lifetime is its creator's business, not this driver's
            )
            record = ActorRecord(spec, state=ActorState.ALIVE, args_released=True)
            record.remote = RemoteActor(handle, spec, self.complete_remote_call, self.resolve_values,
                                        self.resolve_stored, description.get("calls"))
            record.ready.set()
            self._actors[spec.actor_id] = record
            self._names[(namespace, name)] = spec.actor_id
        return spec.actor_id

    def list_named(self, all_namespaces: bool) -> list[Any]:
        with self._lock:
            items = [
                (namespace, name)
                for (namespace, name), actor_id in self._names.items()
                if self._actors[actor_id].state is not ActorState.DEAD
            ]
        if all_namespaces:
            return [{"name": name, "namespace": namespace} for namespace, name in items]
        return [name for namespace, name in items if namespace == self._namespace]
