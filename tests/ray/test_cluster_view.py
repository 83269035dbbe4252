"""The cluster view, over a client whose hosts the test changes: refreshes, change notices, a
cluster that cannot be listed, infeasibility judged on a fresh view, hard node affinity."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from fray_ray._private.driver.cluster_ledger import ClusterLedger
from fray_ray._private.driver.cluster_view import ClusterView
from fray_ray._private.driver.nodes import node_id_for
from fray_ray.fray import HostInfo
from fray_ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


class Hosts:
    """A stand-in for a Fray client's `list_hosts`: returns what the test sets, or raises."""

    def __init__(self, *hosts: HostInfo) -> None:
        self.hosts = list(hosts)
        self.error: Exception | None = None
        self.calls = 0

    def list_hosts(self) -> list[HostInfo]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return list(self.hosts)


@dataclass
class Changes:
    count: int = 0

    def __call__(self) -> None:
        self.count += 1


def cpu_host(host_id: str, cpu: float) -> HostInfo:
    return HostInfo(host_id, f"10.0.0.{cpu:g}", cpu=cpu, memory_bytes=1 << 30)


def view_of(client: Hosts, changes: Changes, head_host: str | None = None) -> tuple[ClusterView, ClusterLedger]:
    ledger = ClusterLedger()
    view = ClusterView(client, ledger, head_host=head_host, head_resources={"object_store_memory": 10.0},
                       on_change=changes, fallback=lambda: cpu_host("this-machine", 3))
    return view, ledger


def test_a_refresh_reads_the_hosts_and_reports_changes_once() -> None:
    client, changes = Hosts(cpu_host("a", 2)), Changes()
    view, ledger = view_of(client, changes)
    assert view.refresh() and changes.count == 1
    assert not view.refresh() and changes.count == 1  # same hosts: nothing changed
    client.hosts.append(cpu_host("b", 4))
    assert view.refresh() and ledger.capacity()["CPU"] == 6.0 and changes.count == 2
    # The head (no driver host given: the first live one) carries the driver's object store.
    assert ledger.capacity()["object_store_memory"] == 10.0 and ledger.nodes()[0].is_head


def test_readers_refresh_a_view_older_than_a_second_only() -> None:
    client, changes = Hosts(cpu_host("a", 2)), Changes()
    view, ledger = view_of(client, changes)
    view.refresh()
    calls = client.calls
    view.current()
    assert client.calls == calls  # fresh enough
    assert not view.refresh(max_age=1000.0) and client.calls == calls


def test_a_cluster_that_cannot_be_listed_sizes_the_session_from_this_machine() -> None:
    client, changes = Hosts(cpu_host("a", 2)), Changes()
    client.error = ConnectionError("controller unreachable")
    view, ledger = view_of(client, changes)
    assert view.refresh() and ledger.capacity()["CPU"] == 3.0 and changes.count == 1
    client.error = None
    assert view.refresh() and ledger.capacity()["CPU"] == 2.0  # the real view replaces it
    client.error = ConnectionError("again")
    assert not view.refresh() and ledger.capacity()["CPU"] == 2.0  # a later failure keeps the last view


def test_a_demand_is_judged_on_a_fresh_view() -> None:
    client, changes = Hosts(cpu_host("a", 2)), Changes()
    view, ledger = view_of(client, changes)
    view.refresh()
    client.hosts.append(cpu_host("b", 8))  # joins after the last view
    time.sleep(1.1)  # the view is now older than a second: a judgement reads the cluster again
    assert view.infeasible({"CPU": 8}) is None and ledger.capacity()["CPU"] == 10.0


def test_the_polling_thread_starts_and_stops() -> None:
    client, changes = Hosts(cpu_host("a", 2)), Changes()
    view, ledger = view_of(client, changes)
    view.start()
    try:
        assert ledger.wait_ready(30) and ledger.capacity()["CPU"] == 2.0
        view.nudge()
    finally:
        view.stop()
    assert not [t for t in threading.enumerate() if t.name == "cluster-view"]


@pytest.mark.parametrize(
    ("hosts", "target", "allowed"),
    [(["a"], "a", True), (["a", "b"], "a", False), (["a"], "elsewhere", False), (["a", "b"], "driver", False)],
)
def test_hard_node_affinity_is_honoured_only_where_every_process_runs_on_that_node(
    hosts: list[str], target: str, allowed: bool
) -> None:
    client, changes = Hosts(*(cpu_host(h, i + 1) for i, h in enumerate(hosts))), Changes()
    view, _ = view_of(client, changes)
    view.refresh()
    driver = node_id_for("driver")
    strategy = NodeAffinitySchedulingStrategy(node_id_for(target).hex(), soft=False)
    problem = view.judge(strategy, {"CPU": 1}, driver)
    assert (problem is None) == allowed
    if not allowed and target in hosts:
        assert "cannot pin work to one worker" in (problem or "")
    assert view.judge(NodeAffinitySchedulingStrategy(node_id_for(target).hex(), soft=True), {"CPU": 1}, driver) is None
