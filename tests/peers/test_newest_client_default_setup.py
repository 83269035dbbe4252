"""The newest Iris client's default job environment on the embedded cluster.

That client's `submit` with no `setup_scripts` sends a `uv sync` of the submitted workspace into
`$IRIS_VENV`, pinned to the client's Python version; Iris's hosts run it and then the command
inside that venv. The embedded cluster's hosts must do the same: `uv` comes with fray_ray, the
Python the workspace asks for comes from the host (here: the peer venv's base interpreter on
the cluster's PATH, as an Iris image carries its Python).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).with_name("peer_workspace_job.py")

MAIN = """\
import os
import sys

import workspace_helper

print("PREFIX", sys.prefix, flush=True)
print("VENV", os.environ["IRIS_VENV"], flush=True)
print("PYTHON", "%d.%d" % sys.version_info[:2], flush=True)
print("HELPER", workspace_helper.GREETING, flush=True)
"""


def write_workspace(root: Path, dependencies: list[str]) -> Path:
    root.mkdir()
    (root / "pyproject.toml").write_text(
        "[project]\n"
        'name = "peer-workspace"\n'
        'version = "0.1.0"\n'
        'requires-python = ">=3.11"\n'
        f"dependencies = {json.dumps(dependencies)}\n"
    )
    (root / "main.py").write_text(MAIN)
    (root / "workspace_helper.py").write_text('GREETING = "from the workspace"\n')
    return root


def submit(peer_python: str, cluster: EmbeddedCluster, workspace: Path) -> dict:
    name = f"uv-{uuid.uuid4().hex[:8]}"
    args = {"address": cluster.address, "token": cluster.token, "workspace": str(workspace), "name": name}
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_")}
    result = subprocess.run([peer_python, str(DRIVER), json.dumps(args)], capture_output=True, text=True,
                            timeout=240, env=env)
    reports = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert reports, f"peer printed no report (exit {result.returncode}):\n{result.stdout}\n{result.stderr[-3000:]}"
    report = json.loads(reports[-1][len("REPORT "):])
    assert "traceback" not in report, report["traceback"]
    return report


@pytest.fixture
def host_with_peer_python(peer_client_python: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Puts the peer client's Python (the version its setup script pins) on the hosts' PATH."""
    base = subprocess.run([peer_client_python, "-c", "import sys; print(sys._base_executable)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    monkeypatch.setenv("PATH", os.pathsep.join([os.path.dirname(base), os.environ.get("PATH", "")]))
    version = subprocess.run([base, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return version


def test_default_submit_syncs_the_workspace_and_runs_in_its_venv(
    peer_client_python: str, host_with_peer_python: str, tmp_path: Path
) -> None:
    workspace = write_workspace(tmp_path / "workspace", dependencies=[])
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker("uv-host", cpu=2, memory="4g"),))) as cluster:
        report = submit(peer_client_python, cluster, workspace)
        assert report["state"] == "succeeded", report["error"]
        with cluster.client() as client:
            lines = [line.data for line in client.task_logs(report["job"])]
    fields = dict(line.split(" ", 1) for line in lines if line.split(" ", 1)[0] in ("PREFIX", "VENV", "PYTHON", "HELPER"))
    # the command ran inside the venv the sync made, with the Python the client pinned
    assert fields["PREFIX"] == fields["VENV"]
    assert fields["VENV"].endswith("/.venv")
    assert fields["PYTHON"] == host_with_peer_python
    assert fields["HELPER"] == "from the workspace"
    assert any("syncing deps" in line for line in lines), lines


def test_a_sync_that_fails_fails_the_job_with_uv_s_error(
    peer_client_python: str, host_with_peer_python: str, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-package"
    workspace = write_workspace(tmp_path / "workspace", dependencies=[f"absent @ {missing.as_uri()}"])
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker("uv-host", cpu=2, memory="4g"),))) as cluster:
        report = submit(peer_client_python, cluster, workspace)
    assert report["state"] == "failed"
    assert "[iris setup] step 1/" in report["error"]
    assert "no-such-package" in report["error"]
