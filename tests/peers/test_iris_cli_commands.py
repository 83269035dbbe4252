"""The newest `iris` command-line tool (marin-iris 0.2.227 from PyPI) against a cluster that
`fray-ray start` runs in the background: `iris cluster status` (GetProcessStatus, ListWorkers,
GetAutoscalerStatus), `iris task list` (ListTasks) and `iris job logs` (FetchLogs through the
log-server proxy path), with the bearer token given as `fray-ray start` says: MARIN_CLUSTER_TOKEN.

That release's CLI imports only with marin-finelog 0.2.71.dev40003900277 beside it (its own
pin resolves an older one): the test installs that one package into a temp dir put first on
PYTHONPATH; the peer venv itself is never modified.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fray_ray._private.driver import cluster_address
from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.entrypoint import command_entrypoint
from fray_ray.iris.names import JobName
from fray_ray.iris.types import JobSpec, JobState, ResourceSpec

pytestmark = pytest.mark.slow

FINELOG_FOR_CLI = "marin-finelog==0.2.71.dev40003900277"
DEADLINE = 180.0


@pytest.fixture(scope="module")
def iris_cli(peer_client_python: str, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command that runs the newest iris CLI, and the PYTHONPATH it needs."""
    overlay = tmp_path_factory.mktemp("iris-cli-finelog")
    install = subprocess.run(
        [peer_client_python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--target", str(overlay), FINELOG_FOR_CLI], capture_output=True, text=True, timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return [str(overlay), str(Path(peer_client_python).parent / "iris")]


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, str]]:
    """`fray-ray start` in the background (recorded in a private dir); `fray-ray down` at the end."""
    record_dir = tmp_path_factory.mktemp("record")
    record_dir.chmod(0o700)
    env = {k: v for k, v in os.environ.items() if k not in ("FRAY_RAY_ADDRESS", "RAY_ADDRESS", "PYTHONPATH")}
    env["FRAY_RAY_TEMP_DIR"] = str(record_dir)
    start = subprocess.run([sys.executable, "-m", "fray_ray", "start", "--cpu", "2", "--memory", "2g", "--disk", "2g"],
                           env=env, capture_output=True, text=True, timeout=DEADLINE)
    try:
        assert start.returncode == 0, start.stderr
        record = cluster_address.read(temp_dir=str(record_dir))
        assert record is not None
        hint = next(line for line in start.stdout.splitlines() if line.startswith("iris CLI: "))
        yield {"address": record.address, "token": record.token}, hint
    finally:
        record = cluster_address.read(temp_dir=str(record_dir))
        subprocess.run([sys.executable, "-m", "fray_ray", "down"], env=env, capture_output=True, timeout=DEADLINE)
        if record is not None:
            try:
                os.kill(record.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_iris(iris_cli: list[str], hint: str, *args: str, home: Path) -> subprocess.CompletedProcess:
    """Run the iris CLI with the token and controller URL the start output gave."""
    match = re.fullmatch(r"iris CLI: MARIN_CLUSTER_TOKEN=(\S+) iris --controller-url (\S+) cluster status", hint)
    assert match, hint
    token, url = match.groups()
    overlay, command = iris_cli
    env = dict(os.environ, HOME=str(home), PYTHONPATH=overlay, MARIN_CLUSTER_TOKEN=token)
    return subprocess.run([command, "--controller-url", url, *args], env=env, capture_output=True, text=True,
                          timeout=DEADLINE, cwd=home)


def test_iris_cluster_status_task_list_and_job_logs(iris_cli: list[str], started: tuple[dict, str], tmp_path: Path) -> None:
    info, hint = started
    with ControllerClient(info["address"], token=info["token"]) as controller:
        job_id = controller.launch_job(JobSpec(
            JobName.root("iriscli", f"two-{uuid.uuid4().hex[:6]}"),
            command_entrypoint(["bash", "-c", "echo hello from $IRIS_TASK_ID"]),
            replicas=2, resources=ResourceSpec(cpu_millicores=100),
        ))
        assert controller.wait_for_job(job_id, timeout=DEADLINE).state is JobState.SUCCEEDED

    status = run_iris(iris_cli, hint, "cluster", "status", home=tmp_path)
    assert status.returncode == 0, status.stderr[-3000:]
    assert "Running: True" in status.stdout, status.stdout
    assert "Workers: 1/1 healthy" in status.stdout and f"Address: {info['address']}" in status.stdout
    assert "No scale groups configured" in status.stdout

    tasks = run_iris(iris_cli, hint, "task", "list", job_id, home=tmp_path)
    assert tasks.returncode == 0, tasks.stderr[-3000:]
    rows = [line.split() for line in tasks.stdout.splitlines()[1:] if line.strip()]
    assert [(row[0], row[1]) for row in rows] == [("0", "succeeded"), ("1", "succeeded")], tasks.stdout

    logs = run_iris(iris_cli, hint, "job", "logs", job_id, home=tmp_path)
    assert logs.returncode == 0, logs.stderr[-3000:]
    shown = sorted(line.split(" | ", 1)[1] for line in logs.stdout.splitlines() if " | " in line)
    assert shown == [f"hello from {job_id}/0:0", f"hello from {job_id}/1:0"], logs.stdout  # IRIS_TASK_ID: task:attempt
