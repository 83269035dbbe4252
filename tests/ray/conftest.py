"""Sessions for Ray-layer tests: real worker processes on an embedded cluster, or local mode."""

from __future__ import annotations

import os
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
