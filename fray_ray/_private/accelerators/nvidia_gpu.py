"""`NvidiaGPUAcceleratorManager`: the GPUs of the current host, as Ray's manager reports them."""

from __future__ import annotations

import glob
import re

from fray_ray._private.accelerators.accelerator import AcceleratorManager

#: The env var a GPU host's scheduler sets: the devices a process may use.
CUDA_VISIBLE_DEVICES_ENV_VAR = "CUDA_VISIBLE_DEVICES"
_DEVICE = re.compile(r"/dev/nvidia\d+$")


class NvidiaGPUAcceleratorManager(AcceleratorManager):
    """NVIDIA GPUs: requested as `GPU`, made visible through `CUDA_VISIBLE_DEVICES`."""

    @staticmethod
    def get_resource_name() -> str:
        return "GPU"

    @staticmethod
    def get_visible_accelerator_ids_env_var() -> str:
        return CUDA_VISIBLE_DEVICES_ENV_VAR

    @staticmethod
    def get_current_node_num_accelerators() -> int:
        """The host's NVIDIA devices (`/dev/nvidia<N>`); on a host without them, the devices
        its tasks are given (`CUDA_VISIBLE_DEVICES`, as the embedded cluster's GPU hosts set it)."""
        devices = [path for path in glob.glob("/dev/nvidia*") if _DEVICE.match(path)]
        if devices:
            return len(devices)
        return len(NvidiaGPUAcceleratorManager.get_current_process_visible_accelerator_ids() or [])

    @staticmethod
    def get_current_node_accelerator_type() -> str | None:
        """None: Ray reads the GPU's model from the NVIDIA driver, which fray_ray does not load.
        The cluster knows each host's GPU type (its node has `accelerator_type:<type>`), and
        `accelerator_type=` asks for it."""
        return None
