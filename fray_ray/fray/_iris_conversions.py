"""Fray values to Iris values: resources, constraints, entrypoints, environments, gangs, states.

Pure functions over the frozen dataclasses of `fray_ray.fray.types`, returning the Iris client
layer's own dataclasses (`fray_ray.iris.types`); no protobuf, no I/O. `FrayIrisClient` builds
every LaunchJob request from them, and they are public so that tests and tools can see exactly
what a Fray request becomes on the wire.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from fray_ray.fray._setup_scripts import pip_setup_script
from fray_ray.fray.hosts import HostInfo
from fray_ray.fray.job_listing import JobSummary
from fray_ray.fray.types import (
    ANY_REGION,
    CpuConfig,
    DeviceConfig,
    Entrypoint,
    EnvironmentConfig,
    GpuConfig,
    JobStatus,
    ResourceConfig,
    TpuConfig,
    parse_bytes,
)
from fray_ray.iris.entrypoint import callable_entrypoint, command_entrypoint
from fray_ray.iris.tpu import get_tpu_topology
from fray_ray.iris.types import (
    Constraint,
    ConstraintOp,
    GpuDevice,
    JobInfoSnapshot,
    JobState,
    PriorityBand,
    ResourceSpec,
    TpuDevice,
    WorkerInfo,
)
from fray_ray.iris.types import Entrypoint as IrisEntrypoint

__all__ = [
    "GPU_GANG_LEVEL",
    "IRIS_TO_FRAY_STATUS",
    "IrisEnvironment",
    "convert_constraints",
    "convert_entrypoint",
    "convert_environment",
    "convert_priority",
    "convert_resources",
    "fray_status",
    "host_info",
    "resolve_coscheduling",
]

# Iris's well-known worker attribute keys that Fray requests constrain.
ATTR_PREEMPTIBLE = "preemptible"
ATTR_REGION = "region"
ATTR_ZONE = "zone"
ATTR_CLUSTER = "cluster"
ATTR_DEVICE_VARIANT = "device-variant"
#: Hosts of one TPU slice share this attribute; a multi-VM slice is gang-scheduled on it.
ATTR_TPU_NAME = "tpu-name"

#: The worker attribute that groups GPU hosts able to run one gang (hosts on one fabric).
#: The embedded cluster's simulated GPU hosts carry `pool` (`fray_ray.cluster.gpu_host`), as
#: Iris's GPU scale groups did before per-variant levels; every variant maps to it here.
GPU_GANG_LEVEL = "pool"
# Variants whose gangs need a finer topology level than GPU_GANG_LEVEL. Empty: no cluster we
# target yet labels hosts with `leafgroup` or NVLink domains by default.
_GPU_GANG_LEVEL_BY_VARIANT: Mapping[str, str] = MappingProxyType({})


# ---------------------------------------------------------------------------------------------
# Resources and constraints


def convert_resources(resources: ResourceConfig) -> ResourceSpec:
    """What one task of the job asks its worker for: CPU in millicores, RAM and disk in bytes,
    and the accelerator (None for CPU-only work; a TPU counts the chips of one VM)."""
    return ResourceSpec(
        cpu_millicores=int(round(resources.cpu * 1000)),
        memory_bytes=parse_bytes(resources.ram),
        disk_bytes=parse_bytes(resources.disk),
        device=_convert_device(resources.device),
    )


def _convert_device(device: DeviceConfig) -> GpuDevice | TpuDevice | None:
    if isinstance(device, GpuConfig):
        return GpuDevice(variant=device.variant, count=device.count)
    if isinstance(device, TpuConfig):
        info = get_tpu_topology(device.variant)
        return TpuDevice(variant=device.variant, topology=device.topology or info.topology, count=info.chips_per_vm)
    return None


def convert_constraints(resources: ResourceConfig) -> list[Constraint]:
    """The placement constraints a `ResourceConfig` implies (all REQUIRED, AND-ed).

    - `preemptible=False`: `preemptible == "false"` (True allows any worker: no constraint);
    - `regions`: one region gives EQ, several give IN, `[ANY_REGION]` gives `region EXISTS`
      (None adds nothing); mixing ANY_REGION with named regions raises ValueError;
    - `zone`: EQ; `target_cluster`: `cluster` EQ;
    - `device_alternatives`: `device-variant IN [variant, *alternatives]`, which also replaces
      the controller's implicit `device-variant == variant`;
    - `required_attributes`: `<attribute> EXISTS` for each;
    - `required_attribute_values`: `<attribute> EQ <value>` for each pair.
    """
    constraints: list[Constraint] = []
    if not resources.preemptible:
        constraints.append(Constraint(ATTR_PREEMPTIBLE, ConstraintOp.EQ, "false"))
    if resources.regions is not None:
        regions = list(resources.regions)
        if ANY_REGION in regions:
            if len(regions) > 1:
                raise ValueError(f"regions mixes ANY_REGION ({ANY_REGION!r}) with named regions {regions!r}")
            constraints.append(Constraint(ATTR_REGION, ConstraintOp.EXISTS))
        elif len(regions) == 1:
            constraints.append(Constraint(ATTR_REGION, ConstraintOp.EQ, regions[0]))
        elif regions:
            constraints.append(Constraint(ATTR_REGION, ConstraintOp.IN, values=tuple(regions)))
    if resources.zone is not None:
        constraints.append(Constraint(ATTR_ZONE, ConstraintOp.EQ, resources.zone))
    if resources.target_cluster is not None:
        constraints.append(Constraint(ATTR_CLUSTER, ConstraintOp.EQ, resources.target_cluster))
    if resources.device_alternatives:
        variants = _device_variants(resources)
        constraints.append(Constraint(ATTR_DEVICE_VARIANT, ConstraintOp.IN, values=tuple(variants)))
    for attribute in resources.required_attributes:
        constraints.append(Constraint(attribute, ConstraintOp.EXISTS))
    for attribute, value in resources.required_attribute_values:
        constraints.append(Constraint(attribute, ConstraintOp.EQ, value))
    return constraints


def _device_variants(resources: ResourceConfig) -> list[str]:
    """The requested device variant followed by its alternatives, without repeats."""
    variants = [resources.device.variant, *(resources.device_alternatives or ())]
    return list(dict.fromkeys(variants))


def resolve_coscheduling(resources: ResourceConfig, replicas: int) -> str | None:
    """The worker attribute a job's replicas must share (Iris `group_by`), or None.

    One replica needs no gang. A TPU slice spanning several VMs is gang-scheduled on
    `tpu-name`, so all its hosts start together on one slice. Several GPU replicas are
    gang-scheduled on their topology level (`GPU_GANG_LEVEL`); every alternative variant must
    use the same level, else ValueError. CPU replicas are placed independently.
    """
    if replicas <= 1:
        return None
    device = resources.device
    if isinstance(device, TpuConfig):
        return ATTR_TPU_NAME if get_tpu_topology(device.variant).vm_count > 1 else None
    if isinstance(device, GpuConfig):
        levels = {variant: _gpu_gang_level(variant) for variant in _device_variants(resources)}
        if len(set(levels.values())) > 1:
            raise ValueError(
                "GPU alternatives must share one topology level to be gang-scheduled together, got "
                + ", ".join(f"{variant} -> {level}" for variant, level in levels.items())
            )
        return levels[device.variant]
    return None


def _gpu_gang_level(variant: str) -> str:
    return _GPU_GANG_LEVEL_BY_VARIANT.get(variant.upper(), GPU_GANG_LEVEL)


def host_info(worker: WorkerInfo) -> HostInfo:
    """A worker as a Fray host: its address without the port (what its tasks advertise), cores,
    memory, disk, accelerators and attributes; an unhealthy worker is not alive."""
    device = worker.device
    return HostInfo(
        host_id=worker.worker_id,
        address=_host_part(worker.address),
        hostname=worker.hostname,
        alive=worker.healthy,
        cpu=float(worker.cpu_count),
        memory_bytes=worker.memory_bytes,
        disk_bytes=worker.disk_bytes,
        gpus=device.count if isinstance(device, GpuDevice) else 0,
        gpu_variant=device.variant if isinstance(device, GpuDevice) else "",
        tpu_chips=device.count if isinstance(device, TpuDevice) else 0,
        tpu_variant=device.variant if isinstance(device, TpuDevice) else "",
        attributes=worker.attributes,
    )


def _host_part(address: str) -> str:
    """`10.0.0.2:8080` -> `10.0.0.2`, `[::1]:80` -> `::1`; a bare host stays as it is."""
    if address.startswith("["):
        return address[1:].split("]", 1)[0]
    if address.count(":") == 1:
        return address.split(":", 1)[0]
    return address


# ---------------------------------------------------------------------------------------------
# Entrypoints and environments


def convert_entrypoint(entrypoint: Entrypoint) -> IrisEntrypoint:
    """The Iris command for a Fray entrypoint.

    A callable is pickled with cloudpickle into Iris's callable layout (`_callable.pkl` plus a
    runner script, started through `bash -c`); a binary runs as `[command, *args]`.
    Raises whatever pickling the callable raises.
    """
    if entrypoint.callable_entrypoint is not None:
        call = entrypoint.callable_entrypoint
        return callable_entrypoint(call.callable, call.args, call.kwargs)
    binary = entrypoint.binary_entrypoint
    assert binary is not None  # Entrypoint checks that exactly one is set
    return command_entrypoint(binary.argv)


@dataclass(frozen=True)
class IrisEnvironment:
    """A task environment as Iris takes it: variables, setup scripts and an image override."""

    env_vars: Mapping[str, str] = field(default_factory=dict)
    setup_scripts: tuple[str, ...] = ()
    task_image: str = ""


def convert_environment(
    environment: EnvironmentConfig | None, device: DeviceConfig = CpuConfig(), *, image: str | None = None
) -> IrisEnvironment:
    """The Iris environment of a job: the user's `env_vars` with the device's defaults merged in
    underneath (a user value always wins), setup scripts, and the task image.

    - The workspace itself travels as a bundle (see `FrayIrisClient`); nothing here names a
      path of the submitting machine, which the workers may not share.
    - `setup_scripts` run in order before the command (None means none); `extras` and
      `sync_packages` add a `uv sync` step, `pip_packages` a step that installs them into a
      virtualenv layered on the worker's Python (`pip_setup_script`).
    - `image` (from `ResourceConfig.image`) or `docker_image` becomes Iris's `task_image`.
    """
    env_vars: dict[str, str] = {}
    scripts: list[str] = []
    task_image = image or ""
    if environment is not None:
        env_vars.update(environment.env_vars)
        scripts.extend(environment.setup_scripts or ())
        if environment.extras or environment.sync_packages:
            flags = [f"--extra {shlex.quote(extra)}" for extra in environment.extras]
            flags += [f"--package {shlex.quote(package)}" for package in environment.sync_packages]
            scripts.append(f'cd "$IRIS_WORKDIR" && uv sync --link-mode symlink {" ".join(flags)}')
        if environment.pip_packages:
            scripts.append(pip_setup_script(list(environment.pip_packages)))
        task_image = task_image or environment.docker_image or ""
    for name, value in device.default_env_vars().items():
        env_vars.setdefault(name, value)
    return IrisEnvironment(env_vars=env_vars, setup_scripts=tuple(scripts), task_image=task_image)


# ---------------------------------------------------------------------------------------------
# Priorities and states

_PRIORITY_BANDS = {band.value: band for band in PriorityBand}


def convert_priority(priority: int) -> PriorityBand:
    """Fray's integer priority is Iris's priority band: 0 default (interactive), 1 production,
    2 interactive, 3 batch. ValueError for anything else."""
    try:
        return _PRIORITY_BANDS[priority]
    except KeyError:
        raise ValueError(
            f"priority must be an Iris priority band: 0 (default), 1 (production), 2 (interactive) "
            f"or 3 (batch); got {priority!r}"
        ) from None


#: How an Iris job state reads as a Fray status; any state not listed reads as PENDING.
IRIS_TO_FRAY_STATUS: Mapping[JobState, JobStatus] = MappingProxyType(
    {
        JobState.PENDING: JobStatus.PENDING,
        JobState.BUILDING: JobStatus.RUNNING,
        JobState.RUNNING: JobStatus.RUNNING,
        JobState.SUCCEEDED: JobStatus.SUCCEEDED,
        JobState.FAILED: JobStatus.FAILED,
        JobState.KILLED: JobStatus.STOPPED,
        JobState.WORKER_FAILED: JobStatus.FAILED,
        JobState.UNSCHEDULABLE: JobStatus.FAILED,
    }
)


def fray_status(state: JobState) -> JobStatus:
    """The Fray status of an Iris job state (`IRIS_TO_FRAY_STATUS`, else PENDING)."""
    return IRIS_TO_FRAY_STATUS.get(state, JobStatus.PENDING)


def job_summary(job: JobInfoSnapshot) -> JobSummary:
    """A controller's job listing entry as a Fray `JobSummary`."""

    def seconds(ms: int) -> float | None:
        return ms / 1000.0 if ms else None

    return JobSummary(
        job_id=job.job_id,
        status=fray_status(job.state),
        parent_job=job.parent_job_id or None,
        error=job.error or job.pending_reason,
        submitted_at=seconds(job.submitted_at_ms),
        started_at=seconds(job.started_at_ms),
        finished_at=seconds(job.finished_at_ms),
    )


def retry_budget(value: int | None, *, unlimited: int) -> int:
    """A Fray retry count as an Iris budget: None is 0, -1 is `unlimited`."""
    if value is None:
        return 0
    return unlimited if value < 0 else value
