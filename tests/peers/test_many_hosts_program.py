"""One multi-file Ray program (examples/ray_programs/many_hosts) run three ways: on the real
Iris controller (marin-iris June release, two 8-core workers), on `fray-ray start` with three
8-core hosts, and on real Ray 2.60 (`ray start` with 16 CPUs). Its directory is moved away right
after `ray.init`; tasks use a module and a file of the `working_dir` and per-task `env_vars`; two
8-CPU tasks run at once (on two hosts of the Iris clusters); an actor holds two CPUs; a second
driver calls its named actor. Both drivers' stdout must equal the golden files recorded from
Ray, and Ray's own run must print them too."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from june_controller import controller_log  # noqa: E402 - tests/peers is on sys.path (conftest)
from standalone_cluster import standalone_cluster  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "examples" / "ray_programs" / "many_hosts"
EXPECTED = REPO / "examples" / "ray_programs" / "expected"
DEADLINE = 300.0
CLUSTER_VARS = ("PYTHONPATH", "FRAY_RAY_ADDRESS", "RAY_ADDRESS", "FRAY_RAY_TOKEN")


@dataclass
class Outputs:
    main: str
    second: str
    hosts: int  # how many hosts the two 8-CPU tasks met on (from the driver's stderr)


def run_program(runner: list[str], address: str, tmp_path: Path, env: dict[str, str]) -> Outputs:
    """Copy the program, run main.py (it moves its directory away after init), and run the
    second driver from a directory of its own once main prints `tally ready`."""
    program, moved, second = tmp_path / "program", tmp_path / "moved", tmp_path / "second"
    shutil.copytree(PROGRAM, program)
    second.mkdir()
    shutil.copy(PROGRAM / "second_driver.py", second)
    stderr_path = tmp_path / "main.stderr"
    with open(stderr_path, "w") as stderr:
        main = subprocess.Popen([*runner, "main.py", address, str(moved)], cwd=program, env=env,
                                stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            assert main.stdout is not None
            lines = []
            for line in main.stdout:
                lines.append(line)
                if line.startswith("tally ready"):
                    break
            else:
                main.wait(DEADLINE)
                raise AssertionError(f"main.py ended before `tally ready`:\n{''.join(lines)}\n{stderr_path.read_text()[-4000:]}")
            assert not program.exists() and moved.is_dir()  # the driver's code is gone from where it started
            second_run = subprocess.run([*runner, "second_driver.py", address], cwd=second, env=env,
                                        capture_output=True, text=True, timeout=DEADLINE)
            assert second_run.returncode == 0, second_run.stdout + second_run.stderr[-4000:]
            lines.extend(main.stdout)
            assert main.wait(DEADLINE) == 0, "".join(lines) + stderr_path.read_text()[-4000:]
        finally:
            if main.poll() is None:
                main.kill()
                main.wait()
    hosts = [line for line in stderr_path.read_text().splitlines() if line.startswith("hosts ")]
    assert hosts, stderr_path.read_text()[-4000:]
    return Outputs("".join(lines), second_run.stdout, int(hosts[-1].split()[1]))


def assert_golden(outputs: Outputs) -> None:
    assert outputs.main == (EXPECTED / "many_hosts.txt").read_text()
    assert outputs.second == (EXPECTED / "many_hosts_second_driver.txt").read_text()


def fray_ray_env(token: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARS}
    if token is not None:
        env["FRAY_RAY_TOKEN"] = token
    return env


FRAY_RAY_RUN = [sys.executable, "-m", "fray_ray", "run"]


#: What the June controller's log says about the program's actors and about any worker that
#: killed tasks on its own: shown when the run fails.
ACTOR_DEATH_SIGNS = ("Rendezvous", "rayactor", "zombie", "No contact", "Resetting", "Superseding", "job_cancelled")


def test_on_the_real_iris_controller(june: str, tmp_path: Path) -> None:
    try:
        outputs = run_program(FRAY_RAY_RUN, june, tmp_path, fray_ray_env())
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nthe controller's log:\n{controller_log(june, *ACTOR_DEATH_SIGNS)}") from exc
    assert_golden(outputs)
    assert outputs.hosts == 2


@pytest.fixture(scope="module")
def three_hosts() -> Iterator[dict]:
    """`fray-ray start` with three 8-core hosts, in its own process; stopped with SIGINT."""
    with standalone_cluster(["--cpu-workers", "3", "--cpu", "8", "--memory", "4g", "--disk", "10g"],
                            fray_ray_env()) as (_, info):
        yield info


def test_on_the_standalone_cluster_of_three_hosts(three_hosts: dict, tmp_path: Path) -> None:
    outputs = run_program(FRAY_RAY_RUN, three_hosts["address"], tmp_path, fray_ray_env(three_hosts["token"]))
    assert_golden(outputs)
    assert outputs.hosts == 2


def real_ray_python() -> str:
    candidate = os.environ.get("FRAY_RAY_REAL_RAY_PYTHON") or str(REPO / ".ci" / "venvs" / "ray" / "bin" / "python")
    if not Path(candidate).exists():
        pytest.skip("REAL RAY MISSING: set FRAY_RAY_REAL_RAY_PYTHON to a Python with ray==2.60.0")
    return candidate


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head() -> Iterator[tuple[str, dict[str, str]]]:
    """`ray start --head --block` with 16 CPUs in a session of its own: (address, environment).
    Stopped by signalling that session only (`ray stop` would end every Ray on the machine)."""
    python = real_ray_python()
    env = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARS}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")  # loopback only: no token
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's unix sockets want a short path
    address = f"127.0.0.1:{free_port()}"
    # (without its dashboard, this Ray's head never starts tasks that have a runtime_env)
    head = subprocess.Popen(
        [str(Path(python).parent / "ray"), "start", "--head", "--block", "--num-cpus", "16",
         "--port", address.split(":")[1], "--temp-dir", temp_dir],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        assert head.stdout is not None
        seen = []
        for line in head.stdout:
            seen.append(line)
            if "Ray runtime started" in line:
                break
        else:
            raise AssertionError("ray start --head failed:\n" + "".join(seen[-40:]))
        threading.Thread(target=head.stdout.read, daemon=True).start()  # keep its pipe drained
        yield address, env
    finally:
        stop_session(head)
        shutil.rmtree(temp_dir, ignore_errors=True)


def session_members(session_id: int) -> list[int]:
    """The live processes of the session `session_id`."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == session_id:
                    members.append(int(entry))
            except ProcessLookupError:
                continue
    return members


def stop_session(leader: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM to the leader's whole session, SIGKILL to what is left after `grace` seconds
    (some of Ray's processes ignore SIGTERM); reaps the leader."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in session_members(leader.pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while session_members(leader.pid) and time.monotonic() < deadline:
            leader.poll()  # a zombie leader still counts as a member until reaped
            time.sleep(0.1)
        if not session_members(leader.pid):
            break
    leader.wait(30)


def test_on_real_ray(ray_head: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    address, env = ray_head
    outputs = run_program([real_ray_python()], address, tmp_path, env)
    if os.environ.get("FRAY_RAY_UPDATE_GOLDEN"):
        (EXPECTED / "many_hosts.txt").write_text(outputs.main)
        (EXPECTED / "many_hosts_second_driver.txt").write_text(outputs.second)
    assert_golden(outputs)
    assert outputs.hosts == 1  # one Ray node: the tasks met on it
