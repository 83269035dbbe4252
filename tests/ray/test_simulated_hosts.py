"""Each simulated host of the embedded cluster has a shared-memory directory of its own, so a
large value reaches a worker on another simulated host as bytes, as it would on another
machine, while a worker on the driver's own host still reads the driver's files in place."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import fray_ray
from fray_ray._private.core import runtime_state
from fray_ray._private.objects.shared_memory import SHARED_MEMORY_DIR_ENV, host_identity
from fray_ray.cluster_utils import Cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

SIZE = 8 << 20  # above the inline limit and the buffer pool's smallest block


def _exporter(array: np.ndarray) -> str:
    """The type of the object whose memory `array` reads."""
    base: object = array
    while isinstance(base, np.ndarray):
        base = base.base
    while isinstance(base, memoryview):
        base = base.obj
    return type(base).__name__


@pytest.fixture
def two_hosts(own_cluster_env: None, fresh_shutdown: None) -> Iterator[Cluster]:
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1}})
    try:
        made.add_node(num_cpus=1, resources={"other": 1})
        made.connect()
        yield made
    finally:
        made.shutdown()


def test_a_worker_on_another_simulated_host_gets_bytes_and_one_on_the_drivers_host_a_file(two_hosts: Cluster) -> None:
    @fray_ray.remote(num_cpus=0)
    def look(array: np.ndarray) -> tuple[int, str, str, str]:
        directory = os.environ.get(SHARED_MEMORY_DIR_ENV, "/dev/shm")
        return int(array.sum()), _exporter(array), directory, host_identity(directory)

    lent = runtime_state.current().lent_blocks
    lent_before = lent.outstanding()
    total, kind, directory, identity = fray_ray.get(
        look.options(resources={"other": 1}).remote(np.full(SIZE, 2, np.uint8)))
    assert total == 2 * SIZE and kind == "bytearray"  # came down the stream
    assert lent.outstanding() == lent_before  # nothing was lent to the other host
    assert identity and identity != runtime_state.current().shared_memory_identity
    assert directory != "/dev/shm" and stat.S_IMODE(os.stat(directory).st_mode) == 0o700

    total, kind, head_directory, head_identity = fray_ray.get(
        look.options(resources={"head": 1}).remote(np.full(SIZE, 3, np.uint8)))
    assert total == 3 * SIZE and kind.startswith("c_char_Array")  # read in place from the driver's block
    assert head_directory == "/dev/shm" and head_identity == runtime_state.current().shared_memory_identity

    two_hosts.shutdown()
    assert not os.path.exists(directory)  # removed with the cluster
