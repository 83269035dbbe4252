"""Cluster introspection: ``cluster_resources``, ``available_resources``, ``nodes``, node ip,
GPU ids.

Covers ray-api.md §1.6 (and the accounting part of Ray's test_basic.py::test_ray_options, with
actors holding resources instead of timing-dependent running tasks).
"""

from __future__ import annotations

import ipaddress

from compat_tests._backend import DEFAULT_SHARED_CLUSTER, ray, util
from compat_tests.helpers import wait_for_condition

CPUS = float(DEFAULT_SHARED_CLUSTER["num_cpus"])
CUSTOM = float(DEFAULT_SHARED_CLUSTER["resources"]["custom"])


@ray.remote
class _Holder:
    def ready(self):
        return True


def test_cluster_resources__keys(ray_start_regular_shared):
    resources = ray.cluster_resources()
    assert resources["CPU"] == CPUS
    assert resources["custom"] == CUSTOM
    assert resources["memory"] > 0 and resources["object_store_memory"] > 0
    assert resources["node:__internal_head__"] == 1.0
    node_keys = [k for k in resources if k.startswith("node:") and k != "node:__internal_head__"]
    assert node_keys == [f"node:{util.get_node_ip_address()}"]
    assert "GPU" not in resources  # no GPUs here, and absent keys are omitted


def test_available_resources__matches_cluster_when_idle(ray_start_regular_shared):
    wait_for_condition(lambda: ray.available_resources().get("CPU") == CPUS)
    available = ray.available_resources()
    assert available["custom"] == CUSTOM
    assert set(available) <= set(ray.cluster_resources())


def test_available_resources__accounting_and_zero_keys_omitted(ray_start_regular_shared):
    wait_for_condition(lambda: ray.available_resources().get("CPU") == CPUS)
    one_cpu = _Holder.options(num_cpus=1).remote()
    ray.get(one_cpu.ready.remote())
    wait_for_condition(lambda: ray.available_resources().get("CPU") == CPUS - 1)
    all_custom = _Holder.options(num_cpus=CPUS - 1, resources={"custom": CUSTOM}).remote()
    ray.get(all_custom.ready.remote())
    # Nothing left of CPU and custom: the keys disappear rather than showing 0.
    wait_for_condition(lambda: "CPU" not in ray.available_resources())
    wait_for_condition(lambda: "custom" not in ray.available_resources())
    assert ray.available_resources().get("CPU", 0) == 0
    ray.kill(one_cpu)
    ray.kill(all_custom)
    wait_for_condition(lambda: ray.available_resources().get("CPU") == CPUS)
    wait_for_condition(lambda: ray.available_resources().get("custom") == CUSTOM)


def test_nodes__one_alive_node(ray_start_regular_shared):
    nodes = ray.nodes()
    assert len(nodes) == 1
    node = nodes[0]
    assert {"NodeID", "Alive", "NodeManagerAddress", "NodeManagerHostname", "Resources"} <= set(node)
    assert node["Alive"] is True
    assert node["NodeID"] == ray.get_runtime_context().get_node_id()
    assert node["NodeManagerAddress"] == util.get_node_ip_address()
    assert node["Resources"]["CPU"] == CPUS and node["Resources"]["custom"] == CUSTOM


def test_util__get_node_ip_address(ray_start_regular_shared):
    address = util.get_node_ip_address()
    ipaddress.ip_address(address)  # a plain IP address string

    @ray.remote
    def task_address():
        return util.get_node_ip_address()

    assert ray.get(task_address.remote()) == address


def test_get_gpu_ids__empty_on_cpu(ray_start_regular_shared):
    assert ray.get_gpu_ids() == []

    @ray.remote
    def gpu_ids():
        return ray.get_gpu_ids()

    assert ray.get(gpu_ids.remote()) == []
