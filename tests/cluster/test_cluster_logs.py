"""Task logs through the client (FetchLogs) and the older GetTaskLogs RPC: captured stdout/stderr
per attempt, by job or task, bounded and filtered."""

from __future__ import annotations

import time

import pytest
from cluster_helpers import job_name, sh, wait_finished, wait_for

from fray_ray.iris.names import JobName
from fray_ray.iris.rpc import controller_pb2
from fray_ray.iris.rpc.controller_connect import ControllerServiceClientSync
from fray_ray.iris.transport import bearer_headers

Controller = controller_pb2.Controller


def test_logs_by_job_and_task(client) -> None:
    before = int(time.time() * 1000)
    script = 'i=${IRIS_TASK_ID%:*}; i=${i##*/}; for n in 1 2 3; do echo "out $i.$n"; echo "err $i.$n" >&2; done'
    job_id = client.launch_job(sh(script, name=job_name("chatty"), replicas=2))
    wait_finished(client, job_id)
    lines = client.task_logs(job_id)
    assert len(lines) == 12
    assert {l.task_id for l in lines} == {f"{job_id}/0", f"{job_id}/1"}
    task0 = [(l.source, l.data) for l in lines if l.task_id == f"{job_id}/0"]
    assert [d for s, d in task0 if s == "stdout"] == ["out 0.1", "out 0.2", "out 0.3"]
    assert [d for s, d in task0 if s == "stderr"] == ["err 0.1", "err 0.2", "err 0.3"]
    assert all(l.timestamp_ms >= before and l.attempt_id == 0 for l in lines)
    only_task = client.task_logs(f"{job_id}/1")
    assert {l.task_id for l in only_task} == {f"{job_id}/1"} and len(only_task) == 6
    newest = client.task_logs(f"{job_id}/1", max_lines=2, tail=True)
    # stdout and stderr are separate pipes, so only the order within each stream is fixed
    assert [l.data for l in newest] == [l.data for l in only_task][-2:]
    oldest = client.task_logs(f"{job_id}/1", max_lines=2, tail=False)
    assert [l.data for l in oldest] == [l.data for l in only_task][:2]
    assert client.task_logs("/tester/nothing") == []  # FetchLogs: an unknown key has no lines
    with pytest.raises(ValueError, match="not a job"):
        client.task_logs("nothing")


def test_logs_per_attempt_and_children(client, cluster) -> None:
    flaky = 'echo "attempt ${IRIS_TASK_ID##*:}"; case "$IRIS_TASK_ID" in *:0) exit 1;; esac'
    parent = client.launch_job(sh(f"{flaky}; sleep 30", name=job_name("parent"), max_retries_failure=1))
    child = client.launch_job(sh("echo from child", name=JobName.from_wire(parent).child("kid")))
    wait_finished(client, child)
    wait_for(lambda: len(client.task_logs(parent)) == 2, what="both attempts' output")
    assert [l.data for l in client.task_logs(parent, attempt_id=0)] == ["attempt 0"]
    assert [l.data for l in client.task_logs(parent, attempt_id=1)] == ["attempt 1"]
    assert [l.data for l in client.task_logs(parent)] == ["attempt 0", "attempt 1"]
    assert [l.data for l in client.task_logs(f"{parent}/0:1")] == ["attempt 1"]
    everything = client.task_logs(parent, include_children=True)
    assert "from child" in [l.data for l in everything]
    stub = ControllerServiceClientSync(cluster.address)
    try:
        response = stub.get_task_logs(
            Controller.GetTaskLogsRequest(
                id=parent, include_children=True, attempt_id=-1, max_total_lines=2, tail=True
            ),
            headers=bearer_headers(cluster.token),
        )
        assert response.truncated and sum(len(b.logs) for b in response.task_logs) == 2
        assert [s.job_id for s in response.child_job_statuses] == [child]
        assert all(e.key.startswith(b.task_id + ":") for b in response.task_logs for e in b.logs)
        cursor = stub.get_task_logs(
            Controller.GetTaskLogsRequest(id=parent, attempt_id=-1), headers=bearer_headers(cluster.token)
        ).cursor
        later = stub.get_task_logs(
            Controller.GetTaskLogsRequest(id=parent, attempt_id=-1, cursor=cursor),
            headers=bearer_headers(cluster.token),
        )
        assert sum(len(b.logs) for b in later.task_logs) == 0
        substring = stub.get_task_logs(
            Controller.GetTaskLogsRequest(id=parent, attempt_id=-1, substring="attempt 1"),
            headers=bearer_headers(cluster.token),
        )
        assert [e.data for b in substring.task_logs for e in b.logs] == ["attempt 1"]
    finally:
        stub.close()
    client.terminate_job(parent)
