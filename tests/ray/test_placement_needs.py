"""Custom resources pin processes to the nodes that declare them, at the cluster and in the ledger."""

from __future__ import annotations

from fray_ray._private.driver.cluster_ledger import ClusterLedger
from fray_ray._private.driver.nodes import nodes_from_hosts, placement_needs, resource_attributes
from fray_ray._private.driver.tpu_nodes import host_pins
from fray_ray.fray import HostInfo


def test_declared_and_tpu_slice_resources_pin_a_process() -> None:
    custom = [("special", 1.0), ("node:10.0.0.2", 0.01), ("accelerator_type:A100", 1.0), ("TPU-v5p-16-head", 1.0),
              ("unused", 0.0), ("TPU", 4.0)]
    assert placement_needs(custom) == ("special", "TPU-v5p-16-head")


def test_cpu_is_asked_only_where_the_needed_resource_is() -> None:
    ledger = ClusterLedger()
    ledger.update(nodes_from_hosts([
        HostInfo("small", "10.0.0.1", cpu=2, memory_bytes=1 << 30, attributes=resource_attributes({"slots": 2})),
        HostInfo("large", "10.0.0.2", cpu=4, memory_bytes=1 << 30),
    ], head_host=None))
    assert ledger.ask(b"a", 2.0, ("slots",)) == 2.0
    ledger.placed(b"a", "small")
    # "large" still has 4 CPUs unasked, but a process needing slots can only run on "small"
    assert ledger.ask(b"b", 2.0, ("slots",)) == 0.0
    assert ledger.ask(b"c", 2.0) == 2.0


def _slice_hosts(name: str, hosts: int) -> list[HostInfo]:
    return [HostInfo(f"{name}-w{i}", f"10.0.1.{i}", cpu=8, memory_bytes=1 << 30, tpu_chips=4, tpu_variant="v5p-16",
                     attributes={"tpu-name": name, "tpu-worker-id": i}) for i in range(hosts)]


def test_a_process_for_a_slice_host_is_aimed_at_a_free_host_of_that_slice() -> None:
    ledger = ClusterLedger()
    ledger.update(nodes_from_hosts([*_slice_hosts("a", 2), *_slice_hosts("b", 2)], head_host=None))
    demand = {"CPU": 1.0, "TPU": 4.0, "b": 1.0}
    first = ledger.aim(b"one", demand, placement_needs(demand.items()))
    assert first is not None and host_pins(first.labels) == (("tpu-name", "b"), ("tpu-worker-id", 0))
    second = ledger.aim(b"two", demand, placement_needs(demand.items()))  # not where "one" is going
    assert second is not None and host_pins(second.labels) == (("tpu-name", "b"), ("tpu-worker-id", 1))
    assert ledger.aim(b"three", demand, placement_needs(demand.items())) is None  # both of b's hosts are aimed at
    ledger.forget(b"one")
    held = ledger.try_acquire(demand)  # a task holds b's first free host now
    assert held is not None and held.node == "b-w0"
    assert ledger.aim(b"four", demand, placement_needs(demand.items())) is None  # no free host of b is left
