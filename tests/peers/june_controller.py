"""Starting and stopping the real Iris controller (marin-iris 2026-06 `LocalCluster`, two
workers, and simulated TPU slices where a test asks) in a process of its own, for the tests
of this directory."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKERS = 2
READY_DEADLINE_S = 180.0
#: Each running controller's log file, by address (see `controller_log`).
_LOGS: dict[str, Path] = {}


def start_controller(python: str, home: Path, pythonpath: str | None, *, workers: int = WORKERS,
                     tpu: tuple[str, int] | None = None) -> tuple[subprocess.Popen, str]:
    """Run `iris_controller_main.py` with the peer venv's `python`; returns the process and the
    controller's address once all its workers are registered and healthy (they start after the
    controller answers; a test that spreads work must see every host). With `pythonpath`, its
    workers' tasks import fray_ray from there. `tpu`: (variant, slices) of simulated TPU slices
    to start besides the `workers` CPU workers."""
    from fray_ray.iris.tpu import get_tpu_topology
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HOME=str(home), TMPDIR=str(home))
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
        # A driver running as a job of this controller serves its session on loopback: this
        # machine's only other address is not one tests may connect to.
        env["FRAY_RAY_NODE_IP_ADDRESS"] = "127.0.0.1"
    log = home / "controller.log"
    command = [python, str(HERE / "iris_controller_main.py"), str(workers), str(log)]
    hosts = workers
    if tpu is not None:
        command += ["--tpu", f"{tpu[0]}:{tpu[1]}"]
        hosts += tpu[1] * get_tpu_topology(tpu[0]).vm_count
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("ADDRESS "):
            address = line.split()[1]
            try:
                wait_for_workers(address, hosts)
            except BaseException:
                stop_controller(process)
                raise
            _LOGS[address] = log
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


def controller_log(address: str, *needles: str, lines: int = 60) -> str:
    """The last `lines` lines of the controller's log that mention any of `needles` (a job's
    name, say): what the controller and its workers did to it, for a failing test to show."""
    path = _LOGS.get(address)
    if path is None or not path.exists():
        return "(no controller log)"
    found = [line for line in path.read_text(errors="replace").splitlines() if any(n in line for n in needles)]
    return "\n".join(found[-lines:]) or f"(nothing about {', '.join(needles)} in {path})"
