"""Placement groups: creation, readiness, lookup, tables, removal, scheduling into bundles.

Covers ``ray.util.placement_group`` and ``PlacementGroupSchedulingStrategy`` (ray-api.md §1.8).
"""

from __future__ import annotations

import uuid

import pytest

from compat_tests._backend import ray, scheduling_strategies, util_placement_group
from compat_tests.helpers import wait_for_condition


def _pg(bundles, **kwargs):
    return util_placement_group.placement_group(bundles, **kwargs)


def _remove(pg):
    util_placement_group.remove_placement_group(pg)


def _in_bundle(pg, index=-1):
    return scheduling_strategies.PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=index
    )


@ray.remote(num_cpus=1)
def _where():
    context = ray.get_runtime_context()
    current = util_placement_group.get_current_placement_group()
    return (
        context.get_placement_group_id(),
        None if current is None else current.id.hex(),
        context.get_assigned_resources(),
    )


def test_placement_group__ready_and_wait(ray_start_regular_shared):
    pg = _pg([{"CPU": 1}, {"CPU": 1}])
    try:
        ready = pg.ready()
        assert isinstance(ready, ray.ObjectRef)
        ray.get(ready, timeout=60)
        assert pg.wait(timeout_seconds=60) is True
    finally:
        _remove(pg)


def test_placement_group__bundle_specs_and_count(ray_start_regular_shared):
    pg = _pg([{"CPU": 1}, {"CPU": 1, "custom": 1}], strategy="PACK")
    try:
        assert pg.bundle_count == 2
        assert pg.bundle_specs == [{"CPU": 1.0}, {"CPU": 1.0, "custom": 1.0}]
        assert pg.wait(timeout_seconds=60)
    finally:
        _remove(pg)


def test_placement_group__reserves_and_releases_resources(ray_start_regular_shared):
    total = ray.cluster_resources()["CPU"]
    custom = ray.cluster_resources()["custom"]
    wait_for_condition(lambda: ray.available_resources().get("CPU", 0) == total)
    pg = _pg([{"CPU": 1}, {"CPU": 1, "custom": custom}])
    assert pg.wait(timeout_seconds=60)
    wait_for_condition(lambda: ray.available_resources().get("CPU", 0) == total - 2)
    wait_for_condition(lambda: "custom" not in ray.available_resources())  # 0 left: omitted
    _remove(pg)
    wait_for_condition(lambda: ray.available_resources().get("CPU", 0) == total)
    wait_for_condition(lambda: ray.available_resources().get("custom", 0) == custom)


def test_placement_group__task_in_bundle(ray_start_regular_shared):
    pg = _pg([{"CPU": 1}, {"CPU": 1}])
    try:
        assert pg.wait(timeout_seconds=60)
        for index in (0, 1, -1):
            pg_id, current, assigned = ray.get(
                _where.options(scheduling_strategy=_in_bundle(pg, index)).remote()
            )
            assert pg_id == pg.id.hex() and current == pg.id.hex()
            assert assigned == {"CPU": 1.0}
        # Outside a placement group there is none.
        assert ray.get(_where.remote())[:2] == (None, None)
    finally:
        _remove(pg)


def test_placement_group__actor_in_bundle(ray_start_regular_shared):
    @ray.remote(num_cpus=1)
    class Placed:
        def placement(self):
            return ray.get_runtime_context().get_placement_group_id()

    pg = _pg([{"CPU": 1}])
    try:
        assert pg.wait(timeout_seconds=60)
        actor = Placed.options(scheduling_strategy=_in_bundle(pg, 0)).remote()
        assert ray.get(actor.placement.remote()) == pg.id.hex()
        ray.kill(actor)
    finally:
        _remove(pg)


def test_placement_group__get_by_name_and_table(ray_start_regular_shared):
    name = f"compat-pg-{uuid.uuid4().hex[:8]}"
    pg = _pg([{"CPU": 1}, {"custom": 1}], strategy="SPREAD", name=name)
    try:
        assert pg.wait(timeout_seconds=60)
        found = util_placement_group.get_placement_group(name)
        assert found.id == pg.id
        assert found.bundle_specs == pg.bundle_specs
        row = util_placement_group.placement_group_table(pg)
        assert row["name"] == name
        assert row["state"] == "CREATED"
        assert row["strategy"] == "SPREAD"
        assert row["placement_group_id"] == pg.id.hex()
        assert row["bundles"] == {0: {"CPU": 1.0}, 1: {"custom": 1.0}}
        everything = util_placement_group.placement_group_table()
        assert pg.id.hex() in everything
        assert everything[pg.id.hex()]["name"] == name
    finally:
        _remove(pg)


def test_placement_group__remove(ray_start_regular_shared):
    name = f"compat-pg-removed-{uuid.uuid4().hex[:8]}"
    pg = _pg([{"CPU": 1}], name=name)
    assert pg.wait(timeout_seconds=60)
    _remove(pg)
    wait_for_condition(
        lambda: util_placement_group.placement_group_table(pg)["state"] == "REMOVED"
    )
    with pytest.raises(ValueError):
        util_placement_group.get_placement_group(name)


def test_placement_group__infeasible_never_ready(ray_start_regular_shared):
    pg = _pg([{"CPU": 1000}])
    try:
        assert pg.wait(timeout_seconds=1) is False
        assert ray.wait([pg.ready()], timeout=0.5)[0] == []
        assert util_placement_group.placement_group_table(pg)["state"] == "PENDING"
    finally:
        _remove(pg)
    wait_for_condition(
        lambda: util_placement_group.placement_group_table(pg)["state"] == "REMOVED"
    )


@pytest.mark.parametrize("strategy", ["PACK", "SPREAD", "STRICT_PACK"])
def test_placement_group__strategies_on_one_node(ray_start_regular_shared, strategy):
    pg = _pg([{"CPU": 1}, {"CPU": 1}], strategy=strategy)
    try:
        assert pg.wait(timeout_seconds=60)
    finally:
        _remove(pg)


def test_placement_group__strict_spread_needs_distinct_nodes(ray_start_regular_shared):
    pg = _pg([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    try:
        assert pg.wait(timeout_seconds=1) is False  # one node cannot hold both bundles
    finally:
        _remove(pg)


def test_placement_group__invalid_arguments(ray_start_regular_shared):
    with pytest.raises(ValueError):
        _pg([{"CPU": 1}], strategy="NOT_A_STRATEGY")
    with pytest.raises(ValueError):
        _pg([])
    with pytest.raises(ValueError):
        _pg([{}])
    with pytest.raises(ValueError):
        _pg([{"CPU": 0}])


_STATS_KEYS = {
    "end_to_end_creation_latency_ms",
    "scheduling_latency_ms",
    "scheduling_attempt",
    "highest_retry_delay_ms",
    "scheduling_state",
}


def test_placement_group__table_bundles_to_node_id_and_stats(ray_start_regular_shared):
    pg = _pg([{"CPU": 1}, {"custom": 1}])
    try:
        assert pg.wait(timeout_seconds=60)
        row = util_placement_group.placement_group_table(pg)
        node_ids = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        assert set(row["bundles_to_node_id"]) == {0, 1}
        assert set(row["bundles_to_node_id"].values()) <= node_ids
        stats = row["stats"]
        assert set(stats) == _STATS_KEYS
        assert stats["scheduling_state"] == "FINISHED"
        assert stats["scheduling_attempt"] >= 1
        assert stats["end_to_end_creation_latency_ms"] >= stats["scheduling_latency_ms"] >= 0
    finally:
        _remove(pg)
    wait_for_condition(
        lambda: util_placement_group.placement_group_table(pg)["stats"]["scheduling_state"] == "REMOVED"
    )


def test_placement_group__table_stats_of_an_infeasible_group(ray_start_regular_shared):
    pg = _pg([{"CPU": 1000}])
    try:
        wait_for_condition(
            lambda: util_placement_group.placement_group_table(pg)["stats"]["scheduling_state"] == "INFEASIBLE"
        )
        stats = util_placement_group.placement_group_table(pg)["stats"]
        assert stats["end_to_end_creation_latency_ms"] == 0.0
    finally:
        _remove(pg)


# --- capturing child tasks, and the deprecated placement_group= keywords ------------------------


@ray.remote(num_cpus=1)
def _child_group():
    current = util_placement_group.get_current_placement_group()
    return None if current is None else current.id.hex()


@ray.remote(num_cpus=1)
def _parent_of_three():
    # The parent holds its bundle's only CPU while its children need one each: it lends it
    # while it waits, as in Ray, or this never ends.
    return ray.get([_child_group.remote() for _ in range(3)])


@ray.remote
class _GroupReporter:
    def group(self):
        current = util_placement_group.get_current_placement_group()
        return None if current is None else current.id.hex()


@ray.remote(num_cpus=1)
def _actor_child_group():
    return ray.get(_GroupReporter.options(num_cpus=0).remote().group.remote())


def test_placement_group__capture_child_tasks(ray_start_regular_shared):
    pg = _pg([{"CPU": 1}])
    try:
        ray.get(pg.ready(), timeout=60)
        strategy = scheduling_strategies.PlacementGroupSchedulingStrategy(pg, placement_group_capture_child_tasks=True)
        assert ray.get(_parent_of_three.options(scheduling_strategy=strategy).remote(), timeout=90) == [pg.id.hex()] * 3
        assert ray.get(_actor_child_group.options(scheduling_strategy=strategy).remote(), timeout=90) == pg.id.hex()
    finally:
        _remove(pg)


@ray.remote(num_cpus=1)
def _parent_of_one():
    return ray.get(_child_group.remote())


def test_placement_group__captured_child_when_the_group_holds_every_cpu(ray_start_2_cpus):
    # Ray's documentation: a group of all the cluster's CPUs; the parent takes one of them and
    # its captured child the other, so the cluster itself has none left for the child.
    pg = _pg([{"CPU": 2}])
    try:
        ray.get(pg.ready(), timeout=60)
        strategy = scheduling_strategies.PlacementGroupSchedulingStrategy(pg, placement_group_capture_child_tasks=True)
        assert ray.get(_parent_of_one.options(scheduling_strategy=strategy).remote(), timeout=60) == pg.id.hex()
    finally:
        _remove(pg)


def test_placement_group__children_not_captured_by_default(ray_start_regular_shared):
    pg = _pg([{"CPU": 1}])
    try:
        ray.get(pg.ready(), timeout=60)
        assert ray.get(_parent_of_three.options(scheduling_strategy=_in_bundle(pg)).remote(), timeout=90) == [None] * 3
    finally:
        _remove(pg)


def test_placement_group__deprecated_keywords_place_the_call(ray_start_regular_shared):
    pg = _pg([{"CPU": 1}, {"CPU": 1}])
    try:
        ray.get(pg.ready(), timeout=60)
        group_id, current, _ = ray.get(_where.options(placement_group=pg, placement_group_bundle_index=1).remote())
        assert group_id == current == pg.id.hex()
        captured = _parent_of_three.options(placement_group=pg, placement_group_capture_child_tasks=True).remote()
        assert ray.get(captured, timeout=90) == [pg.id.hex()] * 3
        # Without capture the children run outside the group.
        assert ray.get(_parent_of_three.options(placement_group=pg).remote(), timeout=90) == [None] * 3
    finally:
        _remove(pg)
