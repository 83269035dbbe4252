"""The hosts a backend runs work on: `HostInfo`, what `Client.list_hosts()` returns.

A host is one machine (an Iris worker; this machine for `LocalClient`) with its size, its
accelerators and its attributes (the key/value pairs Iris constraints select on). Layers above
read these values to size their own accounting; nothing here reserves anything.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["AttributeValue", "HostInfo", "this_machine"]

#: An attribute value as Iris carries it.
AttributeValue = str | int | float


@dataclass(frozen=True)
class HostInfo:
    """One host as its backend reports it now.

    `cpu` is in cores, sizes in bytes. `gpus`/`gpu_variant` describe GPUs, `tpu_chips`/
    `tpu_variant` the TPU chips of this VM (a TPU slice's hosts also carry the `tpu-name` and
    `tpu-worker-id` attributes). `address` is the host's own address (no port), the one its
    processes advertise.

    >>> HostInfo("w0", "10.0.0.2", cpu=8, memory_bytes=32 << 30).gpus
    0
    """

    host_id: str
    address: str
    hostname: str = ""
    alive: bool = True
    cpu: float = 0.0
    memory_bytes: int = 0
    disk_bytes: int = 0
    gpus: int = 0
    gpu_variant: str = ""
    tpu_chips: int = 0
    tpu_variant: str = ""
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.host_id:
            raise ValueError("a host needs an id")
        for name in ("cpu", "memory_bytes", "disk_bytes", "gpus", "tpu_chips"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} of host {self.host_id} cannot be negative, got {getattr(self, name)}")
        object.__setattr__(self, "attributes", dict(self.attributes))


def this_machine(
    host_id: str = "local",
    *,
    cpu: float | None = None,
    gpus: int = 0,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> HostInfo:
    """This machine as a host: its cores (or `cpu`), its physical memory, loopback address.

    >>> this_machine(cpu=3).cpu
    3.0
    """
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 8 << 30
    cores = float(os.cpu_count() or 1) if cpu is None else float(cpu)
    return HostInfo(
        host_id=host_id,
        address="127.0.0.1",
        hostname=os.uname().nodename,
        cpu=cores,
        memory_bytes=memory,
        gpus=gpus,
        attributes=dict(attributes or {}),
    )
