"""fray_ray: Ray's API on Iris clusters.

`import fray_ray as ray` and Ray code keeps working: tasks and actors run as Iris jobs, on an
embedded Iris-compatible cluster by default (`fray_ray.init()`) or on a real Iris cluster
(`fray_ray.init("iris://host:port")`).
"""

from __future__ import annotations

# The first dependency every fray_ray process needs (the driver's and its workers' stream
# protocol), imported first: a worker whose Python lacks fray_ray's dependencies then fails
# naming it, whatever module of the package its job loads first.
import msgpack  # noqa: F401, I001

from fray_ray import exceptions
from fray_ray._api import (
    RayContext,
    available_resources,
    cancel,
    cluster_resources,
    get,
    get_actor,
    get_gpu_ids,
    init,
    is_initialized,
    kill,
    nodes,
    put,
    remote,
    shutdown,
    timeline,
    wait,
)
from fray_ray._install import install, uninstall
from fray_ray._private.core.generators import DynamicObjectRefGenerator, ObjectRefGenerator
from fray_ray._private.core.object_ref import ObjectID, ObjectRef
from fray_ray._private.objects.unique_ids import ActorClassID, ActorID, FunctionID, JobID, NodeID, TaskID, UniqueID, WorkerID
from fray_ray._version import __version__
from fray_ray.actor import method
from fray_ray.runtime_context import get_runtime_context

#: Submodules reachable as attributes after `import ray`, as in Ray; loaded on first use to
#: keep import fast.
_LAZY_SUBMODULES = frozenset({"util", "ray_constants", "cloudpickle", "types", "runtime_env", "_raylet"})


def __getattr__(name: str) -> object:
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"fray_ray.{name}")
    if name == "PlacementGroupID":
        from fray_ray._private.core.placement_group_handle import PlacementGroupID

        return PlacementGroupID
    raise AttributeError(f"module 'fray_ray' has no attribute {name!r}")


__all__ = [
    "ActorClassID",
    "ActorID",
    "DynamicObjectRefGenerator",
    "FunctionID",
    "JobID",
    "NodeID",
    "ObjectID",
    "ObjectRef",
    "ObjectRefGenerator",
    "PlacementGroupID",
    "RayContext",
    "TaskID",
    "UniqueID",
    "WorkerID",
    "__version__",
    "available_resources",
    "cancel",
    "cluster_resources",
    "exceptions",
    "get",
    "get_actor",
    "get_gpu_ids",
    "get_runtime_context",
    "init",
    "install",
    "is_initialized",
    "kill",
    "method",
    "nodes",
    "put",
    "remote",
    "shutdown",
    "timeline",
    "uninstall",
    "util",
    "wait",
]
