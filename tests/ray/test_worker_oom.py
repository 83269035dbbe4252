"""A worker killed by the kernel's OOM killer is reported as OutOfMemoryError naming the task."""

from __future__ import annotations

import glob
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import fray_ray as ray
from fray_ray._private.driver.launcher import WORKER_MEMORY_OVERHEAD
from fray_ray._private.driver.worker_exits import worker_death_error
from fray_ray.cluster._cgroups import MemoryCgroups
from fray_ray.exceptions import OutOfMemoryError, RayError, WorkerCrashedError

MiB = 1024 * 1024


def _require_memory_cgroups() -> None:
    cgroups = MemoryCgroups.open()
    if cgroups is None:
        pytest.skip("this machine does not let this process make a memory cgroup (no writable memory "
                    "controller in its cgroup hierarchy, or FRAY_RAY_MEMORY_CGROUPS=0)")
    cgroups.close()


def test_a_task_past_its_memory_request_fails_with_out_of_memory_error() -> None:
    _require_memory_cgroups()
    ray.init(num_cpus=1)
    try:
        @ray.remote(memory=96 * MiB, max_retries=0)
        def hog() -> int:
            block = bytearray(800 * MiB)  # every page touched: far past the limit
            return len(block)

        @ray.remote(max_retries=0)
        def killed() -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        with pytest.raises(OutOfMemoryError) as raised:
            ray.get(hog.remote())
        message = str(raised.value)
        assert isinstance(raised.value, RayError)
        assert "Task hog" in message and "OOM killed" in message
        # The limit is what memory= asked for plus the worker process's own allowance.
        assert f"memory limit {96 + WORKER_MEMORY_OVERHEAD // MiB}.0 MiB" in message and "peak usage" in message
        # A SIGKILL that is not the OOM killer's stays a crash.
        with pytest.raises(WorkerCrashedError):
            ray.get(killed.remote())
        # The session goes on: tasks within their memory run, however little they asked for.
        @ray.remote(memory=10**6)
        def fits() -> int:
            return len(bytearray(32 * MiB))

        assert ray.get(fits.remote()) == 32 * MiB
    finally:
        ray.shutdown()


@pytest.mark.parametrize(
    ("exit_text", "expected"),
    [
        ("OOM killed: the task ran out of memory ...; memory limit 1.0 MiB, peak usage 1.0 MiB", OutOfMemoryError),
        ("Exit code 137: OOM killed (container exceeded memory limit)", OutOfMemoryError),  # Iris's worker
        ("Exit code 137: killed by SIGKILL (possibly OOM or resource limit)", WorkerCrashedError),
        ("killed by signal SIGKILL", WorkerCrashedError),
        ("", WorkerCrashedError),
    ],
)
def test_only_an_oom_kill_report_makes_out_of_memory_error(exit_text: str, expected: type) -> None:
    error = worker_death_error("f", 1, 4, exit_text)
    assert type(error) is expected
    if expected is OutOfMemoryError:
        assert "Task f" in str(error) and "attempt 1 of 4" in str(error)



def _cluster_cgroup() -> tuple[str, int]:
    """The memory cgroup this process's embedded cluster made for its attempts, and its version."""
    with open("/proc/self/cgroup") as f:
        lines = [line.split(":", 2) for line in f.read().splitlines()]
    candidates = [("/sys/fs/cgroup/memory", path, 1) for _, controllers, path in lines
                  if "memory" in controllers.split(",")]
    candidates += [(root, path, 2) for _, controllers, path in lines if controllers == ""
                   for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")]
    for root, own, version in candidates:
        found = glob.glob(os.path.join(root, own.lstrip("/"), f"fray-ray-{os.getpid()}-*"))
        if found:
            return found[0], version
    raise AssertionError("the embedded cluster made no memory cgroup, though the machine allows one")


@contextmanager
def _memory_runs_out_at(path: str, version: int, headroom: int) -> Iterator[None]:
    """Limit the cgroup enclosing the cluster's attempts to what they use now plus `headroom`:
    as a container's limit, or the machine's memory, would end them."""
    if version == 1:
        files = [name for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
                 if os.path.exists(os.path.join(path, name))]
        with open(os.path.join(path, "memory.usage_in_bytes")) as f:
            limit = int(f.read()) + headroom
        unlimited = "-1"
    else:
        files = ["memory.max"] + (["memory.swap.max"] if os.path.exists(os.path.join(path, "memory.swap.max")) else [])
        with open(os.path.join(path, "memory.current")) as f:
            limit = int(f.read()) + headroom
        unlimited = "max"
    for name in files:  # the memory limit first: v1 wants memsw at or above it
        with open(os.path.join(path, name), "w") as f:
            f.write("0" if name == "memory.swap.max" else str(limit))
    try:
        yield
    finally:
        for name in reversed(files):
            try:
                with open(os.path.join(path, name), "w") as f:
                    f.write(unlimited)
            except FileNotFoundError:  # the cluster is gone, and its cgroup with it
                pass


def test_an_oom_kill_of_a_task_that_asked_for_no_memory_is_out_of_memory_error() -> None:
    # A task with no memory= option is ended by the kernel's OOM killer because the memory
    # around the cluster ran out. The test makes that happen by limiting the cgroup that holds
    # the cluster's attempts (exhausting the machine would harm everything else on it).
    _require_memory_cgroups()
    ray.init(num_cpus=1)
    try:
        @ray.remote
        def warm() -> int:
            return os.getpid()

        @ray.remote(max_retries=0)
        def runs_out_of_memory() -> int:
            block = bytearray(800 * MiB)  # every page touched
            return len(block)

        ray.get(warm.remote())  # its worker runs, so what it uses is within the limit below
        with _memory_runs_out_at(*_cluster_cgroup(), headroom=160 * MiB):
            with pytest.raises(OutOfMemoryError) as raised:
                ray.get(runs_out_of_memory.remote())
        message = str(raised.value)
        assert "Task runs_out_of_memory" in message and "OOM killed" in message, message
        assert "no memory limit of its own" in message and "peak usage" in message, message
        assert ray.get(warm.remote()) > 0  # the session goes on
    finally:
        ray.shutdown()
