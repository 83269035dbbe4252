"""The Fray API layer: a `Client` protocol for jobs and actors, its value types, and backends.

`LocalClient` runs everything in this process; `FrayIrisClient` (in `fray_ray.fray.iris_backend`)
runs on an Iris cluster. `current_client()` picks one. This package may import `fray_ray.iris`,
never the Ray layer above it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from fray_ray.fray._iris_registry import set_task_client_factory

if TYPE_CHECKING:
    from fray_ray.fray.actor import (
        ActorContext,
        ActorFuture,
        ActorGroup,
        ActorHandle,
        ActorMethod,
        ActorUnavailableError,
        HostedActor,
        current_actor,
    )
    from fray_ray.fray.client import Client, FrayError, JobAlreadyExists, JobFailed, JobHandle, wait_all
    from fray_ray.fray.current_client import current_client, host_actor, set_current_client
    from fray_ray.fray.hosts import HostInfo, this_machine
    from fray_ray.fray.iris_backend import (
        ControllerUnavailableError,
        CredentialsRejected,
        FrayIrisClient,
        IrisActorGroup,
        IrisActorHandle,
        IrisBackendError,
        IrisJobHandle,
        JobRejected,
        JobUnschedulable,
    )
    from fray_ray.fray.job_listing import JobSummary
    from fray_ray.fray.local_backend import LocalClient
    from fray_ray.fray.types import (
        ANY_REGION,
        DEFAULT_TPU_HOST_FRACTION,
        TPU_HBM_BYTES_PER_CHIP,
        TPU_HOST_RESOURCES,
        TPU_TOPOLOGIES,
        ActorConfig,
        BinaryEntrypoint,
        CallableEntrypoint,
        CapturedWorkspace,
        CpuConfig,
        DeviceConfig,
        DeviceKind,
        Entrypoint,
        EnvironmentConfig,
        GpuConfig,
        GpuType,
        JobRequest,
        JobStatus,
        ResourceConfig,
        TpuConfig,
        TpuFamily,
        TpuHostResources,
        TpuTopologyInfo,
        TpuType,
        create_environment,
        format_bytes,
        get_tpu_topology,
        parse_bytes,
        tpu_family,
        tpu_hbm_bytes_per_chip,
        tpu_hbm_capacity_bytes,
    )
    from fray_ray.iris.job_info import JobInfo

    #: Fray's own name for `Entrypoint`, for code ported from Fray.
    FrayEntrypoint = Entrypoint

# Each public name is imported from its module on first use (PEP 562), so a process that needs
# one module of this package (a worker reading its job info, say) does not load them all; the
# Iris backend in particular pulls in the RPC stack, which local use never needs.
_MODULE_OF = {
    **dict.fromkeys(
        ("ActorContext", "ActorFuture", "ActorGroup", "ActorHandle", "ActorMethod", "ActorUnavailableError",
         "HostedActor", "current_actor"), "actor"),
    **dict.fromkeys(("Client", "FrayError", "JobAlreadyExists", "JobFailed", "JobHandle", "wait_all"), "client"),
    **dict.fromkeys(("current_client", "host_actor", "set_current_client"), "current_client"),
    **dict.fromkeys(("HostInfo", "this_machine"), "hosts"),
    **dict.fromkeys(
        ("ControllerUnavailableError", "CredentialsRejected", "FrayIrisClient", "IrisActorGroup", "IrisActorHandle",
         "IrisBackendError", "IrisJobHandle", "JobRejected", "JobUnschedulable"), "iris_backend"),
    "JobSummary": "job_listing",
    "LocalClient": "local_backend",
    **dict.fromkeys(
        ("ANY_REGION", "DEFAULT_TPU_HOST_FRACTION", "TPU_HBM_BYTES_PER_CHIP", "TPU_HOST_RESOURCES", "TPU_TOPOLOGIES",
         "ActorConfig", "BinaryEntrypoint", "CallableEntrypoint", "CapturedWorkspace", "CpuConfig", "DeviceConfig",
         "DeviceKind", "Entrypoint", "EnvironmentConfig", "GpuConfig", "GpuType", "JobRequest", "JobStatus", "ResourceConfig",
         "TpuConfig", "TpuFamily", "TpuHostResources", "TpuTopologyInfo", "TpuType", "create_environment",
         "format_bytes", "get_tpu_topology", "parse_bytes", "tpu_family", "tpu_hbm_bytes_per_chip",
         "tpu_hbm_capacity_bytes"), "types"),
}
#: Fray's own names for ours, for code ported from Fray.
_ALIASES = {"FrayEntrypoint": "Entrypoint"}


def _task_client(info: JobInfo) -> FrayIrisClient:
    """The current Iris task's own client, for handles that travelled by pickle."""
    from fray_ray.fray import iris_backend  # on first use, as the names above

    return iris_backend.FrayIrisClient.from_job_info(info)


# The package wires its backends together: the registry the Iris handles resolve through must
# build a task's client without importing the backend that imports those handles.
set_task_client_factory(_task_client)


def __getattr__(name: str) -> object:
    target = _ALIASES.get(name, name)
    module = _MODULE_OF.get(target)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = getattr(importlib.import_module(f"{__name__}.{module}"), target)
    globals()[name] = found  # the next lookup is a plain attribute
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "JobSummary",
    "ANY_REGION",
    "DEFAULT_TPU_HOST_FRACTION",
    "TPU_HBM_BYTES_PER_CHIP",
    "TPU_HOST_RESOURCES",
    "TPU_TOPOLOGIES",
    "ActorConfig",
    "ActorContext",
    "ActorFuture",
    "ActorGroup",
    "ActorHandle",
    "ActorMethod",
    "ActorUnavailableError",
    "BinaryEntrypoint",
    "CallableEntrypoint",
    "CapturedWorkspace",
    "Client",
    "ControllerUnavailableError",
    "CpuConfig",
    "CredentialsRejected",
    "DeviceConfig",
    "DeviceKind",
    "Entrypoint",
    "EnvironmentConfig",
    "FrayEntrypoint",
    "FrayError",
    "FrayIrisClient",
    "GpuConfig",
    "GpuType",
    "HostInfo",
    "HostedActor",
    "IrisActorGroup",
    "IrisActorHandle",
    "IrisBackendError",
    "IrisJobHandle",
    "JobAlreadyExists",
    "JobFailed",
    "JobHandle",
    "JobRejected",
    "JobRequest",
    "JobStatus",
    "JobUnschedulable",
    "LocalClient",
    "ResourceConfig",
    "TpuConfig",
    "TpuFamily",
    "TpuHostResources",
    "TpuTopologyInfo",
    "TpuType",
    "create_environment",
    "current_actor",
    "current_client",
    "format_bytes",
    "get_tpu_topology",
    "host_actor",
    "parse_bytes",
    "set_current_client",
    "this_machine",
    "tpu_family",
    "tpu_hbm_bytes_per_chip",
    "tpu_hbm_capacity_bytes",
    "wait_all",
]
