"""`fray_ray.cluster_utils.Cluster` on the embedded cluster's simulated hosts (what only fray_ray has:
node values, argument checks, the address record, no processes left behind).

The behaviours Ray shares are in compat_tests/test_cluster_utils.py.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import fray_ray
from fray_ray._private.core import runtime_state
from fray_ray._private.core.task_spec import ResourceShape
from fray_ray._private.driver import cluster_address
from fray_ray._private.driver.launcher import resource_config
from fray_ray.cluster_utils import AutoscalingCluster, Cluster
from fray_ray.util.state import list_tasks

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import wait_for  # noqa: E402


@pytest.fixture
def private_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "records"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(cluster_address.TEMP_DIR_ENV, str(directory))
    for name in ("RAY_ADDRESS", "FRAY_RAY_ADDRESS", "FRAY_RAY_TOKEN", "IRIS_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return directory


@pytest.fixture
def cluster(private_records: Path, fresh_shutdown: None) -> Iterator[Cluster]:
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        yield made
    finally:
        made.shutdown()


def _task_processes(made: Cluster) -> list[int]:
    embedded = made._embedded
    return [] if embedded is None else embedded.task_pids()


def test_nodes_are_values_with_ray_ids(cluster: Cluster) -> None:
    node = cluster.add_node(num_cpus=2, num_gpus=1, resources={"special": 3})
    cluster.connect()
    entries = {entry["NodeID"]: entry for entry in fray_ray.nodes()}
    assert entries[node.node_id]["Resources"]["special"] == 3
    assert entries[node.node_id]["Resources"]["GPU"] == 1
    assert entries[node.node_id]["NodeManagerAddress"] == node.node_ip_address
    assert node.unique_id == node.node_id and node.address == cluster.address
    assert cluster.head_node is not None and cluster.head_node.head and cluster.head_node.node_id in entries
    assert node.resources == {"CPU": 2.0, "GPU": 1.0, "special": 3.0}
    assert cluster.list_all_nodes()[0] is cluster.head_node
    assert cluster.remaining_processes_alive()
    cluster.remove_node(node)
    assert cluster.remaining_processes_alive()  # removed nodes no longer count


def test_arguments_ray_nodes_do_not_take_are_refused(cluster: Cluster) -> None:
    with pytest.raises(TypeError, match="num_cpu"):
        cluster.add_node(num_cpu=1)
    assert len(cluster.list_all_nodes()) == 1


def test_arguments_about_ray_daemons_warn(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fray_ray.cluster_utils"):
        cluster.add_node(num_cpus=1, object_store_memory=100 * 1024 * 1024)
    assert "object_store_memory" in caplog.text


def test_removing_a_node_of_another_cluster_is_refused(cluster: Cluster, private_records: Path) -> None:
    other = Cluster(initialize_head=True, shutdown_at_exit=False)
    try:
        with pytest.raises(ValueError, match="not a node of this cluster"):
            cluster.remove_node(other.head_node)
    finally:
        other.shutdown()


def test_connect_twice_is_refused(cluster: Cluster) -> None:
    cluster.connect()
    with pytest.raises(RuntimeError, match="already connected"):
        cluster.connect()


def test_the_cluster_is_recorded_for_auto_while_it_runs(private_records: Path, fresh_shutdown: None) -> None:
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"cu_marker": 1}})
    try:
        record = cluster_address.read()
        assert record is not None and record.address == made.address
        fray_ray.init(address="auto")  # as with Ray's Cluster
        assert fray_ray.cluster_resources().get("cu_marker") == 1
    finally:
        made.shutdown()
    assert not fray_ray.is_initialized()  # the driver on it was shut down first
    assert cluster_address.read() is None


def test_shutdown_leaves_nothing_running(private_records: Path, fresh_shutdown: None) -> None:
    made = Cluster(initialize_head=True, connect=True, head_node_args={"num_cpus": 1})
    try:
        made.add_node(num_cpus=1, resources={"special": 1})  # seen by the driver once it returns

        @fray_ray.remote(resources={"special": 1})
        def pid() -> int:
            return os.getpid()

        worker_pid = fray_ray.get(pid.remote())
        processes = _task_processes(made)
        assert processes
    finally:
        made.shutdown()
    made.shutdown()  # idempotent
    for gone in [worker_pid, *processes]:
        with pytest.raises(ProcessLookupError):
            os.kill(gone, 0)
    assert made.address is None and made.list_all_nodes() == []


def test_autoscaling_cluster_names_what_to_use() -> None:
    with pytest.raises(NotImplementedError, match="Cluster and add_node"):
        AutoscalingCluster(head_resources={"CPU": 1}, worker_node_types={})


def test_custom_resources_ask_for_hosts_that_declare_them() -> None:
    shape = ResourceShape(cpu=1, custom=(("special", 1.0), ("node:127.0.0.2", 0.01)))
    assert resource_config(shape).required_attributes == ("ray-resource:special",)
    assert resource_config(ResourceShape(cpu=1)).required_attributes == ()


def test_tpu_slice_resources_ask_for_the_slices_hosts() -> None:
    head = resource_config(ResourceShape(cpu=1, custom=(("TPU", 4.0), ("TPU-v5p-16-head", 1.0))), slices={"slice-a"})
    assert head.required_attributes == ("tpu-name",)
    assert head.required_attribute_values == (("tpu-worker-id", 0), ("device-variant", "v5p-16"))
    assert head.device.kind == "cpu"  # chips are the driver's to account: a TPU device would be a whole-slice job
    host = resource_config(ResourceShape(cpu=1, custom=(("TPU", 4.0), ("slice-a", 1.0))), slices={"slice-a"})
    assert host.required_attributes == ("tpu-name",)
    assert host.required_attribute_values == (("tpu-name", "slice-a"),)


def test_a_retry_the_cluster_cannot_place_yet_waits_for_a_node_that_fits(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A task's node goes while the driver still counts it (its view of the cluster lags): the
    retry's worker is refused as unschedulable. The task waits, as Ray's would, and runs on the
    node that replaces the lost one, instead of failing with a worker that could not start."""
    doomed = cluster.add_node(num_cpus=1, resources={"special": 1})
    cluster.connect()

    @fray_ray.remote(resources={"special": 1}, max_retries=3)
    def where(lost: str) -> str:
        node = fray_ray.get_runtime_context().get_node_id()
        if node == lost:
            time.sleep(600)  # ended by the node's removal
        return node

    ref = where.remote(doomed.node_id)
    wait_for(lambda: list_tasks(filters=[("name", "=", "where"), ("state", "=", "RUNNING")]), what="the first attempt")
    view = runtime_state.current().view
    view.refresh = lambda max_age=0.0: False  # the driver has not seen the node go
    try:
        with caplog.at_level(logging.WARNING, logger="fray_ray._private.driver.executor_pool"):
            cluster.remove_node(doomed)
            wait_for(lambda: "tasks wait for a worker the cluster can place" in caplog.text,
                     what="the retry's worker to be refused")
    finally:
        del view.refresh  # the class's method again: the driver sees the cluster as it is
    assert not fray_ray.wait([ref], timeout=0)[0]  # still waiting, not failed
    replacement = cluster.add_node(num_cpus=1, resources={"special": 1})
    assert fray_ray.get(ref, timeout=120) == replacement.node_id


def test_work_for_a_lost_nodes_resources_waits_for_a_replacement(cluster: Cluster) -> None:
    """Once a node is lost, no live node may have what its work asks for: the task rebuilding
    its object, or a new task asking for its resource. The cluster had such a node, so the work
    waits for a replacement, as Ray's would, instead of failing as unschedulable."""
    producer = cluster.add_node(num_cpus=1, resources={"producer": 1})
    cluster.connect()

    @fray_ray.remote(resources={"producer": 1}, max_retries=2)
    def large(fill: int) -> bytes:
        return bytes([fill]) * (4 << 20)  # over the inline limit: it stays on the producer's node

    rebuilt = large.remote(5)
    fray_ray.wait([rebuilt], fetch_local=False)
    cluster.remove_node(producer)
    wait_for(lambda: not any(n["Alive"] for n in fray_ray.nodes() if n["NodeID"] == producer.node_id),
             what="the driver to see the node go")
    new = large.remote(6)
    assert fray_ray.wait([new], timeout=0)[0] == []  # waiting, not failed
    cluster.add_node(num_cpus=1, resources={"producer": 1})
    assert fray_ray.get([rebuilt, new], timeout=120) == [bytes([5]) * (4 << 20), bytes([6]) * (4 << 20)]
