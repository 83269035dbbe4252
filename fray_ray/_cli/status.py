"""`fray-ray status`: the cluster's nodes, what they hold and what waits, like `ray status`.

Everything is read from the controller over Iris's own RPCs (ListWorkers, ListJobs and
ListTasks of the unfinished jobs), so it works against any Iris-compatible controller: a node
is a worker; what a node uses is the resources of the task attempts active on it (each job
says what one task holds); pending demand is the tasks still waiting, grouped by job, with
the reason the controller gives.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from fray_ray.cluster._config import ATTR_SIMULATED
from fray_ray.iris.types import GpuDevice, JobInfoSnapshot, ResourceSpec, TaskState, TpuDevice

if TYPE_CHECKING:
    from fray_ray.iris.controller_client import ControllerClient

#: Resource kinds in the order they are shown; memory and disk are bytes.
KINDS = ("CPU", "GPU", "TPU", "memory", "disk")
_BYTE_KINDS = frozenset({"memory", "disk"})


@dataclass(frozen=True)
class NodeStatus:
    """One worker: what it has, what its active tasks hold, and what selects it."""

    node_id: str
    address: str
    healthy: bool
    total: dict[str, float]
    used: dict[str, float]
    attributes: dict[str, str]
    running_tasks: int
    status_message: str = ""


@dataclass(frozen=True)
class PendingDemand:
    """Tasks of one job that wait for a worker, what each needs, and why they wait."""

    job_id: str
    tasks: int
    shape: dict[str, float]
    reason: str


@dataclass(frozen=True)
class ClusterStatus:
    address: str
    nodes: list[NodeStatus]
    pending: list[PendingDemand]
    jobs: dict[str, int] = field(default_factory=dict)  # job state -> how many

    def totals(self) -> dict[str, dict[str, float]]:
        """Per kind: used and total over the healthy nodes (kinds no node has are left out)."""
        result: dict[str, dict[str, float]] = {}
        for kind in KINDS:
            total = sum(node.total.get(kind, 0.0) for node in self.nodes if node.healthy)
            used = sum(node.used.get(kind, 0.0) for node in self.nodes if node.healthy)
            if total or used:
                result[kind] = {"used": used, "total": total, "free": max(total - used, 0.0)}
        return result

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "nodes": [asdict(node) for node in self.nodes],
            "resources": self.totals(),
            "pending": [asdict(demand) for demand in self.pending],
            "jobs": dict(self.jobs),
        }


def shape_of(resources: ResourceSpec | None) -> dict[str, float]:
    """What one task of a job holds, by kind."""
    if resources is None:
        return {}
    shape: dict[str, float] = {}
    if resources.cpu_millicores:
        shape["CPU"] = resources.cpu_millicores / 1000
    if isinstance(resources.device, GpuDevice) and resources.device.count > 0:
        shape["GPU"] = float(resources.device.count)
    if isinstance(resources.device, TpuDevice) and resources.device.count > 0:
        shape["TPU"] = float(resources.device.count)
    if resources.memory_bytes:
        shape["memory"] = float(resources.memory_bytes)
    if resources.disk_bytes:
        shape["disk"] = float(resources.disk_bytes)
    return shape


def read_status(controller: ControllerClient) -> ClusterStatus:
    """Ask the controller; blocks for 2 + (unfinished jobs) RPCs. Raises IrisError."""
    workers = controller.list_workers()
    jobs = controller.list_jobs("")
    used: dict[str, Counter[str]] = {worker.worker_id: Counter() for worker in workers}
    running: Counter[str] = Counter()
    pending: list[PendingDemand] = []
    for job in jobs:
        if job.state.finished:
            continue
        shape = shape_of(job.resources)
        waiting: list[str] = []
        for task in controller.list_tasks(job.job_id):
            if task.state.active and task.worker_id:
                used.setdefault(task.worker_id, Counter()).update(shape)
                running[task.worker_id] += 1
            elif task.state == TaskState.PENDING:
                waiting.append(task.pending_reason or job.pending_reason)
        for reason, count in Counter(waiting).items():
            pending.append(PendingDemand(job.job_id, count, shape, reason or "waiting to be scheduled"))
    nodes = [
        NodeStatus(
            node_id=worker.worker_id,
            address=worker.address,
            healthy=worker.healthy,
            total=_capacity(worker.cpu_count, worker.memory_bytes, worker.disk_bytes, worker.device),
            used=dict(used.get(worker.worker_id, {})),
            attributes={key: str(value) for key, value in sorted(worker.attributes.items())},
            running_tasks=running[worker.worker_id],
            status_message=worker.status_message,
        )
        for worker in workers
    ]
    return ClusterStatus(controller.address, nodes, pending, _job_counts(jobs))


def _capacity(cpu: int, memory: int, disk: int, device: object) -> dict[str, float]:
    total = {"CPU": float(cpu), "memory": float(memory), "disk": float(disk)}
    if isinstance(device, GpuDevice):
        total["GPU"] = float(device.count)
    if isinstance(device, TpuDevice):
        total["TPU"] = float(device.count)
    return {kind: value for kind, value in total.items() if value}


def _job_counts(jobs: list[JobInfoSnapshot]) -> dict[str, int]:
    return dict(sorted(Counter(job.state.name.lower() for job in jobs).items()))


def _amount(kind: str, value: float) -> str:
    if kind in _BYTE_KINDS:
        for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
            if value >= size:
                return f"{value / size:.2f}{unit}"
        return f"{value:.0f}B"
    return f"{value:g}"


def _shape_text(shape: dict[str, float]) -> str:
    return "{" + ", ".join(f"'{kind}': {_amount(kind, value)}" for kind, value in shape.items()) + "}"


def render_text(status: ClusterStatus) -> str:
    """The layout of `ray status`: nodes, then usage per kind, then demands."""
    rule = "-" * 63
    active = [node for node in status.nodes if node.healthy]
    unhealthy = [node for node in status.nodes if not node.healthy]
    lines = [f"======== Cluster status: {status.address} ========", "Node status", rule, "Active:"]
    for node in active:
        lines.append(f" 1 {node.node_id} ({node.address or 'no address'}), {node.running_tasks} running task(s)")
        if node.attributes:
            lines.append("   attributes: " + ", ".join(f"{k}={v}" for k, v in node.attributes.items()))
    if not active:
        lines.append(" (no active nodes)")
    lines.append("Unhealthy:")
    lines.extend(f" 1 {node.node_id}: {node.status_message or 'unhealthy'}" for node in unhealthy)
    if not unhealthy:
        lines.append(" (no unhealthy nodes)")
    lines += ["", "Resources", rule, "Usage:"]
    totals = status.totals()
    for kind, amounts in totals.items():
        lines.append(f" {_amount(kind, amounts['used'])}/{_amount(kind, amounts['total'])} {kind}")
    if not totals:
        lines.append(" (no resources)")
    simulated = [node for node in active if node.attributes.get(ATTR_SIMULATED, "").lower() == "true"]
    if simulated:
        lines.append(f" ({len(simulated)} of {len(active)} nodes are simulated hosts (attribute {ATTR_SIMULATED}=true): "
                     "the CPUs, memory and accelerators they add are declared, not real)")
    lines.append("Usage by node:")
    for node in active:
        parts = [f"{_amount(k, node.used.get(k, 0.0))}/{_amount(k, node.total[k])} {k}" for k in KINDS if k in node.total]
        lines.append(f" {node.node_id}: " + ", ".join(parts))
    lines += ["", "Demands:"]
    for demand in status.pending:
        lines.append(f" {_shape_text(demand.shape)}: {demand.tasks} pending task(s) of {demand.job_id}: {demand.reason}")
    if not status.pending:
        lines.append(" (no resource demands)")
    jobs = ", ".join(f"{count} {state}" for state, count in status.jobs.items()) or "none"
    lines += ["", f"Jobs: {jobs}"]
    return "\n".join(lines)
