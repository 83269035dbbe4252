"""What the controller's handlers look up in the cluster state, and the endpoints tasks register.

Jobs and tasks by id, the address each worker advertises, the tasks and attempts a GetTaskLogs
request covers, and the endpoint registry: a live task attempt registers a name under a lease
(renewed by registering again), and the name is visible while that attempt runs and its job has
not finished. None of this moves a job, task or attempt from one state to another, which is
`ClusterState`'s business (`_state.py`); `StateLookups` is a base of it and reads its fields.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fray_ray.cluster._endpoints import EndpointRecord, EndpointRegistry
from fray_ray.cluster._jobs import AttemptRecord, JobRecord, TaskRecord
from fray_ray.cluster._request_names import endpoint_name_arg, task_id_arg, without_attempt
from fray_ray.iris.errors import FailedPrecondition, NotFound
from fray_ray.iris.rpc import controller_pb2

Controller = controller_pb2.Controller

#: Leases: ControllerService registrations are not renewed by old clients, so they get a long one.
LEGACY_LEASE_S = 3 * 24 * 3600.0
DEFAULT_LEASE_S = 600.0
MAX_LEASE_S = 3 * 24 * 3600.0
MIN_LEASE_S = 5.0


@dataclass(frozen=True)
class LogTarget:
    """One task whose output a GetTaskLogs request covers: (attempt uid, attempt id) pairs."""

    task_id: str
    worker_id: str
    attempts: tuple[tuple[int, int], ...]


class StateLookups:
    """Lookups and endpoints; `ClusterState` sets the fields below in its `__init__`."""

    jobs: dict[str, JobRecord]
    tasks: dict[str, TaskRecord]
    attempts: dict[int, AttemptRecord]  # attempts whose process has not been reaped
    endpoints: EndpointRegistry
    _worker_hosts: dict[str, str]
    _clock: Callable[[], float]

    # ---- endpoints ----------------------------------------------------------------------------

    def register_endpoint(
        self, request: Controller.RegisterEndpointRequest, *, default_lease_s: float
    ) -> tuple[str, float]:
        """Register (or renew) an endpoint for a live task attempt; returns (id, lease seconds)."""
        endpoint_name_arg(request.name)
        task_id = task_id_arg(request.task_id).task.wire
        task = self.tasks.get(task_id)
        if task is None:
            raise NotFound(f"task {request.task_id!r} not found")
        if task.state.finished or task.job.state.finished:
            raise FailedPrecondition(f"task {task_id} has finished ({task.state.name}); it cannot register endpoints")
        current = task.current
        if current is None or current.attempt_id != request.attempt_id or not current.active:
            raise FailedPrecondition(
                f"stale attempt: task {task_id} is on attempt {task.current_attempt_id} "
                f"({task.state.name}), not attempt {request.attempt_id}"
            )
        requested = request.lease_duration.milliseconds / 1000.0
        lease = min(MAX_LEASE_S, max(MIN_LEASE_S, requested)) if requested > 0 else default_lease_s
        endpoint_id = request.endpoint_id or uuid.uuid4().hex
        self.endpoints.put(
            EndpointRecord(
                endpoint_id=endpoint_id,
                name=request.name,
                address=request.address,
                task_id=task_id,
                attempt_uid=current.uid,
                job_id=task.job.wire,
                expires_at=self._clock() + lease,
                metadata=dict(request.metadata),
                access=request.access,
            )
        )
        return endpoint_id, lease

    def unregister_endpoint(self, endpoint_id: str) -> None:
        self.endpoints.remove(endpoint_id)

    def _endpoint_visible(self, record: EndpointRecord) -> bool:
        attempt = self.attempts.get(record.attempt_uid)
        job = self.jobs.get(record.job_id)
        return attempt is not None and attempt.active and job is not None and not job.state.finished

    def list_endpoints(self, prefix: str, *, exact: bool, task_ids: Iterable[str] = ()) -> list[EndpointRecord]:
        return self.endpoints.find(
            prefix, exact=exact, task_ids=task_ids, now=self._clock(), visible=self._endpoint_visible
        )

    # ---- queries ------------------------------------------------------------------------------

    def job(self, job_id: str) -> JobRecord:
        job = self.jobs.get(job_id)
        if job is None:
            raise NotFound(f"job {job_id} not found")
        return job

    def task(self, task_id: str) -> TaskRecord:
        task = self.tasks.get(task_id) or self.tasks.get(without_attempt(task_id))
        if task is None:
            raise NotFound(f"task {task_id} not found")
        return task

    def worker_address(self, worker_id: str) -> str:
        """The address a worker advertises ("" for no worker)."""
        return self._worker_hosts.get(worker_id, "127.0.0.1" if worker_id else "")

    def log_targets(
        self, id: str, *, attempt_id: int, include_children: bool
    ) -> tuple[list[LogTarget], list[JobRecord]]:
        """The tasks (and attempts) a GetTaskLogs request covers, plus the child jobs included."""
        tasks: list[TaskRecord]
        children: list[JobRecord] = []
        only_attempt = attempt_id
        if id in self.jobs:
            job = self.jobs[id]
            tasks = list(job.tasks)
            if include_children:
                children = [j for j in job.subtree() if j is not job]
                for child in children:
                    tasks.extend(child.tasks)
        else:
            wire = without_attempt(id)
            task = self.tasks.get(wire)
            if task is None:
                raise NotFound(f"no job or task named {id}")
            tasks = [task]
            if wire != id and id[len(wire) + 1 :].isdigit():
                only_attempt = int(id[len(wire) + 1 :])
        targets = []
        for task in tasks:
            attempts = tuple(
                (a.uid, a.attempt_id) for a in task.attempts if only_attempt < 0 or a.attempt_id == only_attempt
            )
            worker = task.current.worker_id if task.current is not None else ""
            targets.append(LogTarget(task.wire, worker, attempts))
        return targets, children
