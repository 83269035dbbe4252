"""Nothing outlives its driver: killing the driver process ends its workers and actors."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

DRIVER = textwrap.dedent(
    """
    import os, sys, time
    import fray_ray as ray
    ray.init(num_cpus=2)

    @ray.remote
    class Holder:
        def pid(self):
            return os.getpid()

    @ray.remote
    def pid():
        return os.getpid()

    @ray.remote
    def parent():
        return os.getppid()  # the worker template when workers fork from it, else the driver

    holder = Holder.remote()
    print(ray.get(holder.pid.remote()), ray.get(pid.remote()), ray.get(parent.remote()), flush=True)
    time.sleep(600)  # killed by the test long before
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def test_killing_the_driver_ends_its_workers_and_actors(tmp_path) -> None:
    # The killed driver cannot remove its cluster's temp dir: keep it inside tmp_path.
    env = {**__import__("os").environ, "TMPDIR": str(tmp_path)}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True, env=env)
    try:
        actor_pid, task_pid, parent_pid = (int(p) for p in driver.stdout.readline().split())
        assert _alive(actor_pid) and _alive(task_pid)
        assert parent_pid != driver.pid  # forked from the worker template, which must die too
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (_alive(actor_pid) or _alive(task_pid) or _alive(parent_pid)):
        time.sleep(0.05)
    assert not _alive(actor_pid) and not _alive(task_pid) and not _alive(parent_pid)
