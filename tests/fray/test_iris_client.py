"""FrayIrisClient jobs on the embedded cluster, with real task processes: the `Client` job
contract (as test_client.py checks it on LocalClient), naming, errors, gangs and wrappers."""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fray_ray.cluster import EmbeddedCluster, WorkerSpec, cpu_worker, gpu_hosts, tpu_slice
from fray_ray.fray import (
    Client,
    ControllerUnavailableError,
    CredentialsRejected,
    Entrypoint,
    FrayIrisClient,
    GpuConfig,
    IrisBackendError,
    JobAlreadyExists,
    JobFailed,
    JobHandle,
    JobRejected,
    JobRequest,
    JobStatus,
    JobUnschedulable,
    ResourceConfig,
    wait_all,
)
from fray_ray.iris.transport import free_port

DEADLINE = 60.0
SMALL = ResourceConfig(cpu=0, ram="64m", disk="0")


# -- task bodies (pickled by value: this is a test module) -------------------------------------------


def _say(text: str) -> None:
    print(text, flush=True)


def _fail() -> None:
    raise RuntimeError("intentional failure")


def _wait_for(path: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"gate {path} never opened"
        time.sleep(0.01)


def _record_env(directory: str) -> None:
    keys = (
        "IRIS_TASK_ID",
        "IRIS_WORKER_ID",
        "CUDA_VISIBLE_DEVICES",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "RANK",
        "WORLD_SIZE",
        "TPU_NAME",
        "TPU_WORKER_ID",
        "JAX_PLATFORMS",
        "LIBTPU_INIT_ARGS",
    )
    with open(os.path.join(directory, f"{os.getpid()}.json"), "w") as f:
        json.dump({k: os.environ.get(k) for k in keys}, f)


def _submit_child_from_the_task(report: str) -> None:
    """Inside a task: the ambient client names jobs under this task's job."""
    from fray_ray.fray import Entrypoint, FrayIrisClient, JobRequest, ResourceConfig, current_client

    client = current_client()
    child = client.submit(
        JobRequest(
            name="child",
            entrypoint=Entrypoint.from_callable(print, args=("child ran",)),
            resources=ResourceConfig(cpu=0, ram="64m", disk="0"),
        )
    )
    status = child.wait(timeout=60)
    with open(report, "w") as f:
        json.dump(
            {
                "client": type(client).__name__,
                "same": client is FrayIrisClient.from_job_info(),
                "job_id": child.job_id,
                "status": str(status),
                "logs": list(child.logs()),
            },
            f,
        )


# -- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster_workers() -> tuple[WorkerSpec, ...]:
    return (
        cpu_worker("cpu-0", cpu=4, memory="8g", disk="20g"),
        *gpu_hosts("V100", 2, hosts=2),
        *tpu_slice("v5p-16", "tpu-a"),
    )


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Path]:
    """A file jobs wait for; created at teardown at the latest."""
    path = tmp_path / "gate"
    yield path
    path.touch()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _job(name: str, fn: Callable[..., object], *args: object, **fields: object) -> JobRequest:
    fields.setdefault("resources", SMALL)
    return JobRequest(name=name, entrypoint=Entrypoint.from_callable(fn, args=args), **fields)  # type: ignore[arg-type]


# -- the job contract ------------------------------------------------------------------------------


def test_client_and_handles_satisfy_the_protocols(iris: FrayIrisClient) -> None:
    assert isinstance(iris, Client)
    assert iris.in_process is False  # its jobs and actors are processes of their own
    job = iris.submit(_job(_name("proto"), _say, "x"))
    assert isinstance(job, JobHandle)
    job.wait(timeout=DEADLINE)


def test_submit_callable_succeeds_and_its_output_is_in_the_logs(iris: FrayIrisClient) -> None:
    job = iris.submit(_job(_name("hello"), _say, "hello from a task"))
    assert job.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    assert job.status() is JobStatus.SUCCEEDED
    assert job.logs() == ("hello from a task",)
    assert job.logs(max_lines=1) == ("hello from a task",)


def test_failed_job_raises_job_failed_with_the_reason(iris: FrayIrisClient) -> None:
    job = iris.submit(_job(_name("bad"), _fail))
    with pytest.raises(JobFailed) as info:
        job.wait(timeout=DEADLINE)
    assert (info.value.job_id, info.value.failed_status) == (job.job_id, JobStatus.FAILED)
    assert "intentional failure" in "\n".join(info.value.__notes__)
    assert job.wait(timeout=DEADLINE, raise_on_failure=False) is JobStatus.FAILED
    assert any("RuntimeError: intentional failure" in line for line in job.logs())


def test_root_job_names_come_from_the_user(cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_USER", "alice")
    with FrayIrisClient(cluster.address, token=cluster.token) as client:
        name = _name("named")
        job = client.submit(_job(name, _say, "x"))
        assert job.job_id == f"/alice/{name}"
        job.wait(timeout=DEADLINE)


def test_status_transitions_and_wait_timeout(iris: FrayIrisClient, gate: Path) -> None:
    job = iris.submit(_job(_name("gated"), _wait_for, str(gate)))
    assert job.status() in (JobStatus.PENDING, JobStatus.RUNNING)
    with pytest.raises(TimeoutError, match=job.job_id):
        job.wait(timeout=0.2)
    gate.touch()
    assert job.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED


def test_terminate_stops_a_running_job(iris: FrayIrisClient, eventually) -> None:
    job = iris.submit(_job(_name("sleeper"), time.sleep, 300))
    eventually(lambda: job.status() is JobStatus.RUNNING, "the job to run")
    job.terminate()
    assert job.status() is JobStatus.STOPPED
    assert job.wait(timeout=DEADLINE) is JobStatus.STOPPED  # returned, not raised
    with pytest.raises(JobFailed) as info:
        wait_all([job], timeout=DEADLINE)
    assert info.value.failed_status is JobStatus.STOPPED
    job.terminate()  # a finished job: nothing to do


def test_adopt_existing_and_job_already_exists(iris: FrayIrisClient, gate: Path) -> None:
    name = _name("shared")
    first = iris.submit(_job(name, _wait_for, str(gate)))
    adopted = iris.submit(_job(name, _fail), adopt_existing=True)
    assert adopted.job_id == first.job_id
    with pytest.raises(JobAlreadyExists) as info:
        iris.submit(_job(name, _say, "x"), adopt_existing=False)
    assert info.value.job_name == name
    assert info.value.handle is not None and info.value.handle.job_id == first.job_id
    gate.touch()
    assert adopted.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED  # the first job's outcome, not _fail's
    again = iris.submit(_job(name, _say, "second run"), adopt_existing=False)  # a finished name is reused
    assert again.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    assert again.logs() == ("second run",)


def test_wait_all_over_iris_handles(iris: FrayIrisClient) -> None:
    jobs = [iris.submit(_job(_name("w"), fn, *args)) for fn, args in ((_fail, ()), (_say, ("ok",)), (_fail, ()))]
    assert wait_all(jobs, timeout=DEADLINE, raise_on_failure=False) == [
        JobStatus.FAILED,
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
    ]
    with pytest.raises(JobFailed):
        wait_all(jobs, timeout=DEADLINE)


def test_a_failing_job_runs_max_retries_failure_plus_one_times(iris: FrayIrisClient, cluster: EmbeddedCluster) -> None:
    job = iris.submit(_job(_name("retried"), _fail, max_retries_failure=2))
    assert job.wait(timeout=DEADLINE, raise_on_failure=False) is JobStatus.FAILED
    with cluster.client() as controller:
        (task,) = controller.list_tasks(job.job_id)
    assert len(task.attempts) == 3


def test_binary_entrypoint(iris: FrayIrisClient) -> None:
    request = JobRequest(
        name=_name("binary"),
        entrypoint=Entrypoint.from_binary("sh", ["-c", "echo binary-out; exit 3"]),
        resources=SMALL,
    )
    job = iris.submit(request)
    assert job.wait(timeout=DEADLINE, raise_on_failure=False) is JobStatus.FAILED
    assert "binary-out" in job.logs()


def test_entrypoint_that_cannot_be_unpickled_fails_and_the_logs_say_why(
    iris: FrayIrisClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A module only this process can import: the task cannot unpickle a reference to it.
    (tmp_path / "only_in_the_driver.py").write_text("def work():\n    print('never runs')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import only_in_the_driver  # type: ignore[import-not-found]

    job = iris.submit(
        JobRequest(
            name=_name("unloadable"), entrypoint=Entrypoint.from_callable(only_in_the_driver.work), resources=SMALL
        )
    )
    assert job.wait(timeout=DEADLINE, raise_on_failure=False) is JobStatus.FAILED
    logs = "\n".join(job.logs())
    assert "cannot load the callable" in logs
    assert "No module named 'only_in_the_driver'" in logs
    sys.modules.pop("only_in_the_driver", None)


def test_job_timeout_stops_the_job_and_priority_reaches_the_controller(
    iris: FrayIrisClient, cluster: EmbeddedCluster
) -> None:
    job = iris.submit(_job(_name("slow"), time.sleep, 300, timeout=0.5, priority=3))
    assert job.wait(timeout=DEADLINE) is JobStatus.STOPPED
    assert cluster.controller.job_status(job.job_id).request.priority_band == 3


def test_handle_pickles_and_resolves_through_the_open_client(iris: FrayIrisClient) -> None:
    job = iris.submit(_job(_name("pickled"), _say, "x"))
    copy = pickle.loads(pickle.dumps(job))
    assert copy.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED


# -- errors a user can hit --------------------------------------------------------------------------


def test_nothing_listening_is_a_clear_error_naming_the_address() -> None:
    address = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ControllerUnavailableError, match=f"no Iris controller answers at {address}"):
        FrayIrisClient(address)


def test_a_wrong_token_is_a_clear_error(cluster: EmbeddedCluster) -> None:
    with pytest.raises(IrisBackendError, match="refused the credentials") as raised:
        FrayIrisClient(cluster.address, token="not-the-token")
    assert isinstance(raised.value, CredentialsRejected) and isinstance(raised.value, PermissionError)
    assert "FrayIrisClient(address, token=...)" in str(raised.value)  # what works at this layer
    assert raised.value.reason and raised.value.address == cluster.address


def test_a_request_no_worker_can_ever_run_is_rejected_naming_the_resource(iris: FrayIrisClient) -> None:
    with pytest.raises(JobUnschedulable, match="memory") as raised:
        iris.submit(_job(_name("huge"), _say, "x", resources=ResourceConfig(cpu=0, ram="1000t", disk="0")))
    assert isinstance(raised.value, JobRejected) and isinstance(raised.value, ValueError)


def test_a_child_of_a_finished_parent_is_rejected_but_not_as_unschedulable(
    iris: FrayIrisClient, cluster: EmbeddedCluster
) -> None:
    parent = iris.submit(_job(_name("short-parent"), _say, "x"))
    assert parent.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    with FrayIrisClient(cluster.address, token=cluster.token, parent_job=parent.job_id) as children:
        with pytest.raises(JobRejected, match="already finished") as raised:
            children.submit(_job("late-child", _say, "x"))
    assert not isinstance(raised.value, JobUnschedulable)  # waiting would never help


def test_shut_down_client_refuses_work(cluster: EmbeddedCluster) -> None:
    client = FrayIrisClient(cluster.address, token=cluster.token)
    client.shutdown()
    client.shutdown()  # idempotent
    with pytest.raises(RuntimeError, match="shut down"):
        client.submit(_job("late", _say, "x"))


# -- hierarchy and the ambient client ---------------------------------------------------------------


def test_children_of_a_parent_job_end_with_it(iris: FrayIrisClient, cluster: EmbeddedCluster, gate: Path) -> None:
    parent = iris.submit(_job(_name("parent"), _wait_for, str(gate)))
    with FrayIrisClient(cluster.address, token=cluster.token, parent_job=parent.job_id) as children:
        child = children.submit(_job("child", time.sleep, 300))
        assert child.job_id == f"{parent.job_id}/child"
        parent.terminate()
        assert child.wait(timeout=DEADLINE) is JobStatus.STOPPED


def test_current_client_inside_a_task_submits_children_of_its_job(iris: FrayIrisClient, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    parent = iris.submit(_job(_name("ambient"), _submit_child_from_the_task, str(report)))
    assert parent.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    seen = json.loads(report.read_text())
    assert seen == {
        "client": "FrayIrisClient",
        "same": True,
        "job_id": f"{parent.job_id}/child",
        "status": "succeeded",
        "logs": ["child ran"],
    }


def test_shutdown_terminates_the_jobs_the_client_started(cluster: EmbeddedCluster, iris: FrayIrisClient) -> None:
    owner = FrayIrisClient(cluster.address, token=cluster.token, user="tester")
    job = owner.submit(_job(_name("owned"), time.sleep, 300))
    owner.shutdown(wait=True)
    assert pickle.loads(pickle.dumps(job)).status() is JobStatus.STOPPED  # seen through `iris`


# -- gangs and wrappers on simulated accelerators ---------------------------------------------------


def _records(directory: Path) -> list[dict]:
    return sorted(
        (json.loads(p.read_text()) for p in directory.glob("*.json")),
        key=lambda r: (r["IRIS_TASK_ID"], r["LOCAL_RANK"] or ""),
    )


def test_gpu_gang_with_two_processes_per_task(iris: FrayIrisClient, tmp_path: Path) -> None:
    request = _job(
        _name("gpu"),
        _record_env,
        str(tmp_path),
        replicas=2,
        processes_per_task=2,
        resources=ResourceConfig(cpu=1, ram="1g", disk="1g", device=GpuConfig(variant="v100", count=2)),
    )
    job = iris.submit(request)
    assert job.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    records = _records(tmp_path)
    assert [
        (r["IRIS_TASK_ID"].split("/")[-1], r["LOCAL_RANK"], r["RANK"], r["CUDA_VISIBLE_DEVICES"]) for r in records
    ] == [
        ("0:0", "0", "0", "0"),
        ("0:0", "1", "1", "1"),
        ("1:0", "0", "2", "0"),
        ("1:0", "1", "3", "1"),
    ]
    assert {r["WORLD_SIZE"] for r in records} == {"4"} and {r["LOCAL_WORLD_SIZE"] for r in records} == {"2"}
    assert len({r["IRIS_WORKER_ID"] for r in records}) == 2  # one task per GPU host
    assert {r["JAX_PLATFORMS"] for r in records} == {""}


def test_gpu_count_not_divisible_by_processes_is_rejected_before_submitting(iris: FrayIrisClient) -> None:
    request = _job(
        _name("odd"),
        _say,
        "x",
        processes_per_task=3,
        resources=ResourceConfig(cpu=1, ram="1g", disk="1g", device=GpuConfig("v100", 2)),
    )
    with pytest.raises(ValueError, match="cannot split 2 GPU"):
        iris.submit(request)


def test_tpu_slice_gang_runs_one_task_per_host(iris: FrayIrisClient, tmp_path: Path) -> None:
    resources = ResourceConfig.with_tpu("v5p-16", cpu=1, ram="1g", disk="1g")
    assert resources.replicas == 2
    job = iris.submit(_job(_name("tpu"), _record_env, str(tmp_path), resources=resources))
    assert job.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    records = _records(tmp_path)
    assert [(r["TPU_NAME"], r["TPU_WORKER_ID"]) for r in records] == [("tpu-a", "0"), ("tpu-a", "1")]
    assert {r["LIBTPU_INIT_ARGS"] for r in records} == {"--xla_tpu_scoped_vmem_limit_kib=50000"}
