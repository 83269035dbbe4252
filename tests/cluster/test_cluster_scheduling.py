"""Placement on real workers: packing, constraints, devices, unsatisfiable requests, latency."""

from __future__ import annotations

import time

import pytest
from cluster_helpers import job_name, log_json, sh, wait_finished, wait_for, wait_state, wait_tasks

from fray_ray.cluster import cpu_worker, gpu_host
from fray_ray.iris.errors import FailedPrecondition
from fray_ray.iris.types import (
    Constraint,
    ConstraintMode,
    ConstraintOp,
    GpuDevice,
    JobState,
    ResourceSpec,
    TaskState,
    TpuDevice,
)

GIB = 1024**3
PRINT_GPUS = 'echo "ENV {\\"gpus\\": \\"$CUDA_VISIBLE_DEVICES\\", \\"set\\": \\"${CUDA_VISIBLE_DEVICES+yes}\\"}"'


def test_resources_are_packed_and_released(make_cluster, tmp_path) -> None:
    cluster = make_cluster(cpu_worker("small", cpu=1, memory="2g", disk="1g"))
    gate = tmp_path / "go"
    with cluster.client() as client:
        one_cpu = ResourceSpec(cpu_millicores=1000, memory_bytes=GIB)
        first = client.launch_job(
            sh(f"while [ ! -e {gate} ]; do sleep 0.02; done", name=job_name("first"), resources=one_cpu)
        )
        wait_state(client, first, JobState.RUNNING)
        second = client.launch_job(sh("true", name=job_name("second"), resources=one_cpu))
        assert "cpu" in wait_for(lambda: client.job_status(second).pending_reason, what="a pending reason")
        assert client.job_state(second) == JobState.PENDING
        half = ResourceSpec(cpu_millicores=0, memory_bytes=GIB + GIB // 2)
        third = client.launch_job(sh("true", name=job_name("third"), resources=half))
        assert "memory" in wait_for(lambda: client.job_status(third).pending_reason, what="a pending reason")
        assert client.job_state(third) == JobState.PENDING
        gate.touch()
        for job_id in (first, second, third):
            assert wait_finished(client, job_id).state == JobState.SUCCEEDED


def test_constraints_route_tasks(make_cluster) -> None:
    cluster = make_cluster(
        cpu_worker("east", cpu=4, attributes={"region": "us-east1", "rank": 1, "preemptible": "true"}),
        cpu_worker("west", cpu=4, attributes={"region": "us-west1", "rank": 2}),
    )
    cases = {
        "eq": ([Constraint("region", ConstraintOp.EQ, "us-west1")], "west"),
        "ne": ([Constraint("region", ConstraintOp.NE, "us-west1")], "east"),
        "exists": ([Constraint("preemptible", ConstraintOp.EQ, "true")], "east"),
        "not-exists": ([Constraint("zone", ConstraintOp.NOT_EXISTS), Constraint("rank", ConstraintOp.GT, 1)], "west"),
        "in": ([Constraint("region", ConstraintOp.IN, values=("us-west1", "eu"))], "west"),
        "gt": ([Constraint("rank", ConstraintOp.GT, 1)], "west"),
        "ge": ([Constraint("rank", ConstraintOp.GE, 2)], "west"),
        "lt": ([Constraint("rank", ConstraintOp.LT, 2)], "east"),
        "le": ([Constraint("rank", ConstraintOp.LE, 1)], "east"),
        "preferred": ([Constraint("region", ConstraintOp.EQ, "us-west1", mode=ConstraintMode.PREFERRED)], "west"),
    }
    with cluster.client() as client:
        jobs = {
            case: client.launch_job(sh("true", name=job_name(f"c-{case}"), constraints=constraints, replicas=2))
            for case, (constraints, _) in cases.items()
        }
        for case, job_id in jobs.items():
            assert wait_finished(client, job_id).state == JobState.SUCCEEDED
            assert {t.worker_id for t in client.list_tasks(job_id)} == {cases[case][1]}, case
        with pytest.raises(FailedPrecondition, match="region == mars"):
            client.launch_job(sh("true", name=job_name("mars"), constraints=[Constraint("region", value="mars")]))
        # a PREFERRED constraint no worker satisfies does not block placement
        soft = [Constraint("region", value="mars", mode=ConstraintMode.PREFERRED)]
        assert (
            wait_finished(client, client.launch_job(sh("true", name=job_name("soft"), constraints=soft))).state
            == JobState.SUCCEEDED
        )


def test_requests_no_worker_can_ever_satisfy_are_rejected(make_cluster) -> None:
    cluster = make_cluster(cpu_worker("only", cpu=2, memory="4g", disk="10g"), gpu_host("A100", 2, worker_id="gpu"))
    with cluster.client() as client:
        cases = {
            "cpu": ResourceSpec(cpu_millicores=64_000),
            "memory": ResourceSpec(memory_bytes=1024 * GIB),
            "disk": ResourceSpec(disk_bytes=1024 * GIB),
            "device-type == tpu": ResourceSpec(device=TpuDevice("v5p-16")),
            "device-variant == H100": ResourceSpec(device=GpuDevice("H100", 1)),
            "gpu": ResourceSpec(device=GpuDevice("A100", 4)),
        }
        for missing, resources in cases.items():
            with pytest.raises(FailedPrecondition, match=missing):
                client.launch_job(sh("true", name=job_name("impossible"), resources=resources))
        with pytest.raises(FailedPrecondition, match="group"):
            client.launch_job(
                sh(
                    "true",
                    name=job_name("gang"),
                    replicas=2,
                    coscheduling_group_by="pool",
                    resources=ResourceSpec(cpu_millicores=1000, device=GpuDevice("A100", 2)),
                )
            )
        assert client.list_jobs("/tester/") == []  # nothing was left pending


def test_gpu_tasks_get_their_own_devices(make_cluster) -> None:
    cluster = make_cluster(cpu_worker("cpu", cpu=4), gpu_host("H100", 4, worker_id="gpu", leafgroup="lg-1"))
    with cluster.client() as client:
        two_gpus = ResourceSpec(cpu_millicores=100, device=GpuDevice("H100", 2))
        job_id = client.launch_job(
            sh(PRINT_GPUS + "; sleep 0.3", name=job_name("gpus"), replicas=2, resources=two_gpus)
        )
        assert wait_finished(client, job_id).state == JobState.SUCCEEDED
        tasks = client.list_tasks(job_id)
        assert {t.worker_id for t in tasks} == {"gpu"}
        seen = [log_json(client, t.task_id)[0]["gpus"] for t in tasks]
        assert sorted(seen) == ["0,1", "2,3"]  # disjoint devices while both ran
        plain = client.launch_job(sh(PRINT_GPUS, name=job_name("plain"), resources=ResourceSpec(cpu_millicores=100)))
        wait_finished(client, plain)
        (task,) = client.list_tasks(plain)
        assert task.worker_id == "cpu"  # CPU work stays off the accelerator host
        assert log_json(client, plain)[0]["set"] == ""


def test_cpu_task_on_a_gpu_host_sees_no_gpus(make_cluster) -> None:
    cluster = make_cluster(gpu_host("H100", 2, worker_id="gpu"))
    with cluster.client() as client:
        job_id = client.launch_job(sh(PRINT_GPUS, name=job_name("hidden"), resources=ResourceSpec(cpu_millicores=100)))
        wait_finished(client, job_id)
        assert log_json(client, job_id)[0] == {"gpus": "", "set": "yes"}


def test_placement_is_event_driven(client) -> None:
    """A freed slot is reused at once: no fixed scheduling tick between back-to-back tasks."""
    started = time.perf_counter()
    job_id = client.launch_job(
        sh("true", name=job_name("quick"), replicas=20, resources=ResourceSpec(cpu_millicores=4000))
    )
    status = wait_finished(client, job_id)
    elapsed = time.perf_counter() - started
    assert status.state == JobState.SUCCEEDED
    print(f"20 sequential tasks (one slot) in {elapsed * 1000:.0f} ms")
    assert elapsed < 15  # 20 forks even on a loaded machine; a 1 s tick would need 20 s
    tasks = wait_tasks(client, job_id, lambda ts: all(t.state == TaskState.SUCCEEDED for t in ts))
    assert len(tasks) == 20
