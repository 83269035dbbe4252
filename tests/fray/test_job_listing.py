"""`Client.list_jobs()`: every job the backend knows, as `JobSummary` values."""

from __future__ import annotations

import threading
import time

import pytest

from fray_ray.cluster import EmbeddedCluster, WorkerSpec, cpu_worker
from fray_ray.fray import Entrypoint, FrayIrisClient, JobRequest, JobStatus, JobSummary, LocalClient


@pytest.fixture(scope="module")
def cluster_workers() -> tuple[WorkerSpec, ...]:
    return (cpu_worker("cpu-0", cpu=2),)


def test_iris_client_lists_every_clients_jobs_with_times(cluster: EmbeddedCluster, iris: FrayIrisClient) -> None:
    other = FrayIrisClient(cluster.address, token=cluster.token, user="someone-else")
    try:
        done = other.submit(JobRequest(name="listed-done", entrypoint=Entrypoint.from_callable(print, args=("x",))))
        done.wait(timeout=120)
        failing = iris.submit(JobRequest(name="listed-fails", entrypoint=Entrypoint.from_callable(
            int, args=("not a number",))))
        assert failing.wait(timeout=120, raise_on_failure=False) is JobStatus.FAILED
        jobs = {job.job_id: job for job in iris.list_jobs()}
    finally:
        other.shutdown()
    assert jobs[done.job_id].status is JobStatus.SUCCEEDED  # another user's job is listed too
    assert jobs[done.job_id].parent_job is None
    started, finished = jobs[done.job_id].started_at, jobs[done.job_id].finished_at
    assert started is not None and finished is not None and started <= finished <= time.time() + 1
    assert jobs[failing.job_id].status is JobStatus.FAILED and jobs[failing.job_id].error


def test_local_client_lists_its_unfinished_jobs(client: LocalClient) -> None:
    assert client.list_jobs() == []
    gate = threading.Event()  # the job runs on a thread of this process until the test opens it
    handle = client.submit(JobRequest(name="waiter", entrypoint=Entrypoint.from_callable(gate.wait, args=(120,))))
    try:
        (listed,) = client.list_jobs()
        assert listed == JobSummary(handle.job_id, listed.status) and listed.status in (JobStatus.PENDING,
                                                                                          JobStatus.RUNNING)
    finally:
        gate.set()
    handle.wait(timeout=120)


def test_job_summary_needs_an_id() -> None:
    with pytest.raises(ValueError):
        JobSummary("", JobStatus.RUNNING)
