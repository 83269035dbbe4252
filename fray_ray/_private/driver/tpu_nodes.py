"""TPU hosts as Ray sees them: a slice host's resources and labels, and where a task asking for
TPU resources may run.

Ray gives every host of a TPU slice `TPU: <chips>`, `accelerator_type:TPU-<generation>: 1` and
the slice's name as a resource (`<name>: 1`), and host 0 of the slice `TPU-<pod type>-head: 1`;
its labels name the slice, the host's index in it, the topology, the pod type and the
accelerator type. Iris describes the same hosts with its worker attributes (`tpu-name`,
`tpu-worker-id`, `tpu-topology`, `device-variant`), so both the node view and the placement of a
process asking for these resources are read from them, on the embedded cluster and on Iris alike.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping

from fray_ray.fray import get_tpu_topology
from fray_ray.fray._iris_conversions import ATTR_DEVICE_VARIANT, ATTR_TPU_NAME
from fray_ray.fray.hosts import AttributeValue, HostInfo

#: Iris's worker attributes of a TPU slice's hosts, besides the slice's name and variant.
ATTR_TPU_WORKER_ID = "tpu-worker-id"
ATTR_TPU_TOPOLOGY = "tpu-topology"
#: Ray's node labels of a TPU host.
ACCELERATOR_TYPE_LABEL = "ray.io/accelerator-type"
SLICE_NAME_LABEL = "ray.io/tpu-slice-name"
WORKER_ID_LABEL = "ray.io/tpu-worker-id"
TOPOLOGY_LABEL = "ray.io/tpu-topology"
POD_TYPE_LABEL = "ray.io/tpu-pod-type"

_HEAD = re.compile(r"^TPU-(?P<variant>.+)-head$")
_GRID = re.compile(r"^\d+(x\d+)+$")


def head_resource(pod_type: str) -> str:
    """The resource only host 0 of a `pod_type` slice has.

    >>> head_resource("v5p-16")
    'TPU-v5p-16-head'
    """
    return f"TPU-{pod_type}-head"


def head_pod_type(resource: str) -> str | None:
    """The pod type a `TPU-<pod type>-head` resource names; None for any other resource.

    >>> head_pod_type("TPU-v5p-16-head"), head_pod_type("TPU")
    ('v5p-16', None)
    """
    match = _HEAD.match(resource)
    return match.group("variant") if match else None


def accelerator_type(pod_type: str) -> str:
    """Ray's accelerator type of a pod type: its generation, upper case.

    >>> accelerator_type("v5p-16"), accelerator_type("v5litepod-8")
    ('TPU-V5P', 'TPU-V5LITEPOD')
    """
    return f"TPU-{pod_type.split('-')[0].upper()}"


def _worker_id(host: HostInfo) -> int | None:
    value = host.attributes.get(ATTR_TPU_WORKER_ID)
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def slice_name(host: HostInfo) -> str | None:
    """The name of the TPU slice `host` belongs to; None for other hosts."""
    if not host.tpu_chips:
        return None
    name = host.attributes.get(ATTR_TPU_NAME)
    return str(name) if name not in (None, "") else None


def slice_topology(host: HostInfo) -> str | None:
    """The chip grid of `host`'s slice (`2x2x2`): its `tpu-topology` attribute when that is a
    grid, else the grid of its pod type (some Iris workers report the pod type there)."""
    value = str(host.attributes.get(ATTR_TPU_TOPOLOGY) or "").strip().lower()
    if _GRID.match(value):
        return value
    try:
        return get_tpu_topology(host.tpu_variant).topology if host.tpu_variant else None
    except ValueError:
        return None


def tpu_resources(host: HostInfo) -> dict[str, float]:
    """Ray's TPU resources of `host` (empty for a host without TPU chips)."""
    if not host.tpu_chips:
        return {}
    resources = {"TPU": float(host.tpu_chips)}
    if host.tpu_variant:
        resources[f"accelerator_type:{accelerator_type(host.tpu_variant)}"] = 1.0
    name = slice_name(host)
    if name is not None:
        resources[name] = 1.0
    # A host that says nothing of its index is a slice of one host: its own head.
    if host.tpu_variant and _worker_id(host) in (0, None):
        resources[head_resource(host.tpu_variant)] = 1.0
    return resources


def tpu_labels(host: HostInfo) -> dict[str, str]:
    """Ray's TPU node labels of `host` (empty for a host without TPU chips)."""
    if not host.tpu_chips:
        return {}
    values: dict[str, AttributeValue | None] = {
        ACCELERATOR_TYPE_LABEL: accelerator_type(host.tpu_variant) if host.tpu_variant else None,
        SLICE_NAME_LABEL: slice_name(host),
        WORKER_ID_LABEL: _worker_id(host),
        TOPOLOGY_LABEL: slice_topology(host),
        POD_TYPE_LABEL: host.tpu_variant or None,
    }
    return {label: str(value) for label, value in values.items() if value not in (None, "")}


def is_tpu_resource(name: str, slices: Collection[str]) -> bool:
    """Whether `name` is a resource TPU hosts have by what they are (not a declared one)."""
    return name == "TPU" or name in slices or head_pod_type(name) is not None or (
        name.startswith("accelerator_type:TPU-")
    )


def tpu_placement(custom: Iterable[tuple[str, float]], slices: Collection[str]) -> tuple[tuple[str, str | int], ...]:
    """The worker attribute values a process asking for these resources must run where: a
    slice's name pins it to that slice's hosts (`tpu-name`), a head resource to host 0 of a
    slice of that pod type. `slices` are the slice names the cluster's hosts have.

    >>> tpu_placement([("TPU-v5p-16-head", 1.0), ("TPU", 4.0)], ())
    (('tpu-worker-id', 0), ('device-variant', 'v5p-16'))
    >>> tpu_placement([("slice-a", 1.0)], {"slice-a"})
    (('tpu-name', 'slice-a'),)
    """
    pins: list[tuple[str, str | int]] = []
    for name, amount in custom:
        if amount <= 0:
            continue
        pod_type = head_pod_type(name)
        if pod_type is not None:
            pins += [(ATTR_TPU_WORKER_ID, 0), (ATTR_DEVICE_VARIANT, pod_type)]
        elif name in slices:
            pins.append((ATTR_TPU_NAME, name))
    return tuple(dict.fromkeys(pins))


def needs_tpu_host(custom: Iterable[tuple[str, float]], slices: Collection[str]) -> bool:
    """Whether these resources are to be found on TPU hosts only (`TPU` chips or a slice's
    resources), so the process must run on one."""
    return any(amount > 0 and is_tpu_resource(name, slices) for name, amount in custom)


def host_pins(labels: Mapping[str, str]) -> tuple[tuple[str, str | int], ...]:
    """The worker attribute values that name one TPU host (from its node's labels), to start a
    process on that host; empty for a node that is no TPU host.

    >>> host_pins({SLICE_NAME_LABEL: "slice-a", WORKER_ID_LABEL: "1"})
    (('tpu-name', 'slice-a'), ('tpu-worker-id', 1))
    """
    name, worker = labels.get(SLICE_NAME_LABEL), labels.get(WORKER_ID_LABEL)
    if not name or worker is None or not worker.isdigit():
        return ()
    return (ATTR_TPU_NAME, name), (ATTR_TPU_WORKER_ID, int(worker))
