"""Simulated TPU slices and GPU hosts: gang placement, gang restarts, device environments."""

from __future__ import annotations

import dataclasses

import pytest
from cluster_helpers import job_name, log_json, sh, wait_finished, wait_for, wait_state, wait_tasks

from fray_ray.cluster import ClusterConfig, gpu_hosts, tpu_slice
from fray_ray.iris.types import GpuDevice, JobState, ResourceSpec, TaskState, TpuDevice

TPU = ResourceSpec(cpu_millicores=1000, device=TpuDevice("v5p-16"))
TPU_KEYS = [
    "TPU_NAME",
    "TPU_WORKER_ID",
    "TPU_WORKER_HOSTNAMES",
    "TPU_ACCELERATOR_TYPE",
    "TPU_TOPOLOGY",
    "TPU_CHIPS_PER_HOST_BOUNDS",
    "TPU_HOST_BOUNDS",
    "JAX_PLATFORMS",
    "PJRT_DEVICE",
    "IRIS_TASK_ID",
]
PRINT_TPU_ENV = (
    "printf 'ENV {' ; " + " ; ".join(f'printf \'"{k}": "%s", \' "${k}"' for k in TPU_KEYS) + " ; echo '\"end\": 1}'"
)


def gang(name: str, script: str, **kwargs: object):
    kwargs.setdefault("resources", TPU)
    return sh(script, name=job_name(name), replicas=2, coscheduling_group_by="tpu-name", **kwargs)


def test_v5p_16_gang_starts_on_both_hosts_with_tpu_env(make_cluster) -> None:
    cluster = make_cluster(*tpu_slice("v5p-16", "tpu-a"))
    with cluster.client() as client:
        job_id = client.launch_job(gang("slice", PRINT_TPU_ENV))
        assert wait_finished(client, job_id).state == JobState.SUCCEEDED
        tasks = client.list_tasks(job_id)
        assert [t.worker_id for t in tasks] == ["tpu-a-w0", "tpu-a-w1"]
        # Each VM of the slice is a host of its own, with an address of its own.
        hosts = [t.worker_address for t in tasks]
        assert len(set(hosts)) == 2 and all(h.startswith("127.0.0.") and h != "127.0.0.1" for h in hosts)
        for index, task in enumerate(tasks):
            (env,) = log_json(client, task.task_id)
            assert env["TPU_NAME"] == "tpu-a" and env["TPU_WORKER_ID"] == str(index)
            assert env["TPU_WORKER_HOSTNAMES"] == ",".join(hosts)
            assert env["TPU_ACCELERATOR_TYPE"] == "v5p-16" and env["TPU_TOPOLOGY"] == "2x2x2"
            assert env["TPU_CHIPS_PER_HOST_BOUNDS"] == "2,2,1" and env["TPU_HOST_BOUNDS"] == "1,1,2"
            assert env["JAX_PLATFORMS"] == "tpu" and env["PJRT_DEVICE"] == "TPU"
            assert env["IRIS_TASK_ID"] == f"{task.task_id}:0"


def test_gang_starts_both_tasks_or_neither(make_cluster, tmp_path) -> None:
    cluster = make_cluster(*tpu_slice("v5p-16", "tpu-a"))
    gate = tmp_path / "go"
    with cluster.client() as client:
        blocker = client.launch_job(
            sh(f"while [ ! -e {gate} ]; do sleep 0.02; done", name=job_name("blocker"), resources=TPU)
        )
        wait_state(client, blocker, JobState.RUNNING)
        job_id = client.launch_job(gang("gang", "echo started"))
        reason = wait_for(lambda: client.job_status(job_id).pending_reason, what="a pending reason")
        assert "tpu-name" in reason
        tasks = client.list_tasks(job_id)
        assert client.job_state(job_id) == JobState.PENDING
        assert [t.state for t in tasks] == [TaskState.PENDING, TaskState.PENDING]
        assert client.task_logs(job_id) == []
        gate.touch()
        assert wait_finished(client, job_id).state == JobState.SUCCEEDED
        started = [t for t in client.list_tasks(job_id)]
        assert {t.worker_id for t in started} == {"tpu-a-w0", "tpu-a-w1"}
        assert all(len(t.attempts) == 1 for t in started)


def test_gang_restarts_together_after_one_task_fails(make_cluster) -> None:
    cluster = make_cluster(*tpu_slice("v5p-16", "tpu-a"))
    # Task 1 fails on its first attempt; task 0 would run for a minute unless killed.
    script = 'case "$IRIS_TASK_ID" in */1:0) sleep 0.2; exit 3;; */0:0) sleep 60;; esac; echo "done $IRIS_TASK_ID"'
    with cluster.client() as client:
        job_id = client.launch_job(gang("restart", script, max_retries_failure=1))
        status = wait_finished(client, job_id)
        assert status.state == JobState.SUCCEEDED, status.error
        first, second = client.list_tasks(job_id)
        assert [a.state for a in first.attempts] == [TaskState.COSCHED_FAILED, TaskState.SUCCEEDED]
        assert [a.state for a in second.attempts] == [TaskState.FAILED, TaskState.SUCCEEDED]
        assert first.current_attempt_id == second.current_attempt_id == 1
        assert "coscheduled sibling /tester/restart/1 failed" in first.attempts[0].error
        lines = sorted(l.data for l in client.task_logs(job_id))
        assert lines == [f"done {job_id}/0:1", f"done {job_id}/1:1"]


def test_gang_without_retries_fails_with_sibling_cosched_failed(make_cluster) -> None:
    cluster = make_cluster(*tpu_slice("v5p-16", "tpu-a"))
    script = 'case "$IRIS_TASK_ID" in */1:*) exit 4;; esac; sleep 60'
    with cluster.client() as client:
        job_id = client.launch_job(gang("doomed", script))
        status = wait_finished(client, job_id)
        assert status.state == JobState.FAILED and status.exit_code == 4
        states = [t.state for t in wait_tasks(client, job_id, lambda ts: all(t.state.finished for t in ts))]
        assert states == [TaskState.COSCHED_FAILED, TaskState.FAILED]


def test_gang_moves_to_another_slice_when_a_host_dies(make_cluster) -> None:
    cluster = make_cluster(*tpu_slice("v5p-16", "tpu-a"), *tpu_slice("v5p-16", "tpu-b"))
    with cluster.client() as client:
        job_id = client.launch_job(gang("mobile", "echo $TPU_NAME $IRIS_TASK_ID; sleep 60", max_retries_preemption=2))
        tasks = wait_tasks(client, job_id, lambda ts: all(t.state == TaskState.RUNNING for t in ts))
        wait_for(lambda: len(client.task_logs(job_id)) == 2, what="both hosts to run the script")
        first_slice = tasks[0].worker_id.rsplit("-w", 1)[0]
        cluster.kill_worker(tasks[1].worker_id)
        moved = wait_tasks(
            client, job_id, lambda ts: all(t.state == TaskState.RUNNING and t.current_attempt_id == 1 for t in ts)
        )
        other = "tpu-b" if first_slice == "tpu-a" else "tpu-a"
        assert [t.worker_id for t in moved] == [f"{other}-w0", f"{other}-w1"]
        assert [a.state for a in moved[0].attempts][:1] == [TaskState.COSCHED_FAILED]
        assert [a.state for a in moved[1].attempts][:1] == [TaskState.WORKER_FAILED]
        assert client.job_status(job_id).preemption_count == 1
        wait_for(lambda: len(client.task_logs(job_id)) == 4)
        client.terminate_job(job_id)


def test_gpu_gang_by_pool(make_cluster) -> None:
    cluster = make_cluster(*gpu_hosts("H100", 8, hosts=2, pool="pool-a", leafgroup="lg-a"))
    with cluster.client() as client:
        job_id = client.launch_job(
            sh(
                'echo "ENV {\\"gpus\\": \\"$CUDA_VISIBLE_DEVICES\\"}"',
                name=job_name("gpu-gang"),
                replicas=2,
                coscheduling_group_by="leafgroup",
                resources=ResourceSpec(cpu_millicores=1000, device=GpuDevice("H100", 8)),
            )
        )
        assert wait_finished(client, job_id).state == JobState.SUCCEEDED
        tasks = client.list_tasks(job_id)
        assert sorted(t.worker_id for t in tasks) == ["gpu-0", "gpu-1"]
        assert [log_json(client, t.task_id)[0]["gpus"] for t in tasks] == ["0,1,2,3,4,5,6,7"] * 2


def test_two_slices_cannot_share_a_name() -> None:
    twin = tuple(dataclasses.replace(w, worker_id=f"twin-{w.worker_id}") for w in tpu_slice("v5p-16", "a"))
    with pytest.raises(ValueError, match="two TPU slices are named 'a'"):
        ClusterConfig(workers=(*tpu_slice("v5p-16", "a"), *twin))
    assert len(ClusterConfig(workers=(*tpu_slice("v5p-16", "a"), *tpu_slice("v5p-16", "b"))).workers) == 4
