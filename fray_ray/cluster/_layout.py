"""Cluster layouts written down: a `ClusterConfig` from a mapping or a JSON/TOML file.

    {"port": 0, "auth": true,
     "workers": [
       {"kind": "cpu", "count": 2, "cpu": 4, "memory": "8g", "attributes": {"region": "local"}},
       {"kind": "tpu", "variant": "v5p-16", "name": "tpu-a"},
       {"kind": "gpu", "variant": "H100", "count": 8, "hosts": 2, "pool": "gpu-a"}]}

In TOML the workers are `[[workers]]` tables. Unknown keys are errors, not silently ignored.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from typing import Any

from fray_ray.cluster._config import ClusterConfig, WorkerSpec, cpu_worker
from fray_ray.cluster._devices import gpu_hosts, tpu_slice

_CLUSTER_KEYS = {
    "host",
    "port",
    "auth",
    "token",
    "task_python",
    "work_dir",
    "advertise_host",
    "client_freshness_days",
    "read_max_bytes",
    "max_log_lines_per_attempt",
    "keep_workdirs",
    "inherit_env",
    "max_finished_jobs",
    "distinct_hosts",
    "run_setup_scripts",
    "dashboard",
    "workers",
}
_HOST_KEYS = {"cpu", "memory", "disk", "attributes"}
_WORKER_KEYS = {
    "cpu": _HOST_KEYS | {"kind", "id", "count", "prefix"},
    "tpu": _HOST_KEYS | {"kind", "variant", "name", "env", "preemptible"},
    "gpu": _HOST_KEYS | {"kind", "variant", "count", "hosts", "prefix", "pool", "leafgroup", "env", "preemptible"},
}


def _check_keys(what: str, entry: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ValueError(f"unknown key(s) in {what}: {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")


def workers_from_entry(entry: Mapping[str, Any], position: int = 0) -> tuple[WorkerSpec, ...]:
    """The workers one `workers` entry describes."""
    kind = entry.get("kind", "cpu")
    if kind not in _WORKER_KEYS:
        raise ValueError(f"worker entry {position}: kind must be cpu, tpu or gpu, got {kind!r}")
    _check_keys(f"worker entry {position} ({kind})", entry, _WORKER_KEYS[kind])
    host = {k: entry[k] for k in _HOST_KEYS if k in entry}
    if kind == "cpu":
        count = int(entry.get("count", 1))
        if "id" in entry:
            if count != 1:
                raise ValueError(f"worker entry {position}: 'id' names one worker; drop it or 'count'")
            return (cpu_worker(str(entry["id"]), **host),)
        prefix = str(entry.get("prefix", "cpu"))
        return tuple(cpu_worker(f"{prefix}-{i}", **host) for i in range(count))
    if kind == "tpu":
        if "variant" not in entry:
            raise ValueError(f"worker entry {position}: a TPU slice needs a 'variant', e.g. v5p-16")
        extra = {k: entry[k] for k in ("env", "preemptible") if k in entry}
        return tpu_slice(str(entry["variant"]), str(entry.get("name", f"tpu-{position}")), **host, **extra)
    extra = {k: entry[k] for k in ("hosts", "prefix", "pool", "leafgroup", "env", "preemptible") if k in entry}
    return gpu_hosts(str(entry.get("variant", "H100")), int(entry.get("count", 8)), **host, **extra)


def config_from_mapping(data: Mapping[str, Any], **overrides: Any) -> ClusterConfig:
    """A `ClusterConfig` from parsed JSON/TOML; `overrides` (non-None) win over the file."""
    _check_keys("cluster config", data, _CLUSTER_KEYS)
    values = {k: v for k, v in data.items() if k != "workers"}
    workers: list[WorkerSpec] = []
    for position, entry in enumerate(data.get("workers", ())):
        if not isinstance(entry, Mapping):
            raise ValueError(f"worker entry {position} must be a table/object")
        workers.extend(workers_from_entry(entry, position))
    values.update({k: v for k, v in overrides.items() if v is not None})
    if "workers" in values:
        workers.extend(values.pop("workers"))
    return ClusterConfig(workers=tuple(workers), **values)


def load_config_file(path: str | os.PathLike[str], **overrides: Any) -> ClusterConfig:
    """Read a `.json` or `.toml` cluster layout (see the module docstring)."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".toml"):
        data = tomllib.loads(raw.decode())
    else:
        data = json.loads(raw)
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: the top level must be an object/table")
    return config_from_mapping(data, **overrides)
