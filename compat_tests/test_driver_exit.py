"""A driver that is done or interrupted ends the tasks it started: none outlives it.

Each script runs in its own interpreter and starts its own local cluster; the test reads the
task's process id from what the task printed, then waits for that process to be gone once the
driver has exited.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

from compat_tests._backend import selected_backend
from compat_tests.helpers import wait_for_condition

_SCRIPT = """
import os, sys, time
import {backend} as ray

ray.init(num_cpus=1)


@ray.remote
def long_task():
    print("task running in", os.getpid(), flush=True)
    time.sleep(600)


ref = long_task.remote()
sys.stdin.readline()  # the test answers once the task is running
{ending}
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _run_until_task_runs(tmp_path, ending: str) -> tuple[subprocess.Popen, int]:
    script = tmp_path / "driver_script.py"
    script.write_text(_SCRIPT.format(backend=selected_backend(), ending=ending))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    process = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path)
    for line in process.stdout:
        found = re.search(r"task running in (\d+)", line)
        if found:
            return process, int(found.group(1))
    process.wait()
    raise AssertionError("the script ended before its task ran")


def _finish(process: subprocess.Popen) -> int:
    try:
        process.stdout.read()
        return process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdin.close()
        process.stdout.close()


def test_driver_exit__script_end_stops_a_running_task(tmp_path):
    process, pid = _run_until_task_runs(tmp_path, 'print("script ends", flush=True)')
    process.stdin.write("go\n")
    process.stdin.flush()
    assert _finish(process) == 0
    wait_for_condition(lambda: not _alive(pid), timeout=60)


def test_driver_exit__ctrl_c_during_get_stops_the_task(tmp_path):
    process, pid = _run_until_task_runs(tmp_path, "ray.get(ref)")
    process.stdin.write("go\n")
    process.stdin.flush()
    process.send_signal(signal.SIGINT)
    assert _finish(process) != 0
    wait_for_condition(lambda: not _alive(pid), timeout=60)


_EXITING_TASK = """
import sys
import {backend} as ray

ray.init(num_cpus=1)


@ray.remote(max_retries=1)
def exits_with_3():
    sys.exit(3)


try:
    ray.get(exits_with_3.remote())
except ray.exceptions.WorkerCrashedError as error:
    print("raised WorkerCrashedError:", error, flush=True)
"""


def test_worker_exit__each_retry_is_announced(tmp_path):
    # A task whose process exits is retried, and the driver is told so each time.
    script = tmp_path / "exiting_task.py"
    script.write_text(_EXITING_TASK.format(backend=selected_backend()))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "raised WorkerCrashedError: The worker died unexpectedly while executing this task." in out
    assert "There are 1 retries remaining, so the task will be retried." in out, out[-3000:]
