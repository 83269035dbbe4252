"""The controller's records of jobs, tasks and attempts, and Iris's job-state roll-up.

A job expands into `replicas` tasks; each run of a task is an attempt with a fresh attempt id.
Records are plain mutable objects owned by `ClusterState` and touched only under the
controller's lock; `JobDefinition` (what was asked for) is frozen.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from fray_ray.cluster._placement import Candidate, PlacementRequest
from fray_ray.cluster._resources import Allocation
from fray_ray.iris.names import JobName, TaskName
from fray_ray.iris.rpc import controller_pb2
from fray_ray.iris.types import ExistingJobPolicy, JobState, PriorityBand, ResourceSpec, TaskState

#: `JobPreemptionPolicy.PRESERVE_CHILDREN` on the wire.
PRESERVE_CHILDREN = 2


@dataclass(frozen=True)
class JobDefinition:
    """A validated LaunchJob request: everything needed to run the job's tasks."""

    name: JobName
    argv: tuple[str, ...]
    workdir_files: Mapping[str, bytes]
    env_vars: Mapping[str, str]
    setup_scripts: tuple[str, ...]
    ports: tuple[str, ...]
    replicas: int
    resources: ResourceSpec
    placement: PlacementRequest
    max_retries_failure: int
    max_retries_preemption: int
    max_task_failures: int
    timeout_s: float | None
    scheduling_timeout_s: float | None
    existing_job_policy: ExistingJobPolicy
    priority_band: PriorityBand
    preemption_policy: int
    bundle_id: str
    client_revision_date: str

    @property
    def coscheduled(self) -> bool:
        return self.placement.group_by is not None


_BAND_RANK = {
    PriorityBand.PRODUCTION: 0,
    PriorityBand.UNSPECIFIED: 1,
    PriorityBand.INTERACTIVE: 1,
    PriorityBand.BATCH: 2,
}
_uids = itertools.count(1)


def next_uid() -> int:
    """A process-wide unique attempt uid; keys processes, logs and endpoints of one attempt."""
    return next(_uids)


class AttemptRecord:
    """One run of a task on one worker. Holds its allocation until the process is gone."""

    __slots__ = (
        "uid",
        "task",
        "attempt_id",
        "worker_id",
        "allocation",
        "state",
        "ports",
        "exit_code",
        "error",
        "assigned_at_ms",
        "started_at_ms",
        "finished_at_ms",
        "is_worker_failure",
        "process_gone",
    )

    def __init__(self, task: TaskRecord, attempt_id: int, allocation: Allocation, now_ms: int) -> None:
        self.uid = next_uid()
        self.task = task
        self.attempt_id = attempt_id
        self.worker_id = allocation.worker_id
        self.allocation = allocation
        self.state = TaskState.ASSIGNED
        self.ports: dict[str, int] = {}
        self.exit_code = 0
        self.error = ""
        self.assigned_at_ms = now_ms
        self.started_at_ms = 0
        self.finished_at_ms = 0
        self.is_worker_failure = False
        self.process_gone = False

    @property
    def active(self) -> bool:
        return self.state.active


class TaskRecord:
    """One replica of a job: `/user/job/<index>`."""

    __slots__ = (
        "name",
        "wire",
        "job",
        "state",
        "attempts",
        "failure_retries",
        "preemption_retries",
        "pending_since",
        "exit_code",
        "error",
        "started_at_ms",
        "finished_at_ms",
    )

    def __init__(self, job: JobRecord, index: int, now: float) -> None:
        self.name = TaskName(job.name, index)
        self.wire = self.name.wire
        self.job = job
        self.state = TaskState.PENDING
        self.attempts: list[AttemptRecord] = []
        self.failure_retries = 0
        self.preemption_retries = 0
        self.pending_since = now  # monotonic; a scheduling deadline is valid only for this value
        self.exit_code = 0
        self.error = ""
        self.started_at_ms = 0
        self.finished_at_ms = 0

    @property
    def index(self) -> int:
        return self.name.index

    @property
    def current(self) -> AttemptRecord | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def current_attempt_id(self) -> int:
        return self.attempts[-1].attempt_id if self.attempts else 0


class JobRecord:
    """A job, its tasks and its counters."""

    __slots__ = (
        "definition",
        "request",
        "name",
        "wire",
        "seq",
        "root_seq",
        "parent",
        "children",
        "state",
        "tasks",
        "submitted_at_ms",
        "started_at_ms",
        "finished_at_ms",
        "exit_code",
        "error",
        "failure_count",
        "preemption_count",
        "task_failures",
        "gang_failed_rounds",
        "gang_preempted_rounds",
        "pending_reason",
        "candidates",
    )

    def __init__(
        self,
        definition: JobDefinition,
        request: controller_pb2.Controller.LaunchJobRequest,
        seq: int,
        parent: JobRecord | None,
        now: float,
        now_ms: int,
    ) -> None:
        self.definition = definition
        self.request = request
        self.name = definition.name
        self.wire = definition.name.wire
        self.seq = seq
        self.root_seq = parent.root_seq if parent is not None else seq
        self.parent = parent
        self.children: dict[str, JobRecord] = {}
        self.state = JobState.PENDING
        self.submitted_at_ms = now_ms
        self.started_at_ms = 0
        self.finished_at_ms = 0
        self.exit_code = 0
        self.error = ""
        self.failure_count = 0  # failed attempts (non-zero exits), cumulative across retries
        self.preemption_count = 0  # attempts lost to worker failure
        self.task_failures = 0  # failures that count against max_task_failures
        self.gang_failed_rounds = 0
        self.gang_preempted_rounds = 0
        self.pending_reason = ""
        self.candidates: list[Candidate] | None = None  # eligible workers, cached
        self.tasks = [TaskRecord(self, i, now) for i in range(definition.replicas)]

    def queue_key(self) -> tuple[int, int, int, int]:
        """Scheduling order: higher band, deeper job, earlier root, earlier job."""
        band = _BAND_RANK.get(self.definition.priority_band, 1)
        return (band, -self.name.depth, self.root_seq, self.seq)

    def subtree(self) -> list[JobRecord]:
        """This job and all its descendants, children before parents."""
        out: list[JobRecord] = []
        for child in list(self.children.values()):
            out.extend(child.subtree())
        out.append(self)
        return out


_WORKER_LOSS = (TaskState.WORKER_FAILED, TaskState.PREEMPTED)


def roll_up(job: JobRecord) -> JobState:
    """The job state implied by its tasks, in Iris's order of precedence.

    1. SUCCEEDED if every task succeeded; 2. FAILED once failures exceed `max_task_failures`;
    3. UNSCHEDULABLE if any task is; 4. KILLED if any task was killed; then, when every task
    has finished, WORKER_FAILED if any was lost with its worker, else SUCCEEDED (the failures
    were within tolerance); otherwise 5. RUNNING if any task is assigned or running, else
    6. PENDING.
    """
    states = [task.state for task in job.tasks]
    if all(s == TaskState.SUCCEEDED for s in states):
        return JobState.SUCCEEDED
    if job.task_failures > job.definition.max_task_failures:
        return JobState.FAILED
    if TaskState.UNSCHEDULABLE in states:
        return JobState.UNSCHEDULABLE
    if TaskState.KILLED in states:
        return JobState.KILLED
    if all(s.finished for s in states):
        if any(s in _WORKER_LOSS for s in states):
            return JobState.WORKER_FAILED
        if TaskState.COSCHED_FAILED in states:
            return JobState.FAILED
        return JobState.SUCCEEDED
    if any(s.active for s in states):
        return JobState.RUNNING
    return JobState.PENDING
