"""Fixtures for the Fray layer tests: a LocalClient and an embedded cluster with a FrayIrisClient,
each of which must leave nothing behind, and a poller."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from fray_ray.cluster import ClusterConfig, EmbeddedCluster, WorkerSpec
from fray_ray.fray import FrayIrisClient
from fray_ray.fray.local_backend import LocalClient

# Generous: the suite must pass on a loaded two-core machine. Waits end as soon as their
# condition holds, so this only matters when something is wrong.
DEADLINE = 20.0


def _fray_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("fray-") and t.is_alive()]


@pytest.fixture(autouse=True)
def _outside_iris_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests run as a plain process, whatever the environment that started pytest says."""
    monkeypatch.delenv("IRIS_TASK_ID", raising=False)


@pytest.fixture
def client() -> Iterator[LocalClient]:
    """A LocalClient shut down after the test; fails the test if a thread it started survives."""
    before = set(_fray_threads())
    local = LocalClient(max_threads=4)
    try:
        yield local
    finally:
        local.shutdown(wait=True)
    leftovers = [t for t in _fray_threads() if t not in before]
    assert not leftovers, f"threads left running after shutdown: {[t.name for t in leftovers]}"


@pytest.fixture(scope="module")
def cluster(cluster_workers: tuple[WorkerSpec, ...]) -> Iterator[EmbeddedCluster]:
    """One embedded cluster per test module, with the workers that module's `cluster_workers`
    fixture names; fails the module if a task process or the temp dir survives it."""
    with EmbeddedCluster(ClusterConfig(workers=cluster_workers)) as started:
        yield started
        pids, temp_dir = started.task_pids(), started.temp_dir
    assert not [pid for pid in pids if _process_exists(pid)], "task processes survived the cluster"
    assert temp_dir is None or not os.path.exists(temp_dir)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def iris(cluster: EmbeddedCluster) -> Iterator[FrayIrisClient]:
    """A FrayIrisClient on the module's cluster; fails the test if a call thread survives shutdown."""
    client = FrayIrisClient(cluster.address, token=cluster.token, user="tester")
    yield client
    client.shutdown()
    leftover = [t.name for t in threading.enumerate() if t.name.startswith("fray-iris-call") and t.is_alive()]
    assert not leftover, f"call threads left after shutdown: {leftover}"


@pytest.fixture
def eventually() -> Callable[..., None]:
    """`eventually(predicate, what)`: poll until `predicate()` is true; fail after DEADLINE."""

    def poll(predicate: Callable[[], bool], what: str = "condition", timeout: float = DEADLINE) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.005
        while not predicate():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout} s waiting for {what}")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    return poll
