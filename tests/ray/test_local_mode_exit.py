"""A local-mode script that never calls shutdown() ends as soon as its main thread does.

Local mode's executors and actors are threads of the driver's process. Python joins such
threads before it runs `atexit`, so the session must end earlier, from a `threading` exit hook.
Each script runs in a real interpreter (this venv's python); the tests wait on the process with
a generous deadline.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from environments import unrelated_environment  # noqa: E402

# Far above the second a script takes here, even on a loaded machine; well below the 30 s an idle
# executor thread waits before it retires itself, which is what used to end such a script.
EXIT_DEADLINE_S = 25.0
# For scripts that would otherwise never end (a task or method still looping).
HANG_DEADLINE_S = 120.0


def run_script(tmp_path: Path, body: str, deadline: float) -> subprocess.CompletedProcess:
    script = tmp_path / "local_script.py"
    script.write_text(textwrap.dedent(body))
    env = unrelated_environment()
    process = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = process.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        pytest.fail(f"the script did not exit within {deadline} s\nstdout:\n{stdout}\nstderr:\n{stderr}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_script_without_shutdown_exits_at_once(tmp_path: Path) -> None:
    finished = run_script(tmp_path, """
        import fray_ray as ray

        ray.init(local_mode=True)

        @ray.remote
        def square(x):
            return x * x

        @ray.remote
        class Counter:
            def __init__(self):
                self.n = 0
            def add(self):
                self.n += 1
                return self.n

        counter = Counter.remote()
        print("squares", ray.get([square.remote(i) for i in range(4)]))
        print("count", ray.get([counter.add.remote() for _ in range(3)])[-1])
    """, EXIT_DEADLINE_S)
    assert finished.returncode == 0, finished.stderr
    assert "squares [0, 1, 4, 9]" in finished.stdout
    assert "count 3" in finished.stdout


@pytest.mark.slow  # over 10 s on its own
def test_task_and_method_still_running_at_exit_are_interrupted(tmp_path: Path) -> None:
    """A thread cannot be killed; a task or actor method looping in Python is interrupted, so
    the script still ends (before, it never did)."""
    finished = run_script(tmp_path, """
        import os
        import time
        import fray_ray as ray

        ray.init(local_mode=True)

        @ray.remote
        def spin(marker):
            open(marker, "w").close()
            while True:
                sum(range(1000))

        @ray.remote
        class Spinner:
            def spin(self, marker):
                open(marker, "w").close()
                while True:
                    sum(range(1000))

        spinner = Spinner.remote()
        spinner.spin.remote("method-started")
        ref = spin.remote("task-started")
        while not (os.path.exists("method-started") and os.path.exists("task-started")):
            time.sleep(0.05)
        ready, _ = ray.wait([ref], timeout=0)
        print("main done", ready)
    """, HANG_DEADLINE_S)
    assert finished.returncode == 0, finished.stderr
    assert "main done []" in finished.stdout


def test_explicit_shutdown_still_ends_a_local_session(tmp_path: Path) -> None:
    finished = run_script(tmp_path, """
        import fray_ray as ray

        ray.init(local_mode=True)

        @ray.remote
        def one():
            return 1

        assert ray.get(one.remote()) == 1
        ray.shutdown()
        assert not ray.is_initialized()
        ray.init(local_mode=True)
        assert ray.get(one.remote()) == 1
        print("twice")
    """, EXIT_DEADLINE_S)
    assert finished.returncode == 0, finished.stderr
    assert "twice" in finished.stdout
