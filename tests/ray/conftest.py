"""Sessions for Ray-layer tests (real worker processes on an embedded cluster, or local mode),
simulated hosts, and a connected pair of loopback sockets for the protocol tests."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import fray_ray
from fray_ray._private.driver import cluster_address
from fray_ray._private.objects.shared_memory import SHARED_MEMORY_DIR_ENV
from fray_ray.cluster_utils import Cluster


@pytest.fixture(scope="module")
def cluster_session() -> Iterator[fray_ray.RayContext]:
    """A session on an embedded cluster with 2 logical CPUs; tasks run in worker processes."""
    if fray_ray.is_initialized():
        fray_ray.shutdown()
    context = fray_ray.init(num_cpus=2, namespace="tests")
    yield context
    fray_ray.shutdown()


@pytest.fixture
def fresh_shutdown() -> Iterator[None]:
    """For tests that call init() themselves; shuts down whatever they started."""
    if fray_ray.is_initialized():
        fray_ray.shutdown()
    yield
    fray_ray.shutdown()
    os.environ.pop("FRAY_RAY_LOCAL_MODE", None)


@pytest.fixture
def own_cluster_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """For tests that start a `cluster_utils.Cluster`: clusters are recorded in a temp dir of
    the test's own, and no address, token or shared-memory directory is inherited."""
    records = tmp_path / "records"
    records.mkdir(mode=0o700)
    monkeypatch.setenv(cluster_address.TEMP_DIR_ENV, str(records))
    for name in ("RAY_ADDRESS", "FRAY_RAY_ADDRESS", "FRAY_RAY_TOKEN", "IRIS_AUTH_TOKEN", SHARED_MEMORY_DIR_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def hosts(own_cluster_env: None, fresh_shutdown: None) -> Iterator[Cluster]:
    """A head (the driver's host, resource "head") and two simulated hosts, "a" and "b", each
    with a shared-memory directory of its own (a module may define its own `hosts`)."""
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1}})
    try:
        made.add_node(num_cpus=1, resources={"a": 1})
        made.add_node(num_cpus=1, resources={"b": 1})
        made.connect()
        yield made
    finally:
        made.shutdown()


@pytest.fixture
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """Two connected loopback TCP sockets: (ours, theirs)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        ours = socket.create_connection(listener.getsockname())
        theirs, _ = listener.accept()
    yield ours, theirs
    ours.close()
    theirs.close()
