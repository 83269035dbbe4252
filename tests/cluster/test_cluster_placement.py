"""Constraint matching, device constraints and placement decisions, without processes."""

from __future__ import annotations

import pytest

from fray_ray.cluster import cpu_worker, gpu_host, gpu_hosts, tpu_slice
from fray_ray.cluster._constraints import effective_constraints, matches, validate_constraint
from fray_ray.cluster._placement import (
    PlacementRequest,
    eligible_workers,
    pick_gang,
    pick_worker,
    unsatisfiable_reason,
)
from fray_ray.cluster._resources import Demand, WorkerCapacity
from fray_ray.iris.types import Constraint, ConstraintMode, ConstraintOp, GpuDevice, ResourceSpec, TpuDevice

ATTRS = {"region": "us-east1", "rank": 3, "weight": "2.5", "preemptible": "false"}


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [
        (Constraint("region", ConstraintOp.EQ, "us-east1"), True),
        (Constraint("region", ConstraintOp.EQ, "US-EAST1"), True),
        (Constraint("region", ConstraintOp.EQ, "eu"), False),
        (Constraint("region", ConstraintOp.NE, "eu"), True),
        (Constraint("zone", ConstraintOp.NE, "eu"), True),
        (Constraint("region", ConstraintOp.EXISTS), True),
        (Constraint("zone", ConstraintOp.EXISTS), False),
        (Constraint("zone", ConstraintOp.NOT_EXISTS), True),
        (Constraint("region", ConstraintOp.NOT_EXISTS), False),
        (Constraint("region", ConstraintOp.IN, values=("eu", "us-east1")), True),
        (Constraint("region", ConstraintOp.IN, values=("eu",)), False),
        (Constraint("rank", ConstraintOp.GT, 2), True),
        (Constraint("rank", ConstraintOp.GT, 3), False),
        (Constraint("rank", ConstraintOp.GE, 3), True),
        (Constraint("rank", ConstraintOp.LT, 3), False),
        (Constraint("rank", ConstraintOp.LE, 3), True),
        (Constraint("rank", ConstraintOp.EQ, "3"), True),
        (Constraint("weight", ConstraintOp.GT, 2), True),
        (Constraint("region", ConstraintOp.GT, 2), False),
        (Constraint("missing", ConstraintOp.LT, 2), False),
    ],
)
def test_constraint_ops(constraint: Constraint, expected: bool) -> None:
    assert matches(constraint, ATTRS) is expected


@pytest.mark.parametrize(
    "constraint",
    [
        Constraint("", ConstraintOp.EXISTS),
        Constraint("k", ConstraintOp.EQ),
        Constraint("k", ConstraintOp.IN),
        Constraint("k", ConstraintOp.GT, "abc"),
    ],
)
def test_invalid_constraints(constraint: Constraint) -> None:
    with pytest.raises(ValueError):
        validate_constraint(constraint)


def test_device_requests_add_implicit_constraints_unless_user_set_them() -> None:
    tpu = effective_constraints([], TpuDevice("v5p-16"))
    assert {(c.key, c.value) for c in tpu} == {("device-type", "tpu"), ("device-variant", "v5p-16")}
    auto = effective_constraints([], GpuDevice("auto", 1))
    assert [(c.key, c.value) for c in auto] == [("device-type", "gpu")]
    mine = Constraint("device-variant", ConstraintOp.IN, values=("H100", "A100"))
    both = effective_constraints([mine], GpuDevice("H100", 1))
    assert [c for c in both if c.key == "device-variant"] == [mine]


def capacities(*specs) -> list[WorkerCapacity]:
    return [WorkerCapacity(s) for s in specs]


def test_preferred_constraints_rank_and_cpu_tasks_avoid_accelerator_hosts() -> None:
    caps = capacities(
        gpu_host("H100", 8, worker_id="g"),
        cpu_worker("a", cpu=8, attributes={"zone": "a"}),
        cpu_worker("b", cpu=8, attributes={"zone": "b"}),
    )
    plain = PlacementRequest(Demand(cpu_millicores=1000))
    assert pick_worker(plain, eligible_workers(plain, caps)).worker_id in ("a", "b")
    preferring_b = PlacementRequest(
        Demand(cpu_millicores=1000), (Constraint("zone", value="b", mode=ConstraintMode.PREFERRED),)
    )
    caps[2].take(Demand(cpu_millicores=6000))  # b is busier, but still preferred
    assert pick_worker(preferring_b, eligible_workers(preferring_b, caps)).worker_id == "b"


def test_gpus_are_individual_devices() -> None:
    (cap,) = capacities(gpu_host("H100", 4, worker_id="g"))
    demand = Demand.of(ResourceSpec(cpu_millicores=0, device=GpuDevice("H100", 2)))
    first, second = cap.take(demand), cap.take(demand)
    assert first.gpu_indices == (0, 1) and second.gpu_indices == (2, 3)
    assert cap.shortfall(demand) is not None
    cap.give(first)
    assert cap.take(demand).gpu_indices == (0, 1)


def test_gang_needs_one_group_with_room_for_all() -> None:
    caps = capacities(*tpu_slice("v5p-16", "s1"), *tpu_slice("v5p-16", "s2"))
    tpu = Demand.of(ResourceSpec(cpu_millicores=1000, device=TpuDevice("v5p-16")))
    request = PlacementRequest(tpu, group_by="tpu-name", replicas=2)
    candidates = eligible_workers(request, caps)
    caps[0].take(tpu)  # s1 half busy
    chosen = pick_gang(request, candidates, 2)
    assert [c.worker_id for c in chosen] == ["s2-w0", "s2-w1"]
    caps[2].take(tpu)
    assert pick_gang(request, candidates, 2) is None
    assert unsatisfiable_reason(request, caps) is None  # it could run once hosts free up
    too_big = PlacementRequest(tpu, group_by="tpu-name", replicas=4)
    assert "largest group has 2" in unsatisfiable_reason(too_big, caps)


def test_gpu_pool_gang() -> None:
    caps = capacities(*gpu_hosts("H100", 8, hosts=2, pool="p"))
    demand = Demand.of(ResourceSpec(cpu_millicores=1000, device=GpuDevice("H100", 8)))
    request = PlacementRequest(demand, effective_constraints([], GpuDevice("H100", 8)), group_by="pool", replicas=2)
    chosen = pick_gang(request, eligible_workers(request, caps), 2)
    assert sorted(c.worker_id for c in chosen) == ["gpu-0", "gpu-1"]


def test_unsatisfiable_reasons_name_the_missing_thing() -> None:
    caps = capacities(cpu_worker("a", cpu=2, memory="1g", disk="1g"))
    assert "cpu" in unsatisfiable_reason(PlacementRequest(Demand(cpu_millicores=3000)), caps)
    assert "memory" in unsatisfiable_reason(PlacementRequest(Demand(memory_bytes=2 << 30)), caps)
    assert "disk" in unsatisfiable_reason(PlacementRequest(Demand(disk_bytes=2 << 30)), caps)
    gpu = GpuDevice("H100", 1)
    reason = unsatisfiable_reason(PlacementRequest(Demand(gpus=1), effective_constraints([], gpu)), caps)
    assert "device-type == gpu" in reason and "cpu" in reason
    region = Constraint("region", value="mars")
    assert "region == mars" in unsatisfiable_reason(PlacementRequest(Demand(), (region,)), caps)
    caps[0].alive = False
    assert "no live workers" in unsatisfiable_reason(PlacementRequest(Demand()), caps)
