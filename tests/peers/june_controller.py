"""Starting and stopping the real Iris controller (marin-iris 2026-06 `LocalCluster`, two
workers) in a process of its own, for the tests of this directory."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKERS = 2
READY_DEADLINE_S = 180.0


def start_controller(python: str, home: Path, pythonpath: str | None) -> tuple[subprocess.Popen, str]:
    """Run `iris_controller_main.py` with the peer venv's `python`; returns the process and the
    controller's address once all its workers are registered and healthy (they start after the
    controller answers; a test that spreads work must see every host). With `pythonpath`, its
    workers' tasks import fray_ray from there."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HOME=str(home), TMPDIR=str(home))
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
        # A driver running as a job of this controller serves its session on loopback: this
        # machine's only other address is not one tests may connect to.
        env["FRAY_RAY_NODE_IP_ADDRESS"] = "127.0.0.1"
    process = subprocess.Popen(
        [python, str(HERE / "iris_controller_main.py"), str(WORKERS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("ADDRESS "):
            address = line.split()[1]
            try:
                wait_for_workers(address, WORKERS)
            except BaseException:
                stop_controller(process)
                raise
            return process, address
    raise AssertionError(f"the real Iris controller did not start (exit {process.poll()})")


def wait_for_workers(address: str, count: int) -> None:
    """Poll ListWorkers until `count` healthy workers are registered."""
    from fray_ray.iris.controller_client import ControllerClient

    deadline = time.monotonic() + READY_DEADLINE_S
    with ControllerClient(address) as controller:
        while True:
            healthy = [w for w in controller.list_workers() if w.healthy]
            if len(healthy) >= count:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the real Iris controller has {len(healthy)} of {count} workers after {READY_DEADLINE_S:.0f} s")
            time.sleep(0.2)


def stop_controller(process: subprocess.Popen) -> None:
    """Close its stdin (it stops its cluster and exits); kill it if it does not."""
    assert process.stdin is not None
    process.stdin.close()
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
