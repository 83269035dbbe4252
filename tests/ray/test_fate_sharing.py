"""Nothing outlives its driver: killing the driver process ends its workers and actors."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import pid_alive, wait_for  # noqa: E402

DRIVER = textwrap.dedent(
    """
    import os, sys, time
    import fray_ray as ray
    from fray_ray.cluster import ClusterConfig
    ray.init(num_cpus=2, cluster_config=ClusterConfig(worker_template_after=0))  # workers fork from the start

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



def test_killing_the_driver_ends_its_workers_and_actors(tmp_path) -> None:
    # The killed driver cannot remove its cluster's temp dir: keep it inside tmp_path.
    env = {**__import__("os").environ, "TMPDIR": str(tmp_path)}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True, env=env)
    try:
        actor_pid, task_pid, parent_pid = (int(p) for p in driver.stdout.readline().split())
        assert pid_alive(actor_pid) and pid_alive(task_pid)
        assert parent_pid != driver.pid  # forked from the worker template, which must die too
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
    wait_for(lambda: not (pid_alive(actor_pid) or pid_alive(task_pid) or pid_alive(parent_pid)),
             what="the killed driver's workers to end")
