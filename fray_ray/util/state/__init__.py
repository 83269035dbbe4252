"""The state API (`ray.util.state`): what the session runs, as Ray's records.

`list_actors`, `list_tasks`, `list_objects`, `list_nodes`, `list_jobs`,
`list_placement_groups`, `get_actor`, `get_task`, `summarize_tasks` and `summarize_actors`,
with Ray's filters (`[("state", "=", "RUNNING")]`), `limit` and `detail`. Tasks, actors,
objects and placement groups are the current session's; nodes and jobs cover the cluster
(see `fray_ray.util.state.api`). Ray's other state functions (`list_workers`, `list_logs`,
`get_log`, `list_runtime_envs`, `list_cluster_events`, `summarize_objects`, ...) are not
provided: they raise NotImplementedError.

>>> from fray_ray.util.state import list_actors
>>> [a.state for a in list_actors(filters=[("state", "=", "ALIVE")])]  # doctest: +SKIP
['ALIVE']
"""

from __future__ import annotations

from fray_ray.util._unsupported import unsupported
from fray_ray.util.state.api import (
    get_actor,
    get_task,
    list_actors,
    list_jobs,
    list_nodes,
    list_objects,
    list_placement_groups,
    list_tasks,
    summarize_actors,
    summarize_tasks,
)
from fray_ray.util.state.common import (
    ActorState,
    JobState,
    NodeState,
    ObjectState,
    PlacementGroupState,
    TaskState,
)
from fray_ray.util.state.exception import RayStateApiException, ServerUnavailable

_HINT = "fray_ray's state API lists actors, tasks, objects, nodes, jobs and placement groups."

get_job = unsupported("fray_ray.util.state.get_job", _HINT)
get_log = unsupported("fray_ray.util.state.get_log", "Use `fray-ray logs` or the job's logs.")
get_node = unsupported("fray_ray.util.state.get_node", _HINT)
get_objects = unsupported("fray_ray.util.state.get_objects", _HINT)
get_placement_group = unsupported("fray_ray.util.state.get_placement_group", _HINT)
get_worker = unsupported("fray_ray.util.state.get_worker", _HINT)
list_cluster_events = unsupported("fray_ray.util.state.list_cluster_events", _HINT)
list_logs = unsupported("fray_ray.util.state.list_logs", "Use `fray-ray logs` or the job's logs.")
list_runtime_envs = unsupported("fray_ray.util.state.list_runtime_envs", _HINT)
list_workers = unsupported("fray_ray.util.state.list_workers", _HINT)
summarize_objects = unsupported("fray_ray.util.state.summarize_objects", _HINT)

__all__ = [
    "ActorState",
    "JobState",
    "NodeState",
    "ObjectState",
    "PlacementGroupState",
    "RayStateApiException",
    "ServerUnavailable",
    "TaskState",
    "get_actor",
    "get_job",
    "get_log",
    "get_node",
    "get_objects",
    "get_placement_group",
    "get_task",
    "get_worker",
    "list_actors",
    "list_cluster_events",
    "list_jobs",
    "list_logs",
    "list_nodes",
    "list_objects",
    "list_placement_groups",
    "list_runtime_envs",
    "list_tasks",
    "list_workers",
    "summarize_actors",
    "summarize_objects",
    "summarize_tasks",
]
