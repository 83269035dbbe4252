"""An embedded Iris-compatible cluster: a controller and local workers on one machine.

It serves Iris's `ControllerService` and `EndpointService` over Connect, so the Iris client in
`fray_ray.iris` (or the real one from PyPI) runs against it unchanged. One call starts it:

    >>> from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker, tpu_slice
    >>> config = ClusterConfig(workers=(cpu_worker(cpu=2), *tpu_slice("v5p-16", "tpu-a")))
    >>> with EmbeddedCluster(config) as cluster:
    ...     len(cluster.workers())
    3

`python -m fray_ray.cluster` runs the same thing in the foreground.
"""

from fray_ray.cluster._config import ClusterConfig, GpuSpec, TpuSpec, WorkerSpec, cpu_worker, cpu_workers, parse_bytes
from fray_ray.cluster._controller import EmbeddedController, WorkerStatus
from fray_ray.cluster._devices import gpu_host, gpu_hosts, tpu_slice
from fray_ray.cluster._embedded import ClusterLifecycle, EmbeddedCluster, start_cluster
from fray_ray.cluster._layout import config_from_mapping, load_config_file

__all__ = [
    "ClusterConfig",
    "ClusterLifecycle",
    "EmbeddedCluster",
    "EmbeddedController",
    "GpuSpec",
    "TpuSpec",
    "WorkerSpec",
    "WorkerStatus",
    "config_from_mapping",
    "cpu_worker",
    "cpu_workers",
    "gpu_host",
    "gpu_hosts",
    "load_config_file",
    "parse_bytes",
    "start_cluster",
    "tpu_slice",
]

for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("fray_ray.cluster."):
        try:
            _obj.__module__ = "fray_ray.cluster"
        except (AttributeError, TypeError):
            pass
del _name, _obj
