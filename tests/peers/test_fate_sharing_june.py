"""Fate sharing on the real Iris controller (marin-iris 2026-06 LocalCluster): a SIGKILLed
driver's executors (one mid-task) and actors are gone within seconds and Iris reports their
jobs failed or killed; a driver running as an Iris job takes its executors and actors down when
its job is terminated; a detached actor outlives crashes and a clean shutdown until `ray.kill`.
The workers run the peer venv's Python with fray_ray on its PYTHONPATH (see conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.types import JobState

pytestmark = pytest.mark.slow

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
from june_controller import controller_log  # noqa: E402 - tests/peers is on sys.path (conftest)

GONE_WITHIN_S = 10.0
DEADLINE = 240.0


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FRAY_RAY_ADDRESS", "RAY_ADDRESS", "FRAY_RAY_TOKEN")}


def test_a_killed_drivers_workers_end_within_seconds_and_their_jobs_fail_or_are_killed(june: str, tmp_path: Path) -> None:
    env = clean_env()
    process, report = start_driver(june, str(tmp_path), "june-kept-after-kill", env)
    try:
        assert report.mode == "lease" and report.lease is not None
        gone = [pid for pid in report.session_workers if not alive(pid)]
        with ControllerClient(june) as controller:
            jobs = session_jobs(controller, report.lease)
        assert not gone, (f"session workers {gone} gone before the driver was killed ({report}); jobs: {jobs}\n"
                          f"the controller's log of them:\n{controller_log(june, *jobs)}")
        assert len(jobs) == 5 and set(jobs.values()) == {JobState.RUNNING}, jobs
    finally:
        kill(process)
    try:
        assert wait_gone(report.session_workers, GONE_WITHIN_S) == []
        assert alive(report.detached[0])
        with ControllerClient(june) as controller:
            states = wait_jobs_finished(controller, jobs, DEADLINE)
            assert set(states.values()) <= ENDED_WITH_THE_DRIVER, states
            assert states[report.lease] == JobState.FAILED
            found = detached_job(controller, "june-kept-after-kill")
            assert found is not None and found[1] == JobState.RUNNING
    finally:
        remove_detached(june, "june-kept-after-kill", env)


KILLER = """
import sys, fray_ray as ray
ray.init(sys.argv[1], namespace="fate")
actor = ray.get_actor(sys.argv[2])
print(*ray.get(actor.pid.remote()), flush=True)
ray.kill(actor)
ray.shutdown()
"""


def test_a_detached_actor_outlives_crashes_and_a_shutdown_until_killed(june: str, tmp_path: Path) -> None:
    env = clean_env()
    name = "june-outlives-drivers"
    served = []
    try:
        for _ in range(3):
            process, report = start_driver(june, str(tmp_path), name, env)
            kill(process)
            served.append(report.detached)
            assert wait_gone(report.session_workers, GONE_WITHIN_S) == []
        process, report = start_driver(june, str(tmp_path), name, env, clean=True)
        _, err = process.communicate(timeout=DEADLINE)
        assert process.returncode == 0, err[-3000:]
        served.append(report.detached)
        with ControllerClient(june) as controller:
            states = session_jobs(controller, report.lease or "")
            assert len(states) == 5 and set(states.values()) <= ENDED_BY_THE_DRIVER, states
        pid = served[0][0]
        assert served == [(pid, calls) for calls in range(1, 5)]
        killer = subprocess.run([sys.executable, "-c", KILLER, june, name], env=env, capture_output=True, text=True,
                                timeout=DEADLINE)
        assert killer.returncode == 0, killer.stderr[-3000:]
        assert killer.stdout.split() == [str(pid), "5"]
        assert wait_gone([pid], GONE_WITHIN_S) == []
    finally:
        remove_detached(june, name, env)


SUBMITTED = """
import json, os, sys, time
import fray_ray as ray
from fray_ray._private.core import runtime_state

ray.init()

@ray.remote
def pid():
    return os.getpid()

@ray.remote
class Holder:
    def pid(self):
        return os.getpid()

holder = Holder.remote()
report = {"driver": os.getpid(), "executor": ray.get(pid.remote()), "actor": ray.get(holder.pid.remote()),
          "mode": runtime_state.current().launcher.lease.mode.value}
print("REPORT", json.dumps(report), flush=True)
time.sleep(600)
"""


def test_terminating_a_driver_job_ends_its_executors_and_actors(june: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text(textwrap.dedent(SUBMITTED))
    submitted = subprocess.run([sys.executable, "-m", "fray_ray", "submit", "--address", june, "--no-wait", "main.py"],
                               cwd=project, env=clean_env(), capture_output=True, text=True, timeout=DEADLINE)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.splitlines()[0].split()[-1]
    with ControllerClient(june) as controller:
        try:
            deadline = time.monotonic() + DEADLINE
            report = None
            while report is None:
                lines = [line.data for line in controller.task_logs(f"{job_id}/0")]
                found = [line for line in lines if line.startswith("REPORT ")]
                if found:
                    report = json.loads(found[-1].split(" ", 1)[1])
                    break
                assert not controller.job_state(job_id).finished, "\n".join(lines[-30:])
                assert time.monotonic() < deadline, "the driver job never reported its workers"
                time.sleep(0.2)
            assert report["mode"] == "driver job"
            children = [j for j in session_jobs(controller, job_id) if j != job_id]
            assert len(children) == 2, children  # an executor and an actor, children of the driver's job
            workers = [report["driver"], report["executor"], report["actor"]]
            assert all(alive(pid) for pid in workers)
        finally:
            controller.terminate_job(job_id)
        assert wait_gone(workers, GONE_WITHIN_S) == []
        states = wait_jobs_finished(controller, [job_id, *children], DEADLINE)
        assert set(states.values()) <= ENDED_WITH_THE_DRIVER, states
        assert states[job_id] == JobState.KILLED
