"""`TPUAcceleratorManager`: the TPU slice the current host belongs to, as Ray's manager reports it.

A TPU host says what it is through the environment it gives its tasks: `TPU_NAME` (the slice),
`TPU_WORKER_ID` (this host's index in it), `TPU_ACCELERATOR_TYPE` (the pod type, e.g.
`v5p-16`), `TPU_TOPOLOGY` and the chips a process may use (`TPU_VISIBLE_CHIPS`). GKE's TPU
nodes, Iris's TPU workers and the embedded cluster's simulated slices all set them, so the
manager reads them alone (Ray also asks a GCE VM's metadata server, which only exists on
Google Cloud). Chips are counted from the host's devices (`/dev/accel*`) where there are any.
"""

from __future__ import annotations

import glob
import logging
import os
import re

from fray_ray._private.accelerators.accelerator import AcceleratorManager
from fray_ray._private.driver.tpu_nodes import POD_TYPE_LABEL, SLICE_NAME_LABEL, TOPOLOGY_LABEL, WORKER_ID_LABEL
from fray_ray.fray import get_tpu_topology

logger = logging.getLogger(__name__)

TPU_VISIBLE_CHIPS_ENV_VAR = "TPU_VISIBLE_CHIPS"
#: The environment a TPU host gives its tasks (GKE's names, which Iris's TPU workers use too).
TPU_NAME_ENV_VAR = "TPU_NAME"
TPU_WORKER_ID_ENV_VAR = "TPU_WORKER_ID"
TPU_ACCELERATOR_TYPE_ENV_VAR = "TPU_ACCELERATOR_TYPE"
TPU_TOPOLOGY_ENV_VAR = "TPU_TOPOLOGY"
TPU_WORKER_HOSTNAMES_ENV_VAR = "TPU_WORKER_HOSTNAMES"
TPU_CHIPS_PER_HOST_BOUNDS_ENV_VAR = "TPU_CHIPS_PER_HOST_BOUNDS"

#: A pod type: the generation (`v4`, `v5litepod`, or `tpu7x` in Ironwood's spelling), then the
#: number of cores or chips.
_POD_TYPE = re.compile(r"^(v|tpu)\d+[a-zA-Z]*-\d+$")
#: The chip counts one task may ask for on a TPU host.
VALID_CHIP_COUNTS = (1, 2, 4, 8)


def _normalized_pod_type(pod_type: str) -> str | None:
    """`pod_type` with its generation spelled `v<gen>` (`tpu7x-8` is `v7x-8`); None if it is not one."""
    pod_type = pod_type.strip()
    if not _POD_TYPE.match(pod_type):
        return None
    return re.sub(r"^tpu-?v?", "v", pod_type.lower())


class TPUAcceleratorManager(AcceleratorManager):
    """Google TPUs: requested as `TPU` (chips), made visible through `TPU_VISIBLE_CHIPS`."""

    @staticmethod
    def get_resource_name() -> str:
        return "TPU"

    @staticmethod
    def get_visible_accelerator_ids_env_var() -> str:
        return TPU_VISIBLE_CHIPS_ENV_VAR

    @staticmethod
    def get_current_node_num_accelerators() -> int:
        """The host's TPU chips: its `/dev/accel*` devices, else the chips its tasks are given
        (`TPU_VISIBLE_CHIPS`, or the per-host grid `TPU_CHIPS_PER_HOST_BOUNDS`); 0 off TPU hosts."""
        devices = [path for path in glob.glob("/dev/accel*") if not os.path.isdir(path)]
        if devices:
            return len(devices)
        visible = TPUAcceleratorManager.get_current_process_visible_accelerator_ids()
        if visible:
            return len(visible)
        bounds = os.environ.get(TPU_CHIPS_PER_HOST_BOUNDS_ENV_VAR, "")
        try:
            dims = [int(d) for d in bounds.split(",") if d.strip()]
        except ValueError:
            return 0
        count = 1
        for dim in dims:
            count *= dim
        return count if dims else 0

    @staticmethod
    def get_current_node_tpu_pod_type() -> str | None:
        """The slice's pod type, e.g. `v4-16` or `v5litepod-8`; None off TPU hosts."""
        pod_type = os.environ.get(TPU_ACCELERATOR_TYPE_ENV_VAR, "")
        return _normalized_pod_type(pod_type) if pod_type else None

    @staticmethod
    def get_current_node_tpu_name() -> str | None:
        """The name of the slice this host belongs to; None off TPU hosts."""
        return os.environ.get(TPU_NAME_ENV_VAR) or None

    @staticmethod
    def get_current_node_tpu_worker_id() -> int | None:
        """This host's index in its slice (0 is the slice's head); None off TPU hosts."""
        worker_id = os.environ.get(TPU_WORKER_ID_ENV_VAR, "").strip()
        try:
            return int(worker_id) if worker_id else None
        except ValueError:
            logger.debug("%s=%r is not a worker index", TPU_WORKER_ID_ENV_VAR, worker_id)
            return None

    @staticmethod
    def get_num_workers_in_current_tpu_pod() -> int | None:
        """How many hosts the slice has; None off TPU hosts."""
        hostnames = os.environ.get(TPU_WORKER_HOSTNAMES_ENV_VAR, "")
        hosts = [h for h in hostnames.split(",") if h.strip()]
        if hosts:
            return len(hosts)
        pod_type = TPUAcceleratorManager.get_current_node_tpu_pod_type()
        if pod_type is None:
            return None
        try:
            return get_tpu_topology(pod_type).host_count
        except ValueError:
            return None

    @staticmethod
    def get_current_node_tpu_topology() -> str | None:
        """The slice's chip grid, e.g. `2x2x2`; None off TPU hosts."""
        topology = os.environ.get(TPU_TOPOLOGY_ENV_VAR, "").strip().lower()
        return topology or None

    @staticmethod
    def get_current_node_accelerator_type() -> str | None:
        """The TPU generation as Ray's accelerator type, e.g. `TPU-V4`; None off TPU hosts."""
        pod_type = TPUAcceleratorManager.get_current_node_tpu_pod_type()
        return f"TPU-{pod_type.split('-')[0].upper()}" if pod_type else None

    @staticmethod
    def get_current_node_additional_resources() -> dict[str, float] | None:
        """The slice's name as a resource on every host (`{name: 1}`), and `TPU-<pod type>-head`
        on host 0, as Ray gives TPU hosts; None off TPU hosts."""
        name = TPUAcceleratorManager.get_current_node_tpu_name()
        worker_id = TPUAcceleratorManager.get_current_node_tpu_worker_id()
        pod_type = TPUAcceleratorManager.get_current_node_tpu_pod_type()
        if not name or worker_id is None or not pod_type:
            return None
        resources = {name: 1.0}
        if worker_id == 0:
            resources[f"TPU-{pod_type}-head"] = 1.0
        return resources

    @staticmethod
    def get_current_node_accelerator_labels() -> dict[str, str]:
        """Ray's TPU node labels (slice name, worker id, topology, pod type) that this host has."""
        values = {
            SLICE_NAME_LABEL: TPUAcceleratorManager.get_current_node_tpu_name(),
            WORKER_ID_LABEL: TPUAcceleratorManager.get_current_node_tpu_worker_id(),
            TOPOLOGY_LABEL: TPUAcceleratorManager.get_current_node_tpu_topology(),
            POD_TYPE_LABEL: TPUAcceleratorManager.get_current_node_tpu_pod_type(),
        }
        return {label: str(value) for label, value in values.items() if value is not None}

    @staticmethod
    def is_valid_tpu_accelerator_type(tpu_accelerator_type: str) -> bool:
        """Whether `tpu_accelerator_type` is a pod type Ray knows (`v4-16`, `v5litepod-8`, ...)."""
        return _normalized_pod_type(tpu_accelerator_type) is not None

    @staticmethod
    def validate_resource_request_quantity(quantity: float) -> tuple[bool, str | None]:
        """A task asks for 1, 2, 4 or 8 chips, as in Ray."""
        if quantity in VALID_CHIP_COUNTS:
            return True, None
        return False, (
            f"The number of requested 'TPU' was set to {quantity} which is not a supported chip configuration. "
            f"Supported configs: {VALID_CHIP_COUNTS}"
        )

    # Older Ray releases, which levanter's and Marin's TPU helpers still look for, spelled two
    # of these with a leading underscore.
    _get_current_node_tpu_pod_type = get_current_node_tpu_pod_type
    _get_current_node_tpu_worker_id = get_current_node_tpu_worker_id
