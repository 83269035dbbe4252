"""Translation between Iris wire messages and the controller's records.

`parse_launch_request` validates a LaunchJob request into a `JobDefinition` (raising
`InvalidArgument`); the `*_proto` functions render records as `JobStatus`/`TaskStatus` messages
and workers as `WorkerHealthStatus` messages.
Both run under the controller's lock; neither does I/O.
"""

from __future__ import annotations

import posixpath
import re

from fray_ray.cluster._config import ATTR_TPU_TOPOLOGY, WorkerSpec
from fray_ray.cluster._constraints import effective_constraints, validate_constraint
from fray_ray.cluster._jobs import AttemptRecord, JobDefinition, JobRecord, TaskRecord
from fray_ray.cluster._placement import PlacementRequest
from fray_ray.cluster._resources import Demand
from fray_ray.iris.errors import InvalidArgument
from fray_ray.iris.names import MAX_SEGMENT_BYTES, JobName
from fray_ray.iris.rpc import controller_pb2, job_pb2, time_pb2
from fray_ray.iris.types import (
    Constraint,
    ExistingJobPolicy,
    GpuDevice,
    PriorityBand,
    ResourceSpec,
    TpuDevice,
    attribute_to_proto,
)

Controller = controller_pb2.Controller

_PORT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
REDACTED = "<redacted>"
#: Longest workdir file path a job may ship, in characters.
MAX_WORKDIR_FILE_NAME = 1024


def _seconds(duration: time_pb2.Duration, what: str) -> float | None:
    if duration.milliseconds < 0:
        raise InvalidArgument(f"{what} cannot be negative")
    return duration.milliseconds / 1000.0 if duration.milliseconds > 0 else None


def _workdir_file_name(name: str) -> str:
    """`name` normalized (`./a` is `a`); InvalidArgument unless it stays inside the workdir and
    each component is a printable name of at most MAX_SEGMENT_BYTES."""
    normalized = posixpath.normpath(name) if name else ""
    parts = normalized.split("/")
    if (
        not name
        or name.startswith("/")
        or normalized in (".", "")
        or len(name) > MAX_WORKDIR_FILE_NAME
        or any(p == ".." or not p.isprintable() or len(p.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES
               for p in parts)
    ):
        shown = repr(name) if len(name) <= 80 else repr(name[:80]) + f"... ({len(name)} characters)"
        raise InvalidArgument(
            f"workdir file name {shown} must be a relative path inside the workdir made of printable "
            f"names of at most {MAX_SEGMENT_BYTES} bytes"
        )
    return normalized


def parse_launch_request(request: Controller.LaunchJobRequest) -> JobDefinition:
    """Validate a LaunchJob request; InvalidArgument names the offending field."""
    if not request.name:
        raise InvalidArgument("job name is empty: send the full wire name /<user>/<job>")
    try:
        name = JobName.from_wire(request.name)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    argv = tuple(request.entrypoint.run_command.argv)
    if not argv:
        raise InvalidArgument(f"job {name}: entrypoint.run_command.argv is empty")
    if request.entrypoint.workdir_file_refs:
        raise InvalidArgument(
            f"job {name}: workdir_file_refs need a blob store this cluster does not have; send workdir_files inline"
        )
    files = {_workdir_file_name(k): bytes(v) for k, v in request.entrypoint.workdir_files.items()}
    if request.replicas < 0:
        raise InvalidArgument(f"job {name}: replicas must be at least 1, got {request.replicas}")
    replicas = request.replicas or 1
    for budget in ("max_retries_failure", "max_retries_preemption", "max_task_failures"):
        if getattr(request, budget) < 0:
            raise InvalidArgument(f"job {name}: {budget} cannot be negative")
    ports = tuple(request.ports)
    for port in ports:
        if not _PORT_NAME.match(port):
            raise InvalidArgument(f"job {name}: invalid port name {port!r}")
    if len({p.upper() for p in ports}) != len(ports):
        raise InvalidArgument(f"job {name}: duplicate port names in {list(ports)}")
    try:
        resources = ResourceSpec.from_proto(request.resources)
        demand = Demand.of(resources)
        if isinstance(resources.device, GpuDevice) and resources.device.count < 0:
            raise ValueError("gpu count cannot be negative")
        if isinstance(resources.device, TpuDevice) and not resources.device.variant:
            raise ValueError("a TPU request needs a variant, e.g. v5p-16")
        user_constraints = [Constraint.from_proto(c) for c in request.constraints]
        for constraint in user_constraints:
            validate_constraint(constraint)
        policy = ExistingJobPolicy(request.existing_job_policy)
    except ValueError as exc:
        raise InvalidArgument(f"job {name}: {exc}") from None
    if policy == ExistingJobPolicy.UNSPECIFIED and request.fail_if_exists:
        policy = ExistingJobPolicy.ERROR
    try:
        band = PriorityBand(request.priority_band)
    except ValueError:
        band = PriorityBand.INTERACTIVE
    group_by = request.coscheduling.group_by or None
    placement = PlacementRequest(
        demand=demand,
        constraints=effective_constraints(user_constraints, resources.device),
        group_by=group_by,
        replicas=replicas,
    )
    return JobDefinition(
        name=name,
        argv=argv,
        workdir_files=files,
        env_vars=dict(request.environment.env_vars),
        # What Iris workers run: the entrypoint's setup commands (clients copy their resolved
        # setup_scripts there), else the environment's setup_scripts.
        setup_scripts=tuple(request.entrypoint.setup_commands or request.environment.setup_scripts),
        ports=ports,
        replicas=replicas,
        resources=resources,
        placement=placement,
        max_retries_failure=request.max_retries_failure,
        max_retries_preemption=request.max_retries_preemption,
        max_task_failures=request.max_task_failures,
        timeout_s=_seconds(request.timeout, "timeout"),
        scheduling_timeout_s=_seconds(request.scheduling_timeout, "scheduling_timeout"),
        existing_job_policy=policy,
        priority_band=band,
        preemption_policy=request.preemption_policy,
        bundle_id=request.bundle_id,
        client_revision_date=request.client_revision_date,
    )


def attempt_proto(attempt: AttemptRecord) -> job_pb2.TaskAttempt:
    message = job_pb2.TaskAttempt(
        attempt_id=attempt.attempt_id,
        worker_id=attempt.worker_id,
        state=int(attempt.state),
        exit_code=attempt.exit_code,
        error=attempt.error,
        is_worker_failure=attempt.is_worker_failure,
        attempt_uid=str(attempt.uid),
    )
    if attempt.started_at_ms:
        message.started_at.epoch_ms = attempt.started_at_ms
    if attempt.finished_at_ms:
        message.finished_at.epoch_ms = attempt.finished_at_ms
    return message


def task_status_proto(task: TaskRecord, worker_address: str) -> job_pb2.TaskStatus:
    current = task.current
    message = job_pb2.TaskStatus(
        task_id=task.wire,
        state=int(task.state),
        worker_id=current.worker_id if current is not None else "",
        worker_address=worker_address if current is not None else "",
        exit_code=task.exit_code,
        error=task.error,
        ports=dict(current.ports) if current is not None else {},
        current_attempt_id=task.current_attempt_id,
        attempts=[attempt_proto(a) for a in task.attempts],
        pending_reason=task.job.pending_reason if task.state.name == "PENDING" else "",
        can_be_scheduled=task.state.name == "PENDING",
        cluster="local",
    )
    if task.started_at_ms:
        message.started_at.epoch_ms = task.started_at_ms
    if task.finished_at_ms:
        message.finished_at.epoch_ms = task.finished_at_ms
    message.submitted_at.epoch_ms = task.job.submitted_at_ms
    return message


def job_status_proto(job: JobRecord) -> job_pb2.JobStatus:
    counts: dict[str, int] = {}
    for task in job.tasks:
        key = task.state.name.lower()
        counts[key] = counts.get(key, 0) + 1
    message = job_pb2.JobStatus(
        job_id=job.wire,
        state=int(job.state),
        exit_code=job.exit_code,
        error=job.error,
        failure_count=job.failure_count,
        preemption_count=job.preemption_count,
        name=job.wire,
        resources=job.request.resources,
        task_state_counts=counts,
        task_count=len(job.tasks),
        completed_count=sum(1 for t in job.tasks if t.state.finished),
        pending_reason=job.pending_reason if job.state.name == "PENDING" else "",
        has_children=bool(job.children),
        parent_job_id=job.parent.wire if job.parent is not None else (job.name.parent.wire if job.name.parent else ""),
        cluster="local",
        submitting_user=job.name.user,
    )
    if len(job.tasks) == 1 and job.tasks[0].current is not None:
        message.ports.update(job.tasks[0].current.ports)
    message.submitted_at.epoch_ms = job.submitted_at_ms
    if job.started_at_ms:
        message.started_at.epoch_ms = job.started_at_ms
    if job.finished_at_ms:
        message.finished_at.epoch_ms = job.finished_at_ms
    return message


def redacted_request(request: Controller.LaunchJobRequest) -> Controller.LaunchJobRequest:
    """The request as submitted, with environment values hidden (they may hold secrets)."""
    copy = Controller.LaunchJobRequest()
    copy.CopyFrom(request)
    for key in list(copy.environment.env_vars):
        copy.environment.env_vars[key] = REDACTED
    return copy


def worker_metadata_proto(spec: WorkerSpec, host: str) -> job_pb2.WorkerMetadata:
    """What a real Iris worker reports about its host, for a simulated one.

    `cpu_count` is whole cores (a fractional-core worker reports the cores below its size);
    the hostname is the worker id, since each worker stands for a host of its own.
    """
    message = job_pb2.WorkerMetadata(
        hostname=spec.worker_id,
        ip_address=host,
        cpu_count=spec.cpu_millicores // 1000,
        memory_bytes=spec.memory_bytes,
        disk_bytes=spec.disk_bytes,
    )
    if spec.gpu is not None:
        message.device.gpu.variant = spec.gpu.variant
        message.device.gpu.count = spec.gpu.count
        message.gpu_count = spec.gpu.count
        message.gpu_name = spec.gpu.variant
    elif spec.tpu is not None:
        message.device.tpu.variant = spec.tpu.variant
        message.device.tpu.count = spec.tpu.chips
        message.device.tpu.topology = str(spec.attributes.get(ATTR_TPU_TOPOLOGY, ""))
        message.tpu_name = spec.tpu.slice_name
        message.tpu_worker_id = str(spec.tpu.worker_index)
        message.tpu_worker_hostnames = spec.device_env.get("TPU_WORKER_HOSTNAMES", "")
        message.tpu_chips_per_host_bounds = spec.device_env.get("TPU_CHIPS_PER_HOST_BOUNDS", "")
    else:
        message.device.cpu.variant = "cpu"
    for key, value in spec.attributes.items():
        message.attributes[key].CopyFrom(attribute_to_proto(value))
    return message


def worker_health_proto(
    spec: WorkerSpec, *, alive: bool, address: str, running_job_ids: tuple[str, ...]
) -> Controller.WorkerHealthStatus:
    return Controller.WorkerHealthStatus(
        worker_id=spec.worker_id,
        healthy=alive,
        running_job_ids=list(running_job_ids),
        address=address,
        metadata=worker_metadata_proto(spec, address),
        status_message="" if alive else "worker lost",
    )
