"""Iris's job vocabulary as plain Python values, converted to and from protobuf here only.

Code above `fray_ray.iris` builds these frozen dataclasses and never touches a protobuf message.
Enum values equal the wire values in `job.proto`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fray_ray.iris.bundles import WorkspaceBundle
from fray_ray.iris.names import JobName
from fray_ray.iris.rpc import controller_pb2, finelog_logging_pb2, job_pb2, logging_pb2, time_pb2


class JobState(enum.IntEnum):
    UNSPECIFIED = 0
    PENDING = 1
    BUILDING = 2
    RUNNING = 3
    SUCCEEDED = 4
    FAILED = 5
    KILLED = 6
    WORKER_FAILED = 7
    UNSCHEDULABLE = 8

    @property
    def finished(self) -> bool:
        return self >= JobState.SUCCEEDED


class TaskState(enum.IntEnum):
    UNSPECIFIED = 0
    PENDING = 1
    BUILDING = 2
    RUNNING = 3
    SUCCEEDED = 4
    FAILED = 5
    KILLED = 6
    WORKER_FAILED = 7
    UNSCHEDULABLE = 8
    ASSIGNED = 9
    PREEMPTED = 10
    COSCHED_FAILED = 11
    MISSING = 12

    @property
    def finished(self) -> bool:
        return self in _TERMINAL_TASK_STATES

    @property
    def active(self) -> bool:
        return self in (TaskState.ASSIGNED, TaskState.BUILDING, TaskState.RUNNING)


_TERMINAL_TASK_STATES = frozenset(
    {
        TaskState.SUCCEEDED,
        TaskState.FAILED,
        TaskState.KILLED,
        TaskState.UNSCHEDULABLE,
        TaskState.WORKER_FAILED,
        TaskState.PREEMPTED,
        TaskState.COSCHED_FAILED,
    }
)


class ExistingJobPolicy(enum.IntEnum):
    UNSPECIFIED = 0  # replace a finished job; already_exists while it runs
    ERROR = 1  # already_exists whenever the name is taken
    KEEP = 2  # return the running job's id; replace a finished one
    RECREATE = 3  # kill the running job, then replace it


class PriorityBand(enum.IntEnum):
    UNSPECIFIED = 0
    PRODUCTION = 1
    INTERACTIVE = 2
    BATCH = 3


class ConstraintOp(enum.IntEnum):
    EQ = 0
    NE = 1
    EXISTS = 2
    NOT_EXISTS = 3
    GT = 4
    GE = 5
    LT = 6
    LE = 7
    IN = 8


class ConstraintMode(enum.IntEnum):
    REQUIRED = 0
    PREFERRED = 1


AttributeValue = str | int | float


def attribute_to_proto(value: AttributeValue) -> job_pb2.AttributeValue:
    if isinstance(value, bool):
        return job_pb2.AttributeValue(string_value="true" if value else "false")
    if isinstance(value, int):
        return job_pb2.AttributeValue(int_value=value)
    if isinstance(value, float):
        return job_pb2.AttributeValue(float_value=value)
    return job_pb2.AttributeValue(string_value=str(value))


def attribute_from_proto(message: job_pb2.AttributeValue) -> AttributeValue | None:
    kind = message.WhichOneof("value")
    return None if kind is None else getattr(message, kind)


# ---- resources --------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuDevice:
    variant: str = "auto"
    count: int = 1


@dataclass(frozen=True)
class TpuDevice:
    variant: str
    topology: str = ""
    count: int = 0  # chips on each VM


Device = GpuDevice | TpuDevice | None


@dataclass(frozen=True)
class ResourceSpec:
    """What one task needs on its worker."""

    cpu_millicores: int = 1000
    memory_bytes: int = 0
    disk_bytes: int = 0
    device: Device = None

    def to_proto(self) -> job_pb2.ResourceSpecProto:
        message = job_pb2.ResourceSpecProto(
            cpu_millicores=self.cpu_millicores, memory_bytes=self.memory_bytes, disk_bytes=self.disk_bytes
        )
        if isinstance(self.device, GpuDevice):
            message.device.gpu.variant = self.device.variant
            message.device.gpu.count = self.device.count
        elif isinstance(self.device, TpuDevice):
            message.device.tpu.variant = self.device.variant
            message.device.tpu.topology = self.device.topology
            message.device.tpu.count = self.device.count
        return message

    @classmethod
    def from_proto(cls, message: job_pb2.ResourceSpecProto) -> ResourceSpec:
        device = _device_from_proto(message.device) if message.HasField("device") else None
        return cls(message.cpu_millicores, message.memory_bytes, message.disk_bytes, device)


def _device_from_proto(message: job_pb2.DeviceConfig) -> Device:
    kind = message.WhichOneof("device")
    if kind == "gpu":
        return GpuDevice(message.gpu.variant, message.gpu.count)
    if kind == "tpu":
        return TpuDevice(message.tpu.variant, message.tpu.topology, message.tpu.count)
    return None


@dataclass(frozen=True)
class Constraint:
    """A predicate on worker attributes; REQUIRED filters, PREFERRED ranks."""

    key: str
    op: ConstraintOp = ConstraintOp.EQ
    value: AttributeValue | None = None
    values: tuple[AttributeValue, ...] = ()
    mode: ConstraintMode = ConstraintMode.REQUIRED

    def to_proto(self) -> job_pb2.Constraint:
        message = job_pb2.Constraint(key=self.key, op=int(self.op), mode=int(self.mode))
        if self.value is not None:
            message.value.CopyFrom(attribute_to_proto(self.value))
        message.values.extend(attribute_to_proto(v) for v in self.values)
        return message

    @classmethod
    def from_proto(cls, message: job_pb2.Constraint) -> Constraint:
        return cls(
            key=message.key,
            op=ConstraintOp(message.op),
            value=attribute_from_proto(message.value) if message.HasField("value") else None,
            values=tuple(v for v in (attribute_from_proto(m) for m in message.values) if v is not None),
            mode=ConstraintMode(message.mode),
        )


# ---- jobs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entrypoint:
    """A command plus files the worker writes into the task's workdir first."""

    argv: tuple[str, ...]
    workdir_files: Mapping[str, bytes] = field(default_factory=dict)

    def to_proto(self) -> job_pb2.RuntimeEntrypoint:
        return job_pb2.RuntimeEntrypoint(
            run_command=job_pb2.CommandEntrypoint(argv=list(self.argv)), workdir_files=dict(self.workdir_files)
        )


def _duration(seconds: float | None) -> time_pb2.Duration | None:
    return None if seconds is None else time_pb2.Duration(milliseconds=int(seconds * 1000))


@dataclass(frozen=True)
class JobSpec:
    """Everything LaunchJob needs. `name` is the full wire name `/user/job[/child]`."""

    name: JobName
    entrypoint: Entrypoint
    resources: ResourceSpec = ResourceSpec()
    env_vars: Mapping[str, str] = field(default_factory=dict)
    setup_scripts: Sequence[str] = ()
    ports: Sequence[str] = ()
    replicas: int = 1
    max_retries_failure: int = 0
    max_retries_preemption: int = 100
    max_task_failures: int = 0
    constraints: Sequence[Constraint] = ()
    coscheduling_group_by: str | None = None
    timeout_s: float | None = None
    scheduling_timeout_s: float | None = None
    existing_job_policy: ExistingJobPolicy = ExistingJobPolicy.UNSPECIFIED
    priority_band: PriorityBand = PriorityBand.UNSPECIFIED
    task_image: str = ""
    #: the workspace bundle unpacked into each task's workdir (None: no bundle)
    bundle: WorkspaceBundle | None = None

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be at least 1, got {self.replicas}")
        for budget in ("max_retries_failure", "max_retries_preemption", "max_task_failures"):
            if getattr(self, budget) < 0:
                raise ValueError(f"{budget} must be >= 0, got {getattr(self, budget)}")

    def to_proto(self, client_revision_date: str, *, send_blob: bool = True) -> controller_pb2.Controller.LaunchJobRequest:
        """The LaunchJob request. A bundle goes inline (`bundle_blob`) when `send_blob` and its
        bytes are at hand, else by id alone (the controller must hold it already)."""
        request = controller_pb2.Controller.LaunchJobRequest(
            name=self.name.wire,
            entrypoint=self.entrypoint.to_proto(),
            resources=self.resources.to_proto(),
            environment=job_pb2.EnvironmentConfig(env_vars=dict(self.env_vars), setup_scripts=list(self.setup_scripts)),
            ports=list(self.ports),
            replicas=self.replicas,
            max_retries_failure=self.max_retries_failure,
            max_retries_preemption=self.max_retries_preemption,
            max_task_failures=self.max_task_failures,
            constraints=[c.to_proto() for c in self.constraints],
            existing_job_policy=int(self.existing_job_policy),
            priority_band=int(self.priority_band),
            task_image=self.task_image,
            client_revision_date=client_revision_date,
        )
        if self.setup_scripts:
            # Iris workers run the entrypoint's setup commands; clients copy the resolved
            # scripts there (the environment keeps them for child jobs to inherit).
            request.entrypoint.setup_commands.extend(self.setup_scripts)
        if self.bundle is not None:
            if send_blob and self.bundle.blob:
                request.bundle_blob = self.bundle.blob
            else:
                request.bundle_id = self.bundle.bundle_id
        if self.coscheduling_group_by:
            request.coscheduling.group_by = self.coscheduling_group_by
        if (timeout := _duration(self.timeout_s)) is not None:
            request.timeout.CopyFrom(timeout)
        if (scheduling_timeout := _duration(self.scheduling_timeout_s)) is not None:
            request.scheduling_timeout.CopyFrom(scheduling_timeout)
        return request


@dataclass(frozen=True)
class TaskAttemptInfo:
    attempt_id: int
    state: TaskState
    worker_id: str = ""
    exit_code: int = 0
    error: str = ""
    is_worker_failure: bool = False


@dataclass(frozen=True)
class TaskInfo:
    """A task as the controller reports it."""

    task_id: str
    state: TaskState
    worker_id: str = ""
    worker_address: str = ""
    exit_code: int = 0
    error: str = ""
    ports: Mapping[str, int] = field(default_factory=dict)
    current_attempt_id: int = 0
    attempts: tuple[TaskAttemptInfo, ...] = ()
    pending_reason: str = ""

    @property
    def index(self) -> int:
        return int(self.task_id.rsplit("/", 1)[1])

    @classmethod
    def from_proto(cls, message: job_pb2.TaskStatus) -> TaskInfo:
        return cls(
            task_id=message.task_id,
            state=TaskState(message.state),
            worker_id=message.worker_id,
            worker_address=message.worker_address,
            exit_code=message.exit_code,
            error=message.error,
            ports=dict(message.ports),
            current_attempt_id=message.current_attempt_id,
            attempts=tuple(
                TaskAttemptInfo(a.attempt_id, TaskState(a.state), a.worker_id, a.exit_code, a.error, a.is_worker_failure)
                for a in message.attempts
            ),
            pending_reason=message.pending_reason,
        )


@dataclass(frozen=True)
class JobInfoSnapshot:
    """A job's status as the controller reports it (GetJobStatus / ListJobs)."""

    job_id: str
    state: JobState
    exit_code: int = 0
    error: str = ""
    failure_count: int = 0
    preemption_count: int = 0
    task_count: int = 0
    completed_count: int = 0
    pending_reason: str = ""
    parent_job_id: str = ""
    task_state_counts: Mapping[str, int] = field(default_factory=dict)
    resources: ResourceSpec | None = None  # what each of its tasks holds on its worker
    submitted_at_ms: int = 0  # epoch milliseconds; 0 when the controller did not say
    started_at_ms: int = 0
    finished_at_ms: int = 0

    @classmethod
    def from_proto(cls, message: job_pb2.JobStatus) -> JobInfoSnapshot:
        return cls(
            job_id=message.job_id,
            state=JobState(message.state),
            exit_code=message.exit_code,
            error=message.error,
            failure_count=message.failure_count,
            preemption_count=message.preemption_count,
            task_count=message.task_count,
            completed_count=message.completed_count,
            pending_reason=message.pending_reason,
            parent_job_id=message.parent_job_id,
            task_state_counts=dict(message.task_state_counts),
            resources=ResourceSpec.from_proto(message.resources) if message.HasField("resources") else None,
            submitted_at_ms=message.submitted_at.epoch_ms,
            started_at_ms=message.started_at.epoch_ms,
            finished_at_ms=message.finished_at.epoch_ms,
        )


@dataclass(frozen=True)
class EndpointInfo:
    """A registered endpoint: a name the registry maps to an address."""

    endpoint_id: str
    name: str
    address: str
    task_id: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """The address with a scheme; stored addresses may lack one."""
        return self.address if "://" in self.address else f"http://{self.address}"

    @classmethod
    def from_proto(cls, message: controller_pb2.Controller.Endpoint) -> EndpointInfo:
        return cls(message.endpoint_id, message.name, message.address, message.task_id, dict(message.metadata))


@dataclass(frozen=True)
class WorkerInfo:
    """One worker (host) as the controller reports it through ListWorkers.

    `cpu_count` is whole cores; `device` is None for a CPU-only host, else its accelerators
    (a TPU host's `count` is its chips); `attributes` are what constraints select on
    (`tpu-name`, `device-type`, `region`, `pool`, ...).
    """

    worker_id: str
    address: str
    healthy: bool
    cpu_count: int
    memory_bytes: int
    disk_bytes: int
    device: Device = None
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    running_job_ids: tuple[str, ...] = ()
    hostname: str = ""
    status_message: str = ""

    @property
    def cpu_millicores(self) -> int:
        return self.cpu_count * 1000

    @classmethod
    def from_proto(cls, message: controller_pb2.Controller.WorkerHealthStatus) -> WorkerInfo:
        metadata = message.metadata
        attributes = {key: attribute_from_proto(value) for key, value in metadata.attributes.items()}
        return cls(
            worker_id=message.worker_id,
            address=message.address,
            healthy=message.healthy,
            cpu_count=metadata.cpu_count,
            memory_bytes=metadata.memory_bytes,
            disk_bytes=metadata.disk_bytes,
            device=_device_from_proto(metadata.device) if metadata.HasField("device") else None,
            attributes={key: value for key, value in attributes.items() if value is not None},
            running_job_ids=tuple(message.running_job_ids),
            hostname=metadata.hostname,
            status_message=message.status_message,
        )


@dataclass(frozen=True)
class LogLine:
    """One line a task attempt wrote to stdout or stderr."""

    task_id: str
    attempt_id: int
    source: str
    data: str
    timestamp_ms: int

    @classmethod
    def from_proto(cls, task_id: str, message: logging_pb2.LogEntry | finelog_logging_pb2.LogEntry) -> LogLine:
        return cls(task_id, message.attempt_id, message.source, message.data, message.timestamp.epoch_ms)
