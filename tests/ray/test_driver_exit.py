"""A driver that is done or interrupted ends the work it started at once, quietly.

Each script runs in a real interpreter against its embedded cluster; the test reads its output
as it comes and, where it says so, sends Ctrl-C (SIGINT) as a terminal would. The bounds are
the one kind of time limit these tests hold: how long a user sits waiting after the script is
done or interrupted (Ray 2.60 takes about 2-3 s here), generous for a loaded 2-core machine
and well below what a driver that waits for its running tasks takes.
"""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.environments import unrelated_environment
from tests.waiting import pid_alive, wait_for

#: Seconds from Ctrl-C, or from the script's last line, to the driver's exit.
EXIT_BOUND_S = 5.0
#: Seconds `shutdown()` may take with a task running (it used to wait 3 s for the task).
SHUTDOWN_BOUND_S = 2.5
#: For a script to start its cluster and task on a loaded machine.
START_DEADLINE_S = 120.0

#: What the driver's exit must never print: Python's report of an error in an atexit hook, a
#: launch refused after Python began exiting, frames of fray_ray. (A Ctrl-C that lands while
#: the script's last line still runs prints the user's own KeyboardInterrupt, as in Ray; one
#: that lands in the microseconds before fray_ray's exit hook is in place is Python's to report.)
_NOISE = ("Exception ignored in atexit callback", "cannot schedule new futures", "fray_ray/")

_LONG_TASK = """
import os, sys, time
import fray_ray as ray

ray.init(num_cpus=2)

@ray.remote
def long_task():
    print("TASK RUNNING pid", os.getpid(), flush=True)
    time.sleep(300)
    print("TASK FINISHED", flush=True)
"""


class Driver:
    """A script running in its own interpreter, its output lines read as they arrive."""

    def __init__(self, tmp_path: Path, body: str) -> None:
        script = tmp_path / "driver_script.py"
        script.write_text(textwrap.dedent(body))
        env = unrelated_environment()
        self.process = subprocess.Popen(
            [sys.executable, str(script)], cwd=tmp_path, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stdout, self.stdout, True), daemon=True),
            threading.Thread(target=self._read, args=(self.process.stderr, self.stderr, False), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: object, into: list[str], announce: bool) -> None:
        for line in stream:  # type: ignore[attr-defined]
            into.append(line)
            if announce:
                self.lines.put(line)
        if announce:
            self.lines.put(None)

    def wait_for_line(self, pattern: str) -> re.Match[str]:
        """The first stdout line matching `pattern`; fails if the script ends or stalls first."""
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no line matching {pattern!r} within {START_DEADLINE_S} s\n{self.output()}")
            if line is None:
                pytest.fail(f"the script ended before printing {pattern!r}\n{self.output()}")
            found = re.search(pattern, line)
            if found:
                return found

    def go_on(self) -> None:
        """Let a script waiting on its stdin go on."""
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def seconds_to_exit(self) -> float:
        """Seconds until the process ends (it is killed if it outlives the start deadline)."""
        started = time.monotonic()
        try:
            self.process.wait(timeout=START_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for reader in self._readers:
            reader.join(timeout=30)
        return time.monotonic() - started

    def output(self) -> str:
        return f"stdout:\n{''.join(self.stdout)}\nstderr:\n{''.join(self.stderr)}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@contextmanager
def driver(tmp_path: Path, body: str) -> Iterator[Driver]:
    running = Driver(tmp_path, body)
    try:
        yield running
    finally:
        running.stop()


def _assert_task_stopped(pid: int) -> None:
    wait_for(lambda: not pid_alive(pid), what=f"the task's process {pid} to end")


def test_ctrl_c_during_get_of_a_long_task_exits_at_once(tmp_path: Path) -> None:
    with driver(tmp_path, _LONG_TASK + "ray.get(long_task.remote())\n") as script:
        pid = int(script.wait_for_line(r"TASK RUNNING pid (\d+)").group(1))
        script.process.send_signal(signal.SIGINT)
        took = script.seconds_to_exit()
        assert took < EXIT_BOUND_S, f"exited {took:.1f} s after Ctrl-C\n{script.output()}"
        stderr = "".join(script.stderr)
        assert "KeyboardInterrupt" in stderr, script.output()
        assert "Exception ignored" not in stderr and "cannot schedule" not in stderr, script.output()
        assert "own frames are not shown" not in stderr, script.output()  # Ctrl-C is no fray_ray failure
        _assert_task_stopped(pid)


def test_script_ending_with_a_task_running_exits_at_once_and_stops_it(tmp_path: Path) -> None:
    body = _LONG_TASK + """
ref = long_task.remote()
sys.stdin.readline()  # the test answers once the task is running
print("SCRIPT END", flush=True)
"""
    with driver(tmp_path, body) as script:
        pid = int(script.wait_for_line(r"TASK RUNNING pid (\d+)").group(1))
        script.go_on()
        script.wait_for_line("SCRIPT END")
        took = script.seconds_to_exit()
        assert took < EXIT_BOUND_S, f"exited {took:.1f} s after the script ended\n{script.output()}"
        assert script.process.returncode == 0, script.output()
        assert "TASK FINISHED" not in "".join(script.stdout)
        assert not any(noise in "".join(script.stderr) for noise in _NOISE), script.output()
        _assert_task_stopped(pid)


def test_ctrl_c_while_the_script_ends_is_quiet(tmp_path: Path) -> None:
    # Ctrl-C as the driver ends its session: no traceback of fray_ray's exit code.
    body = _LONG_TASK + """
ref = long_task.remote()
sys.stdin.readline()  # the test answers once the task is running
print("SCRIPT END", flush=True)
"""
    with driver(tmp_path, body) as script:
        pid = int(script.wait_for_line(r"TASK RUNNING pid (\d+)").group(1))
        script.go_on()
        script.wait_for_line("SCRIPT END")
        script.process.send_signal(signal.SIGINT)
        took = script.seconds_to_exit()
        assert took < EXIT_BOUND_S, f"exited {took:.1f} s after Ctrl-C\n{script.output()}"
        assert not any(noise in "".join(script.stderr) for noise in _NOISE), script.output()
        _assert_task_stopped(pid)


def test_shutdown_with_a_task_running_stops_it_at_once(tmp_path: Path) -> None:
    body = _LONG_TASK + """
ref = long_task.remote()
sys.stdin.readline()  # the test answers once the task is running
print("SHUTDOWN START", flush=True)
ray.shutdown()
print("SHUTDOWN DONE", flush=True)
"""
    with driver(tmp_path, body) as script:
        pid = int(script.wait_for_line(r"TASK RUNNING pid (\d+)").group(1))
        script.go_on()
        script.wait_for_line("SHUTDOWN START")
        started = time.monotonic()
        script.wait_for_line("SHUTDOWN DONE")
        took = time.monotonic() - started
        assert took < SHUTDOWN_BOUND_S, f"shutdown() took {took:.1f} s\n{script.output()}"
        script.seconds_to_exit()
        assert script.process.returncode == 0, script.output()
        _assert_task_stopped(pid)


def test_fray_ray_run_prints_what_unawaited_tasks_print(tmp_path: Path) -> None:
    # As `python script.py` does (and Ray): the script ends without waiting for its tasks.
    script = tmp_path / "unawaited.py"
    script.write_text(textwrap.dedent("""
        import ray

        ray.init(num_cpus=1)

        @ray.remote
        def never_awaited():
            print("unawaited task printed", flush=True)

        never_awaited.remote()
    """))
    env = unrelated_environment()
    finished = subprocess.run([sys.executable, "-m", "fray_ray", "run", script.name], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=START_DEADLINE_S)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "unawaited task printed" in finished.stdout, finished.stdout + finished.stderr
