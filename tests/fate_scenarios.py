"""Drivers that die, for the fate-sharing tests on a standalone cluster and on the real Iris
controller: what a killed (or cleanly stopped) driver leaves behind, seen from outside.

`start_driver` runs `DRIVER` in a process of its own against a controller. The driver starts a
task that sleeps (an executor mid-task), a task of another resource shape (a second executor,
idle afterwards), an actor, a named actor and a detached named actor (`get_if_exists`, so a
later driver reuses it); prints their pids and its session's lease job as one JSON line; then
sleeps (to be killed) or shuts down cleanly (`--clean`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from waiting import pid_alive

from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.types import JobState

DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    import fray_ray as ray
    from fray_ray._private.core import runtime_state

    address, scratch, detached_name, mode = sys.argv[1:5]
    ray.init(address, namespace="fate")

    @ray.remote
    def sleeper(path):
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(path + ".tmp", path)
        time.sleep(600)
        return "finished"  # never: its driver is gone by then

    @ray.remote
    def pid():
        return os.getpid()

    @ray.remote
    class Holder:
        def __init__(self):
            self.calls = 0

        def pid(self):
            self.calls += 1
            return os.getpid(), self.calls

    pid_file = os.path.join(scratch, "sleeper.pid")
    if os.path.exists(pid_file):
        os.remove(pid_file)
    running = sleeper.remote(pid_file)
    while not os.path.exists(pid_file):
        time.sleep(0.01)
    plain = Holder.remote()
    named = Holder.options(name="named-" + detached_name).remote()
    detached = Holder.options(name=detached_name, lifetime="detached", get_if_exists=True).remote()
    runtime = runtime_state.current()
    report = {
        "sleeping": int(open(pid_file).read()),
        "actor": ray.get(plain.pid.remote())[0],
        "named": ray.get(named.pid.remote())[0],
        "detached": ray.get(detached.pid.remote()),
        # Last, once every actor holds its CPU: an idle executor gives way to a process
        # launched after it when the cluster is short of CPU, and this one must stay.
        "idle": ray.get(pid.options(num_cpus=0.5).remote()),
        "lease": runtime.launcher.lease.job_id,
        "mode": runtime.launcher.lease.mode.value,
    }
    print(json.dumps(report), flush=True)
    if mode == "clean":
        ray.shutdown()
        print("shut down", flush=True)
    else:
        time.sleep(600)
    """
)

#: What a killed driver's jobs may end as: failed (the lease job, a worker that lost its
#: driver) or killed (cancelled by Iris with their parent). Never succeeded.
ENDED_WITH_THE_DRIVER = {JobState.FAILED, JobState.KILLED}
#: What a cleanly stopped session's jobs may end as: killed (terminated by the driver) or
#: succeeded (a worker told to exit that did so first). Never failed.
ENDED_BY_THE_DRIVER = {JobState.KILLED, JobState.SUCCEEDED}


@dataclass(frozen=True)
class DriverReport:
    """What a driver started: the pids of its workers and its lease job."""

    sleeping: int  # an executor in the middle of a task
    idle: int  # an executor between tasks
    actor: int
    named: int
    detached: tuple[int, int]  # pid and how many calls it has served
    lease: str | None
    mode: str

    @property
    def session_workers(self) -> list[int]:
        """Every process of the session except the detached actor's."""
        return [self.sleeping, self.idle, self.actor, self.named]


def start_driver(
    address: str, scratch: str, detached_name: str, env: Mapping[str, str], *, clean: bool = False
) -> tuple[subprocess.Popen, DriverReport]:
    """Run DRIVER; returns the process (still running unless `clean`) and its report."""
    process = subprocess.Popen(
        [sys.executable, "-c", DRIVER, address, scratch, detached_name, "clean" if clean else "crash"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(env),
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.wait(60)
        raise AssertionError(f"the driver ended without a report:\n{process.stderr.read()[-4000:]}")
    report = json.loads(line)
    report["detached"] = tuple(report["detached"])
    return process, DriverReport(**report)


def kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(60)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


alive = pid_alive  # the tests' one check: exists and is not a zombie


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Poll until none of `pids` runs or `timeout` passes; returns those still alive."""
    deadline = time.monotonic() + timeout
    pids = list(pids)
    while True:
        left = [pid for pid in pids if alive(pid)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)


def session_jobs(controller: ControllerClient, lease: str) -> dict[str, JobState]:
    """The lease job and every job under it, with their states."""
    return {
        job.job_id: job.state
        for job in controller.list_jobs()
        if job.job_id == lease or job.job_id.startswith(lease + "/")
    }


def wait_jobs_finished(controller: ControllerClient, job_ids: Iterable[str], timeout: float) -> dict[str, JobState]:
    """Poll until every one of `job_ids` is finished or `timeout` passes; returns their states."""
    deadline = time.monotonic() + timeout
    job_ids = list(job_ids)
    while True:
        states = controller.job_states(job_ids)
        if all(state.finished for state in states.values()) or time.monotonic() > deadline:
            return {job_id: states[job_id] for job_id in job_ids if job_id in states}
        time.sleep(0.05)


def detached_job(controller: ControllerClient, name: str) -> tuple[str, JobState] | None:
    """The root job of the detached actor `name` (namespace "fate") and its state, if any."""
    for job in controller.list_jobs():
        if job.job_id.count("/") == 2 and job.job_id.endswith(f"/rayactor.fate.{name}"):
            return job.job_id, job.state
    return None


def remove_detached(address: str, name: str, env: Mapping[str, str]) -> None:
    """End a detached actor left by a test: `ray.kill` from a driver of its own."""
    script = (
        "import sys, fray_ray as ray\n"
        "ray.init(sys.argv[1], namespace='fate')\n"
        "try:\n    ray.kill(ray.get_actor(sys.argv[2]))\nexcept ValueError:\n    pass\n"
        "ray.shutdown()\n"
    )
    subprocess.run([sys.executable, "-c", script, address, name], env=dict(env), capture_output=True, timeout=180)
