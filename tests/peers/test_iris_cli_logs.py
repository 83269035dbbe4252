"""The June 2026 `iris job logs` command (marin-iris from PyPI) reads a job's output from our
controller: its log client posts zstd-compressed FetchLogs requests to the controller's
`/finelog.logging.LogService/FetchLogs` and accepts zstd answers, with the bearer token that
`iris login` would have stored."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
from fray_ray.iris.entrypoint import command_entrypoint
from fray_ray.iris.names import JobName
from fray_ray.iris.types import JobSpec, JobState, ResourceSpec

pytestmark = pytest.mark.slow

STORE_TOKEN = (
    "import sys\n"
    "from iris.cluster.token_store import cluster_name_from_url, store_token\n"
    "store_token(cluster_name_from_url(sys.argv[1]), sys.argv[1], sys.argv[2])\n"
)


def test_june_iris_cli_reads_job_logs_from_our_controller(peer_controller_python: str, tmp_path: Path) -> None:
    iris_cli = Path(peer_controller_python).parent / "iris"
    assert iris_cli.exists(), f"no iris command beside {peer_controller_python}"
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home))
    config = ClusterConfig(workers=(cpu_worker("cli-host", cpu=2, memory="2g", disk="1g"),))
    with EmbeddedCluster(config) as cluster:
        with cluster.client() as client:
            job_id = client.launch_job(
                JobSpec(
                    JobName.root("clitest", f"hello-{uuid.uuid4().hex[:6]}"),
                    command_entrypoint(["bash", "-c", "echo line one; echo line two >&2"]),
                    replicas=2,
                    resources=ResourceSpec(cpu_millicores=100),
                )
            )
            assert client.wait_for_job(job_id, timeout=120).state is JobState.SUCCEEDED
        # where `iris login` keeps the token, written by the peer's own token store
        subprocess.run([peer_controller_python, "-c", STORE_TOKEN, cluster.address, cluster.token], env=env, check=True)
        result = subprocess.run(
            [str(iris_cli), "--controller-url", cluster.address, "job", "logs", job_id],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr[-3000:]
        shown = sorted(line.split("] ", 1)[1] for line in result.stdout.splitlines() if "] task=" in line)
        assert shown == sorted(
            f"task={job_id}/{index} | {text}" for index in (0, 1) for text in ("line one", "line two")
        ), result.stdout
        warning_only = subprocess.run(
            [str(iris_cli), "--controller-url", cluster.address, "job", "logs", job_id, "--level", "warning"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert warning_only.returncode == 0, warning_only.stderr[-3000:]
        assert "line two" in warning_only.stdout and "line one" not in warning_only.stdout  # stderr lines are errors
