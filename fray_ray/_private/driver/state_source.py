"""The driver's state as rows of Ray's state API: tasks, actors, objects, nodes, jobs, groups.

Each function reads one part of the driver (`DriverState`, what `runtime.DriverRuntime` is to
them) at the moment it is called and returns one
dict per row, with every column of Ray's record (detail ones included); `fray_ray.util.state`
filters, sorts, limits and wraps them. Tasks, actors, objects and placement groups are this
session's; nodes and jobs come from the cluster's controller, so they cover every session.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any, Protocol

from fray_ray._private.driver.actor_records import ActorState as ActorLifecycle
from fray_ray._private.driver.nodes import node_id_for
from fray_ray._private.objects.object_table import ObjectState as ObjectLifecycle
from fray_ray._private.objects.serialization import deserialize
from fray_ray._private.observe.task_events import TaskEvent, TaskStatus, TaskType, describe

#: Jobs of named actors are root jobs named so (see `launcher.named_group`).
NAMED_ACTOR_PREFIX = "rayactor."
#: A session's lease job is named after the session (see `bootstrap` and `lease`).
SESSION_JOB = re.compile(r"session-[0-9a-f]{8}")


if TYPE_CHECKING:  # the parts' types only: the state API loads without the driver's modules
    from fray_ray._private.driver.actors import ActorManager
    from fray_ray._private.driver.cluster_view import ClusterView
    from fray_ray._private.driver.placement_groups import PlacementGroupManager
    from fray_ray._private.driver.scheduler import TaskScheduler
    from fray_ray._private.objects.object_table import ObjectTable
    from fray_ray._private.objects.refcount import LocalReferenceCounter
    from fray_ray._private.observe.task_events import TaskEvents


class DriverState(Protocol):
    """The parts of the driver (`runtime.DriverRuntime`) the state API and the timeline read.
    The driver builds what serves them, so they name it only through this."""

    job_id: str
    session_name: str
    namespace: str
    node_id: bytes
    node_ip: str
    client: Any  # the Fray client: its controller's jobs are the job rows of other sessions
    task_events: TaskEvents
    actors: ActorManager
    objects: ObjectTable
    references: LocalReferenceCounter
    scheduler: TaskScheduler
    placement_groups: PlacementGroupManager
    view: ClusterView

    def placement_group_table(self, group_id: bytes | None) -> dict[str, Any]: ...

_ACTOR_STATES = {
    ActorLifecycle.STARTING: "PENDING_CREATION",
    ActorLifecycle.ALIVE: "ALIVE",
    ActorLifecycle.RESTARTING: "RESTARTING",
    ActorLifecycle.DEAD: "DEAD",
}


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)


def _node_hex(driver: DriverState, host: str | None) -> str:
    return node_id_for(host).hex() if host else driver.node_id.hex()


def call_string(event: TaskEvent) -> str:
    """Ray's `func_or_class_name`: the function's own name, or `Class.method`, without the
    module (`work`, not `__main__.work` or `job.work`), as Ray's function descriptors say it."""
    if event.kind is TaskType.NORMAL_TASK:
        return event.func_name.rpartition(".")[2]
    head, _, method = event.func_name.rpartition(".")
    return f"{head.rpartition('.')[2]}.{method}" if head else method


def task_row(driver: DriverState, event: TaskEvent) -> dict[str, Any]:
    placed = event.host is not None or event.worker_pid is not None or event.started is not None
    events = [{"state": "PENDING_ARGS_AVAIL", "created_ms": _ms(event.created)}]
    if event.started is not None:
        events.append({"state": "RUNNING", "created_ms": _ms(event.started)})
    if event.ended is not None:
        events.append({"state": str(event.state), "created_ms": _ms(event.ended)})
    failure = describe(event) if event.state is TaskStatus.FAILED else {"error_type": None, "error_message": None}
    return {
        "task_id": event.task_id.hex(),
        "attempt_number": event.attempt,
        "name": event.name,
        "state": str(event.state),
        "job_id": driver.job_id,
        "actor_id": event.actor_id.hex() if event.actor_id else None,
        "type": str(event.kind),
        "func_or_class_name": call_string(event),
        "parent_task_id": event.parent_task_id.hex() if event.parent_task_id else "ffffffffffffffffffffffffffffffffffffffff01000000",
        "node_id": _node_hex(driver, event.host) if placed else None,
        "worker_id": event.worker_id.hex() if event.worker_id else None,
        "worker_pid": event.worker_pid,
        "error_type": failure["error_type"],
        "language": "PYTHON",
        "required_resources": dict(event.resources or {}),
        "runtime_env_info": None,
        "placement_group_id": event.placement_group_id,
        "events": events,
        "profiling_data": None,
        "creation_time_ms": _ms(event.created),
        "start_time_ms": _ms(event.started),
        "end_time_ms": _ms(event.ended),
        "task_log_info": None,
        "error_message": failure["error_message"],
        "is_debugger_paused": False,
        "call_site": None,
        "label_selector": None,
        "fallback_strategy": None,
    }


def task_rows(driver: DriverState) -> list[dict[str, Any]]:
    return [task_row(driver, event) for event in driver.task_events.snapshot()]


def actor_rows(driver: DriverState) -> list[dict[str, Any]]:
    rows = []
    for record in driver.actors.records():
        spec = record.spec
        death = None
        if record.state is ActorLifecycle.DEAD and record.death is not None:
            try:
                message = str(deserialize(record.death))
            except Exception as exc:  # noqa: BLE001 - an unreadable cause still says the actor died
                message = f"(unreadable cause: {exc})"
            death = {"actor_died_error_context": {
                "error_message": message, "actor_id": spec.actor_id.hex(), "class_name": spec.class_name,
                "pid": record.pid or 0, "name": spec.name or "", "ray_namespace": spec.namespace or driver.namespace,
            }}
        rows.append({
            "actor_id": spec.actor_id.hex(),
            "class_name": spec.class_name,
            "state": _ACTOR_STATES[record.state],
            "job_id": driver.job_id,
            "name": spec.name or "",
            "node_id": _node_hex(driver, record.host) if record.pid is not None or record.host else None,
            "pid": record.pid or 0,
            "ray_namespace": spec.namespace or driver.namespace,
            "serialized_runtime_env": None,
            "required_resources": spec.shape.as_dict(),
            "death_cause": death,
            "is_detached": spec.detached,
            "placement_group_id": record.placement_group,
            "repr_name": "",
            "num_restarts": record.restarts,
            "num_restarts_due_to_lineage_reconstruction": 0,
            "num_restarts_due_to_node_preemption": 0,
            "call_site": None,
            "label_selector": None,
            "fallback_strategy": None,
        })
    return rows


def object_rows(driver: DriverState) -> list[dict[str, Any]]:
    """One row per object: its strongest reference, by Ray's order (a task argument, a live
    ObjectRef, a ref inside another object)."""
    entries = driver.objects.snapshot()
    pending_args: set[bytes] = set()
    for event_args in driver.scheduler.argument_refs():
        pending_args.update(event_args)
    pending_args.update(driver.actors.argument_refs())
    captured: set[bytes] = set()
    for entry in entries:
        captured.update(entry.contained)
    live = {event.task_id: event for event in driver.task_events.live_events()}
    pid, ip = os.getpid(), driver.node_ip
    rows = []
    for entry in entries:
        if entry.object_id in pending_args:
            kind = "USED_BY_PENDING_TASK"
        elif driver.references.count(entry.object_id) > 0:
            kind = "LOCAL_REFERENCE"
        elif entry.object_id in captured:
            kind = "CAPTURED_IN_OBJECT"
        else:
            kind = "LOCAL_REFERENCE"  # borrowed by a worker (a task or actor holds a ref)
        if entry.producer is None:
            status, attempt = "NIL", 0
        elif entry.state is ObjectLifecycle.PENDING:
            event = live.get(entry.producer)
            status = str(event.state) if event is not None else "PENDING_NODE_ASSIGNMENT"
            attempt = event.attempt if event is not None else 0
        else:
            status, attempt = ("FAILED" if entry.state is ObjectLifecycle.FAILED else "FINISHED"), 0
        rows.append({
            "object_id": entry.object_id.hex(),
            "object_size": entry.size if entry.size is not None else -1,
            "task_status": status,
            "attempt_number": attempt,
            "reference_type": kind,
            "call_site": "disabled",
            "type": "DRIVER",
            "pid": pid,
            "ip": ip,
        })
    return rows


def node_rows(driver: DriverState) -> list[dict[str, Any]]:
    rows = []
    for node in driver.view.nodes():
        rows.append({
            "node_id": node.node_id_hex,
            "node_ip": node.address,
            "is_head_node": node.is_head,
            "state": "ALIVE" if node.alive else "DEAD",
            "state_message": None if node.alive else "the cluster reports this worker lost",
            "node_name": node.hostname or node.address,
            "resources_total": dict(node.resources),
            "labels": dict(node.labels),
            "start_time_ms": None,
            "end_time_ms": None,
        })
    return rows


_JOB_STATUS = {"pending": "PENDING", "running": "RUNNING", "succeeded": "SUCCEEDED", "failed": "FAILED",
               "stopped": "STOPPED"}


def job_rows(driver: DriverState, started_at: float) -> list[dict[str, Any]]:
    """This driver as a DRIVER job, then the controller's root jobs of other sessions and users:
    a session's lease job (`.../session-<hex>`) is that session's driver, anything else (a
    submitted driver) a SUBMISSION. Named and detached actors' jobs are actors, not jobs."""
    rows: list[dict[str, Any]] = [{
        "type": "DRIVER",
        "job_id": driver.job_id,
        "submission_id": None,
        "driver_info": {"id": driver.job_id, "node_ip_address": driver.node_ip, "pid": str(os.getpid())},
        "status": "RUNNING",
        "entrypoint": " ".join(sys.argv) or "python",
        "message": None,
        "error_type": None,
        "start_time": _ms(started_at),
        "end_time": None,
        "metadata": {"session_name": driver.session_name},
        "runtime_env": None,
        "driver_agent_http_address": None,
        "driver_node_id": driver.node_id.hex(),
        "driver_exit_code": None,
    }]
    for job in driver.client.list_jobs():
        name = job.job_id.rstrip("/").rpartition("/")[2]
        if job.parent_job is not None or driver.session_name in name or name.startswith(NAMED_ACTOR_PREFIX):
            continue  # a part of some session, this one (the DRIVER row above), or a named actor
        is_session = SESSION_JOB.fullmatch(name) is not None
        rows.append({
            "type": "DRIVER" if is_session else "SUBMISSION",
            "job_id": None,
            "submission_id": job.job_id,
            "driver_info": None,
            "status": _JOB_STATUS.get(str(job.status), "PENDING"),
            "entrypoint": job.job_id,
            "message": job.error or None,
            "error_type": None,
            "start_time": _ms(job.started_at or job.submitted_at),
            "end_time": _ms(job.finished_at),
            "metadata": {"iris_job_id": job.job_id},
            "runtime_env": None,
            "driver_agent_http_address": None,
            "driver_node_id": None,
            "driver_exit_code": None,
        })
    return rows


def placement_group_rows(driver: DriverState) -> list[dict[str, Any]]:
    rows = []
    for group_hex, row in driver.placement_group_table(None).items():
        record = driver.placement_groups.get(bytes.fromhex(group_hex))
        rows.append({
            "placement_group_id": group_hex,
            "name": row["name"],
            "creator_job_id": driver.job_id,
            "state": row["state"],
            "bundles": [
                {"bundle_id": {"placement_group_id": group_hex, "bundle_index": index},
                 "node_id": row["bundles_to_node_id"].get(index), "unit_resources": dict(bundle)}
                for index, bundle in row["bundles"].items()
            ],
            "is_detached": bool(record.detached) if record is not None else False,
            "stats": dict(row["stats"]),
            "topology_strategy": {},
            "topology_assignments": {},
        })
    return rows

