"""`ray._private.accelerators`: Ray's accelerator managers, which TPU and GPU launchers call.

Ray calls this module private, but training code imports it (levanter's and Marin's TPU helpers
read `TPUAcceleratorManager`; GPU launchers count GPUs with `NvidiaGPUAcceleratorManager`).
Each manager answers from the host the calling task runs on: the devices it has, else the
environment the host gives its tasks (what a TPU VM sets, and what the embedded cluster's
simulated TPU and GPU hosts set). Ray's other managers (AMD, Intel, NPU, HPU, Neuron, ...)
describe hardware that Iris does not schedule; they are not provided.
"""

from __future__ import annotations

from fray_ray._private.accelerators.accelerator import AcceleratorManager
from fray_ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager
from fray_ray._private.accelerators.tpu import TPUAcceleratorManager

__all__ = [
    "AcceleratorManager",
    "NvidiaGPUAcceleratorManager",
    "TPUAcceleratorManager",
    "get_accelerator_manager_for_resource",
    "get_all_accelerator_managers",
    "get_all_accelerator_resource_names",
]

_MANAGERS: dict[str, type[AcceleratorManager]] = {
    manager.get_resource_name(): manager for manager in (NvidiaGPUAcceleratorManager, TPUAcceleratorManager)
}


def get_all_accelerator_managers() -> set[type[AcceleratorManager]]:
    """The managers of the accelerators fray_ray schedules (GPUs and TPUs)."""
    return set(_MANAGERS.values())


def get_all_accelerator_resource_names() -> set[str]:
    """The resource names those accelerators are requested by: `GPU` and `TPU`."""
    return set(_MANAGERS)


def get_accelerator_manager_for_resource(resource_name: str) -> type[AcceleratorManager] | None:
    """The manager of the accelerator requested as `resource_name`; None for other resources."""
    return _MANAGERS.get(resource_name)
