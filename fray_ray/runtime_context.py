"""get_runtime_context(): ids, resources and namespace of the current driver, task or actor."""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from typing import Any

from fray_ray._private.core import runtime_state
from fray_ray._private.core.task_context import current_task
from fray_ray._private.objects.unique_ids import ActorID, JobID, NodeID, TaskID
from fray_ray.runtime_env.runtime_env import RuntimeEnv
from fray_ray.util.annotations import RayDeprecationWarning

__all__ = ["RuntimeContext", "get_runtime_context"]

_DEPRECATED_ID_WARNING = (
    "This API is deprecated and may be removed in future Ray releases. You could suppress this "
    'warning by setting env variable PYTHONWARNINGS="ignore::DeprecationWarning"\nUse get_{name}() instead'
)

#: Ray's words where a getter is for tasks and actors only (Ray's driver is mode 0, SCRIPT_MODE).
_WORKER_ONLY = "This method is only available when the process is a worker. Current mode: 0"

#: The accelerator kinds Ray 2.60 reports ids of (each an empty list where there are none).
_ACCELERATOR_KINDS = ("GPU", "TPU", "NPU", "HPU", "neuron_cores", "FURIOSA", "MBLT", "RBLN", "TTNPU")


def _require_init() -> Any:
    """The runtime; as in Ray 2.60, asking the runtime context starts a session if needed."""
    return runtime_state.current()


class RuntimeContext:
    """A view of the current process's place in the session (reading it auto-initialises).

    Code that runs on the driver, in tasks and in actors alike asks it where it runs: ids,
    resources, namespace. Get it with `get_runtime_context()`.
    """

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = _require_init().context_info()
        return info

    def get(self) -> dict[str, Any]:
        """Deprecated in Ray (it warns): the get_*_id() methods give each id as hex.

        Returns:
            This process's place as id objects: `job_id` (`JobID`), `node_id` (`NodeID`),
            `namespace`, and `task_id` (`TaskID`) / `actor_id` (`ActorID`) inside a task or actor.
        """
        warnings.warn(_DEPRECATED_ID_WARNING.replace("get_{name}() instead", "get_xxx_id() methods to get relevant "
                                                     "ids instead"), RayDeprecationWarning, stacklevel=2)
        info = self._info()
        context: dict[str, Any] = {
            "job_id": JobID.from_hex(info["job_id"]), "node_id": NodeID(info["node_id"]), "namespace": info["namespace"],
        }
        if info["task_id"] is not None:
            context["task_id"] = TaskID(info["task_id"])
        if info["actor_id"] is not None:
            context["actor_id"] = ActorID(info["actor_id"])
        return context

    def get_job_id(self) -> str:
        """Returns:
            The hex id of the job (one per driver).
        """
        job_id: str = self._info()["job_id"]
        return job_id

    def get_node_id(self) -> str:
        """Returns:
            The hex id of the node (Iris worker) this process runs on.
        """
        node_id: bytes = self._info()["node_id"]
        return node_id.hex()

    def get_worker_id(self) -> str:
        """Returns:
            The hex id of this worker process (zeros on the driver).
        """
        worker_id: bytes = self._info()["worker_id"] or b""
        return worker_id.hex().ljust(56, "0")[:56]

    def get_task_id(self) -> str | None:
        """Returns:
            The hex id of the running task or actor call; None on the driver.
        """
        task_id: bytes | None = self._info()["task_id"]
        return None if task_id is None else task_id.hex()

    def get_actor_id(self) -> str | None:
        """Returns:
            The hex id of the actor this code runs in; None outside an actor.
        """
        actor_id: bytes | None = self._info()["actor_id"]
        return None if actor_id is None else actor_id.hex()

    def get_actor_name(self) -> str | None:
        """Returns:
            The actor's name ("" for an unnamed actor); None outside an actor.
        """
        info = self._info()
        name: str = info.get("actor_given_name") or ""
        return name if info["actor_id"] is not None else None

    def get_task_name(self) -> str | None:
        """Returns:
            The running task's name (its `name` option, else the function's); None on the driver.
        """
        name: str | None = self._info()["task_name"]
        return name

    def get_task_function_name(self) -> str | None:
        """Returns:
            The running function's `module.qualname` (`module.Class.method` in an actor),
            whatever `name` option the task has; None on the driver.
        """
        info = self._info()
        name: str | None = info.get("task_function_name", info["task_name"])
        return name

    def get_assigned_resources(self) -> dict[str, float]:
        """Returns:
            The resources this task or actor holds (`memory` left out, as in Ray).

        Raises:
            AssertionError: on the driver, as in Ray (it holds nothing).
        """
        info = self._info()
        self._worker_only(info)
        resources: dict[str, float] = info["resources"]
        return {k: v for k, v in resources.items() if k != "memory"}

    def get_accelerator_ids(self) -> dict[str, list[str]]:
        """Returns:
            The accelerator ids visible to this task or actor, by kind (`GPU`, `TPU`, ...).
        """
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        gpus = [g for g in visible.split(",") if g] if self._info()["task_id"] is not None else []
        tpus = [c for c in os.environ.get("TPU_VISIBLE_CHIPS", "").split(",") if c]
        ids: dict[str, list[str]] = {kind: [] for kind in _ACCELERATOR_KINDS}
        ids.update(GPU=gpus, TPU=tpus)
        return ids

    def get_placement_group_id(self) -> str | None:
        """Returns:
            The hex id of the placement group this task or actor was placed in, else None.
        """
        group_id: str | None = self._info()["placement_group_id"]
        return group_id

    def get_node_labels(self) -> dict[str, str]:
        """Returns:
            The node's labels; fray_ray gives only `ray.io/node-id`.
        """
        return {"ray.io/node-id": self.get_node_id()}

    def get_runtime_env_string(self) -> str:
        """Returns:
            The runtime env this process runs with (the job's in the driver), as JSON.
        """
        env: str = _require_init().runtime_env.to_json()
        return env

    @property
    def runtime_env(self) -> RuntimeEnv:
        """The runtime env this process runs with (the job's in the driver), as a `RuntimeEnv`."""
        fields: dict[str, Any] = json.loads(self.get_runtime_env_string())
        return RuntimeEnv(**fields, _validate=False)

    def get_session_name(self) -> str:
        """Returns:
            The session's name.
        """
        name: str = getattr(_require_init(), "session_name", "session")  # the driver's, in every process
        return name

    def get_temp_dir(self) -> str:
        """Returns:
            The directory for temporary files on this host.
        """
        return tempfile.gettempdir()

    def is_canceled(self) -> bool:
        """Returns:
            True once `cancel` was called on the running task, so long loops can stop early.

        Raises:
            RuntimeError: on the driver, or in an async actor (whose cancelled calls see
                `asyncio.CancelledError` instead), as in Ray.
        """
        info = self._info()
        if info.get("is_driver", False):
            raise RuntimeError(_WORKER_ONLY)
        if getattr(getattr(current_task.get(), "actor_handle", None), "_is_async", False):
            raise RuntimeError("This method is not supported in an async actor.")
        return bool(info["cancelled"])

    @property
    def namespace(self) -> str:
        """The namespace named actors are looked up in."""
        namespace: str = self._info()["namespace"]
        return namespace

    @property
    def gcs_address(self) -> str:
        """The address of the session's driver service (Ray's GCS address stands here)."""
        address: str = self._info()["session_address"]
        return address

    @property
    def current_actor(self) -> Any:
        """The handle of the actor this code runs in.

        Raises:
            RuntimeError: called outside an actor.
        """
        info = self._info()
        if info["actor_id"] is None:
            raise RuntimeError("This method is only available in an actor.")
        runtime = runtime_state.current()
        named = getattr(runtime, "actor_handle_for", None)
        if named is not None:
            return named(info["actor_id"])
        context = current_task.get()
        return getattr(context, "actor_handle", None)

    @property
    def should_capture_child_tasks_in_placement_group(self) -> bool:
        """Whether tasks and actors started here join the placement group this one runs in
        (`placement_group_capture_child_tasks`); False outside one and on the driver."""
        return bool(getattr(current_task.get(), "capture_child_tasks", False))

    @property
    def was_current_actor_reconstructed(self) -> bool:
        """True inside an actor instance that replaced one whose process died (max_restarts).

        Raises:
            AssertionError: on the driver, as in Ray.
            AttributeError: in a task that is not an actor's, as in Ray (there is no actor).
        """
        info = self._info()
        self._worker_only(info)
        if info["actor_id"] is None:
            raise AttributeError("was_current_actor_reconstructed is only available in an actor")
        return bool(getattr(current_task.get(), "actor_restarted", False))

    def _deprecated(self, name: str) -> dict[str, Any]:
        """Warn as Ray's deprecated id properties do; returns the context info."""
        warnings.warn(_DEPRECATED_ID_WARNING.format(name=name), RayDeprecationWarning, stacklevel=3)
        return self._info()

    def _worker_only(self, info: dict[str, Any]) -> None:
        # Ray asserts it runs in a worker for these.
        if info.get("is_driver", False):
            raise AssertionError(_WORKER_ONLY)

    @property
    def job_id(self) -> JobID:
        """Deprecated in Ray: warns and returns the job's `JobID` (`get_job_id()` is its hex)."""
        return JobID.from_hex(self._deprecated("job_id")["job_id"])

    @property
    def node_id(self) -> NodeID:
        """Deprecated in Ray: warns and returns this node's `NodeID`."""
        return NodeID(self._deprecated("node_id")["node_id"])

    @property
    def task_id(self) -> TaskID | None:
        """Deprecated in Ray: warns and returns the running task's `TaskID` (None if none);
        raises AssertionError on the driver, as Ray does."""
        info = self._deprecated("task_id")
        self._worker_only(info)
        task_id: bytes | None = info["task_id"]
        return None if task_id is None else TaskID(task_id)

    @property
    def actor_id(self) -> ActorID | None:
        """Deprecated in Ray: warns and returns this actor's `ActorID` (None outside an actor);
        raises AssertionError on the driver, as Ray does."""
        info = self._deprecated("actor_id")
        self._worker_only(info)
        actor_id: bytes | None = info["actor_id"]
        return None if actor_id is None else ActorID(actor_id)


_context = RuntimeContext()


def get_runtime_context() -> RuntimeContext:
    """Get this process's runtime context; as in Ray 2.60, this starts a session if none runs.

    Returns:
        The process's `RuntimeContext`.
    """
    runtime_state.current()
    return _context
