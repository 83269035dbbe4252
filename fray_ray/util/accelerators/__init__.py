"""Accelerator type names (`ray.util.accelerators`) for the `accelerator_type=` option.

Each constant is the string a node advertises for that device, e.g.
`@remote(num_gpus=1, accelerator_type=NVIDIA_H100)` asks for a host with H100 GPUs. The values
are Ray 2.60's. Ray's package exports only part of its table at the top level; here every name
of that table is exported (`NVIDIA_H200`, `AMD_INSTINCT_MI300A`, ...), which is a superset.
`NVIDIA_TESLA_A100` still works but warns, as in Ray. `accelerators.tpu` is the module
`fray_ray.util.tpu`, loaded on first use.

>>> GOOGLE_TPU_V5P
'TPU-V5P'
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType
from typing import Final

NVIDIA_TESLA_V100: Final = "V100"
NVIDIA_TESLA_P100: Final = "P100"
NVIDIA_TESLA_T4: Final = "T4"
NVIDIA_TESLA_P4: Final = "P4"
NVIDIA_TESLA_K80: Final = "K80"
NVIDIA_TESLA_A10G: Final = "A10G"
NVIDIA_L4: Final = "L4"
NVIDIA_L40S: Final = "L40S"
NVIDIA_A100: Final = "A100"
NVIDIA_A100_40G: Final = "A100-40G"
NVIDIA_A100_80G: Final = "A100-80G"
NVIDIA_H100: Final = "H100"
NVIDIA_H200: Final = "H200"
NVIDIA_H20: Final = "H20"
NVIDIA_B200: Final = "B200"
NVIDIA_B300: Final = "B300"
NVIDIA_GB200: Final = "GB200"
NVIDIA_GB300: Final = "GB300"
NVIDIA_RTX_PRO_6000: Final = "RTX-PRO-6000"

INTEL_MAX_1550: Final = "Intel-GPU-Max-1550"
INTEL_MAX_1100: Final = "Intel-GPU-Max-1100"
INTEL_GAUDI: Final = "Intel-GAUDI"

AMD_INSTINCT_MI100: Final = "AMD-Instinct-MI100"
AMD_INSTINCT_MI210: Final = "AMD-Instinct-MI210"
AMD_INSTINCT_MI250: Final = "AMD-Instinct-MI250X-MI250"
AMD_INSTINCT_MI250x: Final = "AMD-Instinct-MI250X"
AMD_INSTINCT_MI300A: Final = "AMD-Instinct-MI300A"
AMD_INSTINCT_MI300x: Final = "AMD-Instinct-MI300X-OAM"
AMD_INSTINCT_MI300x_HF: Final = "AMD-Instinct-MI300X-HF"
AMD_INSTINCT_MI308x: Final = "AMD-Instinct-MI308X"
AMD_INSTINCT_MI325x: Final = "AMD-Instinct-MI325X-OAM"
AMD_INSTINCT_MI350x: Final = "AMD-Instinct-MI350X-OAM"
AMD_INSTINCT_MI355x: Final = "AMD-Instinct-MI355X-OAM"
AMD_RADEON_R9_200_HD_7900: Final = "AMD-Radeon-R9-200-HD-7900"
AMD_RADEON_HD_7900: Final = "AMD-Radeon-HD-7900"

AWS_NEURON_CORE: Final = "aws-neuron-core"

GOOGLE_TPU_V2: Final = "TPU-V2"
GOOGLE_TPU_V3: Final = "TPU-V3"
GOOGLE_TPU_V4: Final = "TPU-V4"
GOOGLE_TPU_V5P: Final = "TPU-V5P"
GOOGLE_TPU_V5LITEPOD: Final = "TPU-V5LITEPOD"
GOOGLE_TPU_V6E: Final = "TPU-V6E"
GOOGLE_TPU_V7X: Final = "TPU-V7X"

HUAWEI_NPU_910B: Final = "Ascend910B"
HUAWEI_NPU_910B4: Final = "Ascend910B4"

METAX_C500: Final = "MXC500"
METAX_C550: Final = "MXC550"

MOBILINT_ARIES: Final = "MOBILINT_ARIES"
MOBILINT_REGULUS: Final = "MOBILINT_REGULUS"

FURIOSA_RNGD: Final = "FURIOSA_RNGD"

APPLE_M1: Final = "M1"
APPLE_M1_PRO: Final = "M1-Pro"
APPLE_M1_MAX: Final = "M1-Max"
APPLE_M1_ULTRA: Final = "M1-Ultra"
APPLE_M2: Final = "M2"
APPLE_M2_PRO: Final = "M2-Pro"
APPLE_M2_MAX: Final = "M2-Max"
APPLE_M2_ULTRA: Final = "M2-Ultra"
APPLE_M3: Final = "M3"
APPLE_M3_PRO: Final = "M3-Pro"
APPLE_M3_MAX: Final = "M3-Max"
APPLE_SILICON: Final = "Apple-Silicon"

# Old names that still resolve, with a warning: old name -> current name.
_DEPRECATED: Final = {"NVIDIA_TESLA_A100": "NVIDIA_A100"}

__all__ = [
    "tpu",
    *sorted(n for n in dir() if not n.startswith("_") and (n.isupper() or n.startswith("AMD_"))),
    *_DEPRECATED,
]


def __getattr__(name: str) -> str | ModuleType:
    """Resolve the lazily loaded `tpu` module and deprecated constant names."""
    if name == "tpu":
        return importlib.import_module("fray_ray.util.tpu")
    if name in _DEPRECATED:
        current = _DEPRECATED[name]
        warnings.warn(
            f"{name} is deprecated, use {current} instead.", DeprecationWarning, stacklevel=2
        )
        value: str = globals()[current]
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
