"""`Client.list_hosts()`: LocalClient reports this machine (or the host it was given), the Iris
backend reports the controller's workers with their sizes, accelerators and attributes."""

from __future__ import annotations

import os

import pytest

from fray_ray.cluster import ClusterConfig, EmbeddedCluster, WorkerSpec, cpu_worker, gpu_host, tpu_slice
from fray_ray.fray import Client, FrayIrisClient, HostInfo, LocalClient, this_machine
from fray_ray.fray._iris_conversions import host_info
from fray_ray.iris.types import GpuDevice, TpuDevice, WorkerInfo


@pytest.fixture(scope="module")
def cluster_workers() -> tuple[WorkerSpec, ...]:
    return (
        cpu_worker("small", cpu=2, memory="4g", disk="10g", attributes={"ray-resource:disk_slots": "3"}),
        gpu_host("A100", 2, worker_id="gpu-0", cpu=8, memory="32g", disk="100g"),
        *tpu_slice("v5p-16", "slice-a", cpu=16, memory="64g", disk="100g"),
    )


def test_local_client_reports_this_machine(client: LocalClient) -> None:
    assert isinstance(client, Client)
    (host,) = client.list_hosts()
    assert host.alive and host.cpu == float(os.cpu_count() or 1)
    assert host.memory_bytes > 0 and host.gpus == 0 and host.address == "127.0.0.1"


def test_local_client_reports_the_host_it_was_given() -> None:
    given = this_machine("here", cpu=3, gpus=1, attributes={"ray-resource:custom": 2.0})
    with LocalClient(max_threads=1, host=given) as local:
        assert local.list_hosts() == [given]
    assert given.cpu == 3.0 and given.gpus == 1 and given.attributes == {"ray-resource:custom": 2.0}


def test_iris_client_reports_every_worker_of_the_controller(cluster: EmbeddedCluster, iris: FrayIrisClient) -> None:
    hosts = {host.host_id: host for host in iris.list_hosts()}
    assert sorted(hosts) == ["gpu-0", "slice-a-w0", "slice-a-w1", "small"]
    small = hosts["small"]
    assert (small.cpu, small.memory_bytes, small.disk_bytes, small.gpus, small.tpu_chips) == (2.0, 4 << 30, 10 << 30, 0, 0)
    assert small.attributes["ray-resource:disk_slots"] == "3" and small.attributes["device-type"] == "cpu"
    assert (hosts["gpu-0"].gpus, hosts["gpu-0"].gpu_variant, hosts["gpu-0"].cpu) == (2, "A100", 8.0)
    tpu = hosts["slice-a-w1"]
    assert (tpu.tpu_chips, tpu.tpu_variant, tpu.attributes["tpu-worker-id"]) == (4, "v5p-16", 1)
    # Each simulated host has its own address, without the port a worker's RPC address carries.
    with cluster.client() as controller:
        addresses = {w.worker_id: w.address for w in controller.list_workers()}
    assert {h.host_id: h.address for h in hosts.values()} == {k: v.split(":")[0] for k, v in addresses.items()}
    assert len({h.address for h in hosts.values()}) == 4 and all(h.alive for h in hosts.values())


def test_a_lost_worker_is_reported_not_alive(cluster_workers: tuple[WorkerSpec, ...]) -> None:
    with EmbeddedCluster(ClusterConfig(workers=cluster_workers[:2])) as cluster:
        client = FrayIrisClient(cluster.address, token=cluster.token)
        try:
            cluster.kill_worker("gpu-0")
            alive = {host.host_id: host.alive for host in client.list_hosts()}
        finally:
            client.shutdown()
    assert alive == {"small": True, "gpu-0": False}


@pytest.mark.parametrize(
    ("address", "host"),
    [("10.0.0.2:8080", "10.0.0.2"), ("10.0.0.2", "10.0.0.2"), ("[::1]:9000", "::1"), ("::1", "::1"), ("", "")],
)
def test_a_worker_address_loses_its_port(address: str, host: str) -> None:
    worker = WorkerInfo("w", address, True, cpu_count=8, memory_bytes=1, disk_bytes=1)
    assert host_info(worker).address == host


def test_worker_devices_and_health_become_host_fields() -> None:
    gpu = host_info(WorkerInfo("g", "h:1", False, 4, 2, 3, device=GpuDevice("H100", 8), hostname="node-7"))
    assert (gpu.alive, gpu.gpus, gpu.gpu_variant, gpu.tpu_chips, gpu.hostname) == (False, 8, "H100", 0, "node-7")
    tpu = host_info(WorkerInfo("t", "h:1", True, 4, 2, 3, device=TpuDevice("v6e-8", "2x4", 8)))
    assert (tpu.tpu_chips, tpu.tpu_variant, tpu.gpus) == (8, "v6e-8", 0)


def test_host_values_are_checked() -> None:
    with pytest.raises(ValueError, match="cpu of host w cannot be negative"):
        HostInfo("w", "h", cpu=-1)
    with pytest.raises(ValueError, match="needs an id"):
        HostInfo("", "h")
