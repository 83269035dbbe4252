"""CoreRuntime: what the public API (get, put, remote, actors...) needs from a runtime.

Two implementations: the driver runtime owns the session (objects, scheduling, workers);
the worker runtime, inside executors and actors, forwards each operation to its driver over
the session connection. The public API never knows which one it talks to; it reaches the
one of this process through `runtime_state`.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from fray_ray._private.core.generators import ObjectRefGenerator, StreamRuntime
from fray_ray._private.core.object_ref import ObjectRef, RefRuntime
from fray_ray._private.core.placement_group_handle import PlacementGroupInfo, PlacementGroupRuntime

if TYPE_CHECKING:
    from fray_ray._private.core.runtime_env import RuntimeEnv
    from fray_ray._private.core.task_spec import ActorCallSpec, ActorCreationSpec, TaskSpec
    from fray_ray._private.objects.refcount import LocalReferenceCounter


class CoreRuntime(RefRuntime, StreamRuntime, PlacementGroupRuntime, Protocol):
    """Operations behind the public API; each says whether it blocks.

    It includes what the values the API hands out ask of their runtime (`RefRuntime`,
    `StreamRuntime`, `PlacementGroupRuntime`), which they read from `runtime_slot` below it.
    """

    references: LocalReferenceCounter
    namespace: str
    is_driver: bool
    runtime_env: RuntimeEnv
    """What tasks and actors submitted from here inherit (the job's, or this worker's own)."""

    def put(self, value: Any) -> ObjectRef:
        """Store `value` (a snapshot) and return a ref to it. Does not block on other work."""
        ...

    def get(self, refs: Sequence[ObjectRef], timeout: float | None) -> list[Any]:
        """Block until every ref is ready; return values in order. Raises the first error
        found, or GetTimeoutError."""
        ...

    def wait(
        self, refs: Sequence[ObjectRef], num_returns: int, timeout: float | None, fetch_local: bool
    ) -> tuple[list[ObjectRef], list[ObjectRef]]:
        """Block until `num_returns` refs are ready or the timeout passes."""
        ...

    def object_future(self, ref: ObjectRef) -> concurrent.futures.Future:
        """A future for the ref's value; does not block."""
        ...

    def submit_task(self, spec: TaskSpec) -> list[ObjectRef]:
        """Queue a task; returns its return refs at once."""
        ...

    def create_actor(self, spec: ActorCreationSpec) -> bytes | list[bytes]:
        """Start creating an actor; returns its id at once (calls queue until it is up), or
        one id per host for a gang. Raises ValueError for a taken name unless get_if_exists is set."""
        ...

    def submit_actor_call(self, spec: ActorCallSpec) -> list[ObjectRef]:
        """Queue a method call; returns its return refs at once."""
        ...

    def report_metrics(self, points: list[list[Any]]) -> None:
        """Hand application metrics (`metrics.Registry.drain` points) to the session's registry."""
        ...

    def stream_next_future(self, stream_id: bytes, index: int) -> concurrent.futures.Future:
        """A future for the ref to item `index` of a streaming generator, None once it ended;
        does not block."""
        ...

    def stream_ready(self, stream_id: bytes, index: int) -> str:
        """"item" if item `index` has arrived, "end" if the stream ended before it, else "pending"."""
        ...

    def kill_actor(self, actor_id: bytes, no_restart: bool) -> None: ...

    def cancel(self, ref: ObjectRef | ObjectRefGenerator, force: bool, recursive: bool) -> None: ...

    def get_named_actor(self, name: str, namespace: str | None) -> Mapping[str, Any]:
        """Describe a named actor (id, class name, methods); ValueError if there is none."""
        ...

    def list_named_actors(self, all_namespaces: bool) -> list[Any]: ...

    def cluster_resources(self) -> dict[str, float]: ...

    def available_resources(self) -> dict[str, float]: ...

    def available_resources_per_node(self) -> dict[str, dict[str, float]]:
        """What each live node has free by the session's accounting, keyed by node id hex."""
        ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def create_placement_group(
        self, bundles: list[dict[str, float]], strategy: str, name: str, detached: bool
    ) -> PlacementGroupInfo:
        """Start reserving `bundles` together; returns at once (the group may stay pending)."""
        ...

    def remove_placement_group(self, group_id: bytes) -> None:
        """Release a group's resources."""
        ...

    def wait_placement_group(self, group_id: bytes, timeout: float | None) -> bool:
        """Block until the group is placed (True), or the timeout passes or it is gone (False)."""
        ...

    def placement_group_info(self, group_id: bytes) -> PlacementGroupInfo | None:
        """A group's id, bundles and readiness object; None if there is no such group."""
        ...

    def placement_group_by_name(self, name: str) -> PlacementGroupInfo:
        """The live group named `name`; ValueError if there is none."""
        ...

    def placement_group_table(self, group_id: bytes | None) -> dict[str, Any]:
        """One group's row (empty if unknown), or every group's keyed by id hex."""
        ...

    def reserve_gang(self, *, tpu: str, num_slices: int, timeout: float | None) -> bytes:
        """Block until the hosts of `num_slices` slices of `tpu` are up and held; the gang's id.
        TimeoutError if they are not within `timeout` seconds."""
        ...

    def release_gang(self, gang_id: bytes) -> None:
        """Give back a reserved gang's hosts."""
        ...

    def gang_size(self, gang_id: bytes) -> int:
        """How many hosts the reserved gang has."""
        ...

    def context_info(self) -> dict[str, Any]:
        """Ids and resources for get_runtime_context(): job, task, actor, node, ..."""
        ...

    def shutdown(self) -> None: ...
