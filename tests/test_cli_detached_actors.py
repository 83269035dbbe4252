"""`fray-ray list actors` and `fray-ray summary actors` keep listing a detached actor after the
driver that made it exits (its host answers for it), with its state, until it is killed; a
session's own actors are listed once, by their session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[0]))  # the shared test helpers

from standalone_cluster import standalone_cluster  # noqa: E402
from waiting import wait_for  # noqa: E402

DEADLINE = 180.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict]:
    with standalone_cluster(["--cpu-workers", "1", "--cpu", "2", "--memory", "4g", "--disk", "10g"]) as (_, info):
        yield info


def env_for(cluster: dict) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FRAY_RAY_ADDRESS", "RAY_ADDRESS", "PYTHONPATH")}
    env["FRAY_RAY_TOKEN"] = cluster["token"]
    return env


def driver(cluster: dict, body: str, tmp_path: Path) -> str:
    """Run a driver joining `cluster` in namespace "tools" to its end; its stdout."""
    script = f"import fray_ray as ray\nray.init({cluster['address']!r}, namespace='tools')\n" + textwrap.dedent(body)
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env_for(cluster), capture_output=True,
                            text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stderr
    return result.stdout


def cli(cluster: dict, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fray_ray", *args, "--address", cluster["address"]],
                          env=env_for(cluster), capture_output=True, text=True, timeout=DEADLINE)


def listed(cluster: dict) -> list[dict]:
    result = cli(cluster, "list", "actors", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


CREATE = """
    @ray.remote
    class Registry:
        def ping(self):
            return "pong"

    registry = Registry.options(name="registry", lifetime="detached").remote()
    assert ray.get(registry.ping.remote()) == "pong"
    print(registry._actor_id.hex())
"""


def test_a_detached_actor_stays_listed_after_its_driver_exits(cluster: dict, tmp_path: Path) -> None:
    actor_id = driver(cluster, CREATE, tmp_path).split()[-1]  # the driver has exited: its session is gone
    [row] = [row for row in listed(cluster) if row["actor_id"] == actor_id]
    assert (row["class_name"], row["name"], row["ray_namespace"], row["state"]) == ("Registry", "registry", "tools",
                                                                                     "ALIVE")
    assert row["is_detached"] is True and row["pid"] > 0 and row["node_id"]
    nodes = json.loads(cli(cluster, "list", "nodes", "--json").stdout)
    assert row["node_id"] in {node["node_id"] for node in nodes}  # the node it runs on, as sessions name it

    table = cli(cluster, "list", "actors")
    assert table.returncode == 0 and actor_id in table.stdout.split(), table.stdout + table.stderr
    summary = json.loads(cli(cluster, "summary", "actors", "--json").stdout)["cluster"]
    assert summary["summary"]["Registry"]["state_counts"] == {"ALIVE": 1}

    driver(cluster, """
        ray.kill(ray.get_actor("registry"))
    """, tmp_path)
    wait_for(lambda: all(row["actor_id"] != actor_id for row in listed(cluster)), interval=0.5, what="the killed actor leaving the list")


def test_a_live_sessions_detached_actor_is_listed_once_by_its_session(cluster: dict, tmp_path: Path) -> None:
    script = f"import fray_ray as ray, sys\nray.init({cluster['address']!r}, namespace='tools')\n" + textwrap.dedent(
        CREATE) + "sys.stdout.flush()\nsys.stdin.readline()\nray.kill(registry)\n"
    process = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, env=env_for(cluster), text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout is not None and process.stdin is not None
        actor_id = process.stdout.readline().strip()
        rows = wait_for(lambda: [r for r in listed(cluster) if r["actor_id"] == actor_id and r["session"]],
                        interval=0.5, what="the session listing its actor")
        assert len([r for r in listed(cluster) if r["actor_id"] == actor_id]) == 1 and rows[0]["state"] == "ALIVE"
        process.stdin.close()
        assert process.wait(timeout=DEADLINE) == 0, process.stderr.read() if process.stderr else ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
