"""Building the driver runtime for init(): which cluster, which client, how big.

- local_mode: Fray's LocalClient; executors and actors are threads of this process.
- no address: an embedded Iris-compatible cluster started in this process.
- an address: a running Iris controller (ours or a real one).
- inside an Iris task: the task's controller, with the task's job as parent.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from fray_ray._private.driver import DriverRuntime


def _capacity(num_cpus: float | None, num_gpus: float | None, resources: Mapping[str, float] | None) -> dict[str, float]:
    for key in ("CPU", "GPU"):
        if resources and key in resources:
            raise ValueError(f"Use the '{key.lower()}s' argument instead of resources['{key}'] (num_cpus/num_gpus).")
    capacity = {
        "CPU": float(num_cpus if num_cpus is not None else (os.cpu_count() or 1)),
        "GPU": float(num_gpus or 0),
        "memory": float(_machine_memory() * 0.7),
        "object_store_memory": float(_machine_memory() * 0.3),
    }
    capacity.update({k: float(v) for k, v in (resources or {}).items()})
    return capacity


def _machine_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def start_driver(
    *,
    address: str | None,
    num_cpus: float | None,
    num_gpus: float | None,
    resources: Mapping[str, float] | None,
    namespace: str,
    runtime_env: Mapping[str, Any] | None,
    local_mode: bool,
    log_to_driver: bool,
) -> DriverRuntime:
    capacity = _capacity(num_cpus, num_gpus, resources)
    session_name = "session-" + os.urandom(4).hex()
    if local_mode:
        from fray_ray.fray.local_backend import LocalClient

        client = LocalClient(max_threads=256)
        runtime = DriverRuntime(
            client,
            capacity=capacity,
            namespace=namespace,
            session_name=session_name,
            log_to_driver=log_to_driver,
            address_info=_address_info("local_mode", session_name),
            warm_executors=0,
        )
        return runtime.start()
    raise NotImplementedError("only local_mode=True is available so far")


def _address_info(address: str, session_name: str) -> dict[str, Any]:
    return {
        "node_ip_address": "127.0.0.1",
        "raylet_ip_address": "127.0.0.1",
        "redis_address": None,
        "object_store_address": "",
        "raylet_socket_name": "",
        "webui_url": "",
        "session_dir": os.path.join("/tmp", "fray_ray", session_name),
        "metrics_export_port": 0,
        "gcs_address": address,
        "address": address,
        "dashboard_agent_listen_port": 0,
        "node_id": "",
    }
