"""TPU slice shapes: how many chips, hosts and VMs each variant name (`v5p-16`, `v6e-8`) means.

Both the client (to fill `TpuDevice.count` and size gangs) and the embedded cluster (to lay out
simulated slices) read this one table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TpuTopologyInfo:
    """One TPU variant: `chip_count` chips on `host_count` hosts and `vm_count` VMs."""

    name: str
    chip_count: int
    host_count: int
    vm_count: int
    chips_per_vm: int

    @property
    def family(self) -> str:
        return tpu_family(self.name)

    @property
    def topology(self) -> str:
        """A chip grid such as `2x2x1` (v4/v5p) or `4x4` (v5e/v6e)."""
        return _grid(self.chip_count, three_d=self.family in ("v4", "v5p"))


def _grid(chips: int, *, three_d: bool) -> str:
    dims = [1, 1, 1] if three_d else [1, 1]
    remaining = chips
    i = 0
    while remaining > 1:
        dims[i % len(dims)] *= 2
        remaining //= 2
        i += 1
    if three_d and chips >= 4:
        # v4/v5p hosts hold a 2x2x1 block; keep the grid in that conventional order.
        dims = sorted(dims)
        dims = [dims[1], dims[2], dims[0]] if chips == 4 else dims
    else:
        dims = sorted(dims)
    return "x".join(str(d) for d in dims)


def _tensorcore_variants(prefix: str, sizes: list[int]) -> list[TpuTopologyInfo]:
    # v4 and v5p names count TensorCores: two per chip, four chips per host.
    return [TpuTopologyInfo(f"{prefix}-{n}", n // 2, n // 8, n // 8, 4) for n in sizes]


def _chip_variants(prefix: str, sizes: list[int], hosts_per_vm_pair: bool) -> list[TpuTopologyInfo]:
    infos = []
    for n in sizes:
        if n <= 8:
            infos.append(TpuTopologyInfo(f"{prefix}-{n}", n, 1, 1, n))
        else:
            vms = n // 4
            hosts = n // 8 if hosts_per_vm_pair else vms
            infos.append(TpuTopologyInfo(f"{prefix}-{n}", n, hosts, vms, 4))
    return infos


TPU_TOPOLOGIES: tuple[TpuTopologyInfo, ...] = tuple(
    _tensorcore_variants("v4", [2**k for k in range(3, 13)])
    + _tensorcore_variants("v5p", [2**k for k in range(3, 14)] + [12288])
    + _chip_variants("v5litepod", [1, 2, 4, 8, 16, 32, 64, 128, 256], hosts_per_vm_pair=True)
    + _chip_variants("v6e", [1, 4, 8, 16, 32, 64, 128, 256], hosts_per_vm_pair=False)
)

_BY_NAME = {info.name: info for info in TPU_TOPOLOGIES}


def tpu_family(variant: str) -> str:
    """`v4`, `v5e`, `v5p` or `v6e`."""
    if variant.startswith(("v5litepod-", "v5e-")):
        return "v5e"
    return variant.split("-", 1)[0]


def get_tpu_topology(variant: str) -> TpuTopologyInfo:
    """The shape of a TPU variant; ValueError naming the valid variants when unknown."""
    try:
        return _BY_NAME[variant]
    except KeyError:
        raise ValueError(
            f"Unknown TPU type {variant!r}; valid TPU types are: {', '.join(info.name for info in TPU_TOPOLOGIES)}"
        ) from None
