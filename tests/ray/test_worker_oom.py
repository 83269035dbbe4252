"""A worker killed by the kernel's OOM killer is reported as OutOfMemoryError naming the task."""

from __future__ import annotations

import os
import signal

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
