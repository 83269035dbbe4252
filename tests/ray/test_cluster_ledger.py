"""The per-node ledger and the nodes it is built from (no cluster: hosts are values here)."""

from __future__ import annotations

import logging

import pytest

from fray_ray._private.driver.cluster_ledger import ClusterLedger
from fray_ray._private.driver.nodes import HEAD_RESOURCE, node_from_host, node_id_for, nodes_from_hosts, resource_attributes
from fray_ray._private.driver.resources import Ledger
from fray_ray.fray import HostInfo


def host(host_id: str, cpu: float, **fields: object) -> HostInfo:
    return HostInfo(host_id, fields.pop("address", f"10.0.0.{len(host_id)}"), cpu=cpu, memory_bytes=1 << 30, **fields)


def ledger_of(*hosts: HostInfo) -> ClusterLedger:
    ledger = ClusterLedger()
    ledger.update(nodes_from_hosts(list(hosts), head_host=None))
    return ledger


# ---- nodes ---------------------------------------------------------------------------------


def test_a_host_becomes_a_node_with_rays_resource_names() -> None:
    tpu = host("t-w0", 16, tpu_chips=4, tpu_variant="v5p-16", attributes={"tpu-worker-id": 0, "tpu-name": "t"})
    node = node_from_host(tpu, head=True, head_resources={"object_store_memory": 100.0})
    assert node.resources == {
        "CPU": 16.0, "memory": float(1 << 30), "TPU": 4.0, "TPU-v5p-16-head": 1.0, "node:10.0.0.4": 1.0,
        "accelerator_type:TPU-V5P": 1.0, "t": 1.0, HEAD_RESOURCE: 1.0, "object_store_memory": 100.0,
    }
    assert node.node_id == node_id_for("t-w0") and node.labels["tpu-name"] == "t"
    assert node.labels["ray.io/tpu-slice-name"] == "t" and node.labels["ray.io/tpu-worker-id"] == "0"
    assert node.labels["ray.io/tpu-pod-type"] == "v5p-16" and node.labels["ray.io/accelerator-type"] == "TPU-V5P"
    second = node_from_host(host("t-w1", 16, tpu_chips=4, tpu_variant="v5p-16", attributes={"tpu-worker-id": 1}))
    assert "TPU-v5p-16-head" not in second.resources and HEAD_RESOURCE not in second.resources
    gpu = node_from_host(host("g", 8, gpus=2, gpu_variant="A100"))
    assert gpu.resources["GPU"] == 2.0 and gpu.resources["accelerator_type:A100"] == 1.0


def test_custom_resources_come_from_resource_attributes(caplog: pytest.LogCaptureFixture) -> None:
    attributes = {**resource_attributes({"slots": 3}), "ray-resource:ssd": "2.5", "ray-resource:CPU": "9",
                  "ray-resource:bad": "many", "pool": "a"}
    with caplog.at_level(logging.WARNING):
        node = node_from_host(host("w", 2, attributes=attributes))
    assert node.resources["slots"] == 3.0 and node.resources["ssd"] == 2.5
    assert node.resources["CPU"] == 2.0 and "bad" not in node.resources  # built-ins cannot be redefined
    assert "ray-resource:bad" in caplog.text and "ray-resource:CPU" in caplog.text
    assert node.labels["pool"] == "a" and not any(k.startswith("ray-resource:") for k in node.labels)


def test_the_head_is_the_drivers_host_else_the_first_live_one() -> None:
    hosts = [host("a", 1, alive=False), host("b", 1), host("c", 1)]
    assert [n.is_head for n in nodes_from_hosts(hosts, head_host="c")] == [False, False, True]
    assert [n.is_head for n in nodes_from_hosts(hosts, head_host=None)] == [False, True, False]
    entry = nodes_from_hosts(hosts, head_host=None)[0].ray_entry()
    assert entry["Alive"] is False and entry["Resources"] == {} and entry["NodeID"] == node_id_for("a").hex()


# ---- feasibility and holdings --------------------------------------------------------------


def test_feasibility_is_per_node_and_names_the_largest_worker() -> None:
    ledger = ledger_of(host("a", 4), host("b", 4))
    assert ledger.capacity()["CPU"] == 8.0
    assert ledger.infeasible({"CPU": 4}) is None
    problem = ledger.infeasible({"CPU": 6})
    assert problem is not None and problem.startswith("CPU (requested 6; the largest worker, a, has 4)")
    assert "no worker of the cluster has any" in (ledger.infeasible({"GPU": 1}) or "")


def test_resources_that_only_fit_on_different_nodes_are_infeasible_together() -> None:
    ledger = ledger_of(host("cpus", 8), host("gpus", 1, gpus=2))
    assert ledger.infeasible({"CPU": 4}) is None and ledger.infeasible({"GPU": 2}) is None
    assert "together" in (ledger.infeasible({"CPU": 4, "GPU": 2}) or "")


def test_placement_resources_count_for_feasibility_only() -> None:
    ledger = ledger_of(host("zero", 0))
    assert ledger.infeasible({}, placement={"CPU": 1}) is not None  # a default actor needs a node with a CPU
    ledger = ledger_of(host("one", 1))
    held = ledger.try_acquire({"CPU": 1})
    assert held is not None and ledger.infeasible({}, placement={"CPU": 1}) is None
    assert ledger.try_acquire({}) is not None  # and holds nothing: it starts on a full node


def test_a_cluster_without_live_workers_judges_nothing_infeasible() -> None:
    ledger = ClusterLedger()
    assert not ledger.ready and ledger.infeasible({"CPU": 100}) is None
    ledger.update(nodes_from_hosts([host("a", 1, alive=False)], head_host=None))
    assert ledger.ready and ledger.infeasible({"CPU": 100}) is None and ledger.capacity() == {}


def test_what_a_lost_node_could_hold_waits_for_a_replacement() -> None:
    # A task rebuilding a lost node's object is resubmitted before any replacement joins.
    ledger = ledger_of(host("a", 1), host("p", 1, attributes=resource_attributes({"producer": 1})))
    ledger.update(nodes_from_hosts([host("a", 1)], head_host=None))  # p was lost
    assert ledger.infeasible({"CPU": 1, "producer": 1}) is None
    assert "no worker of the cluster has any" in (ledger.infeasible({"consumer": 1}) or "")
    assert "the largest worker" in (ledger.infeasible({"CPU": 2}) or "")  # neither ever had 2 CPUs


def test_holdings_fill_nodes_and_release_where_they_were_taken() -> None:
    ledger = ledger_of(host("a", 3), host("b", 3))
    assert ledger.count_fits({"CPU": 2}, 10) == 2  # one per node: 3 + 3 CPUs hold two, not three
    first = ledger.try_acquire({"CPU": 2}, prefer="b")
    assert first is not None and first.node == "b"
    second = ledger.try_acquire({"CPU": 2}, prefer="b")  # b is full: charged to a
    assert second is not None and second.node == "a"
    assert ledger.try_acquire({"CPU": 2}) is None and ledger.available()["CPU"] == 2.0
    ledger.release(first)
    assert ledger.available_on("b") == {"CPU": 3.0, "memory": float(1 << 30), "node:10.0.0.1": 1.0}


def test_a_holding_moves_to_where_its_process_runs_when_that_node_has_room() -> None:
    ledger = ledger_of(host("a", 2), host("b", 2))
    holding = ledger.try_acquire({"CPU": 2})
    assert holding is not None and holding.node == "a"
    moved = ledger.move(holding, "b")
    assert moved.node == "b" and ledger.available_on("a")["CPU"] == 2.0 and "CPU" not in ledger.available_on("b")
    other = ledger.try_acquire({"CPU": 2}, prefer="a")
    assert other is not None and ledger.move(other, "b") is other  # b is full: it stays on a


def test_a_lost_node_no_longer_counts_and_a_returning_one_keeps_its_holdings() -> None:
    ledger = ledger_of(host("a", 2), host("b", 2))
    held = ledger.try_acquire({"CPU": 2}, prefer="b")
    assert held is not None
    assert ledger.update(nodes_from_hosts([host("a", 2)], head_host=None))  # b left
    assert ledger.capacity()["CPU"] == 2.0 and [n.alive for n in ledger.nodes()] == [True, False]
    assert ledger.update(nodes_from_hosts([host("a", 2), host("b", 2)], head_host=None))
    assert ledger.available()["CPU"] == 2.0  # b came back still holding what was taken there
    ledger.release(held)
    assert ledger.available()["CPU"] == 4.0
    assert not ledger.update(nodes_from_hosts([host("a", 2), host("b", 2)], head_host=None))  # no change


def test_a_resized_node_keeps_what_is_held() -> None:
    ledger = Ledger({"CPU": 4}, name="a")
    held = ledger.try_acquire({"CPU": 3})
    assert held is not None
    ledger.resize({"CPU": 8})
    assert ledger.available() == {"CPU": 5.0}


# ---- placement groups ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "nodes"),
    [("STRICT_PACK", {"a"}), ("PACK", {"a"}), ("SPREAD", {"a", "b", "c"}), ("STRICT_SPREAD", {"a", "b", "c"})],
)
def test_bundles_are_placed_by_strategy(strategy: str, nodes: set[str]) -> None:
    ledger = ledger_of(host("a", 4), host("b", 4), host("c", 4))
    held = ledger.try_acquire_bundles([{"CPU": 1}] * 3, strategy)
    assert held is not None and {h.node for h in held} == nodes


def test_bundles_that_cannot_be_placed_take_nothing() -> None:
    ledger = ledger_of(host("a", 2), host("b", 2))
    assert ledger.bundles_infeasible([{"CPU": 1}] * 3, "STRICT_SPREAD") is not None
    assert "STRICT_PACK" in (ledger.bundles_infeasible([{"CPU": 2}] * 2, "STRICT_PACK") or "")
    assert ledger.bundles_infeasible([{"CPU": 2}] * 2, "PACK") is None
    blocker = ledger.try_acquire({"CPU": 1}, prefer="b")
    assert blocker is not None
    assert ledger.try_acquire_bundles([{"CPU": 2}] * 2, "SPREAD") is None
    assert ledger.available()["CPU"] == 3.0  # the bundle placed on a was given back


# ---- what processes ask the cluster for ------------------------------------------------------


def test_processes_ask_for_their_cpu_while_the_cluster_has_it_unasked() -> None:
    ledger = ledger_of(host("a", 2), host("b", 2))
    assert [ledger.ask(bytes([i]), 2.0) for i in range(2)] == [2.0, 2.0]
    assert ledger.ask(b"third", 2.0) == 0.0  # runs on CPU the session's own processes hold
    ledger.placed(b"\x00", "a")
    ledger.forget(b"\x01")
    assert ledger.ask(b"fourth", 2.0) == 2.0 and ledger.asked(b"fourth") == 2.0
    assert ledger.ask(b"none", 0.0) == 0.0


def test_asking_lets_idle_processes_make_room_first() -> None:
    ledger = ledger_of(host("a", 2))
    ledger.ask(b"idle", 2.0)
    ledger.placed(b"idle", "a")
    retired: list[float] = []

    def make_room(cpu: float) -> None:
        retired.append(cpu)
        ledger.forget(b"idle")

    ledger.make_room = make_room
    assert ledger.ask(b"new", 1.0) == 1.0 and retired == [1.0]
