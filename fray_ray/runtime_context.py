"""get_runtime_context(): ids, resources and namespace of the current driver, task or actor."""

from __future__ import annotations

import os
import tempfile
import warnings
from typing import Any

from fray_ray._private import runtime_state
from fray_ray._private.task_context import current_task

__all__ = ["RuntimeContext", "get_runtime_context"]


def _require_init() -> Any:
    """The runtime; as in Ray 2.60, asking the runtime context starts a session if needed."""
    return runtime_state.current()


class RuntimeContext:
    """A view of the current process's place in the session (reading it auto-initialises)."""

    def _info(self) -> dict[str, Any]:
        return _require_init().context_info()

    def get(self) -> dict[str, Any]:
        info = self._info()
        context = {"job_id": info["job_id"], "node_id": info["node_id"].hex(), "namespace": info["namespace"]}
        if info["task_id"] is not None:
            context["task_id"] = info["task_id"].hex()
        if info["actor_id"] is not None:
            context["actor_id"] = info["actor_id"].hex()
        return context

    def get_job_id(self) -> str:
        return self._info()["job_id"]

    def get_node_id(self) -> str:
        return self._info()["node_id"].hex()

    def get_worker_id(self) -> str:
        worker_id = self._info()["worker_id"] or b""
        return worker_id.hex().ljust(56, "0")[:56]

    def get_task_id(self) -> str | None:
        task_id = self._info()["task_id"]
        return None if task_id is None else task_id.hex()

    def get_actor_id(self) -> str | None:
        actor_id = self._info()["actor_id"]
        return None if actor_id is None else actor_id.hex()

    def get_actor_name(self) -> str | None:
        """The actor's name ("" for an unnamed actor); None outside an actor."""
        info = self._info()
        return (info.get("actor_given_name") or "") if info["actor_id"] is not None else None

    def get_task_name(self) -> str | None:
        return self._info()["task_name"]

    def get_task_function_name(self) -> str | None:
        return self._info()["task_name"]

    def get_assigned_resources(self) -> dict[str, float]:
        return {k: v for k, v in self._info()["resources"].items() if k != "memory"}

    def get_accelerator_ids(self) -> dict[str, list[str]]:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        gpus = [g for g in visible.split(",") if g] if self._info()["task_id"] is not None else []
        tpus = [c for c in os.environ.get("TPU_VISIBLE_CHIPS", "").split(",") if c]
        return {"GPU": gpus, "TPU": tpus, "NPU": [], "HPU": [], "neuron_cores": []}

    def get_placement_group_id(self) -> str | None:
        return self._info()["placement_group_id"]

    def get_node_labels(self) -> dict[str, str]:
        return {"ray.io/node-id": self.get_node_id()}

    def get_runtime_env_string(self) -> str:
        """The runtime env this process runs with (the job's in the driver), as JSON."""
        return _require_init().runtime_env.to_json()

    def get_session_name(self) -> str:
        return getattr(_require_init(), "session_name", "session")

    def get_temp_dir(self) -> str:
        return tempfile.gettempdir()

    def is_canceled(self) -> bool:
        return bool(self._info()["cancelled"])

    @property
    def namespace(self) -> str:
        return self._info()["namespace"]

    @property
    def gcs_address(self) -> str:
        return self._info()["session_address"]

    @property
    def current_actor(self) -> Any:
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
    def was_current_actor_reconstructed(self) -> bool:
        """True inside an actor instance that replaced one whose process died (max_restarts)."""
        return bool(getattr(current_task.get(), "actor_restarted", False))

    def _deprecated(self, name: str) -> Any:
        warnings.warn(f"Use get_{name}() instead", DeprecationWarning, stacklevel=3)
        return getattr(self, f"get_{name}")()

    @property
    def job_id(self) -> Any:
        return self._deprecated("job_id")

    @property
    def node_id(self) -> Any:
        return self._deprecated("node_id")

    @property
    def task_id(self) -> Any:
        return self._deprecated("task_id")

    @property
    def actor_id(self) -> Any:
        return self._deprecated("actor_id")


_context = RuntimeContext()


def get_runtime_context() -> RuntimeContext:
    """The runtime context of this process; as in Ray 2.60, this starts a session if none runs."""
    runtime_state.current()
    return _context
