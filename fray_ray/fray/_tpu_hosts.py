"""The host VMs and chips of each TPU family: HBM per chip, host CPUs and RAM.

Re-exported by `fray_ray.fray.types`, where users find them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from fray_ray.iris.tpu import get_tpu_topology, tpu_family

__all__ = [
    "DEFAULT_TPU_HOST_FRACTION",
    "TPU_HBM_BYTES_PER_CHIP",
    "TPU_HOST_RESOURCES",
    "TpuHostResources",
    "tpu_hbm_bytes_per_chip",
    "tpu_hbm_capacity_bytes",
]

_GIB = 1024**3

#: High-bandwidth memory on one chip of each TPU family, in bytes.
TPU_HBM_BYTES_PER_CHIP: Mapping[str, int] = MappingProxyType(
    {"v4": 32 * _GIB, "v5e": 16 * _GIB, "v5p": 95 * _GIB, "v6e": 32 * _GIB}
)


@dataclass(frozen=True)
class TpuHostResources:
    """The CPUs and RAM (GB) of one host VM of a TPU family."""

    cpu: int
    ram_gb: int


#: Host VM sizes per TPU family; `ResourceConfig.with_tpu` asks for a fraction of one.
TPU_HOST_RESOURCES: Mapping[str, TpuHostResources] = MappingProxyType(
    {
        "v4": TpuHostResources(cpu=240, ram_gb=400),
        "v5e": TpuHostResources(cpu=112, ram_gb=192),
        "v5p": TpuHostResources(cpu=208, ram_gb=448),
        "v6e": TpuHostResources(cpu=180, ram_gb=720),
    }
)

#: The share of a TPU host's CPUs and RAM that `with_tpu` requests by default.
DEFAULT_TPU_HOST_FRACTION = 0.5


def tpu_hbm_bytes_per_chip(family: str) -> int:
    """HBM bytes on one chip of `family` (`"v4"`, `"v5e"`, `"v5p"`, `"v6e"`); KeyError otherwise."""
    try:
        return TPU_HBM_BYTES_PER_CHIP[family]
    except KeyError:
        raise KeyError(f"unknown TPU family {family!r}; known: {sorted(TPU_HBM_BYTES_PER_CHIP)}") from None


def tpu_hbm_capacity_bytes(tpu_type: str) -> int:
    """Total HBM bytes of one slice of `tpu_type`; ValueError for an unknown variant."""
    return get_tpu_topology(tpu_type).chip_count * tpu_hbm_bytes_per_chip(tpu_family(tpu_type))
