"""Jobs on real processes: the task runtime contract, names, policies, hierarchy, queries."""

from __future__ import annotations

import json
import os
import sys

import pytest
from cluster_helpers import job_name, log_json, sh, wait_finished, wait_state, wait_tasks

from fray_ray.cluster import EmbeddedCluster
from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.entrypoint import callable_entrypoint
from fray_ray.iris.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from fray_ray.iris.names import JobName
from fray_ray.iris.rpc import controller_pb2
from fray_ray.iris.rpc.controller_connect import ControllerServiceClientSync
from fray_ray.iris.transport import bearer_headers
from fray_ray.iris.types import Entrypoint, ExistingJobPolicy, JobSpec, JobState, ResourceSpec, TaskState

Controller = controller_pb2.Controller


def report_environment() -> None:
    """Runs inside a task: print what the runtime contract gave it."""
    keys = [k for k in os.environ if k.startswith(("IRIS_", "MY_", "CUDA_", "TPU_"))]
    with open(os.path.join(os.environ["IRIS_WORKDIR"], "data", "input.txt")) as f:
        content = f.read()
    info = {
        "env": {k: os.environ[k] for k in keys},
        "cwd": os.getcwd(),
        "file": content,
        "session_leader": os.getsid(0) == os.getpid(),
        "python": sys.executable,
    }
    print("ENV " + json.dumps(info), flush=True)


def test_callable_job_gets_the_iris_runtime_contract(cluster: EmbeddedCluster, client: ControllerClient) -> None:
    entry = callable_entrypoint(report_environment)
    files = dict(entry.workdir_files, **{"data/input.txt": b"hello file"})
    job_id = client.launch_job(
        JobSpec(
            name=job_name("contract"),
            entrypoint=Entrypoint(entry.argv, files),
            replicas=2,
            ports=["actor", "http"],
            env_vars={"MY_SETTING": "42"},
            resources=ResourceSpec(cpu_millicores=500),
        )
    )
    status = wait_finished(client, job_id)
    assert status.state == JobState.SUCCEEDED, status.error
    tasks = client.list_tasks(job_id)
    assert [t.task_id for t in tasks] == ["/tester/contract/0", "/tester/contract/1"]
    for task in tasks:
        (info,) = log_json(client, task.task_id)
        env = info["env"]
        assert env["IRIS_TASK_ID"] == f"{task.task_id}:0"
        assert env["IRIS_NUM_TASKS"] == "2"
        assert env["IRIS_CONTROLLER_ADDRESS"] == env["IRIS_CONTROLLER_URL"] == cluster.address
        # the address of the task's own host (with one worker: this machine, 127.0.0.1)
        assert env["IRIS_ADVERTISE_HOST"] == env["IRIS_BIND_HOST"] == task.worker_address == "127.0.0.1"
        assert env["IRIS_VENV"] == os.path.join(env["IRIS_WORKDIR"], ".venv")
        assert env["IRIS_WORKDIR"] == info["cwd"] and info["file"] == "hello file"
        assert env["IRIS_PYTHON"] == sys.executable == info["python"]
        assert json.loads(env["IRIS_JOB_ENV"]) == {"MY_SETTING": "42"} and env["MY_SETTING"] == "42"
        assert env["IRIS_WORKER_ID"] == "cpu-0" == task.worker_id
        assert env["IRIS_AUTH_TOKEN"] == cluster.token
        assert {"actor", "http"} == set(task.ports)
        assert int(env["IRIS_PORT_ACTOR"]) == task.ports["actor"]
        assert int(env["IRIS_PORT_HTTP"]) == task.ports["http"]
        assert info["session_leader"]
    workdirs = {log_json(client, t.task_id)[0]["cwd"] for t in tasks}
    assert len(workdirs) == 2  # a fresh workdir per attempt
    assert not any(os.path.exists(w) for w in workdirs)  # removed once the attempt is over


def test_exit_codes_map_to_states(client: ControllerClient) -> None:
    ok = client.launch_job(sh("exit 0", name=job_name("ok")))
    bad = client.launch_job(sh("echo something broke >&2; exit 7", name=job_name("bad")))
    assert wait_finished(client, ok).state == JobState.SUCCEEDED
    status = wait_finished(client, bad)
    assert status.state == JobState.FAILED and status.exit_code == 7
    assert "exit code 7" in status.error and "something broke" in status.error
    (task,) = client.list_tasks(bad)
    assert task.state == TaskState.FAILED and task.exit_code == 7
    missing = client.launch_job(JobSpec(name=job_name("missing"), entrypoint=Entrypoint(("/no/such/binary",))))
    status = wait_finished(client, missing)
    assert status.state == JobState.FAILED and "/no/such/binary" in status.error


def test_job_names_and_lookups(client: ControllerClient, cluster: EmbeddedCluster) -> None:
    job_id = client.launch_job(sh("exit 0", name=JobName.root("alice", "named")))
    assert job_id == "/alice/named"
    wait_finished(client, job_id)
    assert client.job_states([job_id, "/alice/unknown"]) == {job_id: JobState.SUCCEEDED}
    with pytest.raises(NotFound):
        client.job_status("/alice/unknown")
    with pytest.raises(NotFound):
        client.list_tasks("/alice/unknown")
    with pytest.raises(NotFound):
        client.task_status("/alice/named/7")
    assert client.task_status("/alice/named/0").state == TaskState.SUCCEEDED
    stub = ControllerServiceClientSync(cluster.address)
    try:
        for bad in ("", "alice", "/alice", "/alice/has space", "//x"):
            request = sh("true", name=job_name("x")).to_proto(client_revision_date="2026-01-01")
            request.name = bad
            with pytest.raises(Exception) as info:
                stub.launch_job(request, headers=bearer_headers(cluster.token))
            assert info.value.code.value == "invalid_argument", bad
    finally:
        stub.close()


def test_job_status_reports_request_and_counts(client: ControllerClient, cluster: EmbeddedCluster) -> None:
    job_id = client.launch_job(sh("exit 0", name=job_name("status"), replicas=3, env_vars={"SECRET": "s3cr3t"}))
    wait_finished(client, job_id)
    status = client.job_status(job_id)
    assert (status.task_count, status.completed_count) == (3, 3)
    assert status.task_state_counts == {"succeeded": 3}
    stub = ControllerServiceClientSync(cluster.address)
    try:
        raw = stub.get_job_status(Controller.GetJobStatusRequest(job_id=job_id), headers=bearer_headers(cluster.token))
    finally:
        stub.close()
    assert raw.request.replicas == 3 and raw.request.environment.env_vars["SECRET"] != "s3cr3t"
    assert raw.job.started_at.epoch_ms and raw.job.finished_at.epoch_ms >= raw.job.started_at.epoch_ms


def test_existing_job_policy_table(client: ControllerClient, tmp_path) -> None:
    gate = tmp_path / "go"
    wait_gate = f"while [ ! -e {gate} ]; do sleep 0.02; done"
    name = job_name("policy")
    first = client.launch_job(sh(wait_gate, name=name))
    wait_tasks(client, first, lambda ts: ts[0].state == TaskState.RUNNING)
    with pytest.raises(AlreadyExists):
        client.launch_job(sh("true", name=name))  # UNSPECIFIED while running
    with pytest.raises(AlreadyExists):
        client.launch_job(sh("true", name=name, existing_job_policy=ExistingJobPolicy.ERROR))
    assert client.launch_job(sh("true", name=name, existing_job_policy=ExistingJobPolicy.KEEP)) == first
    (task,) = client.list_tasks(first)
    assert task.state == TaskState.RUNNING and len(task.attempts) == 1  # KEEP started nothing
    old_worker_pid_task = task
    recreated = client.launch_job(sh("echo second", name=name, existing_job_policy=ExistingJobPolicy.RECREATE))
    assert recreated == first
    assert wait_finished(client, recreated).state == JobState.SUCCEEDED
    assert [l.data for l in client.task_logs(recreated)] == ["second"]  # the old job's output is gone
    assert old_worker_pid_task.current_attempt_id == 0
    with pytest.raises(AlreadyExists):
        client.launch_job(sh("true", name=name, existing_job_policy=ExistingJobPolicy.ERROR))  # finished, ERROR
    client.launch_job(sh("echo third", name=name))  # UNSPECIFIED replaces a finished job
    wait_finished(client, recreated)
    client.launch_job(
        sh("echo fourth", name=name, existing_job_policy=ExistingJobPolicy.KEEP)
    )  # KEEP replaces finished
    wait_finished(client, recreated)
    assert [l.data for l in client.task_logs(recreated)] == ["fourth"]


def test_children_need_a_live_parent(client: ControllerClient, tmp_path) -> None:
    with pytest.raises(FailedPrecondition, match="does not exist"):
        client.launch_job(sh("true", name=JobName.from_wire("/tester/ghost/child")))
    done = client.launch_job(sh("true", name=job_name("done")))
    wait_finished(client, done)
    with pytest.raises(FailedPrecondition, match="already finished"):
        client.launch_job(sh("true", name=JobName.from_wire(done).child("child")))


def test_terminate_kills_the_subtree(client: ControllerClient, tmp_path) -> None:
    forever = "sleep 60"
    parent = client.launch_job(sh(forever, name=job_name("tree")))
    child = client.launch_job(sh(forever, name=JobName.from_wire(parent).child("child")))
    grandchild = client.launch_job(sh(forever, name=JobName.from_wire(child).child("grandchild")))
    for job_id in (parent, child, grandchild):
        wait_state(client, job_id, JobState.RUNNING)
    client.terminate_job(parent)
    for job_id in (parent, child, grandchild):
        assert client.job_state(job_id) == JobState.KILLED
        wait_tasks(client, job_id, lambda ts: all(t.state == TaskState.KILLED for t in ts))
    with pytest.raises(NotFound):
        client.terminate_job("/tester/never-was")


def test_parent_failure_cancels_children_success_does_not(client: ControllerClient, tmp_path) -> None:
    gate = tmp_path / "go"
    parent = client.launch_job(sh(f"while [ ! -e {gate} ]; do sleep 0.02; done; exit 1", name=job_name("fails")))
    child = client.launch_job(sh("sleep 60", name=JobName.from_wire(parent).child("child")))
    happy = client.launch_job(sh(f"while [ ! -e {gate} ]; do sleep 0.02; done", name=job_name("succeeds")))
    survivor = client.launch_job(sh("sleep 60", name=JobName.from_wire(happy).child("child")))
    for job_id in (child, survivor):
        wait_state(client, job_id, JobState.RUNNING)
    gate.touch()
    assert wait_finished(client, parent).state == JobState.FAILED
    assert wait_finished(client, child).state == JobState.KILLED
    assert wait_finished(client, happy).state == JobState.SUCCEEDED
    assert client.job_state(survivor) == JobState.RUNNING
    client.terminate_job(survivor)


def test_list_jobs_filters(client: ControllerClient, cluster: EmbeddedCluster) -> None:
    a = client.launch_job(sh("sleep 60", name=JobName.root("bob", "exp-a")))
    b = client.launch_job(sh("true", name=JobName.root("bob", "exp-b")))
    c = client.launch_job(sh("true", name=JobName.from_wire(a).child("c")))
    wait_finished(client, b)
    wait_finished(client, c)
    assert [j.job_id for j in client.list_jobs("/bob/exp-")] == [a, b, c]
    stub = ControllerServiceClientSync(cluster.address)
    headers = bearer_headers(cluster.token)

    def query(**fields: object) -> list[str]:
        response = stub.list_jobs(Controller.ListJobsRequest(query=Controller.JobQuery(**fields)), headers=headers)
        return [j.job_id for j in response.jobs]

    try:
        assert query(scope=Controller.JOB_QUERY_SCOPE_ROOTS, job_id_prefix="/bob/") == [a, b]
        assert query(scope=Controller.JOB_QUERY_SCOPE_CHILDREN, job_id_prefix="/bob/") == [c]
        assert query(parent_job_id=a) == [c]
        assert query(state_filter="running", job_id_prefix="/bob/") == [a]
        assert query(name_filter="exp-b") == [b]
        page = stub.list_jobs(
            Controller.ListJobsRequest(query=Controller.JobQuery(job_id_prefix="/bob/", limit=2)), headers=headers
        )
        assert page.total_count == 3 and page.has_more and len(page.jobs) == 2
        parent_status = stub.get_job_status(Controller.GetJobStatusRequest(job_id=a), headers=headers)
        assert parent_status.job.has_children
        assert client.job_status(c).parent_job_id == a
    finally:
        stub.close()
    client.terminate_job(a)


def test_client_freshness_window(make_cluster) -> None:
    strict = make_cluster(client_freshness_days=14)
    lenient = make_cluster()
    for cluster, accepted in ((strict, False), (lenient, True)):
        stub = ControllerServiceClientSync(cluster.address)
        try:
            request = sh("true", name=job_name("old-client")).to_proto(client_revision_date="2020-01-01")
            if accepted:
                assert stub.launch_job(request, headers=bearer_headers(cluster.token)).job_id == "/tester/old-client"
            else:
                with pytest.raises(Exception, match="client is too old") as info:
                    stub.launch_job(request, headers=bearer_headers(cluster.token))
                assert info.value.code.value == "failed_precondition"
        finally:
            stub.close()
    with strict.client() as client:
        assert client.launch_job(sh("true", name=job_name("fresh")))  # our client sends today's date


def test_invalid_request_fields(client: ControllerClient) -> None:
    with pytest.raises(InvalidArgument):
        client.launch_job(sh("true", name=job_name("ports"), ports=["bad port"]))
    with pytest.raises(InvalidArgument):
        client.launch_job(JobSpec(name=job_name("files"), entrypoint=Entrypoint(("true",), {"/etc/passwd": b""})))
