"""The Ray programs in examples/ray_programs/ print the same stdout on fray_ray and on real Ray.

Every program runs unmodified through `python -m fray_ray run` and its stdout must equal the
golden file in examples/ray_programs/expected/ (produced by real Ray 2.60). When a real Ray
interpreter is available ($FRAY_RAY_REAL_RAY_PYTHON, else .ci/venvs/ray/bin/python once CI has
finished building it), the program also runs on Ray, and Ray's stdout must equal both the golden
file and fray_ray's stdout. Only stdout is compared (Ray logs to stderr); of Ray's, the lines its
raylet prints about worker processes are left out, since they reach stdout only when they beat
the program's exit (`_program_output`). fray_ray's is compared whole.

Set FRAY_RAY_UPDATE_GOLDEN=1 (with real Ray available) to rewrite the golden files from Ray's
output instead of comparing against them.
"""

from __future__ import annotations

import difflib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS_DIR = ROOT / "examples" / "ray_programs"
EXPECTED_DIR = PROGRAMS_DIR / "expected"

# golden-file name -> program path (relative to examples/ray_programs/)
PROGRAMS = {
    "parameter_server": "parameter_server.py",
    "hyperparameter_sweep": "hyperparameter_sweep.py",
    "actor_pipeline": "actor_pipeline.py",
    "actor_pool_map": "actor_pool_map.py",
    "multiprocessing_pool": "multiprocessing_pool.py",
    "replay_buffer": "replay_buffer.py",
    "multi_file": "multi_file/main.py",
}

RUN_TIMEOUT_S = 180
# Processes the run started may take a moment to exit after the driver returns.
LEFTOVER_GRACE_S = 30
MARKER_VAR = "FRAY_RAY_PROGRAM_TEST_RUN"
# Variables that would point a program at an existing cluster instead of starting its own.
CLUSTER_ADDRESS_VARS = ("RAY_ADDRESS", "FRAY_RAY_ADDRESS", "FRAY_RAY_TOKEN")


@dataclass
class Run:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str
    leftovers: list[str]

    def describe(self) -> str:
        return (
            f"command: {' '.join(self.command)}\nexit code: {self.returncode}\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr (last 4000 chars) ---\n{self.stderr[-4000:]}"
        )


def _marked_processes(marker: str) -> dict[int, str]:
    """Live processes whose environment carries `marker` (every descendant of a run inherits it)."""
    found: dict[int, str] = {}
    needle = f"{MARKER_VAR}={marker}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                found[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
        except OSError:  # exited meanwhile, or not ours
            continue
    return found


def _kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _run(command: list[str]) -> Run:
    """Run a program in its own session, with a marker in its environment to find its descendants."""
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in CLUSTER_ADDRESS_VARS}
    env[MARKER_VAR] = marker
    env["PYTHONUNBUFFERED"] = "1"
    can_scan = os.path.isdir("/proc")
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if can_scan:
            _kill_all(_marked_processes(marker))
        stdout, stderr = proc.communicate()
        pytest.fail(f"timed out after {RUN_TIMEOUT_S} s: {' '.join(command)}\n--- stdout ---\n{stdout}\n"
                    f"--- stderr ---\n{stderr[-4000:]}")
    leftovers: dict[int, str] = {}
    if can_scan:
        deadline = time.monotonic() + LEFTOVER_GRACE_S
        leftovers = _marked_processes(marker)
        while leftovers and time.monotonic() < deadline:
            time.sleep(0.5)
            leftovers = _marked_processes(marker)
        _kill_all(leftovers)  # never leave them running, whatever the verdict
    return Run(command, proc.returncode, stdout, stderr, [f"{pid}: {cmd}" for pid, cmd in sorted(leftovers.items())])


#: How Ray's raylet's own reports begin (in colour on a terminal, or not).
_RAYLET_LINE = re.compile(r"^(\x1b\[[0-9;]*m)?\(raylet\)")


def _program_output(ray_stdout: str) -> str:
    """Real Ray's stdout without its raylet's reports about worker processes (a pool's actors
    killed as it closes, say): they reach the driver's stdout only when they beat its exit."""
    return "".join(line for line in ray_stdout.splitlines(keepends=True) if not _RAYLET_LINE.match(line))


def _diff(expected: str, actual: str, expected_name: str, actual_name: str) -> str:
    return "".join(difflib.unified_diff(
        expected.splitlines(keepends=True), actual.splitlines(keepends=True), expected_name, actual_name
    ))


def _real_ray_python() -> tuple[str | None, str]:
    """(interpreter, why-not) for real Ray 2.60."""
    explicit = os.environ.get("FRAY_RAY_REAL_RAY_PYTHON")
    if explicit:
        return explicit, ""
    default = ROOT / ".ci" / "venvs" / "ray"
    python = default / "bin" / "python"
    if not python.exists():
        return None, f"FRAY_RAY_REAL_RAY_PYTHON is not set and {python} does not exist"
    # .ci/run builds this virtualenv in the background and marks it complete at the end.
    if not (default / ".complete").exists():
        return None, f"{default} is not completely built yet (no .complete marker)"
    return str(python), ""


@pytest.fixture(scope="module")
def real_ray_python() -> str:
    python, why = _real_ray_python()
    if python is None:
        message = (
            f"!!! REAL RAY MISSING: the Ray half of this test did NOT run ({why}). "
            "Set FRAY_RAY_REAL_RAY_PYTHON to a python with ray==2.60.0 and numpy installed."
        )
        print(f"\n{message}", file=sys.stderr)
        pytest.skip(message)
    probe = subprocess.run(
        [python, "-c", "import numpy, ray; print(ray.__version__)"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )
    # An interpreter that was asked for but cannot run Ray is an error, not a skip.
    assert probe.returncode == 0, f"{python} cannot import ray and numpy:\n{probe.stderr[-3000:]}"
    version = probe.stdout.strip()
    assert version == "2.60.0", f"{python} has ray {version}, expected 2.60.0"
    return python


@pytest.fixture(scope="module")
def fray_ray_runs() -> dict[str, Run]:
    """fray_ray's run of each program, shared by the golden test and the comparison with Ray."""
    return {}


def _fray_ray_run(name: str, cache: dict[str, Run]) -> Run:
    if name not in cache:
        cache[name] = _run([sys.executable, "-m", "fray_ray", "run", str(PROGRAMS_DIR / PROGRAMS[name])])
    return cache[name]


def _check_clean_exit(run: Run, who: str) -> None:
    assert run.returncode == 0, f"{who} run failed\n{run.describe()}"


@pytest.mark.timeout(RUN_TIMEOUT_S + LEFTOVER_GRACE_S + 60)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_on_fray_ray_matches_golden(name: str, fray_ray_runs: dict[str, Run]) -> None:
    run = _fray_ray_run(name, fray_ray_runs)
    _check_clean_exit(run, "fray_ray")
    assert not run.leftovers, "fray_ray run left processes behind:\n" + "\n".join(run.leftovers)
    golden = EXPECTED_DIR / f"{name}.txt"
    if os.environ.get("FRAY_RAY_UPDATE_GOLDEN"):
        pytest.skip("FRAY_RAY_UPDATE_GOLDEN is set: golden files are being rewritten from real Ray")
    expected = golden.read_text()
    assert run.stdout == expected, (
        f"fray_ray's stdout differs from {golden.relative_to(ROOT)} (made with real Ray):\n"
        f"{_diff(expected, run.stdout, str(golden.name), 'fray_ray stdout')}\n{run.describe()}"
    )


@pytest.mark.timeout(2 * (RUN_TIMEOUT_S + LEFTOVER_GRACE_S) + 60)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_on_real_ray_matches_fray_ray(name: str, real_ray_python: str, fray_ray_runs: dict[str, Run]) -> None:
    ray_run = _run([real_ray_python, str(PROGRAMS_DIR / PROGRAMS[name])])
    _check_clean_exit(ray_run, "real Ray")
    if ray_run.leftovers:  # not fray_ray's fault; they were killed, just say so
        print("real Ray run left processes behind (killed):\n" + "\n".join(ray_run.leftovers), file=sys.stderr)
    golden = EXPECTED_DIR / f"{name}.txt"
    output = _program_output(ray_run.stdout)
    if os.environ.get("FRAY_RAY_UPDATE_GOLDEN"):
        golden.write_text(output)
    expected = golden.read_text()
    assert output == expected, (
        f"real Ray's stdout differs from {golden.relative_to(ROOT)}: the program or the golden file is wrong\n"
        f"{_diff(expected, output, str(golden.name), 'real Ray stdout')}\n{ray_run.describe()}"
    )
    fray_run = _fray_ray_run(name, fray_ray_runs)
    _check_clean_exit(fray_run, "fray_ray")
    assert fray_run.stdout == output, (
        f"fray_ray and real Ray print different stdout for {PROGRAMS[name]}:\n"
        f"{_diff(output, fray_run.stdout, 'real Ray stdout', 'fray_ray stdout')}"
    )
