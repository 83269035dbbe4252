"""The real Iris client (marin-iris from PyPI) against our embedded controller.

Tasks launched by the peer run the peer's callable runner and unpickle the peer's objects, so
the cluster runs its tasks with the peer venv's Python (`task_python`).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).with_name("peer_client_driver.py")


def run_driver(python: str, **args: object) -> dict:
    env = dict(os.environ, IRIS_USER="peer")
    result = subprocess.run(
        [python, str(DRIVER), json.dumps(args)], capture_output=True, text=True, timeout=240, env=env
    )
    reports = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert reports, (
        f"peer driver printed no report (exit {result.returncode}):\n{result.stdout}\n{result.stderr[-3000:]}"
    )
    return json.loads(reports[-1][len("REPORT ") :])


@pytest.fixture
def peer_cluster(peer_client_python: str) -> Iterator[EmbeddedCluster]:
    # The peer client's jobs carry marin's default setup (uv sync of a workspace project); like
    # Iris's local process runtime, these workers skip setup: the peer's venv holds everything.
    config = ClusterConfig(
        workers=(cpu_worker("peer-host", cpu=4, memory="8g"),), task_python=peer_client_python, run_setup_scripts=False
    )
    with EmbeddedCluster(config) as cluster:
        yield cluster


def test_peer_client_submits_polls_terminates_and_lists_endpoints(peer_client_python: str, peer_cluster) -> None:
    prefix = f"compat-{uuid.uuid4().hex[:8]}"
    report = run_driver(peer_client_python, address=peer_cluster.address, token=peer_cluster.token, prefix=prefix)
    assert "error" not in report, report["error"]
    hello = report["hello_job"]
    assert hello == f"/peer/{prefix}-hello"
    assert report["hello_states"][-1] == "succeeded"
    assert [t["task_id"] for t in report["hello_tasks"]] == [f"{hello}/0", f"{hello}/1"]
    assert {t["state"] for t in report["hello_tasks"]} == {"succeeded"}
    assert report["listed_jobs"] == [hello]
    with peer_cluster.client() as client:
        lines = sorted(line.data for line in client.task_logs(hello))
    assert lines == [f"peer says hi from {hello}/0:0", f"peer says hi from {hello}/1:0"]
    # the peer read the same lines through its log client (FetchLogs at the controller's proxy path)
    assert [entry for entry in report["hello_logs"] if entry[1].startswith("peer says")] == [
        [f"{hello}/0", f"peer says hi from {hello}/0:0", 0],
        [f"{hello}/1", f"peer says hi from {hello}/1:0", 0],
    ]
    (worker,) = report["workers"]
    assert {k: worker[k] for k in ("worker_id", "healthy", "cpu_count", "memory_bytes", "device")} == {
        "worker_id": "peer-host",
        "healthy": True,
        "cpu_count": 4,
        "memory_bytes": 8 << 30,
        "device": "cpu",
    }
    assert worker["attributes"]["device-type"] == "cpu"
    assert report["sleeper_state"] == "killed" and report["sleeper_tasks"] == ["killed"]
    (endpoint,) = report["endpoints"]
    server = f"/peer/{prefix}-server"
    assert endpoint["name"] == f"{server}/peer-actor"
    assert endpoint["task_id"] == f"{server}/0"
    assert endpoint["address"] == f"http://127.0.0.1:{report['server_ports'][0]['actor']}"
    assert endpoint["metadata"] == {"attempt": f"{server}/0:0"}
    assert report["endpoints_after_cancel"] == 0


def test_peer_client_without_the_token_is_rejected(peer_client_python: str, peer_cluster) -> None:
    report = run_driver(peer_client_python, address=peer_cluster.address, token=None, prefix="x", expect_rejection=True)
    assert report["rejected"] is True, report
    assert report["code"] == "unauthenticated", report
