"""Retry budgets, worker loss and timeouts on real processes."""

from __future__ import annotations

from cluster_helpers import job_name, sh, wait_finished, wait_for, wait_state, wait_tasks

from fray_ray.cluster import cpu_worker
from fray_ray.iris.types import JobState, ResourceSpec, TaskState

# Fails on attempts 0 and 1, succeeds on attempt 2 (the attempt is the suffix of IRIS_TASK_ID).
FLAKY = 'echo "attempt ${IRIS_TASK_ID##*:}"; case "$IRIS_TASK_ID" in *:2) exit 0;; *) exit 1;; esac'


def test_failure_retries_are_new_attempts(client) -> None:
    job_id = client.launch_job(sh(FLAKY, name=job_name("flaky"), max_retries_failure=2))
    status = wait_finished(client, job_id)
    assert status.state == JobState.SUCCEEDED and status.failure_count == 2
    (task,) = client.list_tasks(job_id)
    assert [a.attempt_id for a in task.attempts] == [0, 1, 2]
    assert [a.state for a in task.attempts] == [TaskState.FAILED, TaskState.FAILED, TaskState.SUCCEEDED]
    assert task.current_attempt_id == 2
    assert [l.data for l in client.task_logs(job_id)] == ["attempt 0", "attempt 1", "attempt 2"]
    assert [l.attempt_id for l in client.task_logs(job_id)] == [0, 1, 2]


def test_failure_budget_runs_out(client) -> None:
    job_id = client.launch_job(sh(FLAKY, name=job_name("flaky"), max_retries_failure=1))
    status = wait_finished(client, job_id)
    assert status.state == JobState.FAILED and status.exit_code == 1
    assert len(client.list_tasks(job_id)[0].attempts) == 2


def test_max_task_failures_is_a_separate_budget(client) -> None:
    fail_task_one = 'case "$IRIS_TASK_ID" in */1:*) exit 5;; esac'
    tolerant = client.launch_job(sh(fail_task_one, name=job_name("tolerant"), replicas=3, max_task_failures=1))
    assert wait_finished(client, tolerant).state == JobState.SUCCEEDED
    states = [t.state for t in client.list_tasks(tolerant)]
    assert states == [TaskState.SUCCEEDED, TaskState.FAILED, TaskState.SUCCEEDED]
    strict = client.launch_job(sh(fail_task_one + "; sleep 30", name=job_name("strict"), replicas=3))
    status = wait_finished(client, strict)
    assert status.state == JobState.FAILED and status.exit_code == 5
    assert "task /tester/strict/1 failed" in status.error
    states = [t.state for t in client.list_tasks(strict)]
    assert states == [TaskState.KILLED, TaskState.FAILED, TaskState.KILLED]  # the rest was killed


def test_worker_loss_retries_elsewhere_under_preemption_budget(make_cluster) -> None:
    cluster = make_cluster(cpu_worker("w0", cpu=1), cpu_worker("w1", cpu=1), cpu_worker("w2", cpu=1))
    with cluster.client() as client:
        job_id = client.launch_job(
            sh(
                "echo $IRIS_TASK_ID; sleep 60",
                name=job_name("survivor"),
                max_retries_preemption=1,
                resources=ResourceSpec(cpu_millicores=1000),
            )
        )
        (first,) = wait_tasks(client, job_id, lambda ts: ts[0].state == TaskState.RUNNING)
        wait_for(lambda: client.task_logs(job_id), what="the first attempt to have started its script")
        victim_pids = cluster.task_pids()
        cluster.kill_worker(first.worker_id)
        (task,) = wait_tasks(
            client, job_id, lambda ts: ts[0].state == TaskState.RUNNING and ts[0].current_attempt_id == 1
        )
        assert task.worker_id != first.worker_id
        assert task.attempts[0].state == TaskState.WORKER_FAILED and task.attempts[0].is_worker_failure
        assert client.job_status(job_id).preemption_count == 1
        wait_for(lambda: not set(victim_pids) & set(cluster.task_pids()), what="the dead worker's task is killed")
        wait_for(lambda: [l.data for l in client.task_logs(job_id)] == [f"{job_id}/0:0", f"{job_id}/0:1"])
        cluster.kill_worker(task.worker_id)  # budget of 1 used up
        status = wait_finished(client, job_id)
        assert status.state == JobState.WORKER_FAILED and status.preemption_count == 2
        # a dead worker takes no new work; a revived one does
        cluster.revive_worker(first.worker_id)
        again = client.launch_job(
            sh("true", name=job_name("after"), resources=ResourceSpec(cpu_millicores=1000), replicas=2)
        )
        assert wait_finished(client, again).state == JobState.SUCCEEDED
        workers = {t.worker_id for t in client.list_tasks(again)}
        assert task.worker_id not in workers


def test_timeout_kills_the_task(client) -> None:
    job_id = client.launch_job(sh("sleep 60", name=job_name("slow"), timeout_s=0.5))
    status = wait_finished(client, job_id)
    assert status.state == JobState.KILLED and "timed out" in status.error
    assert client.list_tasks(job_id)[0].state == TaskState.KILLED


def test_scheduling_timeout_makes_the_job_unschedulable(client) -> None:
    hog = client.launch_job(sh("sleep 60", name=job_name("hog"), resources=ResourceSpec(cpu_millicores=4000)))
    wait_state(client, hog, JobState.RUNNING)
    job_id = client.launch_job(
        sh("true", name=job_name("starved"), resources=ResourceSpec(cpu_millicores=1000), scheduling_timeout_s=1.0)
    )
    reason = wait_for(lambda: client.job_status(job_id).pending_reason, what="a pending reason")
    assert "cpu" in reason
    status = wait_finished(client, job_id)
    assert status.state == JobState.UNSCHEDULABLE and "not scheduled within" in status.error
    client.terminate_job(hog)
