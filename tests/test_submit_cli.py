"""`fray-ray submit` against a standalone cluster (`fray-ray start`, three hosts): the working
directory is shipped and the script runs from it with the worker's Python; output streams while
the job runs; `--no-wait` and Ctrl-C leave the job running and say how to follow or stop it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.types import JobState

sys.path.insert(0, str(Path(__file__).resolve().parents[0]))  # the shared test helpers

from standalone_cluster import standalone_cluster  # noqa: E402

DEADLINE = 180.0

PROGRAM = """
    import os, sys, time
    import ray
    from helpers import double

    ray.init()

    @ray.remote
    def work(x):
        return double(x), os.environ["IRIS_ADVERTISE_HOST"]

    results = ray.get([work.remote(i) for i in range(3)])
    print("results", [r[0] for r in results], flush=True)
    print("driver session", ray.get_runtime_context().gcs_address.rsplit(":", 1)[0], flush=True)
    print("driver host", os.environ["IRIS_ADVERTISE_HOST"], flush=True)
    gate = sys.argv[1] if len(sys.argv) > 1 else ""
    while gate and not os.path.exists(gate):  # hold until the test opens the gate
        print("waiting", flush=True)
        time.sleep(0.5)
    print("finished", flush=True)
"""


@pytest.fixture(scope="module")
def standalone() -> Iterator[dict]:
    """`fray-ray start` with three CPU hosts, in its own process; stopped with SIGINT."""
    with standalone_cluster(["--cpu-workers", "3", "--cpu", "2", "--memory", "4g", "--disk", "10g"]) as (_, info):
        yield info


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "data").mkdir(parents=True)
    (root / "main.py").write_text(textwrap.dedent(PROGRAM))
    (root / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    return root


def submit(standalone: dict, project: Path, *args: str, **kwargs: object) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("FRAY_RAY_ADDRESS", "RAY_ADDRESS", "PYTHONPATH")}
    env["FRAY_RAY_TOKEN"] = standalone["token"]
    return subprocess.Popen(
        [sys.executable, "-m", "fray_ray", "submit", "--address", standalone["address"], *args],
        cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs,  # type: ignore[arg-type]
    )


def read_until(stream, prefix: str) -> list[str]:  # noqa: ANN001
    seen = []
    for line in stream:
        seen.append(line.rstrip("\n"))
        if prefix in line:
            return seen
    raise AssertionError(f"never saw {prefix!r}; saw {seen}")


def job_state(standalone: dict, job_id: str) -> JobState:
    with ControllerClient(standalone["address"], token=standalone["token"]) as controller:
        return controller.job_state(job_id)


def test_submit_ships_the_directory_and_streams_output_while_the_job_runs(standalone: dict, project: Path) -> None:
    gate = project / "gate"
    process = submit(standalone, project, "main.py", str(gate))
    try:
        assert process.stdout is not None
        head = read_until(process.stdout, "waiting")
        job_id = head[0].split()[-1]
        assert head[0].startswith("submitted /"), process.stderr.read()
        assert job_state(standalone, job_id) == JobState.RUNNING  # streamed before the job ended
        lines = {line.split("] ", 1)[-1].split(" ", 1)[0]: line.split("] ", 1)[-1] for line in head}
        assert lines["results"] == "results [0, 2, 4]"
        # the driver runs on a worker host and serves its session at that host's address
        host = lines["driver"]  # the last "driver ..." line: driver host
        session = next(line for line in head if "driver session" in line).split()[-1]
        assert session == host.split()[-1] and session.startswith("127.") and session != "127.0.0.1"
        gate.write_text("go")
        stdout, stderr = process.communicate(timeout=DEADLINE)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert "finished" in stdout and f"{job_id}: succeeded" in stderr


AUTO_PROGRAM = """
    import ray

    ray.init(address="auto")
    print("auto cpus", ray.cluster_resources().get("CPU"), flush=True)
    ray.shutdown()
    ray.init()
    print("plain cpus", ray.cluster_resources().get("CPU"), flush=True)
    ray.shutdown()
"""


def test_a_submitted_script_reaches_the_cluster_with_init_and_init_auto(standalone: dict, project: Path) -> None:
    # As in a job Ray's job server runs: both find the cluster the job was submitted to (its
    # three 2-CPU hosts), neither starts a cluster of its own nor fails to find one.
    (project / "auto.py").write_text(textwrap.dedent(AUTO_PROGRAM))
    process = submit(standalone, project, "auto.py")
    stdout, stderr = process.communicate(timeout=DEADLINE)
    assert process.returncode == 0, stdout + stderr
    assert "auto cpus 6.0" in stdout and "plain cpus 6.0" in stdout, stdout


def test_no_wait_returns_with_the_job_running(standalone: dict, project: Path) -> None:
    process = submit(standalone, project, "--no-wait", "main.py", str(project / "never"))
    stdout, stderr = process.communicate(timeout=DEADLINE)
    assert process.returncode == 0, stderr
    job_id = stdout.splitlines()[0].split()[-1]
    assert f"fray-ray logs -f {job_id}" in stdout and f"fray-ray stop {job_id}" in stdout
    deadline = time.monotonic() + DEADLINE
    while job_state(standalone, job_id) != JobState.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    stop = subprocess.run(
        [sys.executable, "-m", "fray_ray", "stop", job_id, "--address", standalone["address"], "--token",
         standalone["token"]], capture_output=True, text=True, timeout=DEADLINE,
    )
    assert stop.returncode == 0, stop.stderr
    assert job_state(standalone, job_id) == JobState.KILLED


def test_ctrl_c_detaches_and_says_how_to_follow(standalone: dict, project: Path) -> None:
    process = submit(standalone, project, "main.py", str(project / "never"))
    try:
        assert process.stdout is not None and process.stderr is not None
        head = read_until(process.stdout, "waiting")
        job_id = head[0].split()[-1]
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=DEADLINE)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert f"detached: {job_id} keeps running" in stderr and f"fray-ray logs -f {job_id}" in stderr
    assert job_state(standalone, job_id) == JobState.RUNNING
    # follow it again, then stop it
    with ControllerClient(standalone["address"], token=standalone["token"]) as controller:
        lines, _ = controller.task_logs_after(job_id)
        assert any(line.data == "waiting" for line in lines)
        controller.terminate_job(job_id)


def test_a_script_outside_the_shipped_directory_is_refused(standalone: dict, project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.py"
    outside.write_text("print('x')\n")
    process = submit(standalone, project, str(outside))
    _, stderr = process.communicate(timeout=DEADLINE)
    assert process.returncode == 2 and "not a file inside the directory that is shipped" in stderr


def submitted_resources(standalone: dict, project: Path, *args: str) -> tuple[int, int, object]:
    """(CPU millicores, memory bytes, device) the job of `fray-ray submit --no-wait <args>` holds."""
    process = submit(standalone, project, "--no-wait", *args, "main.py", str(project / "never"))
    stdout, stderr = process.communicate(timeout=DEADLINE)
    assert process.returncode == 0, stderr
    job_id = stdout.splitlines()[0].split()[-1]
    with ControllerClient(standalone["address"], token=standalone["token"]) as controller:
        try:
            resources = controller.job_status(job_id).resources
        finally:
            controller.terminate_job(job_id)
    assert resources is not None
    return resources.cpu_millicores, resources.memory_bytes, resources.device


def test_the_submitted_driver_holds_no_cpu_or_memory_unless_asked(standalone: dict, project: Path) -> None:
    # As Ray's job entrypoint: nothing reserved by default, the --entrypoint-* options when given.
    assert submitted_resources(standalone, project) == (0, 0, None)
    assert submitted_resources(
        standalone, project, "--entrypoint-num-cpus", "1.5", "--entrypoint-memory", str(512 * 1024 * 1024)
    ) == (1500, 512 * 1024 * 1024, None)


@pytest.mark.parametrize(("args", "message"), [
    (["--entrypoint-num-gpus", "0.5"], "--entrypoint-num-gpus must be a whole number"),
    (["--entrypoint-num-cpus", "-1"], "--entrypoint-num-cpus must be a number >= 0"),
    (["--entrypoint-memory", "lots"], "--entrypoint-memory must be a number of bytes"),
    (["--entrypoint-resources", "{oops"], "--entrypoint-resources must be a JSON object"),
    (["--entrypoint-resources", '{"CPU": 1}'], "cannot name CPU: use --entrypoint-num-cpus"),
])
def test_bad_entrypoint_options_are_refused_before_anything_is_sent(project: Path, args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fray_ray", "submit", "--address", "http://127.0.0.1:9", *args, "main.py"],
        cwd=project, capture_output=True, text=True, timeout=DEADLINE,
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr


ONE_CPU_PROGRAM = """
    import ray

    ray.init()

    @ray.remote(num_cpus=1)
    def work():
        return "ran"

    print(ray.get(work.remote(), timeout=120), flush=True)  # never placed while the driver held the CPU
"""


def test_on_a_one_cpu_cluster_the_submitted_drivers_task_runs(project: Path) -> None:
    (project / "one_cpu.py").write_text(textwrap.dedent(ONE_CPU_PROGRAM))
    with standalone_cluster(["--cpu-workers", "1", "--cpu", "1", "--memory", "4g", "--disk", "10g"]) as (_, info):
        process = submit(info, project, "one_cpu.py")
        stdout, stderr = process.communicate(timeout=DEADLINE)
    assert process.returncode == 0, stdout + stderr
    assert "ran" in stdout.splitlines()[-1], stdout
