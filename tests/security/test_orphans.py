"""No orphans: a killed driver or controller leaves no process and no temp dir behind.

Each scenario runs the owner in its own process with a unique variable in its environment,
which everything it starts inherits (tasks, their children, the cluster's reaper). After the
owner is killed, the test polls, with a 10 s deadline, until no process carrying that variable
is alive, the processes it knows by pid are gone (including one that cleared its environment and
left its session, where the machine gives the cluster a cgroup), and the cluster's work dir holds
no temp dir.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fray_ray.cluster._guard import pids_cgroup_parent
from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.entrypoint import command_entrypoint
from fray_ray.iris.names import JobName
from fray_ray.iris.types import JobSpec, JobState, ResourceSpec

CLEANUP_DEADLINE_S = 10.0
START_DEADLINE_S = 120.0  # a loaded 2-core machine can be slow to start a driver and its executor
HAVE_CGROUP = pids_cgroup_parent() is not None
MARK = "FRAY_RAY_ORPHAN_TEST"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


def marked(mark: str) -> list[int]:
    """Live processes whose environment holds MARK=mark."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if needle in f.read():
                        found.append(int(name))
            except OSError:
                continue
    return found


def wait_until(condition: Callable[[], object], deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {deadline_s} s: {what}")
        time.sleep(0.02)


def read_line(process: subprocess.Popen, deadline_s: float) -> str:
    """The next stdout line of `process`, waiting at most `deadline_s`."""
    assert process.stdout is not None
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if ready:
            return process.stdout.readline()
    raise AssertionError(f"no output from pid {process.pid} within {deadline_s} s (exit code {process.poll()})")


@pytest.fixture
def owner_env(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], Path]]:
    """A unique mark, the environment that carries it, and the cluster's work dir; at teardown
    anything still marked is killed so a failing test leaves nothing behind either."""
    mark = uuid.uuid4().hex
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, MARK: mark, "FRAY_RAY_CLUSTER_CONFIG": json.dumps({"work_dir": str(work)})}
    yield mark, env, work
    for pid in marked(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def assert_nothing_left(mark: str, pids: list[int], work: Path, owner_pid: int) -> None:
    wait_until(lambda: not marked(mark), CLEANUP_DEADLINE_S, f"every marked process gone (left: {marked(mark)})")
    wait_until(lambda: not any(alive(p) for p in pids), CLEANUP_DEADLINE_S, f"all of {pids} gone")
    wait_until(lambda: not list(work.iterdir()), CLEANUP_DEADLINE_S, f"work dir empty: {list(work.iterdir())}")
    if HAVE_CGROUP:
        parent = pids_cgroup_parent()
        assert parent is not None
        wait_until(
            lambda: not [n for n in os.listdir(parent) if n.startswith(f"fray-ray-{owner_pid}-")],
            CLEANUP_DEADLINE_S,
            "the cluster's cgroup removed",
        )


DRIVER = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    import fray_ray

    fray_ray.init(num_cpus=2)

    @fray_ray.remote
    def start_grandchildren(cleared_env):
        kept = subprocess.Popen(["sleep", "300"])                            # in the task's group
        escaped = subprocess.Popen(["sleep", "301"], start_new_session=True)  # left the group
        pids = [os.getpid(), kept.pid, escaped.pid]
        if cleared_env:  # left the group and dropped the environment: only a cgroup holds it
            pids.append(subprocess.Popen(["sleep", "302"], start_new_session=True, env={}).pid)
        return pids

    print(json.dumps(fray_ray.get(start_grandchildren.remote(%(cleared_env)r))), flush=True)
    time.sleep(600)  # killed by the test long before
    """
)


@pytest.mark.parametrize("kill_signal", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killed_embedded_driver_leaves_no_process_and_no_temp_dir(owner_env, kill_signal: int) -> None:
    mark, env, work = owner_env
    script = DRIVER % {"cleared_env": HAVE_CGROUP}
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env, text=True)
    try:
        pids = json.loads(read_line(driver, START_DEADLINE_S))
        assert all(alive(p) for p in pids) and len(pids) == (4 if HAVE_CGROUP else 3)
        assert any(n.startswith("fray-ray-cluster-") for n in os.listdir(work))
        driver.send_signal(kill_signal)
        assert driver.wait(CLEANUP_DEADLINE_S) == -kill_signal
        assert_nothing_left(mark, pids, work, driver.pid)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        assert driver.stdout is not None
        driver.stdout.close()


@pytest.mark.parametrize("kill_signal", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killed_standalone_controller_leaves_no_process_and_no_temp_dir(
    owner_env, tmp_path: Path, kill_signal: int
) -> None:
    mark, env, work = owner_env
    command = [sys.executable, "-m", "fray_ray.cluster", "--json", "--cpu", "2", "--memory", "2g"]
    command += ["--work-dir", str(work)]
    controller = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True)
    pid_file = tmp_path / "pids"
    script = (
        f"echo $$ >> {pid_file}; sleep 300 & echo $! >> {pid_file}; "
        f"setsid sleep 301 & echo $! >> {pid_file}; "
        + (f"env -i setsid sleep 302 & echo $! >> {pid_file}; " if HAVE_CGROUP else "")
        + "wait"
    )
    expected = 4 if HAVE_CGROUP else 3
    try:
        info = json.loads(read_line(controller, START_DEADLINE_S))
        with ControllerClient(info["address"], token=info["token"]) as client:
            job = JobSpec(
                name=JobName.root("tester", "grandparent"),
                entrypoint=command_entrypoint(["sh", "-c", script]),
                resources=ResourceSpec(cpu_millicores=100),
            )
            job_id = client.launch_job(job)
            wait_until(
                lambda: pid_file.exists() and len(pid_file.read_text().split()) == expected,
                START_DEADLINE_S,
                "the task to start its grandchildren",
            )
            assert client.job_state(job_id) == JobState.RUNNING
        pids = [int(p) for p in pid_file.read_text().split()]
        assert all(alive(p) for p in pids)
        controller.send_signal(kill_signal)
        assert controller.wait(CLEANUP_DEADLINE_S) in (0, -signal.SIGKILL)
        assert_nothing_left(mark, pids, work, controller.pid)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        assert controller.stdout is not None
        controller.stdout.close()
