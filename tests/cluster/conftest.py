"""Fixtures for the embedded-cluster tests: clusters that are always stopped, and a check that
nothing they started (processes, ports, temp dirs) survives them."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from fray_ray.cluster import ClusterConfig, EmbeddedCluster, WorkerSpec, cpu_worker
from fray_ray.iris.controller_client import ControllerClient

# The suite runs with --import-mode=importlib, which leaves sys.path alone; the test modules
# here import their shared helpers by this directory's (unique) module name.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster_helpers import child_processes, pid_alive, port_open, wait_for  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "load: load test of the embedded controller (deselect with -m 'not load')")


ClusterFactory = Callable[..., EmbeddedCluster]


@pytest.fixture
def make_cluster() -> Iterator[ClusterFactory]:
    """Start clusters with `make_cluster(workers=..., **config)`; all are stopped at teardown and
    must leave no task process, open port, temp dir or child process behind."""
    started: list[EmbeddedCluster] = []
    children_before = {pid for pid, _ in child_processes()}

    def make(*workers: WorkerSpec, **config: object) -> EmbeddedCluster:
        specs = workers or (cpu_worker("cpu-0", cpu=4, memory="8g", disk="10g"),)
        cluster = EmbeddedCluster(ClusterConfig(workers=tuple(specs), **config)).start()  # type: ignore[arg-type]
        started.append(cluster)
        return cluster

    yield make
    leftovers = []
    for cluster in started:
        pids = cluster.task_pids()
        temp_dir = cluster.temp_dir
        port = cluster.port if cluster.state.value == "running" else None
        cluster.stop()
        leftovers += [f"task process {pid}" for pid in pids if pid_alive(pid)]
        if temp_dir is not None and os.path.exists(temp_dir):
            leftovers.append(f"temp dir {temp_dir}")
        if port is not None and port_open(port):
            leftovers.append(f"port {port}")
    cluster_threads = ("fray-ray-processes", "fray-ray-scheduler", "fray-ray-controller")
    leftovers += [f"thread {t.name}" for t in threading.enumerate() if t.name.startswith(cluster_threads)]
    assert not leftovers, f"left behind after cluster.stop(): {leftovers}"
    wait_for(
        lambda: not [c for c in child_processes() if c[0] not in children_before],
        timeout=10,
        what="no child processes left behind",
    )


@pytest.fixture
def cluster(make_cluster: ClusterFactory) -> EmbeddedCluster:
    return make_cluster()


@pytest.fixture
def client(cluster: EmbeddedCluster) -> Iterator[ControllerClient]:
    with cluster.client() as c:
        yield c
