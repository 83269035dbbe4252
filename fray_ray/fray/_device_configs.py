"""Fray's device configs: the accelerator each replica of a job asks for, and what it offers.

`CpuConfig`, `GpuConfig` and `TpuConfig` (one of them is a `DeviceConfig`) are frozen
dataclasses checked when built; each knows its chip count, its peak FLOP/s from vendors'
published figures, and the environment variables a job on it starts with. They are public as
`fray_ray.fray.types.*` (their `__module__` says so), next to `ResourceConfig`, which holds one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from fray_ray.iris.tpu import TpuTopologyInfo, get_tpu_topology, tpu_family

# Peak dense bf16 FLOP/s per chip or GPU, from vendors' published specifications.
_TPU_BF16_FLOPS: Mapping[str, float] = MappingProxyType({"v4": 275e12, "v5e": 197e12, "v5p": 459e12, "v6e": 918e12})
_GPU_BF16_FLOPS: Mapping[str, float] = MappingProxyType(
    {"A100": 312e12, "H100": 989e12, "H200": 989e12, "B200": 2250e12, "L4": 121e12}
)
# What `ResourceConfig.total_flops` reports for a CPU-only request (a nominal figure).
_CPU_NOMINAL_FLOPS = 100e9

# LIBTPU_INIT_ARGS default per TPU family; v4 gets none.
_LIBTPU_SCOPED_VMEM_KIB: Mapping[str, int] = MappingProxyType({"v5e": 50000, "v5p": 50000, "v6e": 98304})


def _check_kind(obj: CpuConfig | GpuConfig | TpuConfig, expected: str) -> None:
    if obj.kind != expected:
        raise ValueError(f"{type(obj).__name__}.kind must be {expected!r}, got {obj.kind!r}")


@dataclass(frozen=True)
class CpuConfig:
    """No accelerator."""

    variant: str = "cpu"
    kind: Literal["cpu"] = field(default="cpu", kw_only=True)

    def __post_init__(self) -> None:
        _check_kind(self, "cpu")

    def chip_count(self) -> int:
        return 0

    def device_flops(self, dtype: str = "bf16") -> float:
        raise NotImplementedError("CPU FLOP/s are not tabulated; ResourceConfig.total_flops reports a nominal value")

    def total_flops(self, dtype: str = "bf16") -> float:
        return _CPU_NOMINAL_FLOPS

    def default_env_vars(self) -> dict[str, str]:
        return {"JAX_PLATFORMS": "cpu"}


@dataclass(frozen=True)
class GpuConfig:
    """`count` GPUs of `variant` (e.g. `"H100"`; `"auto"` means any) on each replica:
    `GpuConfig("H100", 8)`."""

    variant: str = "auto"
    count: int = 1
    kind: Literal["gpu"] = field(default="gpu", kw_only=True)

    def __post_init__(self) -> None:
        _check_kind(self, "gpu")
        if not isinstance(self.variant, str) or not self.variant:
            raise ValueError(f"GpuConfig.variant must be a non-empty string, got {self.variant!r}")
        if not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"GpuConfig.count must be a positive integer, got {self.count!r}")

    def chip_count(self) -> int:
        return self.count

    def device_flops(self, dtype: str = "bf16") -> float:
        """Peak dense FLOP/s of one GPU; NotImplementedError for untabulated variants or dtypes."""
        key = self.variant.upper().split("-", 1)[0]
        if dtype != "bf16" or key not in _GPU_BF16_FLOPS:
            raise NotImplementedError(f"no FLOP/s figure for GPU {self.variant!r} in {dtype}")
        return _GPU_BF16_FLOPS[key]

    def total_flops(self, dtype: str = "bf16") -> float:
        return self.device_flops(dtype) * self.count

    def default_env_vars(self) -> dict[str, str]:
        return {"JAX_PLATFORMS": ""}


@dataclass(frozen=True)
class TpuConfig:
    """One VM's share of a TPU slice of `variant` (e.g. `"v5p-16"`); ValueError for unknown variants.

    `chip_count()` counts the chips on one VM and `vm_count()` the VMs in one slice.
    """

    variant: str
    topology: str | None = None
    kind: Literal["tpu"] = field(default="tpu", kw_only=True)

    def __post_init__(self) -> None:
        _check_kind(self, "tpu")
        get_tpu_topology(self.variant)

    @property
    def info(self) -> TpuTopologyInfo:
        return get_tpu_topology(self.variant)

    @property
    def family(self) -> str:
        return tpu_family(self.variant)

    def chip_count(self) -> int:
        return self.info.chips_per_vm

    def vm_count(self) -> int:
        return self.info.vm_count

    def device_flops(self, dtype: str = "bf16") -> float:
        """Peak dense FLOP/s of one chip; NotImplementedError for dtypes other than bf16."""
        if dtype != "bf16":
            raise NotImplementedError(f"no FLOP/s figure for TPU {self.variant!r} in {dtype}")
        return _TPU_BF16_FLOPS[self.family]

    def total_flops(self, dtype: str = "bf16") -> float:
        """Peak FLOP/s of the chips on one VM."""
        return self.device_flops(dtype) * self.chip_count()

    def default_env_vars(self) -> dict[str, str]:
        env = {"JAX_PLATFORMS": ""}
        vmem = _LIBTPU_SCOPED_VMEM_KIB.get(self.family)
        if vmem is not None:
            env["LIBTPU_INIT_ARGS"] = f"--xla_tpu_scoped_vmem_limit_kib={vmem}"
        return env


#: One of the device configs; `kind` ("cpu", "gpu", "tpu") tells them apart and is keyword-only,
#: so `GpuConfig("H100", 8)` means eight H100s.
DeviceConfig = CpuConfig | GpuConfig | TpuConfig


for _config in (CpuConfig, GpuConfig, TpuConfig):
    _config.__module__ = "fray_ray.fray.types"
