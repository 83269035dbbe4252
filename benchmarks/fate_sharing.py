#!/usr/bin/env python3
"""A driver on a standalone cluster: init to first result, and how fast its work ends when it dies.

    python benchmarks/fate_sharing.py                          # starts `fray-ray start` itself
    python benchmarks/fate_sharing.py --address http://host:port   # a running controller
    PYTHONPATH=/other/checkout python benchmarks/fate_sharing.py   # another fray_ray (drivers
                                                                   # and the cluster it starts)

Each sample is a fresh driver process:

- `init_to_first_result`: from before `init(address)` to the result of the first no-op task
  (the import is not included), split into `init` and `first task`;
- `sigkill_to_gone`: the driver starts a task that sleeps (one executor mid-task), a second
  task on another executor (idle afterwards) and an actor, prints their pids and is killed with SIGKILL; the time
  until none of those processes exists (polled every 10 ms), and until the controller reports
  every job of the session finished. A version without fate sharing lets the sleeping task run
  its 60 s: that sample is reported as "> GIVE_UP_S" and its survivors are killed.

This machine is shared: compare runs made one after the other only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

FIRST_RESULT = textwrap.dedent(
    """
    import json, sys, time
    began = time.perf_counter()
    import fray_ray as ray
    imported = time.perf_counter()
    ray.init(sys.argv[1])
    initialised = time.perf_counter()

    @ray.remote
    def noop():
        return None

    ray.get(noop.remote())
    done = time.perf_counter()
    print(json.dumps({"init": initialised - imported, "first_task": done - initialised}), flush=True)
    ray.shutdown()
    """
)

CRASH = textwrap.dedent(
    """
    import json, os, sys, time
    import fray_ray as ray
    ray.init(sys.argv[1])

    @ray.remote
    def sleeper(path):
        with open(path, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)

    @ray.remote
    def pid():
        return os.getpid()

    @ray.remote
    class Actor:
        def pid(self):
            return os.getpid()

    pid_file = sys.argv[2]
    sleeper.remote(pid_file)
    while not os.path.exists(pid_file) or not open(pid_file).read():
        time.sleep(0.01)
    actor = Actor.remote()
    # Another resource shape is another pool: an executor of its own, idle once it answered.
    pids = [int(open(pid_file).read()), ray.get(pid.options(num_cpus=0.5).remote()), ray.get(actor.pid.remote())]
    session = ray._private.core.runtime_state.current().session_name
    print(json.dumps({"pids": pids, "session": session}), flush=True)
    time.sleep(600)
    """
)


#: Seconds after which a sample stops waiting for the killed driver's workers to end.
GIVE_UP_S = 30.0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def first_result(address: str, env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", FIRST_RESULT, address], capture_output=True, text=True, env=env,
                         timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def sigkill_to_gone(address: str, env: dict[str, str], token: str | None) -> tuple[float, float]:
    """(seconds until the workers are gone, until the session's jobs are finished); inf for
    what did not happen within GIVE_UP_S."""
    from fray_ray.iris.controller_client import ControllerClient

    with tempfile.TemporaryDirectory() as scratch:
        driver = subprocess.Popen([sys.executable, "-c", CRASH, address, os.path.join(scratch, "pid")],
                                  stdout=subprocess.PIPE, text=True, env=env)
        try:
            report = json.loads(driver.stdout.readline())
        finally:
            driver.send_signal(signal.SIGKILL)
            killed = time.perf_counter()
            driver.wait(30)
    pids = report["pids"]
    gone = finished = float("inf")
    while time.perf_counter() - killed < GIVE_UP_S:
        if not any(_alive(pid) for pid in pids):
            gone = time.perf_counter() - killed
            break
        time.sleep(0.01)
    for pid in pids:  # what outlived its driver (a version without fate sharing)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    with ControllerClient(address, token=token) as controller:
        while time.perf_counter() - killed < GIVE_UP_S:
            jobs = [j for j in controller.list_jobs() if report["session"] in j.job_id]
            if jobs and all(j.state.finished for j in jobs):
                finished = time.perf_counter() - killed
                break
            time.sleep(0.01)
    return gone, finished


def _seconds(value: float) -> str:
    return f"> {GIVE_UP_S:.0f} s" if value == float("inf") else f"{value:.3f} s"


def start_cluster(env: dict[str, str]) -> tuple[subprocess.Popen, str, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "fray_ray", "start", "--block", "--json", "--cpu-workers", "2", "--cpu", "2", "--memory", "4g",
         "--disk", "10g"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    info = json.loads(process.stdout.readline())
    return process, info["address"], info["token"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="a running controller (default: start `fray-ray start` here)")
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    env = dict(os.environ)
    cluster = None
    token = env.get("FRAY_RAY_TOKEN") or None
    address = args.address
    if address is None:
        cluster, address, token = start_cluster(env)
        env["FRAY_RAY_TOKEN"] = token
    try:
        first_result(address, env)  # warm-up: the workspace bundle reaches the controller once
        samples = [first_result(address, env) for _ in range(args.samples)]
        totals = [s["init"] + s["first_task"] for s in samples]
        print(f"init_to_first_result  median {statistics.median(totals):.3f} s  "
              f"(init {statistics.median(s['init'] for s in samples):.3f} s + first task "
              f"{statistics.median(s['first_task'] for s in samples):.3f} s; {len(samples)} drivers)")
        kills = [sigkill_to_gone(address, env, token) for _ in range(args.samples)]
        print(f"sigkill_to_gone       median {_seconds(statistics.median(k[0] for k in kills))}, "
              f"max {_seconds(max(k[0] for k in kills))}; jobs finished: median "
              f"{_seconds(statistics.median(k[1] for k in kills))} ({len(kills)} drivers)")
    finally:
        if cluster is not None:
            cluster.send_signal(signal.SIGINT)
            cluster.wait(60)


if __name__ == "__main__":
    main()
