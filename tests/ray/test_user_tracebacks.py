"""Tracebacks of task and actor errors show the user's file, line and source, not fray_ray's.

Scripts run as real drivers (this venv's python, and `python -m fray_ray run`) on an embedded
cluster whose workers are separate processes. Each script deletes itself once its functions
have been shipped, so a worker can only show the source lines that travelled with the code,
as on a host that does not share the driver's disk.
"""

from __future__ import annotations

import linecache
import os
import re
import socket
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import pytest

import fray_ray
from fray_ray._private.core import excepthook, user_tracebacks
from fray_ray._private.objects import code_source

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from environments import unrelated_environment  # noqa: E402

DEADLINE_S = 180.0
FRAY_RAY_DIR = os.path.dirname(os.path.abspath(fray_ray.__file__)) + os.sep

SCRIPT = '''
import os
import {module} as ray


def helper(x):
    if x > 2:
        raise ValueError(f"bad value {{x}}")
    return x


@ray.remote
def task(x):
    return helper(x + 1)


@ray.remote
class Worker:
    def run(self, x):
        return helper(x)


if __name__ == "__main__":
    ray.init(num_cpus=1)
    worker = Worker.remote()
    assert ray.get([task.remote(0), worker.run.remote(1)]) == [1, 1]
    os.remove(__file__)  # from here on, no process can read this file from disk
    try:
        ray.get(task.remote(5))
    except ValueError as exc:
        print("=== task ===")
        print(exc)
    try:
        ray.get(worker.run.remote(7))
    except ValueError as exc:
        print("=== actor ===")
        print(exc)
    ray.get(task.remote(9))
'''


def run(tmp_path: Path, *, module: str = "fray_ray", via_cli: bool = False, **env: str) -> subprocess.CompletedProcess:
    script = tmp_path / "deep_error.py"
    script.write_text(SCRIPT.format(module=module))
    clean = unrelated_environment()
    clean.update(env)
    command = [sys.executable, "-m", "fray_ray", "run", script.name] if via_cli else [sys.executable, str(script)]
    return subprocess.run(command, cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=DEADLINE_S)


def frames(text: str) -> list[str]:
    """The file names of the traceback frames in `text`."""
    return re.findall(r'^\s*File "([^"]+)", line \d+', text, flags=re.MULTILINE)


def line_of(code: str) -> int:
    """The line number of `code` in the script."""
    return next(n for n, line in enumerate(SCRIPT.splitlines(), 1) if line.strip() == code)


def assert_user_frames(text: str, x: int, *, function: str) -> None:
    """`text` names the script's file, line and source for the failing call and for helper."""
    call = "return helper(x + 1)" if function == "task" else "return helper(x)"
    raised = 'raise ValueError(f"bad value {x}")'
    for name, code in ((function, call), ("helper", raised)):
        frame = f'deep_error.py", line {line_of(code.replace("{x}", "{{x}}"))}, in {name}\n    {code}\n'
        assert frame in text, text
    assert f"ValueError: bad value {x}" in text
    assert "<dynamic-code>" not in text


def test_task_and_actor_errors_show_the_script_lines(tmp_path: Path) -> None:
    finished = run(tmp_path)
    assert finished.returncode == 1, finished.stdout + finished.stderr
    task_text = finished.stdout.split("=== task ===")[1].split("=== actor ===")[0]
    actor_text = finished.stdout.split("=== actor ===")[1]
    assert_user_frames(task_text, 6, function="task")
    assert_user_frames(actor_text, 7, function="run")
    # The uncaught error: the driver's own frame, then the task's frames; none of fray_ray's.
    assert f'deep_error.py", line {line_of("ray.get(task.remote(9))")}, in <module>' in finished.stderr
    assert_user_frames(finished.stderr, 10, function="task")
    for text in (finished.stdout, finished.stderr):
        assert frames(text) and not [name for name in frames(text) if name.startswith(FRAY_RAY_DIR)], text


ARGUMENT_SCRIPT = '''
import os
import fray_ray as ray


def transform(x):
    raise KeyError(f"no {x}")


@ray.remote
def apply(fn, x):
    return fn(x)


if __name__ == "__main__":
    ray.init(num_cpus=1)
    assert ray.get(apply.remote(str, 1)) == "1"
    os.remove(__file__)  # from here on, no process can read this file from disk
    try:
        ray.get(apply.remote(transform, 3))
    except KeyError as exc:
        print(exc)
'''


def test_a_function_passed_as_an_argument_shows_its_script_lines(tmp_path: Path) -> None:
    script = tmp_path / "arg_error.py"
    script.write_text(ARGUMENT_SCRIPT)
    clean = unrelated_environment()
    finished = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=clean, capture_output=True,
                              text=True, timeout=DEADLINE_S)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    raised = 'raise KeyError(f"no {x}")'
    line = next(n for n, text in enumerate(ARGUMENT_SCRIPT.splitlines(), 1) if text.strip() == raised)
    assert f'arg_error.py", line {line}, in transform\n    {raised}\n' in finished.stdout, finished.stdout
    assert "<dynamic-code>" not in finished.stdout


def test_fray_ray_run_shows_only_the_script(tmp_path: Path) -> None:
    finished = run(tmp_path, module="ray", via_cli=True)
    assert finished.returncode == 1, finished.stdout + finished.stderr
    assert_user_frames(finished.stderr, 10, function="task")
    names = frames(finished.stderr)
    assert names[0] == "deep_error.py", finished.stderr  # no fray-ray CLI or runpy frames above it
    assert not [name for name in names if name.startswith(FRAY_RAY_DIR) or "runpy" in name], finished.stderr


def test_internals_env_shows_fray_ray_frames_in_driver_and_workers(tmp_path: Path) -> None:
    finished = run(tmp_path, **{user_tracebacks.INTERNALS_ENV: "1"})
    assert finished.returncode == 1, finished.stdout + finished.stderr
    task_text = finished.stdout.split("=== task ===")[1].split("=== actor ===")[0]
    assert [name for name in frames(task_text) if name.startswith(FRAY_RAY_DIR)], task_text  # the worker's
    assert_user_frames(task_text, 6, function="task")
    driver_part = finished.stderr.split("RayTaskError")[0]
    assert [name for name in frames(driver_part) if name.startswith(FRAY_RAY_DIR)], finished.stderr


def test_bad_call_names_the_user_line_and_how_to_see_more(tmp_path: Path) -> None:
    script = tmp_path / "bad_call.py"
    script.write_text(textwrap.dedent("""
        import fray_ray as ray

        @ray.remote
        def one(x):
            return x

        ray.init(num_cpus=1)
        one.remote(1, 2)
    """))
    clean = unrelated_environment()
    finished = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=clean, capture_output=True,
                              text=True, timeout=DEADLINE_S)
    assert finished.returncode == 1
    assert 'bad_call.py", line 9, in <module>' in finished.stderr and "one.remote(1, 2)" in finished.stderr
    assert "TypeError" in finished.stderr
    assert f"{user_tracebacks.INTERNALS_ENV}=1 shows them" in finished.stderr
    assert not [name for name in frames(finished.stderr) if name.startswith(FRAY_RAY_DIR)], finished.stderr


def test_an_error_of_the_script_itself_reads_as_plain_python(tmp_path: Path) -> None:
    """Under `fray-ray run`, the script's own error shows only the script, with no note."""
    script = tmp_path / "own_error.py"
    script.write_text("import ray\n\nray.init(num_cpus=1)\nprint(1 / 0)\n")
    clean = unrelated_environment()
    finished = subprocess.run([sys.executable, "-m", "fray_ray", "run", script.name], cwd=tmp_path, env=clean,
                              capture_output=True, text=True, timeout=DEADLINE_S)
    assert finished.returncode == 1
    assert finished.stderr.endswith(
        'Traceback (most recent call last):\n  File "own_error.py", line 4, in <module>\n    print(1 / 0)\n'
        "          ~~^~~\nZeroDivisionError: division by zero\n"
    ), finished.stderr


def _run_script(tmp_path: Path, name: str, source: str, *launcher: str) -> subprocess.CompletedProcess:
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    clean = unrelated_environment()
    command = [*launcher, script.name] if launcher else [sys.executable, script.name]
    return subprocess.run(command, cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=DEADLINE_S)


def test_the_fray_ray_command_adds_no_frames_of_its_own(tmp_path: Path) -> None:
    """`fray-ray run` (the console script) shows the script's error as Python would, even one
    raised before the script called init()."""
    fray_ray_command = str(Path(sys.executable).parent / "fray-ray")
    finished = _run_script(tmp_path, "early_error.py", """
        def check():
            raise KeyError("no such setting")

        check()
    """, fray_ray_command, "run")
    assert finished.returncode == 1
    assert finished.stderr.startswith('Traceback (most recent call last):\n  File "early_error.py", line 5'), \
        finished.stderr
    assert "bin/fray-ray" not in finished.stderr and "runpy" not in finished.stderr, finished.stderr


def test_an_unpicklable_argument_shows_one_message_at_the_call(tmp_path: Path) -> None:
    finished = _run_script(tmp_path, "unpicklable.py", """
        import threading
        import fray_ray as ray

        @ray.remote
        def takes(x):
            return x

        ray.init(num_cpus=1)
        ray.get(takes.remote(threading.Lock()))
    """)
    assert finished.returncode == 1
    assert 'unpicklable.py", line 10, in <module>' in finished.stderr, finished.stderr
    assert "Could not serialize argument 0 (lock) of __main__.takes: cannot pickle '_thread.lock' object" \
        in finished.stderr
    # The pickling machinery's frames, fray_ray's and cloudpickle's, are not shown (the note says how).
    assert finished.stderr.count("Traceback (most recent call last)") == 1, finished.stderr
    assert not [name for name in frames(finished.stderr) if name.startswith(FRAY_RAY_DIR)], finished.stderr
    assert "cloudpickle" not in finished.stderr, finished.stderr


def test_a_wrong_address_shows_one_message_at_the_call(tmp_path: Path) -> None:
    with socket.socket() as unused:  # a loopback port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    finished = _run_script(tmp_path, "wrong_address.py", f"""
        import fray_ray as ray

        ray.init("http://127.0.0.1:{port}")
    """)
    assert finished.returncode == 1
    lines = finished.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):", finished.stderr
    assert lines[1].endswith('wrong_address.py", line 4, in <module>'), finished.stderr
    assert f"no Iris controller answers at http://127.0.0.1:{port}" in finished.stderr
    assert len(lines) <= 6, finished.stderr  # the call, its line, the message, the note
    assert "connectrpc" not in finished.stderr and "Traceback" not in "\n".join(lines[1:]), finished.stderr


# ---- the parts, in process -------------------------------------------------------------------


def _compile_file(path: Path, source: str) -> dict:
    path.write_text(textwrap.dedent(source))
    namespace: dict = {"__name__": "shipped_by_value"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - the test's own code
    return namespace


def test_code_travels_with_its_file_name_and_lines(tmp_path: Path) -> None:
    path = tmp_path / "gone_soon.py"
    namespace = _compile_file(path, """
        def outer(values):
            return [inner(v) for v in values]

        def inner(v):
            return (lambda y: 1 / y)(v)
    """)
    payload = code_source.dumps(namespace["outer"])
    path.unlink()
    linecache.clearcache()
    outer = code_source_loads(payload)
    with pytest.raises(ZeroDivisionError) as raised:
        outer([1, 0])
    text = "".join(traceback.format_exception(raised.value))
    assert f'File "{path}", line 3, in outer' in text and "return [inner(v) for v in values]" in text
    assert f'File "{path}", line 6, in <lambda>' in text and "return (lambda y: 1 / y)(v)" in text


def test_too_much_source_travels_without_its_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.py"
    namespace = _compile_file(path, """
        def fails():
            raise KeyError("k")
    """)
    monkeypatch.setattr(code_source, "MAX_SOURCE_BYTES", 10)
    payload = code_source.dumps(namespace["fails"])
    path.unlink()
    linecache.clearcache()
    with pytest.raises(KeyError) as raised:
        code_source_loads(payload)()
    text = "".join(traceback.format_exception(raised.value))
    assert f'File "{path}", line 3, in fails' in text and 'raise KeyError("k")' not in text


def test_lines_already_on_disk_are_kept_whole(tmp_path: Path) -> None:
    path = tmp_path / "here.py"
    _compile_file(path, "a = 1\nb = 2\nc = 3\n")
    code_source.remember_lines(str(path), 2, ("b = 2\n",))
    assert linecache.getlines(str(path)) == ["a = 1\n", "b = 2\n", "c = 3\n"]
    path.unlink()
    assert linecache.getlines(str(path)) == ["a = 1\n", "b = 2\n", "c = 3\n"]  # held, not re-read
    code_source.remember_lines(str(path), 2, ("b = 20\n",))  # a newer version of line 2 arrives
    assert linecache.getlines(str(path)) == ["a = 1\n", "b = 20\n", "c = 3\n"]
    linecache.clearcache()


def test_excepthook_another_program_set_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    def theirs(*args: object) -> None:
        pass

    monkeypatch.setattr(sys, "excepthook", theirs)
    excepthook.install_excepthook()
    assert sys.excepthook is theirs


def code_source_loads(payload: bytes):  # noqa: ANN201 - whatever was pickled
    import cloudpickle

    return cloudpickle.loads(payload)
