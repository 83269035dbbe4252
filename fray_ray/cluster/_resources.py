"""Resource bookkeeping: what a task needs (`Demand`), what it holds (`Allocation`), and what
each worker has free (`WorkerCapacity`).

CPU is in millicores, memory and disk in bytes; GPUs are individual device indices (so a task
can be told which ones are its own) and TPU chips a count. A TPU request for 0 chips means
every chip of the host, as Iris infers the count from the VM shape.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from fray_ray.cluster._config import WorkerSpec
from fray_ray.iris.types import GpuDevice, ResourceSpec, TpuDevice


def _gib(n: int) -> str:
    return f"{n / 1024**3:.3g} GiB"


def _cores(millicores: int) -> str:
    return f"{millicores / 1000:g} CPU"


@dataclass(frozen=True)
class Demand:
    """What one task of a job needs on its worker."""

    cpu_millicores: int = 0
    memory_bytes: int = 0
    disk_bytes: int = 0
    gpus: int = 0
    tpu: bool = False
    tpu_chips: int = 0

    def __post_init__(self) -> None:
        for name in ("cpu_millicores", "memory_bytes", "disk_bytes", "gpus", "tpu_chips"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} cannot be negative, got {getattr(self, name)}")

    @classmethod
    def of(cls, resources: ResourceSpec) -> Demand:
        device = resources.device
        gpus = max(1, device.count) if isinstance(device, GpuDevice) else 0
        is_tpu = isinstance(device, TpuDevice)
        chips = device.count if isinstance(device, TpuDevice) else 0
        return cls(resources.cpu_millicores, resources.memory_bytes, resources.disk_bytes, gpus, is_tpu, chips)

    def chips_on(self, spec: WorkerSpec) -> int:
        """TPU chips this demand takes on `spec` (all of them when the request says 0)."""
        if not self.tpu:
            return 0
        if self.tpu_chips:
            return self.tpu_chips
        return spec.tpu.chips if spec.tpu is not None else 1


@dataclass(frozen=True)
class Allocation:
    """Resources one task attempt holds on one worker until its process is gone."""

    worker_id: str
    cpu_millicores: int
    memory_bytes: int
    disk_bytes: int
    gpu_indices: tuple[int, ...] = ()
    tpu_chips: int = 0


class WorkerCapacity:
    """A worker's liveness and free resources. Mutated only under the controller's lock."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.alive = True
        self.free_cpu = spec.cpu_millicores
        self.free_memory = spec.memory_bytes
        self.free_disk = spec.disk_bytes
        self.free_gpus: list[int] = list(range(spec.gpu.count)) if spec.gpu is not None else []
        self.free_tpu_chips = spec.tpu.chips if spec.tpu is not None else 0

    @property
    def worker_id(self) -> str:
        return self.spec.worker_id

    def clone(self) -> WorkerCapacity:
        """An independent copy, for trying a gang placement before committing it."""
        other = copy.copy(self)
        other.free_gpus = list(self.free_gpus)
        return other

    def shortfall(self, demand: Demand) -> str | None:
        """Why `demand` does not fit in what is free now, or None if it fits."""
        return self._shortfall(
            demand, self.free_cpu, self.free_memory, self.free_disk, len(self.free_gpus), self.free_tpu_chips
        )

    def shortfall_when_empty(self, demand: Demand) -> str | None:
        """Why `demand` could never fit on this worker, or None if it could."""
        spec = self.spec
        return self._shortfall(
            demand,
            spec.cpu_millicores,
            spec.memory_bytes,
            spec.disk_bytes,
            spec.gpu.count if spec.gpu is not None else 0,
            spec.tpu.chips if spec.tpu is not None else 0,
        )

    def _shortfall(self, demand: Demand, cpu: int, memory: int, disk: int, gpus: int, chips: int) -> str | None:
        if demand.cpu_millicores > cpu:
            return f"cpu: needs {_cores(demand.cpu_millicores)}, has {_cores(cpu)}"
        if demand.memory_bytes > memory:
            return f"memory: needs {_gib(demand.memory_bytes)}, has {_gib(memory)}"
        if demand.disk_bytes > disk:
            return f"disk: needs {_gib(demand.disk_bytes)}, has {_gib(disk)}"
        if demand.gpus > gpus:
            return f"gpu: needs {demand.gpus} GPU(s), has {gpus}"
        if demand.tpu:
            wanted = demand.chips_on(self.spec)
            if wanted > chips or self.spec.tpu is None:
                return f"tpu: needs {wanted} chip(s), has {chips if self.spec.tpu is not None else 0}"
        return None

    def take(self, demand: Demand) -> Allocation:
        """Reserve `demand`; the caller has checked `shortfall` is None."""
        chips = demand.chips_on(self.spec)
        gpus = tuple(self.free_gpus[: demand.gpus])
        del self.free_gpus[: demand.gpus]
        self.free_cpu -= demand.cpu_millicores
        self.free_memory -= demand.memory_bytes
        self.free_disk -= demand.disk_bytes
        self.free_tpu_chips -= chips
        return Allocation(self.worker_id, demand.cpu_millicores, demand.memory_bytes, demand.disk_bytes, gpus, chips)

    def give(self, allocation: Allocation) -> None:
        """Return what `take` reserved."""
        self.free_cpu += allocation.cpu_millicores
        self.free_memory += allocation.memory_bytes
        self.free_disk += allocation.disk_bytes
        self.free_tpu_chips += allocation.tpu_chips
        self.free_gpus = sorted(set(self.free_gpus) | set(allocation.gpu_indices))

    def load(self) -> float:
        """Fraction of CPU in use, for spreading tasks over equally good workers."""
        total = self.spec.cpu_millicores
        return 0.0 if total == 0 else 1.0 - self.free_cpu / total
