"""Fray on Iris, both directions against real releases from PyPI:

- the real `marin-fray` FrayIrisClient (peer client venv, Python 3.12) runs a callable job and
  an actor group on our embedded cluster and calls the actors, and our client finds and calls
  those same actors;
- our FrayIrisClient submits jobs to a real Iris controller (marin-iris 2026-06, peer
  controller venv, Python 3.11), reads their state and terminates them.

Tasks on the real controller run with that venv's Python, where fray_ray is not installed:
our callable runner needs only cloudpickle (which marin-iris brings), and the job bodies here
are pickled by value (this is a test module, and both sides run Python 3.11).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
from fray_ray.fray import (
    Entrypoint,
    FrayIrisClient,
    IrisActorGroup,
    JobAlreadyExists,
    JobFailed,
    JobRequest,
    JobStatus,
    ResourceConfig,
)

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CONTROLLER_ENV = "FRAY_RAY_PEER_CONTROLLER_PYTHON"
DEADLINE = 120.0
SMALL = ResourceConfig(cpu=0.25, ram="128m", disk="0")


# -- the real marin-fray client against our embedded cluster -------------------------------------------


def test_real_fray_client_runs_a_job_and_an_actor_group_on_our_cluster(peer_client_python: str, tmp_path: Path) -> None:
    """The peer creates a job and a 2-actor group and calls them; while its group is up, our
    client discovers the same actors (one prefix query) and calls them too."""
    marker = tmp_path / "peer-job-ran"
    # The peer's jobs carry marin's default setup (uv sync of a workspace project); like Iris's
    # local process runtime, these workers skip setup: the peer's venv already holds everything.
    config = ClusterConfig(
        workers=(cpu_worker("peer-host", cpu=4, memory="8g", disk="20g"),), task_python=peer_client_python,
        run_setup_scripts=False,
    )
    prefix = f"fray-{uuid.uuid4().hex[:6]}"
    group_job = f"/peer/{prefix}-acc"
    with EmbeddedCluster(config) as cluster:
        args = {
            "address": cluster.address,
            "token": cluster.token,
            "prefix": prefix,
            "marker": str(marker),
            "hold": True,
        }
        stderr_file = tmp_path / "driver.stderr"
        with open(stderr_file, "w") as stderr_sink:  # a file: a chatty peer cannot block on a full pipe
            driver = subprocess.Popen(
                [peer_client_python, str(HERE / "fray_peer_driver.py"), json.dumps(args)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr_sink,
                text=True,
                env=dict(os.environ, IRIS_USER="peer"),
            )
        ours_saw: dict = {}
        try:
            assert driver.stdout is not None and driver.stdin is not None
            first = ""
            for line in driver.stdout:  # up to the HOLD line (or the report, if the driver failed)
                if line.startswith(("HOLD ", "REPORT ")):
                    first = line
                    break
            if first.startswith("HOLD "):
                with FrayIrisClient(cluster.address, token=cluster.token) as ours:
                    handles = IrisActorGroup(f"{prefix}-acc", 2, group_job, ours).wait_ready(timeout=DEADLINE)
                    ours_saw = {
                        "endpoints": [h.endpoint for h in handles],
                        "direct": handles[0].add(100),
                        "remote": handles[1].add.remote(1).result(timeout=DEADLINE),
                        "operation": handles[1].add.submit(2).result(timeout=DEADLINE),
                    }
            driver.stdin.close()
            stdout = first + driver.stdout.read()
            driver.wait(timeout=240)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
        reports = [line for line in stdout.splitlines() if line.startswith("REPORT ")]
        assert reports, (
            f"peer driver printed no report (exit {driver.returncode}):\n{stdout}\n{stderr_file.read_text()[-3000:]}"
        )
        report = json.loads(reports[-1][len("REPORT ") :])
        assert "error" not in report, report["error"]
        with cluster.client() as controller:
            group_state = controller.job_state(group_job)
    assert report["job_id"] == f"/peer/{prefix}-job"
    assert report["job_status"] == "succeeded"
    assert marker.read_text() == "peer job ran"
    assert "marker written: peer job ran" in report["job_logs"]  # marin-fray's handle.logs() on our controller
    assert report["ready"] == 2
    assert report["remote"] == [11, 11]  # each replica built with 10, then added 1
    assert report["direct"] == 16
    assert report["tasks"] == [f"{group_job}/0:0", f"{group_job}/1:0"]
    assert ours_saw["endpoints"] == [f"{group_job}/{prefix}-acc-0", f"{group_job}/{prefix}-acc-1"]
    # The peer left one replica at 16 and the other at 11 (its order need not be ours); we added
    # 100 to replica 0, then 1 and 2 to replica 1.
    assert {ours_saw["direct"] - 100, ours_saw["remote"] - 1} == {16, 11}
    assert ours_saw["operation"] == ours_saw["remote"] + 2
    assert group_state.finished  # the peer's group.shutdown() terminated the job


# -- our client against a real Iris controller ----------------------------------------------------------


def _say(text: str) -> None:
    print(text, flush=True)


def _fail() -> None:
    raise ValueError("kaboom from a real Iris task")


def _sleep() -> None:
    import time

    time.sleep(300)


@pytest.fixture(scope="module")
def peer_controller_python() -> str:
    candidate = os.environ.get(CONTROLLER_ENV)
    default = REPO / ".ci" / "venvs" / "controller" / "bin" / "python"
    if candidate is None and default.exists():
        candidate = str(default)
    if candidate is None:
        pytest.skip(
            f"PEER VENV MISSING: set {CONTROLLER_ENV} to the python of a venv built by "
            f"`scripts/peer_venv.sh controller DIR` (or build it at {default.parent.parent})"
        )
    probe = subprocess.run(
        [candidate, "-c", "import iris.cluster.backends.local.cluster, cloudpickle"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        pytest.skip(f"PEER VENV BROKEN: {candidate} cannot start a real Iris controller: {probe.stderr.strip()[-500:]}")
    return candidate


@pytest.fixture(scope="module")
def real_controller(peer_controller_python: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Iris LocalCluster in a subprocess; its HOME and TMPDIR are a temp dir (it stores a
    login token under HOME), removed by pytest."""
    home = tmp_path_factory.mktemp("iris-home")
    env = dict(os.environ, HOME=str(home), TMPDIR=str(home))
    process = subprocess.Popen(
        [peer_controller_python, str(HERE / "iris_controller_main.py"), "2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        address = None
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("ADDRESS "):
                address = line.split()[1]
                break
        assert address, f"the real Iris controller did not start (exit {process.poll()})"
        yield address
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def real_iris(real_controller: str) -> Iterator[FrayIrisClient]:
    client = FrayIrisClient(real_controller, user="fraypeer")  # loopback callers need no token
    yield client
    client.shutdown()


def _job(name: str, fn, *args) -> JobRequest:
    return JobRequest(name=name, entrypoint=Entrypoint.from_callable(fn, args=args), resources=SMALL)


def test_our_client_runs_jobs_on_a_real_controller(real_iris: FrayIrisClient) -> None:
    name = f"hello-{uuid.uuid4().hex[:6]}"
    job = real_iris.submit(_job(name, _say, "hello from our client"))
    assert job.job_id == f"/fraypeer/{name}"
    assert job.status() in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.SUCCEEDED)
    assert job.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED

    failing = real_iris.submit(_job(f"fail-{uuid.uuid4().hex[:6]}", _fail))
    with pytest.raises(JobFailed) as info:
        failing.wait(timeout=DEADLINE)
    assert "kaboom from a real Iris task" in "\n".join(info.value.__notes__)


def _say_twice(word: str) -> None:
    import sys

    print(f"{word} on stdout", flush=True)
    print(f"{word} on stderr", file=sys.stderr, flush=True)


def _wait_for_lines(read, expected: set[str]) -> list:
    """The real controller's workers push task output to its log server in the background."""
    deadline = time.monotonic() + DEADLINE
    while True:
        lines = read()
        if expected <= {getattr(line, "data", line) for line in lines}:
            return lines
        assert time.monotonic() < deadline, f"never saw {expected}; last read {lines}"
        time.sleep(0.2)


def test_our_client_reads_logs_from_a_real_controller(real_iris: FrayIrisClient, real_controller: str) -> None:
    name = f"logs-{uuid.uuid4().hex[:6]}"
    job = real_iris.submit(_job(name, _say_twice, "ping"))
    assert job.wait(timeout=DEADLINE) is JobStatus.SUCCEEDED
    expected = {"ping on stdout", "ping on stderr"}
    assert expected <= set(_wait_for_lines(job.logs, expected))  # JobHandle.logs() through FetchLogs
    controller = real_iris._controller
    lines = _wait_for_lines(lambda: controller.task_logs(job.job_id), expected)
    mine = {(line.task_id, line.attempt_id, line.source, line.data) for line in lines if line.data in expected}
    assert mine == {
        (f"{job.job_id}/0", 0, "stdout", "ping on stdout"),
        (f"{job.job_id}/0", 0, "stderr", "ping on stderr"),
    }
    exact = controller.task_logs(f"{job.job_id}/0:0")  # an exact key: the server leaves keys empty
    assert {line.task_id for line in exact} == {f"{job.job_id}/0"} and expected <= {line.data for line in exact}
    assert [line.data for line in controller.task_logs(job.job_id, max_lines=1)] == [lines[-1].data]
    # the fray-ray command line reads them the same way
    cli = subprocess.run(
        [sys.executable, "-m", "fray_ray", "logs", job.job_id, "--address", real_controller],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k not in ("FRAY_RAY_TOKEN", "IRIS_AUTH_TOKEN")},
    )
    assert cli.returncode == 0, cli.stderr
    assert f"[{job.job_id}/0:0] ping on stdout" in cli.stdout and f"[{job.job_id}/0:0] ping on stderr" in cli.stderr


def test_our_client_lists_the_workers_of_a_real_controller(real_iris: FrayIrisClient) -> None:
    workers = real_iris._controller.list_workers()
    assert len(workers) == 2  # the fixture's LocalCluster has two
    for worker in workers:
        assert worker.healthy and worker.worker_id and worker.address
        assert worker.cpu_count == 8 and worker.memory_bytes > 0  # its CPU workers report 8 cores
        assert worker.device is None and worker.attributes["device-type"] == "cpu"
    assert len({w.worker_id for w in workers}) == 2


class _ConfigMissing(Exception):
    """An exception type of this test's own, to see it come back through the real controller."""


def _print_last_and_fail(line: str) -> None:
    import sys

    print("traceback text before it", file=sys.stderr, flush=True)
    print(line, file=sys.stderr, flush=True)
    sys.exit(1)


def test_the_actor_failure_line_survives_a_real_controller(real_iris: FrayIrisClient) -> None:
    """A failed replica reports its constructor's exception as its last stderr line; the real
    controller keeps that line in the task's error, where wait_ready looks for it."""
    from fray_ray.fray._iris_actors import _error_from_text, _error_line

    line = _error_line(_ConfigMissing("no config on this host"), "constructor")
    job = real_iris.submit(_job(f"ctor-{uuid.uuid4().hex[:6]}", _print_last_and_fail, line))
    assert job.wait(timeout=DEADLINE, raise_on_failure=False) is JobStatus.FAILED
    (task,) = real_iris._controller.list_tasks(job.job_id)
    error = _error_from_text(task.error)
    assert isinstance(error, _ConfigMissing) and str(error) == "no config on this host"


def test_our_client_terminates_a_job_on_a_real_controller(real_iris: FrayIrisClient) -> None:
    name = f"sleeper-{uuid.uuid4().hex[:6]}"
    job = real_iris.submit(_job(name, _sleep))
    deadline = time.monotonic() + DEADLINE
    while job.status() is not JobStatus.RUNNING:
        assert time.monotonic() < deadline, "the job never started running"
        time.sleep(0.05)
    with pytest.raises(JobAlreadyExists) as info:
        real_iris.submit(_job(name, _say, "x"), adopt_existing=False)
    assert info.value.handle.job_id == job.job_id
    assert real_iris.submit(_job(name, _say, "x"), adopt_existing=True).job_id == job.job_id
    job.terminate()
    assert job.status() is JobStatus.STOPPED
    assert job.wait(timeout=DEADLINE) is JobStatus.STOPPED
