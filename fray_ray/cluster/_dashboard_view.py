"""What the dashboard shows, read from the controller's state: plain dicts of JSON values.

Each function runs under the controller's lock (through `EmbeddedController.read`), so it only
reads, never blocks, and copies what it needs. Sizes are bounded: the most recent
`MAX_JOBS` jobs and `MAX_TASKS` tasks of a job are listed, with the totals beside them.
A node's use is the allocation of the attempts that hold resources on it now; pending demand
is the PENDING tasks of each job with the reason the scheduler last gave.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from fray_ray.cluster._jobs import JobRecord, TaskRecord
from fray_ray.cluster._resources import Demand, WorkerCapacity
from fray_ray.cluster._state import ClusterState
from fray_ray.iris.types import TaskState

MAX_JOBS = 200
MAX_TASKS = 500
MAX_ENDPOINTS = 500
#: The endpoint name suffix a Ray driver's dashboard feed registers under (see ARCHITECTURE.md).
SESSION_FEED_SUFFIX = "/fray-ray-dashboard"


def _resources(cpu_millicores: int, memory: int, disk: int, gpus: int, tpu_chips: int) -> dict[str, float]:
    found = {"CPU": cpu_millicores / 1000, "memory": float(memory), "disk": float(disk)}
    if gpus:
        found["GPU"] = float(gpus)
    if tpu_chips:
        found["TPU"] = float(tpu_chips)
    return found


def _worker(capacity: WorkerCapacity, address: str, running: int) -> dict[str, Any]:
    spec = capacity.spec
    total = _resources(
        spec.cpu_millicores,
        spec.memory_bytes,
        spec.disk_bytes,
        spec.gpu.count if spec.gpu is not None else 0,
        spec.tpu.chips if spec.tpu is not None else 0,
    )
    free = _resources(
        capacity.free_cpu, capacity.free_memory, capacity.free_disk, len(capacity.free_gpus), capacity.free_tpu_chips
    )
    device = "cpu"
    if spec.gpu is not None:
        device = f"{spec.gpu.count}x {spec.gpu.variant}"
    elif spec.tpu is not None:
        device = f"TPU {spec.tpu.variant}, host {spec.tpu.worker_index} of {spec.tpu.slice_name}"
    return {
        "id": spec.worker_id,
        "address": address,
        "alive": capacity.alive,
        "device": device,
        "attributes": {key: str(value) for key, value in sorted(spec.attributes.items())},
        "total": total,
        "used": {kind: max(total[kind] - free.get(kind, 0.0), 0.0) for kind in total},
        "free": {kind: free.get(kind, 0.0) for kind in total},
        "running": running,
    }


def _shape(demand: Demand) -> dict[str, float]:
    shape = {"CPU": demand.cpu_millicores / 1000, "memory": float(demand.memory_bytes)}
    if demand.gpus:
        shape["GPU"] = float(demand.gpus)
    if demand.tpu:
        shape["TPU"] = float(demand.tpu_chips or 1)
    return {kind: value for kind, value in shape.items() if value}


def _duration_s(started_ms: int, finished_ms: int, now_ms: int) -> float | None:
    if not started_ms:
        return None
    return max((finished_ms or now_ms) - started_ms, 0) / 1000


def _job(job: JobRecord, now_ms: int) -> dict[str, Any]:
    counts = Counter(task.state.name.lower() for task in job.tasks)
    return {
        "id": job.wire,
        "state": job.state.name.lower(),
        "parent": job.parent.wire if job.parent is not None else "",
        "tasks": len(job.tasks),
        "task_states": dict(sorted(counts.items())),
        "submitted_ms": job.submitted_at_ms,
        "started_ms": job.started_at_ms,
        "finished_ms": job.finished_at_ms,
        "duration_s": _duration_s(job.started_at_ms, job.finished_at_ms, now_ms),
        "error": job.error,
        "exit_code": job.exit_code,
        "failures": job.failure_count,
        "preemptions": job.preemption_count,
        "pending_reason": job.pending_reason,
    }


def _task(task: TaskRecord, state: ClusterState, now_ms: int) -> dict[str, Any]:
    current = task.current
    worker = current.worker_id if current is not None else ""
    error = task.error or (current.error if current is not None else "")
    return {
        "id": task.wire,
        "index": task.index,
        "state": task.state.name.lower(),
        "attempts": len(task.attempts),
        "worker": worker,
        "address": state.worker_address(worker) if worker else "",
        "started_ms": task.started_at_ms,
        "finished_ms": task.finished_at_ms,
        "duration_s": _duration_s(task.started_at_ms, task.finished_at_ms, now_ms),
        "exit_code": task.exit_code or (current.exit_code if current is not None else 0),
        "error": error,
    }


def cluster_view(state: ClusterState, now_ms: int) -> dict[str, Any]:
    """Workers with their use, pending demand, recent jobs and live endpoints."""
    running: Counter[str] = Counter(a.worker_id for a in state.attempts.values() if a.active)
    workers = [
        _worker(capacity, state.worker_address(worker_id), running[worker_id])
        for worker_id, capacity in state.capacities.items()
    ]
    pending = []
    jobs = list(state.jobs.values())
    for job in jobs:
        if job.state.finished:
            continue
        waiting = sum(1 for task in job.tasks if task.state == TaskState.PENDING)
        if waiting:
            pending.append(
                {
                    "job": job.wire,
                    "tasks": waiting,
                    "shape": _shape(job.definition.placement.demand),
                    "reason": job.pending_reason or "waiting for the scheduler's next pass",
                }
            )
    recent = sorted(jobs, key=lambda job: job.seq, reverse=True)[:MAX_JOBS]
    endpoints = state.list_endpoints("", exact=False)
    return {
        "now_ms": now_ms,
        "workers": workers,
        "pending": pending,
        "job_counts": dict(sorted(Counter(job.state.name.lower() for job in jobs).items())),
        "jobs_total": len(jobs),
        "jobs": [_job(job, now_ms) for job in recent],
        "endpoints_total": len(endpoints),
        "endpoints": [
            {"name": r.name, "address": r.address, "task": r.task_id} for r in endpoints[:MAX_ENDPOINTS]
        ],
    }


def job_view(state: ClusterState, job_id: str, now_ms: int) -> dict[str, Any] | None:
    """One job with its tasks (the first `MAX_TASKS`), or None if the cluster does not know it."""
    job = state.jobs.get(job_id)
    if job is None:
        return None
    view = _job(job, now_ms)
    view["children"] = sorted(job.children)[:MAX_JOBS]
    view["task_list"] = [_task(task, state, now_ms) for task in job.tasks[:MAX_TASKS]]
    return view


def session_feeds(state: ClusterState) -> list[dict[str, str]]:
    """The Ray sessions' dashboard feeds: endpoints named `<job>/fray-ray-dashboard`."""
    return [
        {"name": r.name, "job": r.job_id, "address": r.address}
        for r in state.list_endpoints("", exact=False)
        if r.name.endswith(SESSION_FEED_SUFFIX)
    ]
