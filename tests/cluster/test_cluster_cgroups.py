"""Per-attempt memory cgroups: a job's memory request is a hard limit, and an OOM kill says so."""

from __future__ import annotations

import os
import sys

import pytest
from cluster_helpers import job_name, wait_finished

from fray_ray.cluster._cgroups import OOM_HEADLINE, MemoryCgroups
from fray_ray.iris.entrypoint import command_entrypoint
from fray_ray.iris.types import JobSpec, JobState, ResourceSpec, TaskState

MiB = 1024 * 1024

#: Touches every page of 400 MiB, well past a 64 MiB limit.
ALLOCATE = "b = bytearray(400 * 1024 * 1024); print('allocated', len(b))"


def _cgroups_or_skip() -> MemoryCgroups:
    cgroups = MemoryCgroups.open()
    if cgroups is None:
        pytest.skip("this machine does not let this process make a memory cgroup (no writable memory "
                    "controller in its cgroup hierarchy, or FRAY_RAY_MEMORY_CGROUPS=0)")
    return cgroups


def _python_job(name: str, code: str, memory: int) -> JobSpec:
    return JobSpec(
        name=job_name(name),
        entrypoint=command_entrypoint([sys.executable, "-c", code]),
        resources=ResourceSpec(cpu_millicores=100, memory_bytes=memory),
    )


def test_an_attempt_past_its_memory_request_is_reported_oom_killed(make_cluster) -> None:
    _cgroups_or_skip().close()
    cluster = make_cluster()
    with cluster.client() as client:
        job_id = client.launch_job(_python_job("hog", ALLOCATE, 64 * MiB))
        status = wait_finished(client, job_id, timeout=120)
        assert status.state == JobState.FAILED
        (task,) = client.list_tasks(job_id)
        assert task.state == TaskState.FAILED and task.exit_code == 137
        assert task.error.startswith(OOM_HEADLINE)
        assert "memory limit 64.0 MiB" in task.error and "peak usage" in task.error
        assert OOM_HEADLINE in status.error  # the job's error names the task and the cause


def test_an_attempt_within_its_request_runs_and_a_plain_kill_is_not_oom(make_cluster) -> None:
    cgroups = _cgroups_or_skip()
    cgroups.close()
    cluster = make_cluster()
    with cluster.client() as client:
        fits = client.launch_job(_python_job("fits", "b = bytearray(32 * 1024 * 1024); print(len(b))", 256 * MiB))
        assert wait_finished(client, fits, timeout=120).state == JobState.SUCCEEDED
        killed = client.launch_job(_python_job("killed", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
                                               256 * MiB))
        wait_finished(client, killed, timeout=120)
        (task,) = client.list_tasks(killed)
        assert task.exit_code == 137 and OOM_HEADLINE not in task.error
    # Every attempt's cgroup, and the cluster's, are gone once the cluster stops.
    cluster.stop()
    parent = os.path.dirname(cgroups.path)
    assert not [n for n in os.listdir(parent) if n.startswith(f"fray-ray-{os.getpid()}-")]


def test_a_cgroup_is_made_only_for_attempts_that_ask_for_memory(tmp_path) -> None:
    cgroups = _cgroups_or_skip()
    try:
        attempt = cgroups.attempt(7, 128 * MiB)
        assert attempt is not None and os.path.isdir(attempt.path)
        argv = attempt.wrap(["python", "-c", "pass"])
        assert argv[0] == "/bin/sh" and argv[3].endswith("cgroup.procs") and argv[4:] == ("python", "-c", "pass")
        assert attempt.exit_report(1) == ""  # nothing was OOM-killed
        cgroups.release(7)
        assert not os.path.exists(attempt.path)
    finally:
        cgroups.close()
    assert not os.path.exists(cgroups.path)
