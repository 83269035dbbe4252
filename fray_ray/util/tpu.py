"""TPU helpers (`ray.util.tpu`, also reachable as `ray.util.accelerators.tpu`).

On Iris a TPU slice is a gang: one job whose replicas are the slice's hosts, placed together
or not at all. `run_on_slice` runs a function on every host of a slice and returns one ref
per host; `SlicePlacementGroup` keeps a slice's hosts reserved for repeated runs. The
`get_current_*` functions read the environment TPU hosts give their tasks.

>>> @fray_ray.remote
... def where():
...     return fray_ray.util.tpu.get_current_pod_name()
>>> refs = run_on_slice(where, topology="2x2x2", accelerator_version="v5p")  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any

from fray_ray._private.accelerators.tpu import TPUAcceleratorManager
from fray_ray._private.driver.tpu_nodes import POD_TYPE_LABEL, SLICE_NAME_LABEL, WORKER_ID_LABEL
from fray_ray.fray import get_tpu_topology, tpu_family

__all__ = [
    "SlicePlacementGroup",
    "get_chips_per_host",
    "get_current_pod_name",
    "get_current_pod_worker_count",
    "get_num_chips_from_topology",
    "get_num_ready_tpu_slices",
    "get_num_tpu_chips_on_node",
    "get_num_tpu_slices",
    "get_tpu_coordinator_env_vars",
    "get_tpu_nodes_for_slice",
    "get_tpu_slice_name_from_node",
    "get_tpu_version_from_type",
    "get_tpu_worker_resources",
    "infer_tpu_pod_type_from_topology",
    "init_jax_profiler",
    "run_on_slice",
    "slice_placement_group",
]

_VERSION_PREFIX = {"v4": "v4", "v5p": "v5p", "v5e": "v5litepod", "v5litepod": "v5litepod", "v6e": "v6e"}


def get_current_pod_name() -> str | None:
    """The name of the TPU slice this task runs on (None off TPU hosts)."""
    return TPUAcceleratorManager.get_current_node_tpu_name()


def get_current_pod_worker_count() -> int | None:
    """How many hosts the current slice has (None off TPU hosts)."""
    return TPUAcceleratorManager.get_num_workers_in_current_tpu_pod()


def get_num_tpu_chips_on_node() -> int:
    """TPU chips on this host (0 off TPU hosts)."""
    return TPUAcceleratorManager.get_current_node_num_accelerators()


def get_tpu_slice_name_from_node(node: dict[str, Any]) -> str | None:
    """The name of the TPU slice a node of `ray.nodes()` belongs to (None for other nodes)."""
    name = (node.get("Labels") or {}).get(SLICE_NAME_LABEL)
    return str(name) if name else None


def get_tpu_nodes_for_slice(slice_name: str, nodes: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The live nodes (entries of `ray.nodes()`, or of `nodes`) of the TPU slice `slice_name`."""
    if nodes is None:
        import fray_ray

        if not fray_ray.is_initialized():
            return []
        nodes = fray_ray.nodes()
    return [node for node in nodes if node.get("Alive") and get_tpu_slice_name_from_node(node) == slice_name]


def _whole_slices(topology: str, accelerator_type: str, tpu_resource_per_chip: int | None) -> dict[str, list[dict[str, Any]]]:
    """The slices of this shape whose every host is alive: slice name -> its nodes."""
    import fray_ray

    pod_type = infer_tpu_pod_type_from_topology(topology, accelerator_type)
    if pod_type is None or not fray_ray.is_initialized():
        return {}
    chips = get_num_chips_from_topology(topology) * (tpu_resource_per_chip or 1)
    by_slice: dict[str, list[dict[str, Any]]] = {}
    for node in fray_ray.nodes():
        labels = node.get("Labels") or {}
        if not node.get("Alive") or labels.get(POD_TYPE_LABEL) != pod_type:
            continue
        alone = node.get("Resources", {}).get("TPU", 0) >= chips  # a one-host slice is its own node
        name = node["NodeID"] if alone else get_tpu_slice_name_from_node(node)
        if name:
            by_slice.setdefault(name, []).append(node)
    return {
        name: members for name, members in by_slice.items()
        if sum(m.get("Resources", {}).get("TPU", 0) for m in members) == chips
        and (len(members) == 1 or any((m.get("Labels") or {}).get(WORKER_ID_LABEL) == "0" for m in members))
    }


def get_num_tpu_slices(topology: str, accelerator_type: str, tpu_resource_per_chip: int | None = None) -> int:
    """How many slices of this shape the cluster has with every host alive."""
    return len(_whole_slices(topology, accelerator_type, tpu_resource_per_chip))


def get_num_ready_tpu_slices(topology: str, accelerator_type: str, tpu_resource_per_chip: int | None = None) -> int:
    """How many slices of this shape have every host alive and all their chips free."""
    from fray_ray._private import state

    free = state.available_resources_per_node()
    return sum(
        all(free.get(node["NodeID"], {}).get("TPU", 0) >= node.get("Resources", {}).get("TPU", 0) for node in nodes)
        for nodes in _whole_slices(topology, accelerator_type, tpu_resource_per_chip).values()
    )


def get_tpu_coordinator_env_vars(
    coordinator_address: str, num_slices: int, slice_id: int, coordinator_port: str = "8081"
) -> dict[str, str]:
    """Build the MEGASCALE_* variables multi-slice JAX needs on every host of a slice.

    Args:
        coordinator_address: the host of slice 0's first worker.
        num_slices: how many slices run the job.
        slice_id: this slice's index.
        coordinator_port: the coordinator's port.

    Returns:
        Variable name to value.
    """
    return {
        "MEGASCALE_COORDINATOR_ADDRESS": f"{coordinator_address}:{coordinator_port}",
        "MEGASCALE_NUM_SLICES": str(num_slices),
        "MEGASCALE_SLICE_ID": str(slice_id),
        "MEGASCALE_PORT": str(coordinator_port),
    }


def get_tpu_version_from_type(accelerator_type: str) -> str:
    """Read the TPU generation from an accelerator type: `"v5p-16"` → `"v5p"`; `"TPU-V6E"` → `"v6e"`.

    Args:
        accelerator_type: a slice name or Ray accelerator type.

    Returns:
        The generation, lower case.
    """
    name = accelerator_type.lower().removeprefix("tpu-")
    return tpu_family(name.split("-")[0] + "-") if name.startswith(("v5litepod", "v5e")) else name.split("-")[0]


def get_num_chips_from_topology(topology: str) -> int:
    """Count the chips of a topology: `"2x2x2"` → 8.

    Args:
        topology: the chip grid, e.g. `"4x4"`.

    Returns:
        The number of chips.

    Raises:
        ValueError: `topology` is not a grid.
    """
    try:
        return math.prod(int(d) for d in topology.lower().split("x"))
    except ValueError:
        raise ValueError(f"invalid TPU topology {topology!r}; expected a grid such as '2x2x2'") from None


def infer_tpu_pod_type_from_topology(topology: str, accelerator_type: str) -> str | None:
    """Name the slice of a topology and TPU version: ("2x2x2", "v5p") → "v5p-16".

    Args:
        topology: the chip grid.
        accelerator_type: the TPU generation (or a type it can be read from).

    Returns:
        The slice name, or None when no known slice has that shape.
    """
    version = get_tpu_version_from_type(accelerator_type)
    prefix = _VERSION_PREFIX.get(version)
    if prefix is None:
        return None
    chips = get_num_chips_from_topology(topology)
    # v4 and v5p names count TensorCores (two per chip); v5e and v6e names count chips.
    variant = f"{prefix}-{chips * 2}" if prefix in ("v4", "v5p") else f"{prefix}-{chips}"
    try:
        get_tpu_topology(variant)
    except ValueError:
        return None
    return variant


def _variant(topology: str | None, accelerator_version: str | None) -> str:
    if not topology or not accelerator_version:
        raise ValueError("topology and accelerator_version are required, e.g. topology='2x2x2', accelerator_version='v5p'")
    variant = infer_tpu_pod_type_from_topology(topology, accelerator_version)
    if variant is None:
        raise ValueError(f"no known TPU slice has topology {topology!r} and version {accelerator_version!r}")
    return variant


def get_chips_per_host(topology: str, accelerator_version: str) -> int:
    """Say how many chips each host of a slice has, to size per-host resources.

    Args:
        topology: the chip grid.
        accelerator_version: the TPU generation.

    Returns:
        Chips per host.

    Raises:
        ValueError: no known slice has that shape.
    """
    return get_tpu_topology(_variant(topology, accelerator_version)).chips_per_vm


def get_tpu_worker_resources(
    topology: str,
    accelerator_type: str,
    resources_per_worker: dict[str, float] | None = None,
    num_slices: int = 1,
    chips_per_vm: int | None = None,
    tpu_resource_per_chip: int | None = None,
) -> tuple[int, dict[str, float]]:
    """Size Ray workers to cover `num_slices` slices, one worker per host.

    Args:
        topology: the chip grid.
        accelerator_type: the TPU generation.
        resources_per_worker: each worker's resources (default: its host's chips as `TPU`).
        num_slices: how many slices.
        chips_per_vm: chips per host, if not the slice's usual number.
        tpu_resource_per_chip: accepted for Ray's signature.

    Returns:
        (number of workers, resources of each).

    Raises:
        ValueError: no known slice has that shape.
    """
    info = get_tpu_topology(_variant(topology, accelerator_type))
    per_host = chips_per_vm or info.chips_per_vm
    return info.host_count * num_slices, dict(resources_per_worker or {"TPU": float(per_host)})


def init_jax_profiler(port: int | None = None) -> None:
    """Start JAX's profiler server on this host, to profile a task from outside.

    Args:
        port: the server's port (default 9999).

    Raises:
        ImportError: jax is not installed.
    """
    import jax  # noqa: PLC0415 - optional dependency

    jax.profiler.start_server(port or 9999)


class SlicePlacementGroup:
    """Holds the hosts of `num_slices` TPU slices reserved, for `run_on_slice(tpu_slice=...)`.

    Creating it starts one gang job per reservation (all hosts or none); `shutdown()` frees it.
    """

    def __init__(
        self,
        topology: str,
        accelerator_version: str,
        resources_per_bundle: dict[str, float] | None = None,
        strategy: str = "SPREAD",
        name: str = "",
        lifetime: str | None = None,
        num_slices: int = 1,
        chips_per_vm: int | None = None,
        head_reservation_timeout_s: float | None = 100.0,
        bundle_label_selector: Any = None,
        pg_per_slice: bool = False,
        tpu_resource_per_chip: int | None = None,
    ) -> None:
        from fray_ray._private.core import runtime_state

        self.topology = topology
        self.accelerator_version = accelerator_version
        self.variant = _variant(topology, accelerator_version)
        info = get_tpu_topology(self.variant)
        self.num_slices = num_slices
        self.num_hosts = info.host_count
        self.chips_per_host = chips_per_vm or info.chips_per_vm
        self.num_bundles = self.num_hosts * num_slices
        self.bundle_resources = dict(resources_per_bundle or {"TPU": float(self.chips_per_host)})
        self.name = name
        self._gang_id: bytes | None = runtime_state.current().reserve_gang(
            tpu=self.variant, num_slices=num_slices, timeout=head_reservation_timeout_s
        )

    @property
    def devices_per_host(self) -> int:
        """TPU chips on each host of the slice."""
        return self.chips_per_host

    def shutdown(self) -> None:
        """Release the reserved hosts."""
        from fray_ray._private.core import runtime_state

        runtime = runtime_state.current_or_none()
        if runtime is not None and self._gang_id is not None:
            runtime.release_gang(self._gang_id)
        self._gang_id = None


def slice_placement_group(
    topology: str,
    accelerator_version: str,
    resources_per_bundle: dict[str, float] | None = None,
    num_slices: int = 1,
    chips_per_vm: int | None = None,
    pg_per_slice: bool = False,
    tpu_resource_per_chip: int | None = None,
    **kwargs: Any,
) -> SlicePlacementGroup:
    """Reserve `num_slices` slices of `topology` TPUs to run several calls on the same hosts.

    Args:
        topology: the chip grid, e.g. `"2x2x2"`.
        accelerator_version: the TPU generation, e.g. `"v5p"`.
        resources_per_bundle: each host's resources (default: its chips as `TPU`).
        num_slices: how many slices.
        chips_per_vm: chips per host, if not the slice's usual number.
        pg_per_slice: accepted for Ray's signature.
        tpu_resource_per_chip: accepted for Ray's signature.
        **kwargs: passed to `SlicePlacementGroup`.

    Returns:
        The reservation; `shutdown()` releases it.

    Raises:
        ValueError: no known slice has that shape.
    """
    return SlicePlacementGroup(
        topology, accelerator_version, resources_per_bundle, num_slices=num_slices, chips_per_vm=chips_per_vm,
        pg_per_slice=pg_per_slice, tpu_resource_per_chip=tpu_resource_per_chip, **kwargs,
    )


def run_on_slice(
    fn: Any,
    *args: Any,
    topology: str | None = None,
    accelerator_version: str | None = None,
    tpu_slice: SlicePlacementGroup | None = None,
    slice_index: int | None = None,
    num_slices: int = 1,
    chips_per_vm: int | None = None,
    head_reservation_timeout_s: float | None = 100.0,
    pg_ready_timeout_s: float | None = None,
    **kwargs: Any,
) -> list[Any]:
    """Run remote function `fn` once on every host of the slice(s), as one gang.

    Args:
        fn: a remote function.
        *args: its arguments.
        topology: the chip grid, when no `tpu_slice` is given.
        accelerator_version: the TPU generation, when no `tpu_slice` is given.
        tpu_slice: a reservation from `slice_placement_group` to run on.
        slice_index: accepted for Ray's signature.
        num_slices: how many slices, when no `tpu_slice` is given.
        chips_per_vm: accepted for Ray's signature.
        head_reservation_timeout_s: accepted for Ray's signature.
        pg_ready_timeout_s: accepted for Ray's signature.
        **kwargs: its keyword arguments.

    Returns:
        One ref per host, in host order.

    Raises:
        TypeError: `fn` is not a remote function.
        ValueError: the slice shape is unknown, or `tpu_slice` was shut down.
    """
    from fray_ray.remote_function import RemoteFunction

    if not isinstance(fn, RemoteFunction):
        raise TypeError("run_on_slice expects a remote function (decorated with @remote)")
    if tpu_slice is not None:
        if tpu_slice._gang_id is None:
            raise ValueError("this SlicePlacementGroup was shut down")
        refs = fn.options(_gang=tpu_slice._gang_id).remote(*args, **kwargs)
    else:
        refs = fn.options(tpu=_variant(topology, accelerator_version), num_slices=num_slices).remote(*args, **kwargs)
    return refs if isinstance(refs, list) else [refs]
