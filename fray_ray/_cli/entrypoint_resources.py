"""What a driver started by `fray-ray submit` holds on the cluster: Ray's entrypoint options.

As with `ray job submit`, the driver's own process takes no CPU, GPU or memory unless asked
(`--entrypoint-num-cpus`, `--entrypoint-num-gpus`, `--entrypoint-memory`,
`--entrypoint-resources`), so on a small cluster its first task does not wait behind it.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fray_ray.fray import ResourceConfig

__all__ = ["add_entrypoint_options", "entrypoint_resources"]


def add_entrypoint_options(parser: argparse.ArgumentParser) -> None:
    """Ray's `--entrypoint-*` options of `ray job submit` (with this CLI's older short names)."""
    parser.add_argument("--entrypoint-num-cpus", "--cpu", dest="cpu", type=float, default=0.0, metavar="CPUS",
                        help="CPUs the driver process holds, apart from its tasks and actors (default 0)")
    parser.add_argument("--entrypoint-num-gpus", dest="gpus", type=float, default=0.0, metavar="GPUS",
                        help="GPUs the driver process holds (a whole number on Iris; default 0)")
    parser.add_argument("--entrypoint-memory", "--memory", dest="memory", default="0", metavar="BYTES",
                        help="memory the driver process holds, in bytes or as 2g, 512m (default: none reserved)")
    parser.add_argument("--entrypoint-resources", dest="resources", default=None, metavar="JSON",
                        help="custom resources as a JSON object, e.g. '{\"special\": 1}': the driver runs on a "
                             "host that declares each of them")


def entrypoint_resources(options: argparse.Namespace) -> ResourceConfig:
    """The driver job's request. ValueError, naming the option, for a value Iris cannot hold."""
    # Imported here, as the rest of the CLI does: building the parser loads neither Fray nor the driver.
    from fray_ray._private.driver.nodes import required_attributes
    from fray_ray.fray import GpuConfig, ResourceConfig, parse_bytes

    cpu = _non_negative(options.cpu, "--entrypoint-num-cpus")
    gpus = _non_negative(options.gpus, "--entrypoint-num-gpus")
    if gpus != int(gpus):
        raise ValueError(f"--entrypoint-num-gpus must be a whole number on Iris, which hands out whole GPUs; got {gpus}")
    try:
        memory = parse_bytes(int(options.memory) if str(options.memory).isdigit() else str(options.memory))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--entrypoint-memory must be a number of bytes or a size such as 2g; got {options.memory!r}") from exc
    custom = _custom(options.resources)
    ram = f"{max(1, memory // (1 << 20))}m" if memory else "0"
    needs = required_attributes(custom.items())
    if gpus:
        return ResourceConfig(cpu=cpu, ram=ram, disk="1g", device=GpuConfig("auto", int(gpus)), required_attributes=needs)
    return ResourceConfig(cpu=cpu, ram=ram, disk="1g", required_attributes=needs)


def _non_negative(value: float, option: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{option} must be a number >= 0; got {value}")
    return value


def _custom(text: str | None) -> dict[str, float]:
    if text is None:
        return {}
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--entrypoint-resources must be a JSON object such as '{{\"special\": 1}}': {exc}") from exc
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for k, v in value.items()
    ):
        raise ValueError(f"--entrypoint-resources must map resource names to numbers >= 0; got {text}")
    reserved = sorted(set(value) & {"CPU", "GPU", "memory"})
    if reserved:
        raise ValueError(f"--entrypoint-resources cannot name {', '.join(reserved)}: use --entrypoint-num-cpus, "
                         "--entrypoint-num-gpus or --entrypoint-memory")
    return {k: float(v) for k, v in value.items()}
