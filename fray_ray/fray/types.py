"""Fray's value types: what a job or actor needs (resources, devices, environment) and how it starts.

Everything here is a frozen dataclass checked when it is built, so a bad request fails at the
call site rather than on a worker. Copies are made with `dataclasses.replace` or the named
helpers (`ResourceConfig.scale`, `ResourceConfig.with_tpu`, ...).

The TPU variant table is not repeated here: `TpuTopologyInfo`, `TPU_TOPOLOGIES`,
`get_tpu_topology` and `tpu_family` come from `fray_ray.iris.tpu` and are re-exported, as are
the device configs (`CpuConfig`, `GpuConfig`, `TpuConfig`: `_device_configs.py`), TPU host
facts (`_tpu_hosts.py`) and byte sizes (`_sizes.py`).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from fray_ray.fray._device_configs import _CPU_NOMINAL_FLOPS, CpuConfig, DeviceConfig, GpuConfig, TpuConfig
from fray_ray.fray._sizes import format_bytes, parse_bytes
from fray_ray.fray._tpu_hosts import (
    DEFAULT_TPU_HOST_FRACTION,
    TPU_HBM_BYTES_PER_CHIP,
    TPU_HOST_RESOURCES,
    TpuHostResources,
    tpu_hbm_bytes_per_chip,
    tpu_hbm_capacity_bytes,
)
from fray_ray.iris.tpu import TPU_TOPOLOGIES, TpuTopologyInfo, get_tpu_topology, tpu_family

__all__ = [
    "ANY_REGION",
    "DEFAULT_TPU_HOST_FRACTION",
    "TPU_HBM_BYTES_PER_CHIP",
    "TPU_HOST_RESOURCES",
    "TPU_TOPOLOGIES",
    "ActorConfig",
    "BinaryEntrypoint",
    "CallableEntrypoint",
    "CapturedWorkspace",
    "CpuConfig",
    "DeviceConfig",
    "DeviceKind",
    "Entrypoint",
    "EnvironmentConfig",
    "GpuConfig",
    "GpuType",
    "JobRequest",
    "JobStatus",
    "ResourceConfig",
    "TpuConfig",
    "TpuFamily",
    "TpuHostResources",
    "TpuTopologyInfo",
    "TpuType",
    "create_environment",
    "format_bytes",
    "get_tpu_topology",
    "parse_bytes",
    "tpu_family",
    "tpu_hbm_bytes_per_chip",
    "tpu_hbm_capacity_bytes",
]

# ---------------------------------------------------------------------------------------------
# Names and tables

#: A TPU variant name such as `"v5p-16"`. Kept as `str`, not a `Literal`, so that
#: `fray_ray.iris.tpu.TPU_TOPOLOGIES` stays the one list of valid names.
TpuType = str
TpuFamily = Literal["v4", "v5e", "v5p", "v6e"]
#: Known GPU names. Not enforced: any string is passed to the scheduler as it is.
GpuType = Literal["A10", "A100-40G", "A100-80G", "A10G", "B100", "H100", "H200", "L4", "T4", "V100", "auto"]
DeviceKind = Literal["cpu", "gpu", "tpu"]

#: `ResourceConfig.regions == [ANY_REGION]` means "run in any region, do not inherit the parent's".
ANY_REGION = "*"


# ---------------------------------------------------------------------------------------------
# Resources


def _check_str_sequence(value: object, what: str) -> None:
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings, got {value!r}")


def _check_attribute_values(value: object) -> None:
    pairs = value if isinstance(value, Sequence) and not isinstance(value, str) else None
    if pairs is None or not all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and p[0]
        and isinstance(p[1], str | int) and not isinstance(p[1], bool)
        for p in pairs
    ):
        raise ValueError(
            f"ResourceConfig.required_attribute_values must be a list of (attribute, str or int) pairs, got {value!r}"
        )


@dataclass(frozen=True)
class ResourceConfig:
    """What one task (one replica of a job) needs, plus how many replicas the job has.

    `regions` has three states: None inherits the parent job's region, a list pins the job
    there, and `[ANY_REGION]` lets it run anywhere.
    """

    cpu: float = 1
    ram: str = "4g"
    disk: str = "16g"
    device: DeviceConfig = CpuConfig()
    preemptible: bool = True
    regions: Sequence[str] | None = None
    zone: str | None = None
    target_cluster: str | None = None
    replicas: int = 1
    device_alternatives: Sequence[str] | None = None
    image: str | None = None
    #: host attributes the task needs (it runs only on hosts that have each of them)
    required_attributes: Sequence[str] = ()
    #: (attribute, value) pairs a host must match, e.g. `("tpu-name", "slice-a")`
    required_attribute_values: Sequence[tuple[str, str | int]] = ()

    def __post_init__(self) -> None:
        _check_str_sequence(self.required_attributes, "ResourceConfig.required_attributes")
        _check_attribute_values(self.required_attribute_values)
        if isinstance(self.cpu, bool) or not isinstance(self.cpu, int | float) or self.cpu < 0:
            raise ValueError(f"ResourceConfig.cpu must be a non-negative number, got {self.cpu!r}")
        for name in ("ram", "disk"):
            value = getattr(self, name)
            try:
                if not isinstance(value, str):
                    raise ValueError(f"not a string: {value!r}")
                parse_bytes(value)
            except ValueError as exc:
                raise ValueError(f"ResourceConfig.{name} must be a size such as '4g' or '512m': {exc}") from None
        if not isinstance(self.device, CpuConfig | GpuConfig | TpuConfig):
            raise ValueError(f"ResourceConfig.device must be a CpuConfig, GpuConfig or TpuConfig, got {self.device!r}")
        if not isinstance(self.replicas, int) or isinstance(self.replicas, bool) or self.replicas < 1:
            raise ValueError(f"ResourceConfig.replicas must be a positive integer, got {self.replicas!r}")
        if self.regions is not None:
            _check_str_sequence(self.regions, "ResourceConfig.regions")
            if ANY_REGION in self.regions and len(self.regions) > 1:
                raise ValueError(
                    f"ResourceConfig.regions mixes ANY_REGION ({ANY_REGION!r}) with named regions "
                    f"{list(self.regions)!r}; "
                    "use [ANY_REGION] alone to run anywhere, or list the regions"
                )
        if self.device_alternatives is not None:
            _check_str_sequence(self.device_alternatives, "ResourceConfig.device_alternatives")

    # -- sizes --------------------------------------------------------------------------------

    def chip_count(self) -> int:
        """Accelerator chips across all replicas."""
        return self.device.chip_count() * self.replicas

    def device_flops(self, dtype: str = "bf16") -> float:
        """Peak FLOP/s of one device (chip or GPU); NotImplementedError for CPU."""
        return self.device.device_flops(dtype)

    def total_flops(self, dtype: str = "bf16") -> float:
        """Peak FLOP/s across all replicas; a nominal 100 GFLOP/s for CPU-only requests."""
        if isinstance(self.device, CpuConfig):
            return _CPU_NOMINAL_FLOPS
        return self.device.total_flops(dtype) * self.replicas

    def scale(
        self,
        factor: float | None = None,
        /,
        *,
        cpu: float | None = None,
        ram: float | None = None,
        disk: float | None = None,
    ) -> ResourceConfig:
        """A copy with cpu, ram and disk multiplied: all by `factor`, or each by its own keyword.

        Sizes keep compact suffixes (`"4g"` scaled by 2 is `"8g"`). Raises ValueError when
        `factor` is combined with keyword factors, or for a factor that is not positive.
        """
        if factor is not None and (cpu is not None or ram is not None or disk is not None):
            raise ValueError("Pass either a single factor or per-field factors (cpu=, ram=, disk=), not both")
        if factor is not None:
            cpu = ram = disk = factor
        for name, value in (("factor", factor), ("cpu", cpu), ("ram", ram), ("disk", disk)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
                raise ValueError(f"scale {name} must be a positive number, got {value!r}")
        changes: dict[str, Any] = {}
        if cpu is not None:
            changes["cpu"] = self.cpu * cpu
        if ram is not None:
            changes["ram"] = format_bytes(round(parse_bytes(self.ram) * ram))
        if disk is not None:
            changes["disk"] = format_bytes(round(parse_bytes(self.disk) * disk))
        return dataclasses.replace(self, **changes)

    # -- named constructors -------------------------------------------------------------------

    @staticmethod
    def with_tpu(tpu_type: str | Sequence[str], *, slice_count: int = 1, **kwargs: Any) -> ResourceConfig:
        """Resources for `slice_count` slices of a TPU variant, one replica per VM.

        `tpu_type` may be a list: the first variant is the one requested and the rest become
        `device_alternatives` the scheduler may use instead; all must have the same VM count
        and chips per VM. `replicas = slice_count * vm_count`. By default each replica asks
        for half a host's CPUs and RAM and 50g of disk; `kwargs` override any field.
        Raises ValueError for an empty list, unknown variants (naming the valid ones), or
        variants of different shapes.
        """
        variants = [tpu_type] if isinstance(tpu_type, str) else list(tpu_type)
        if not variants:
            raise ValueError("with_tpu needs a TPU type or a non-empty list of TPU types")
        if not isinstance(slice_count, int) or isinstance(slice_count, bool) or slice_count < 1:
            raise ValueError(f"slice_count must be a positive integer, got {slice_count!r}")
        shapes = [get_tpu_topology(v) for v in variants]
        first = shapes[0]
        mismatched = [s.name for s in shapes if (s.vm_count, s.chips_per_vm) != (first.vm_count, first.chips_per_vm)]
        if mismatched:
            raise ValueError(
                f"TPU alternatives must share vm_count and chips_per_vm with {first.name} "
                f"({first.vm_count} VMs x {first.chips_per_vm} chips); these differ: {mismatched}"
            )
        host = TPU_HOST_RESOURCES[tpu_family(first.name)]
        fields: dict[str, Any] = {
            "cpu": max(1, int(host.cpu * DEFAULT_TPU_HOST_FRACTION)),
            "ram": f"{int(host.ram_gb * DEFAULT_TPU_HOST_FRACTION)}g",
            "disk": "50g",
            "device": TpuConfig(variant=first.name),
            "replicas": slice_count * first.vm_count,
            "device_alternatives": variants[1:] or None,
        }
        fields.update(kwargs)
        return ResourceConfig(**fields)

    @staticmethod
    def with_gpu(gpu_type: str = "auto", count: int = 1, **kwargs: Any) -> ResourceConfig:
        """Resources with `count` GPUs of `gpu_type` per replica; `kwargs` set other fields."""
        return ResourceConfig(device=GpuConfig(variant=gpu_type, count=count), **kwargs)

    @staticmethod
    def with_cpu(**kwargs: Any) -> ResourceConfig:
        """CPU-only resources; `kwargs` set fields (`cpu=`, `ram=`, ...)."""
        return ResourceConfig(device=CpuConfig(), **kwargs)


# ---------------------------------------------------------------------------------------------
# Environment


@dataclass(frozen=True)
class CapturedWorkspace:
    """What `Client.prepare_environment` captured of a workspace (and its `py_modules`): the
    files and their bytes before compression."""

    files: int
    size_bytes: int


@dataclass(frozen=True)
class EnvironmentConfig:
    """Where a job's code comes from (a workspace directory or a Docker image) and its setup.

    Exactly one of `workspace` and `docker_image` must be set. `setup_scripts=None` means the
    backend's default setup; `[]` means none.

    fray_ray adds three fields to Fray's: `workspace_excludes`, .gitignore-style patterns
    (relative to the workspace) left out of the shipped workspace; `workspace_only`, the names of
    the workspace's top-level files and directories to ship, when not all of it (None: all); and
    `py_modules`, further local directories or files shipped with it and importable in the
    job's tasks (Ray's `py_modules`).
    """

    workspace: str | None = None
    docker_image: str | None = None
    pip_packages: Sequence[str] = field(default_factory=list)
    env_vars: Mapping[str, str] = field(default_factory=dict)
    extras: Sequence[str] = field(default_factory=list)
    setup_scripts: Sequence[str] | None = None
    sync_packages: Sequence[str] = field(default_factory=list)
    workspace_excludes: Sequence[str] = field(default_factory=tuple)
    py_modules: Sequence[str] = field(default_factory=tuple)
    workspace_only: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if (self.workspace is None) == (self.docker_image is None):
            raise ValueError(
                "EnvironmentConfig needs exactly one of workspace= or docker_image= "
                f"(got workspace={self.workspace!r}, docker_image={self.docker_image!r})"
            )
        for name in ("pip_packages", "extras", "sync_packages", "workspace_excludes", "py_modules"):
            _check_str_sequence(getattr(self, name), f"EnvironmentConfig.{name}")
        if self.workspace_only is not None:
            _check_str_sequence(self.workspace_only, "EnvironmentConfig.workspace_only")
        if self.setup_scripts is not None:
            _check_str_sequence(self.setup_scripts, "EnvironmentConfig.setup_scripts")
        if not isinstance(self.env_vars, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.env_vars.items()
        ):
            raise ValueError(f"EnvironmentConfig.env_vars must map strings to strings, got {self.env_vars!r}")


# Set in every environment unless the caller overrides them.
_DEFAULT_ENV_VARS: Mapping[str, str] = MappingProxyType(
    {"HF_DATASETS_TRUST_REMOTE_CODE": "1", "TOKENIZERS_PARALLELISM": "false"}
)
# Copied from the submitting process when present.
_INHERITED_ENV_VARS = ("HF_TOKEN", "WANDB_API_KEY", "MARIN_CI_DISABLE_RUNTIME_ENVS")


def create_environment(
    workspace: str | None = None,
    docker_image: str | None = None,
    pip_packages: Sequence[str] | None = None,
    env_vars: Mapping[str, str | None] | None = None,
    extras: Sequence[str] | None = None,
    setup_scripts: Sequence[str] | None = None,
    sync_packages: Sequence[str] | None = None,
) -> EnvironmentConfig:
    """An `EnvironmentConfig` with the usual defaults filled in.

    The workspace defaults to the current directory unless a Docker image is given. The
    environment starts with `HF_DATASETS_TRUST_REMOTE_CODE=1` and `TOKENIZERS_PARALLELISM=false`,
    copies `HF_TOKEN`, `WANDB_API_KEY` and `MARIN_CI_DISABLE_RUNTIME_ENVS` from this process, then
    applies `env_vars`; a None value removes a variable. Raises ValueError as `EnvironmentConfig` does.
    """
    if workspace is None and docker_image is None:
        workspace = os.getcwd()
    merged: dict[str, str | None] = dict(_DEFAULT_ENV_VARS)
    merged.update({name: os.environ.get(name) for name in _INHERITED_ENV_VARS})
    merged.update(env_vars or {})
    return EnvironmentConfig(
        workspace=workspace,
        docker_image=docker_image,
        pip_packages=list(pip_packages or []),
        env_vars={k: v for k, v in merged.items() if v is not None},
        extras=list(extras or []),
        setup_scripts=None if setup_scripts is None else list(setup_scripts),
        sync_packages=list(sync_packages or []),
    )


# ---------------------------------------------------------------------------------------------
# Entrypoints


@dataclass(frozen=True)
class BinaryEntrypoint:
    """Run a program: `command` with `args` (no shell)."""

    command: str
    args: Sequence[str] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command:
            raise ValueError(f"BinaryEntrypoint.command must be a non-empty string, got {self.command!r}")
        _check_str_sequence(self.args, "BinaryEntrypoint.args")
        object.__setattr__(self, "args", tuple(self.args))

    @property
    def argv(self) -> tuple[str, ...]:
        return (self.command, *self.args)


@dataclass(frozen=True)
class CallableEntrypoint:
    """Call a Python function: `callable(*args, **kwargs)`."""

    callable: Callable[..., Any]
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not callable(self.callable):
            raise ValueError(f"CallableEntrypoint.callable must be callable, got {self.callable!r}")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "kwargs", dict(self.kwargs))


@dataclass(frozen=True)
class Entrypoint:
    """How a job starts: exactly one of a callable or a binary entrypoint."""

    callable_entrypoint: CallableEntrypoint | None = None
    binary_entrypoint: BinaryEntrypoint | None = None

    def __post_init__(self) -> None:
        if (self.callable_entrypoint is None) == (self.binary_entrypoint is None):
            raise ValueError("Entrypoint needs exactly one of callable_entrypoint= or binary_entrypoint=")

    @staticmethod
    def from_callable(
        c: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
    ) -> Entrypoint:
        """An entrypoint that calls `c(*args, **kwargs)`."""
        return Entrypoint(callable_entrypoint=CallableEntrypoint(c, tuple(args), dict(kwargs or {})))

    @staticmethod
    def from_binary(command: str, args: Sequence[str] = ()) -> Entrypoint:
        """An entrypoint that runs `command` with `args`."""
        return Entrypoint(binary_entrypoint=BinaryEntrypoint(command, tuple(args)))


# ---------------------------------------------------------------------------------------------
# Jobs and actors


def _check_count(value: object, what: str, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class JobRequest:
    """A job to submit: a name unique among running jobs, an entrypoint, and its needs.

    `replicas` defaults to `resources.replicas`. Retries are split: `max_retries_failure` for
    the job's own failures, `max_retries_preemption` for lost workers; `max_task_failures` is
    how many tasks may fail before the job does. `timeout` (seconds) stops the job when it runs
    longer. Raises ValueError for a name with whitespace and for out-of-range numbers.
    """

    name: str
    entrypoint: Entrypoint
    resources: ResourceConfig = ResourceConfig()
    environment: EnvironmentConfig | None = None
    replicas: int | None = None
    processes_per_task: int = 1
    max_retries_failure: int = 0
    max_retries_preemption: int = 100
    max_task_failures: int = 0
    priority: int = 0
    timeout: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"JobRequest.name must be a non-empty string, got {self.name!r}")
        if any(ch.isspace() for ch in self.name):
            raise ValueError(f"JobRequest.name must not contain spaces, got {self.name!r}; use '-' or '_' instead")
        if not isinstance(self.entrypoint, Entrypoint):
            raise ValueError(f"JobRequest.entrypoint must be an Entrypoint, got {self.entrypoint!r}")
        if not isinstance(self.resources, ResourceConfig):
            raise ValueError(f"JobRequest.resources must be a ResourceConfig, got {self.resources!r}")
        if self.environment is not None and not isinstance(self.environment, EnvironmentConfig):
            raise ValueError(f"JobRequest.environment must be an EnvironmentConfig, got {self.environment!r}")
        if self.replicas is None:
            object.__setattr__(self, "replicas", self.resources.replicas)
        _check_count(self.replicas, "JobRequest.replicas", 1)
        _check_count(self.processes_per_task, "JobRequest.processes_per_task", 1)
        for name in ("max_retries_failure", "max_retries_preemption", "max_task_failures"):
            _check_count(getattr(self, name), f"JobRequest.{name}", 0)
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise ValueError(f"JobRequest.priority must be an integer, got {self.priority!r}")
        if self.timeout is not None and (
            isinstance(self.timeout, bool)
            or not isinstance(self.timeout, int | float)
            or not math.isfinite(self.timeout)
            or self.timeout <= 0
        ):
            raise ValueError(f"JobRequest.timeout must be a positive number of seconds or None, got {self.timeout!r}")


class JobStatus(enum.StrEnum):
    """Where a job is in its life; SUCCEEDED, FAILED and STOPPED are final."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    def finished(self) -> bool:
        """True for SUCCEEDED, FAILED and STOPPED; also callable as `JobStatus.finished(status)`."""
        return self in _FINISHED


_FINISHED = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED})


@dataclass(frozen=True)
class ActorConfig:
    """How actors of a group behave.

    `max_concurrency` calls may run at once on one actor (1: one at a time, in submission
    order). `max_restarts` is how often a failed actor is rebuilt (None: the backend's default,
    no restarts locally; -1: without limit). `max_task_retries` is how often a call is retried
    (None: backend default). `priority` is the scheduling priority of the actors' job.
    """

    max_concurrency: int = 1
    max_restarts: int | None = None
    max_task_retries: int | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        _check_count(self.max_concurrency, "ActorConfig.max_concurrency", 1)
        if self.max_restarts is not None:
            _check_count(self.max_restarts, "ActorConfig.max_restarts", -1)
        if self.max_task_retries is not None:
            _check_count(self.max_task_retries, "ActorConfig.max_task_retries", -1)
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise ValueError(f"ActorConfig.priority must be an integer, got {self.priority!r}")
