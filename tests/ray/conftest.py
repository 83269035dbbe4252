"""Sessions for Ray-layer tests (real worker processes on an embedded cluster, or local mode),
and a connected pair of loopback sockets for the protocol tests."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

import fray_ray


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
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """Two connected loopback TCP sockets: (ours, theirs)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        ours = socket.create_connection(listener.getsockname())
        theirs, _ = listener.accept()
    yield ours, theirs
    ours.close()
    theirs.close()
