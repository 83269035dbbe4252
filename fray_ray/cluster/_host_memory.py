"""Each simulated host's shared-memory directory, so objects between simulated hosts move as
between machines.

A process reads another's large buffers in place only when both name the same shared-memory
directory (`FRAY_RAY_SHARED_MEMORY_DIR`, default `/dev/shm`): that is how the runtime tells
"this host" from "another host". Simulated hosts all live on this machine, so left alone every
one of them would share the driver's `/dev/shm` and a transfer between two of them would be a
memory map, which no real cluster has. Here each simulated host other than the driver's own
gets a directory of its own, made on first use below a per-cluster directory
(`<base>/fray-ray-cluster-<random>/<worker id>`, mode 0700), and its tasks are told so through
the variable. Workers advertised at the driver's address (the single worker `init()` starts,
the head node of `cluster_utils.Cluster`) are the driver's host and keep its directory, so
one-host performance is unchanged.

The per-cluster directory carries the owner's pid like the cluster's temp dir, so it is removed
when the cluster stops, by the reaper if the owner dies, and by the next cluster otherwise.
A task's own environment (a job's or a runtime_env's `env_vars`) still wins over this.
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading

from fray_ray.cluster._paths import path_inside
from fray_ray.cluster._reaper import OWNER_FILE, TEMP_PREFIX, remove_orphaned_dirs

#: The variable the runtime reads its shared-memory directory from ("" turns sharing off).
SHARED_MEMORY_DIR_ENV = "FRAY_RAY_SHARED_MEMORY_DIR"
DEFAULT_SHARED_MEMORY_DIR = "/dev/shm"


def base_shared_memory_dir() -> str | None:
    """The directory this process (the driver's host) shares, or None when sharing is off."""
    directory = os.environ.get(SHARED_MEMORY_DIR_ENV, DEFAULT_SHARED_MEMORY_DIR)
    return directory if directory and os.path.isdir(directory) else None


class HostMemoryDirs:
    """The shared-memory directories of one cluster's simulated hosts. Thread-safe.

    `for_host` answers None for the driver's own host (its tasks inherit the driver's
    directory) and when sharing is off; `remove` deletes every directory made."""

    def __init__(self, driver_host: str, base: str | None = None) -> None:
        self.driver_host = driver_host
        self._base = base if base is not None else base_shared_memory_dir()
        self._lock = threading.Lock()  # guards _root_made and _made
        #: Named now (the reaper is told it at start), made when a host first needs it.
        self.root = os.path.join(self._base, TEMP_PREFIX + secrets.token_hex(8)) if self._base else None
        self._root_made = False
        self._made: dict[str, str] = {}

    def for_host(self, worker_id: str, host: str) -> str | None:
        """The shared-memory directory of the simulated host `worker_id` advertised at `host`.

        Raises OSError if it cannot be made, ValueError for a worker id that is no file name."""
        if self._base is None or host == self.driver_host:
            return None
        if not worker_id or "/" in worker_id or worker_id in (".", ".."):
            raise ValueError(f"{worker_id!r} cannot name a shared-memory directory")
        with self._lock:
            made = self._made.get(worker_id)
            if made is not None:
                return made
            root = self._make_root()
            path = path_inside(root, worker_id)
            os.mkdir(path, 0o700)
            self._made[worker_id] = path
            return path

    def _make_root(self) -> str:
        assert self._base is not None and self.root is not None
        if not self._root_made:
            remove_orphaned_dirs(self._base)  # left by clusters whose owner was killed
            os.mkdir(self.root, 0o700)  # a fresh random name: fails rather than adopt another's
            self._root_made = True
            with open(os.path.join(self.root, OWNER_FILE), "w") as owner:
                owner.write(str(os.getpid()))
        return self.root

    def remove(self) -> None:
        """Delete every host's directory (and what its tasks left there). Idempotent."""
        with self._lock:
            made, self._root_made = self._root_made, False
            self._made.clear()
        if made and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
