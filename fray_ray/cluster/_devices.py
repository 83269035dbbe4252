"""Simulated accelerator hosts: TPU slices and GPU hosts described as `WorkerSpec`s.

A TPU slice expands into one worker per VM of its variant (from `fray_ray.iris.tpu`), each
carrying Iris's well-known attributes (`tpu-name`, `tpu-worker-id`, ...) and the environment
a real TPU VM gives its tasks. GPU hosts carry `gpu-variant`/`gpu-count` and a topology group
attribute (`pool`, `leafgroup`) usable as a coscheduling `group_by`. No accelerator is needed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fray_ray.cluster._config import (
    ATTR_DEVICE_TYPE,
    ATTR_DEVICE_VARIANT,
    ATTR_GPU_COUNT,
    ATTR_GPU_VARIANT,
    ATTR_PREEMPTIBLE,
    ATTR_SIMULATED,
    ATTR_TPU_NAME,
    ATTR_TPU_TOPOLOGY,
    ATTR_TPU_VM_COUNT,
    ATTR_TPU_WORKER_ID,
    GpuSpec,
    TpuSpec,
    WorkerSpec,
    parse_bytes,
)
from fray_ray.iris.tpu import get_tpu_topology
from fray_ray.iris.types import AttributeValue

#: Simulated accelerator hosts are virtual: their CPU and memory need not exist here.
DEFAULT_ACCELERATOR_HOST_CPU = 32.0
DEFAULT_ACCELERATOR_HOST_MEMORY = "128g"
DEFAULT_ACCELERATOR_HOST_DISK = "100g"

_CHIPS_PER_HOST_BOUNDS = {1: (1, 1, 1), 2: (1, 2, 1), 4: (2, 2, 1), 8: (2, 4, 1)}


def _grid(topology: str) -> tuple[int, int, int]:
    dims = [int(d) for d in topology.split("x")]
    while len(dims) < 3:
        dims.append(1)
    return dims[0], dims[1], dims[2]


def tpu_host_env(variant: str, slice_name: str, worker_index: int, hostnames: list[str]) -> dict[str, str]:
    """The environment a TPU VM gives its tasks (plus Iris's JAX/PJRT selection)."""
    info = get_tpu_topology(variant)
    per_host = _CHIPS_PER_HOST_BOUNDS.get(info.chips_per_vm, (1, 1, info.chips_per_vm))
    grid = _grid(info.topology)
    host_bounds = tuple(max(1, math.ceil(g / p)) for g, p in zip(grid, per_host))
    if math.prod(host_bounds) != info.vm_count:
        host_bounds = (1, 1, info.vm_count)
    return {
        "TPU_NAME": slice_name,
        "TPU_WORKER_ID": str(worker_index),
        "TPU_WORKER_HOSTNAMES": ",".join(hostnames),
        "TPU_ACCELERATOR_TYPE": variant,
        "TPU_TOPOLOGY": info.topology,
        "TPU_CHIPS_PER_HOST_BOUNDS": ",".join(str(d) for d in per_host),
        "TPU_HOST_BOUNDS": ",".join(str(d) for d in host_bounds),
        "TPU_SKIP_MDS_QUERY": "1",
        "JAX_PLATFORMS": "tpu",
        "PJRT_DEVICE": "TPU",
    }


def tpu_slice(
    variant: str = "v5p-16",
    name: str = "tpu-0",
    *,
    cpu: float = DEFAULT_ACCELERATOR_HOST_CPU,
    memory: int | str = DEFAULT_ACCELERATOR_HOST_MEMORY,
    disk: int | str = DEFAULT_ACCELERATOR_HOST_DISK,
    attributes: Mapping[str, AttributeValue] | None = None,
    env: Mapping[str, str] | None = None,
    preemptible: bool = False,
    advertise_host: str = "127.0.0.1",
) -> tuple[WorkerSpec, ...]:
    """One worker per VM of a simulated TPU slice, named `<name>-w<i>`.

    `env` overrides entries of the TPU environment (e.g. `{"JAX_PLATFORMS": "cpu"}` to run
    JAX code on a machine without TPUs).

    >>> [w.worker_id for w in tpu_slice("v5p-16", "tpu-a")]
    ['tpu-a-w0', 'tpu-a-w1']
    """
    info = get_tpu_topology(variant)
    hostnames = [advertise_host] * info.vm_count
    workers = []
    for index in range(info.vm_count):
        attrs: dict[str, AttributeValue] = {
            ATTR_DEVICE_TYPE: "tpu",
            ATTR_DEVICE_VARIANT: variant,
            ATTR_TPU_NAME: name,
            ATTR_TPU_WORKER_ID: index,
            ATTR_TPU_TOPOLOGY: info.topology,
            ATTR_TPU_VM_COUNT: info.vm_count,
            ATTR_PREEMPTIBLE: "true" if preemptible else "false",
            ATTR_SIMULATED: "true",
        }
        attrs.update(attributes or {})
        device_env = tpu_host_env(variant, name, index, hostnames)
        device_env.update(env or {})
        workers.append(
            WorkerSpec(
                worker_id=f"{name}-w{index}",
                cpu_millicores=int(round(cpu * 1000)),
                memory_bytes=parse_bytes(memory),
                disk_bytes=parse_bytes(disk),
                attributes=attrs,
                tpu=TpuSpec(variant=variant, slice_name=name, worker_index=index, chips=info.chips_per_vm),
                device_env=device_env,
            )
        )
    return tuple(workers)


def gpu_host(
    variant: str = "H100",
    count: int = 8,
    *,
    worker_id: str = "gpu-0",
    pool: str | None = "gpu-pool",
    leafgroup: str | None = None,
    cpu: float = DEFAULT_ACCELERATOR_HOST_CPU,
    memory: int | str = DEFAULT_ACCELERATOR_HOST_MEMORY,
    disk: int | str = DEFAULT_ACCELERATOR_HOST_DISK,
    attributes: Mapping[str, AttributeValue] | None = None,
    env: Mapping[str, str] | None = None,
    preemptible: bool = False,
) -> WorkerSpec:
    """A simulated host with `count` GPUs of `variant`; tasks see CUDA_VISIBLE_DEVICES.

    >>> gpu_host("A100", 4).attributes["gpu-count"]
    4
    """
    attrs: dict[str, AttributeValue] = {
        ATTR_DEVICE_TYPE: "gpu",
        ATTR_DEVICE_VARIANT: variant,
        ATTR_GPU_VARIANT: variant,
        ATTR_GPU_COUNT: count,
        ATTR_PREEMPTIBLE: "true" if preemptible else "false",
        ATTR_SIMULATED: "true",
    }
    if pool is not None:
        attrs["pool"] = pool
    if leafgroup is not None:
        attrs["leafgroup"] = leafgroup
    attrs.update(attributes or {})
    return WorkerSpec(
        worker_id=worker_id,
        cpu_millicores=int(round(cpu * 1000)),
        memory_bytes=parse_bytes(memory),
        disk_bytes=parse_bytes(disk),
        attributes=attrs,
        gpu=GpuSpec(variant=variant, count=count),
        device_env=dict(env or {}),
    )


def gpu_hosts(
    variant: str = "H100",
    count: int = 8,
    *,
    hosts: int = 2,
    prefix: str = "gpu",
    pool: str | None = "gpu-pool",
    leafgroup: str | None = None,
    **kwargs: object,
) -> tuple[WorkerSpec, ...]:
    """`hosts` GPU hosts sharing one `pool` (and `leafgroup`, if given), named `<prefix>-<i>`."""
    if hosts < 1:
        raise ValueError(f"hosts must be at least 1, got {hosts}")
    return tuple(
        gpu_host(variant, count, worker_id=f"{prefix}-{i}", pool=pool, leafgroup=leafgroup, **kwargs)  # type: ignore[arg-type]
        for i in range(hosts)
    )
