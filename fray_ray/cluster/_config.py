"""What an embedded cluster is made of: its workers (simulated hosts) and its settings.

Values only; nothing here starts anything. `cpu_worker` sizes a plain host from this machine;
`fray_ray.cluster._devices` builds TPU slices and GPU hosts.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fray_ray.iris.types import AttributeValue

# Iris's well-known worker attribute keys.
ATTR_DEVICE_TYPE = "device-type"
ATTR_DEVICE_VARIANT = "device-variant"
ATTR_PREEMPTIBLE = "preemptible"
ATTR_REGION = "region"
ATTR_ZONE = "zone"
ATTR_TPU_NAME = "tpu-name"
ATTR_TPU_WORKER_ID = "tpu-worker-id"
ATTR_TPU_TOPOLOGY = "tpu-topology"
ATTR_TPU_VM_COUNT = "tpu-vm-count"
ATTR_GPU_VARIANT = "gpu-variant"
ATTR_GPU_COUNT = "gpu-count"
#: fray_ray's own: set on the embedded cluster's accelerator hosts, whose CPUs, memory and
#: devices are declared, not this machine's (its tasks all run on this machine's cores).
ATTR_SIMULATED = "simulated"

_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
#: What the worker template imports before it serves its first fork: fray_ray's executor
#: entry point (with cloudpickle and msgpack), the actor host and the actor server stack, what
#: an actor imports as it registers its endpoint (the HTTP client's OpenTelemetry hooks, the
#: IDNA codec for host names: 20 ms and 1 MiB of every actor otherwise), and numpy. A module
#: that is not installed is skipped. Names only: the cluster never imports them itself.
DEFAULT_TEMPLATE_PRELOAD = (
    "fray_ray._private.workers.worker_start",
    "cloudpickle",
    "msgpack",
    "fray_ray._private.workers.actor_host",
    "fray_ray.fray.iris_backend",
    "fray_ray.iris.actor_server",
    "fray_ray.iris.endpoints",
    "pyqwest._glue",
    "opentelemetry.propagate",
    "opentelemetry.metrics",
    "opentelemetry.trace",
    "encodings.idna",
    "concurrent.futures.thread",
    "numpy",
)
_WORKER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)


def parse_bytes(value: int | float | str) -> int:
    """`8g`, `512MiB`, `1.5G`, `1024` → bytes (binary multiples)."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"a size cannot be negative: {value!r}")
        return int(value)
    match = _SIZE.match(value)
    if not match:
        raise ValueError(f"not a size: {value!r} (use e.g. 512m, 8g, 16GiB)")
    number, unit, _ = match.groups()
    return int(float(number) * 1024 ** "_kmgtp".index(unit.lower() or "_"))


def machine_cpu_millicores() -> int:
    """The cores this process may use, in millicores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, cores) * 1000


def machine_memory_bytes() -> int:
    """Physical memory of this machine (8 GiB when it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


def machine_disk_bytes(path: str | None = None) -> int:
    """Free space where task workdirs go."""
    try:
        return shutil.disk_usage(path or tempfile.gettempdir()).free
    except OSError:
        return 100 * 1024**3


@dataclass(frozen=True)
class GpuSpec:
    """Simulated GPUs on one host: `count` devices of `variant` (e.g. H100)."""

    variant: str
    count: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a GPU host needs at least one GPU, got {self.count}")
        if not self.variant:
            raise ValueError("a GPU host needs a variant, e.g. 'H100'")


@dataclass(frozen=True)
class TpuSpec:
    """One host of a simulated TPU slice: `chips` chips of slice `slice_name`, host `worker_index`."""

    variant: str
    slice_name: str
    worker_index: int
    chips: int

    def __post_init__(self) -> None:
        if self.chips < 1:
            raise ValueError(f"a TPU host needs at least one chip, got {self.chips}")
        if self.worker_index < 0:
            raise ValueError(f"tpu worker index must be >= 0, got {self.worker_index}")


def _check_slices_are_named_apart(workers: Sequence[WorkerSpec]) -> None:
    """ValueError unless each TPU slice has a name of its own: the hosts sharing a slice name
    are one slice (one variant, each host index once), as Ray's slice resources assume."""
    seen: dict[str, tuple[str, set[int]]] = {}
    for worker in workers:
        if worker.tpu is None:
            continue
        variant, indices = seen.setdefault(worker.tpu.slice_name, (worker.tpu.variant, set()))
        if variant != worker.tpu.variant or worker.tpu.worker_index in indices:
            raise ValueError(f"two TPU slices are named {worker.tpu.slice_name!r}: give each slice a name of its own")
        indices.add(worker.tpu.worker_index)


@dataclass(frozen=True)
class WorkerSpec:
    """One local worker standing in for a host: its capacity, attributes and devices.

    `device_env` is added to the environment of tasks that request this worker's device
    (TPU_* for TPU hosts; a TPU host's other tasks get its TPU_* variables alone, which say
    which slice and host they run on); GPU tasks also get CUDA_VISIBLE_DEVICES for the GPUs
    they hold.
    """

    worker_id: str
    cpu_millicores: int
    memory_bytes: int
    disk_bytes: int
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    gpu: GpuSpec | None = None
    tpu: TpuSpec | None = None
    device_env: Mapping[str, str] = field(default_factory=dict)
    host: str | None = None
    """The address this worker advertises and binds (None: the cluster chooses)."""

    def __post_init__(self) -> None:
        if not _WORKER_ID.match(self.worker_id):
            raise ValueError(f"invalid worker id {self.worker_id!r}: use letters, digits, '.', '_', ':' or '-'")
        for name in ("cpu_millicores", "memory_bytes", "disk_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} of worker {self.worker_id} cannot be negative")
        if self.gpu is not None and self.tpu is not None:
            raise ValueError(f"worker {self.worker_id} cannot hold both GPUs and TPUs")
        object.__setattr__(self, "attributes", dict(self.attributes))
        object.__setattr__(self, "device_env", dict(self.device_env))

    @property
    def device_type(self) -> str:
        return "gpu" if self.gpu is not None else "tpu" if self.tpu is not None else "cpu"


def cpu_worker(
    worker_id: str = "cpu-0",
    *,
    cpu: float | None = None,
    memory: int | str | None = None,
    disk: int | str | None = None,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> WorkerSpec:
    """A plain CPU host; `cpu` in cores, sizes as bytes or strings like `8g`. Defaults: this machine.

    >>> cpu_worker("cpu-0", cpu=4, memory="8g").cpu_millicores
    4000
    """
    attrs: dict[str, AttributeValue] = {ATTR_DEVICE_TYPE: "cpu", ATTR_PREEMPTIBLE: "false"}
    attrs.update(attributes or {})
    return WorkerSpec(
        worker_id=worker_id,
        cpu_millicores=machine_cpu_millicores() if cpu is None else int(round(cpu * 1000)),
        memory_bytes=machine_memory_bytes() if memory is None else parse_bytes(memory),
        disk_bytes=machine_disk_bytes() if disk is None else parse_bytes(disk),
        attributes=attrs,
    )


def cpu_workers(count: int, *, prefix: str = "cpu", **kwargs: object) -> tuple[WorkerSpec, ...]:
    """`count` identical CPU hosts named `<prefix>-0`, `<prefix>-1`, ... (see `cpu_worker`)."""
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    return tuple(cpu_worker(f"{prefix}-{i}", **kwargs) for i in range(count))  # type: ignore[arg-type]


@dataclass(frozen=True)
class ClusterConfig:
    """Settings of one embedded cluster. All defaults are safe for a laptop.

    - `workers`: the simulated hosts; empty means one CPU worker sized from this machine.
    - `host`/`port`: where the controller listens (loopback, a free port).
    - `auth`: require `Authorization: Bearer <token>` on every RPC; `token` None mints one.
    - `task_python`: `IRIS_PYTHON` for tasks (default: this interpreter).
    - `work_dir`: parent of the cluster's temp dir (task workdirs live inside it).
    - `client_freshness_days`: reject root jobs whose `client_revision_date` is older than this
      many days (None accepts any date).
    - `read_max_bytes`: largest request body accepted (decompressed).
    - `max_log_lines_per_attempt`: captured output kept per task attempt (oldest dropped).
    - `keep_workdirs`: leave each attempt's workdir until the cluster stops.
    - `max_finished_jobs`: finished root jobs (with their subtrees and logs) remembered; the
      oldest are forgotten beyond this, so a long session's memory stays bounded.
    - `inherit_env`: tasks start from this process's environment (as Iris's process runtime).
    - `distinct_hosts`: with several workers, each advertises and binds a loopback address of
      its own (127.0.0.2, 127.0.0.3, ...; as IRIS_ADVERTISE_HOST and IRIS_BIND_HOST), as if it
      were a host of its own, when the cluster listens on 127.0.0.1 and a worker sets no
      `host`. A single worker is this machine itself (127.0.0.1), as Ray's one-node cluster.
    - `run_setup_scripts`: run each job's setup scripts before its command, as Iris's
      container runtime does (False: skip them, as Iris's local process runtime does).
    - `worker_template`: fork task processes that run the task Python on a script (executors,
      actor hosts, callable jobs) from a warm template process that has imported
      `worker_template_preload`, instead of starting an interpreter each time; device-shaped
      tasks and other commands always start fresh. `FRAY_RAY_WORKER_TEMPLATE=0` turns it off
      too (for code that is not fork-safe).
    - `worker_template_preload`: modules the template imports (those that fail are skipped);
      all are imported before the template serves its first fork.
    - `worker_template_after`: launches that could fork but start fresh before the template
      does; it starts along with the last of them (0: with the cluster). A template costs an
      interpreter's memory and an import, which pay off only for a session that starts more
      processes: one that runs on a worker or two never has one.
    - `dashboard`: serve the web dashboard at the controller's address (`/`), behind the same
      token (a login form, or the token link `EmbeddedCluster.dashboard_url`).
    """

    workers: tuple[WorkerSpec, ...] = ()
    host: str = "127.0.0.1"
    port: int = 0
    auth: bool = True
    token: str | None = None
    task_python: str | None = None
    work_dir: str | None = None
    advertise_host: str = "127.0.0.1"
    client_freshness_days: int | None = None
    read_max_bytes: int = 64 * 1024 * 1024
    max_log_lines_per_attempt: int = 10_000
    keep_workdirs: bool = False
    inherit_env: bool = True
    max_finished_jobs: int = 10_000
    distinct_hosts: bool = True
    run_setup_scripts: bool = True
    worker_template: bool = True
    worker_template_preload: tuple[str, ...] = DEFAULT_TEMPLATE_PRELOAD
    worker_template_after: int = 2
    dashboard: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "workers", tuple(self.workers))
        ids = [w.worker_id for w in self.workers]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate worker ids: {', '.join(duplicates)}")
        _check_slices_are_named_apart(self.workers)
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.read_max_bytes < 1024:
            raise ValueError("read_max_bytes must be at least 1024")
        if self.max_finished_jobs < 1:
            raise ValueError("max_finished_jobs must be at least 1")
        if self.max_log_lines_per_attempt < 0:
            raise ValueError("max_log_lines_per_attempt cannot be negative")
        if self.client_freshness_days is not None and self.client_freshness_days < 0:
            raise ValueError("client_freshness_days cannot be negative")
        if self.token is not None and not self.token:
            raise ValueError("token cannot be empty; pass None to mint one")
        if self.worker_template_after < 0:
            raise ValueError("worker_template_after cannot be negative")
        if isinstance(self.worker_template_preload, str):
            raise TypeError("worker_template_preload is a sequence of module names, not one string")
        object.__setattr__(self, "worker_template_preload", tuple(self.worker_template_preload))
        bad = [m for m in self.worker_template_preload if not isinstance(m, str) or not _MODULE_NAME.match(m)]
        if bad:
            raise ValueError(f"worker_template_preload holds names that are not module names: {bad}")

    def effective_workers(self) -> tuple[WorkerSpec, ...]:
        return self.workers or (cpu_worker(),)

    def worker_hosts(self) -> dict[str, str]:
        """The address each worker advertises and binds, by worker id."""
        hosts: dict[str, str] = {}
        workers = self.effective_workers()
        # One worker is this machine (Ray's single node, driver included); several are hosts.
        distinct = self.distinct_hosts and self.host == LOOPBACK and len(workers) > 1
        for index, worker in enumerate(workers):
            if worker.host:
                hosts[worker.worker_id] = worker.host
            elif distinct:
                hosts[worker.worker_id] = simulated_host(index)
            else:
                hosts[worker.worker_id] = self.advertise_host
        return hosts


LOOPBACK = "127.0.0.1"


def simulated_host(index: int) -> str:
    """The loopback address of simulated host `index`: 127.0.0.2, 127.0.0.3, ..."""
    number = index + 2
    if number >= 256 ** 3 - 1:
        raise ValueError(f"too many simulated hosts for 127.0.0.0/8: {index + 1}")
    return f"127.{number >> 16 & 255}.{number >> 8 & 255}.{number & 255}"
