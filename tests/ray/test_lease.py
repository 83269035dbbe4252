"""Fate sharing on a standalone cluster (`fray-ray start`, two hosts): a driver's executors and
actors end with it, within seconds, as killed or failed jobs, whether the driver is SIGKILLed
(its lease job fails and Iris cancels its children) or runs as an Iris job that is terminated;
a clean shutdown ends them as stopped by the driver; detached actors outlive the driver, crash
after crash and a clean shutdown, until `ray.kill`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fray_ray._private.driver.lease import LEASE_HOLDER_SOURCE, FateMode, SessionLease
from fray_ray._private.stream.protocol import Connection
from fray_ray._private.stream.stream_server import StreamServer
from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.types import JobState

# The suite runs with --import-mode=importlib; the scenarios are shared with tests/peers.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fate_scenarios import (  # noqa: E402
    ENDED_BY_THE_DRIVER,
    ENDED_WITH_THE_DRIVER,
    alive,
    detached_job,
    kill,
    remove_detached,
    session_jobs,
    start_driver,
    wait_gone,
    wait_jobs_finished,
)
from standalone_cluster import standalone_cluster  # noqa: E402

#: How long a dead driver's workers may outlive it (the issue's bound; it takes well under 1 s).
GONE_WITHIN_S = 10.0
DEADLINE = 180.0


# ---- the lease holder against a real stream server -------------------------------------------


def run_holder(address: str, token: str) -> subprocess.Popen:
    """The lease holder as the lease job runs it: `exec` of its source, standard library only."""
    code = f"exec({LEASE_HOLDER_SOURCE!r}, {{'LEASE': ({address!r}, 'session-test', {token!r})}})"
    return subprocess.Popen([sys.executable, "-I", "-S", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


class Greeted:
    """A stream server that records the greetings of the connections it accepts."""

    def __init__(self, token: str) -> None:
        self.greetings: list[dict] = []
        self.connections: list[Connection] = []
        self.server = StreamServer(self._accept, token=token, name="lease-test").start()

    def _accept(self, connection: Connection, greeting: list) -> None:
        self.greetings.append(greeting[3])
        self.connections.append(connection)
        connection.start({"hello": lambda c, message_id, body, buffers: c.reply(message_id, {"ok": True})},
                         first_frame=greeting)


def test_the_lease_holder_greets_with_the_token_and_fails_when_the_connection_ends() -> None:
    server = Greeted("s3cret")
    holder = run_holder(server.server.address, "s3cret")
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().startswith("holding the lease of session-test")
        assert server.greetings[0]["kind"] == "lease" and server.greetings[0]["pid"] == holder.pid
        assert holder.poll() is None  # holds while the connection lives
        server.connections[0].close()  # the driver is gone
        _, err = holder.communicate(timeout=60)
        assert holder.returncode == 1 and "lost the connection to the driver of session-test" in err
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
        server.server.close()


def test_a_lease_holder_with_the_wrong_token_is_refused_and_fails() -> None:
    server = Greeted("s3cret")
    holder = run_holder(server.server.address, "guess")
    try:
        _, err = holder.communicate(timeout=60)
        assert holder.returncode == 1 and "refused this lease holder" in err
        assert server.greetings == []
    finally:
        server.server.close()


@pytest.mark.slow  # over 10 s on its own
def test_a_lease_holder_whose_driver_is_gone_fails() -> None:
    server = Greeted("s3cret")
    address = server.server.address
    server.server.close()  # nothing listens there any more
    holder = run_holder(address, "s3cret")
    _, err = holder.communicate(timeout=120)
    assert holder.returncode == 1 and "refuses connections" in err


# ---- sessions on a standalone cluster ----------------------------------------------------------


@pytest.fixture(scope="module")
def standalone() -> Iterator[dict]:
    """`fray-ray start` with two CPU hosts, in its own process; stopped with SIGINT."""
    with standalone_cluster(["--cpu-workers", "2", "--cpu", "4", "--memory", "4g", "--disk", "10g"]) as (_, info):
        yield info


@pytest.fixture
def env(standalone: dict) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FRAY_RAY_ADDRESS", "RAY_ADDRESS", "PYTHONPATH")}
    env["FRAY_RAY_TOKEN"] = standalone["token"]
    return env


def controller_of(standalone: dict) -> ControllerClient:
    return ControllerClient(standalone["address"], token=standalone["token"])


def test_a_killed_drivers_executors_and_actors_end_within_seconds_as_failed_or_killed(
    standalone: dict, env: dict[str, str], tmp_path: Path
) -> None:
    process, report = start_driver(standalone["address"], str(tmp_path), "kept-after-kill", env)
    try:
        assert report.mode == "lease" and report.lease is not None
        assert all(alive(pid) for pid in report.session_workers)
        with controller_of(standalone) as controller:
            jobs = session_jobs(controller, report.lease)
        # the lease job, two executors, two actors: every one of them a child of the lease
        assert len(jobs) == 5 and set(jobs.values()) == {JobState.RUNNING}, jobs
    finally:
        kill(process)
    try:
        assert wait_gone(report.session_workers, GONE_WITHIN_S) == []
        assert alive(report.detached[0])
        with controller_of(standalone) as controller:
            states = wait_jobs_finished(controller, jobs, DEADLINE)
            assert set(states.values()) <= ENDED_WITH_THE_DRIVER, states
            assert states[report.lease] == JobState.FAILED  # its holder lost the driver's connection
            found = detached_job(controller, "kept-after-kill")
            assert found is not None and found[1] == JobState.RUNNING
    finally:
        remove_detached(standalone["address"], "kept-after-kill", env)


def test_a_clean_shutdown_ends_the_sessions_jobs_as_succeeded_never_failed(
    standalone: dict, env: dict[str, str], tmp_path: Path
) -> None:
    process, report = start_driver(standalone["address"], str(tmp_path), "kept-after-shutdown", env, clean=True)
    try:
        out, err = process.communicate(timeout=DEADLINE)
        assert process.returncode == 0 and out.strip() == "shut down", err[-3000:]
        assert wait_gone(report.session_workers, GONE_WITHIN_S) == []
        with controller_of(standalone) as controller:
            states = session_jobs(controller, report.lease or "")
            assert len(states) == 5 and set(states.values()) <= ENDED_BY_THE_DRIVER, states
            # children exit by themselves first, then the released holder: a finished session succeeded
            assert states[report.lease] == JobState.SUCCEEDED, states
        assert alive(report.detached[0])
    finally:
        remove_detached(standalone["address"], "kept-after-shutdown", env)


KILLER = """
import sys, fray_ray as ray
ray.init(sys.argv[1], namespace="fate")
actor = ray.get_actor(sys.argv[2])
print(*ray.get(actor.pid.remote()), flush=True)
ray.kill(actor)
ray.shutdown()
"""


@pytest.mark.slow  # over 10 s on its own
def test_a_detached_actor_outlives_crashes_and_a_shutdown_until_killed(
    standalone: dict, env: dict[str, str], tmp_path: Path
) -> None:
    name = "outlives-drivers"
    served = []
    try:
        for _ in range(3):
            process, report = start_driver(standalone["address"], str(tmp_path), name, env)
            kill(process)
            served.append(report.detached)
            assert wait_gone(report.session_workers, GONE_WITHIN_S) == []
        process, report = start_driver(standalone["address"], str(tmp_path), name, env, clean=True)
        _, err = process.communicate(timeout=DEADLINE)
        assert process.returncode == 0, err[-3000:]
        served.append(report.detached)
        pid = served[0][0]
        # one process served all four drivers, its state kept: calls counted 1, 2, 3, 4
        assert served == [(pid, calls) for calls in range(1, 5)]
        assert alive(pid)
        # a fifth driver finds it by name, calls it, and kills it
        killer = subprocess.run([sys.executable, "-c", KILLER, standalone["address"], name], env=env,
                                capture_output=True, text=True, timeout=DEADLINE)
        assert killer.returncode == 0, killer.stderr[-3000:]
        assert killer.stdout.split() == [str(pid), "5"]
        assert wait_gone([pid], GONE_WITHIN_S) == []
        with controller_of(standalone) as controller:
            found = detached_job(controller, name)
            assert found is not None
            assert wait_jobs_finished(controller, [found[0]], DEADLINE) == {found[0]: JobState.KILLED}
    finally:
        remove_detached(standalone["address"], name, env)


SUBMITTED = """
import json, os, sys, time
import fray_ray as ray
from fray_ray._private.core import runtime_state

ray.init()

def write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)

@ray.remote
def sleeper(path):
    write(path, str(os.getpid()))
    time.sleep(600)

@ray.remote
def pid():
    return os.getpid()

@ray.remote
class Holder:
    def pid(self):
        return os.getpid()

sleeping = sys.argv[1] + ".sleeper"
sleeper.remote(sleeping)
while not os.path.exists(sleeping):
    time.sleep(0.01)
holder = Holder.remote()
named = Holder.options(name="named-in-job").remote()
report = {"driver": os.getpid(), "sleeping": int(open(sleeping).read()), "idle": ray.get(pid.options(num_cpus=0.5).remote()),
          "actor": ray.get(holder.pid.remote()), "named": ray.get(named.pid.remote()),
          "mode": runtime_state.current().launcher.lease.mode.value}
write(sys.argv[1], json.dumps(report))
time.sleep(600)
"""


def test_terminating_a_driver_job_ends_its_executors_and_actors(
    standalone: dict, env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text(textwrap.dedent(SUBMITTED))
    report_file = tmp_path / "report.json"
    submitted = subprocess.run(
        [sys.executable, "-m", "fray_ray", "submit", "--address", standalone["address"], "--no-wait", "main.py",
         str(report_file)],
        cwd=project, env=env, capture_output=True, text=True, timeout=DEADLINE,
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.splitlines()[0].split()[-1]
    with controller_of(standalone) as controller:
        try:
            deadline = time.monotonic() + DEADLINE
            while not report_file.exists():
                assert not controller.job_state(job_id).finished, controller.job_status(job_id)
                assert time.monotonic() < deadline, "the driver job never reported its workers"
                time.sleep(0.1)
            report = json.loads(report_file.read_text())
            assert report["mode"] == "driver job"
            children = [j for j in session_jobs(controller, job_id) if j != job_id]
            assert len(children) == 4, children  # the sleeping executor, the idle one, two actors
            workers = [report[key] for key in ("driver", "sleeping", "idle", "actor", "named")]
            assert all(alive(pid) for pid in workers)
        finally:
            controller.terminate_job(job_id)
        assert wait_gone(workers, GONE_WITHIN_S) == []
        states = wait_jobs_finished(controller, [job_id, *children], DEADLINE)
        assert set(states.values()) <= ENDED_WITH_THE_DRIVER, states
        assert states[job_id] == JobState.KILLED


# ---- the lease's states, with a client that answers the launch late ---------------------------


class _LateAnsweringClient:
    """A Fray client whose `submit` runs `meanwhile` before it answers, as a fast cluster may
    start the lease job (and its holder connect) before the launch's answer is back."""

    def __init__(self, meanwhile, fail: bool = False) -> None:  # type: ignore[no-untyped-def]
        self._meanwhile = meanwhile
        self._fail = fail

    def submit(self, request, **kwargs):  # type: ignore[no-untyped-def]
        self._meanwhile()
        if self._fail:
            raise RuntimeError("the controller refused the job")
        return type("Job", (), {"job_id": "/user/session-test"})()


class _Holder:
    closed = False

    def close(self) -> None:
        self.closed = True


def _lease(client) -> SessionLease:  # type: ignore[no-untyped-def]
    return SessionLease(client, FateMode.LEASE, session_name="session-test", session_address="127.0.0.1:1", token="t")


def test_a_holder_that_greets_before_the_launch_is_answered_is_kept() -> None:
    accepted: list[bool] = []
    lease = _lease(_LateAnsweringClient(lambda: accepted.append(lease.holder_connected(_Holder()))))  # type: ignore[arg-type]
    lease.launch()
    assert accepted == [True]
    assert lease.covers_children
    assert lease.children() == {"parent_job": "/user/session-test"}


def test_a_holder_of_a_refused_launch_is_closed() -> None:
    holder = _Holder()
    accepted: list[bool] = []
    lease = _lease(_LateAnsweringClient(lambda: accepted.append(lease.holder_connected(holder)), fail=True))  # type: ignore[arg-type]
    lease.launch()
    assert accepted == [True] and holder.closed
    assert not lease.covers_children
    assert lease.children() == {"parent_job": None}


def test_a_holder_of_no_launch_is_refused() -> None:
    assert not _lease(_LateAnsweringClient(lambda: None)).holder_connected(_Holder())  # type: ignore[arg-type]
