"""Unit tests of a TPU host's identity: what the driver derives from a node
(`driver/tpu_identity.py`) and how a worker adopts it (`core/host_identity.py`)."""

from __future__ import annotations

from fray_ray._private.core import host_identity
from fray_ray._private.driver.nodes import Node, node_from_host
from fray_ray._private.driver.tpu_identity import tpu_identity
from fray_ray.fray.hosts import HostInfo


def slice_host(name: str, index: int, address: str, *, topology: str = "2x2x2", alive: bool = True) -> Node:
    attributes = {"tpu-name": name, "tpu-worker-id": index, "tpu-topology": topology, "device-variant": "v5p-16"}
    return node_from_host(HostInfo(f"{name}-{index}", address, alive=alive, cpu=8, tpu_chips=4, tpu_variant="v5p-16",
                                   attributes=attributes))


def test_a_slice_hosts_identity_names_its_slice_index_and_peers() -> None:
    nodes = [slice_host("s", 1, "10.0.0.3"), slice_host("s", 0, "10.0.0.2"), slice_host("t", 0, "10.0.0.9")]
    assert tpu_identity(nodes[0], nodes) == {
        "TPU_NAME": "s", "TPU_WORKER_ID": "1", "TPU_ACCELERATOR_TYPE": "v5p-16", "TPU_TOPOLOGY": "2x2x2",
        "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1", "TPU_WORKER_HOSTNAMES": "10.0.0.2,10.0.0.3",
    }


def test_a_pod_type_given_as_topology_is_read_as_the_pod_types_grid() -> None:
    # Iris's local TPU workers report the pod type in `tpu-topology`.
    host = slice_host("s", 0, "10.0.0.2", topology="v5p-16")
    assert host.labels["ray.io/tpu-topology"] == "2x2x2"
    assert tpu_identity(host, [host])["TPU_TOPOLOGY"] == "2x2x2"


def test_no_peer_list_while_a_host_of_the_slice_is_missing() -> None:
    nodes = [slice_host("s", 1, "10.0.0.3"), slice_host("s", 0, "10.0.0.2", alive=False)]
    assert "TPU_WORKER_HOSTNAMES" not in tpu_identity(nodes[0], nodes)


def test_a_host_of_no_slice_has_no_tpu_identity() -> None:
    cpu = node_from_host(HostInfo("cpu-0", "10.0.0.5", cpu=8))
    assert tpu_identity(cpu, [cpu]) == {}


def test_a_worker_adopts_only_what_its_host_did_not_set() -> None:
    environ = {"TPU_NAME": "from-host", "TPU_TOPOLOGY": "", **host_identity.encode(
        {"TPU_NAME": "from-driver", "TPU_WORKER_ID": "1", "TPU_TOPOLOGY": "2x2x2"})}
    assert host_identity.adopt(environ) == {"TPU_WORKER_ID": "1", "TPU_TOPOLOGY": "2x2x2"}
    assert environ["TPU_NAME"] == "from-host" and environ["TPU_WORKER_ID"] == "1"


def test_a_malformed_identity_sets_nothing() -> None:
    for raw in ("not json", "[1, 2]", '{"TPU_NAME": 3}'):
        environ = {host_identity.HOST_IDENTITY_ENV: raw}
        assert host_identity.adopt(environ) == {}
        assert set(environ) == {host_identity.HOST_IDENTITY_ENV}
    assert host_identity.adopt({}) == {}
