"""Placement: which worker runs a task, and whether a job could ever run at all.

Pure functions over `WorkerCapacity` objects; the controller calls them under its lock.
Single tasks go to the live worker that fits and ranks best (more PREFERRED matches, then a
plain CPU host for a task without devices, then the least loaded). A coscheduled job is placed
all-or-nothing on workers sharing one value of its `group_by` attribute.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from fray_ray.cluster._constraints import describe, preference_score, required_match
from fray_ray.cluster._resources import Demand, WorkerCapacity
from fray_ray.iris.types import Constraint, ConstraintMode


@dataclass(frozen=True)
class PlacementRequest:
    """The placement-relevant part of a job, shared by all its tasks."""

    demand: Demand
    constraints: tuple[Constraint, ...] = ()
    group_by: str | None = None
    replicas: int = 1

    @property
    def wants_device(self) -> bool:
        return self.demand.gpus > 0 or self.demand.tpu


@dataclass(frozen=True)
class Candidate:
    """A worker that satisfies a job's REQUIRED constraints, with its preference score."""

    score: int
    capacity: WorkerCapacity


def eligible_workers(request: PlacementRequest, capacities: Sequence[WorkerCapacity]) -> list[Candidate]:
    """Workers whose attributes satisfy the REQUIRED constraints, best PREFERRED score first.

    Attributes never change, so callers may cache this per job (liveness is checked later).
    """
    found = [
        Candidate(preference_score(request.constraints, c.spec.attributes), c)
        for c in capacities
        if required_match(request.constraints, c.spec.attributes)
    ]
    found.sort(key=lambda cand: -cand.score)
    return found


def _rank(request: PlacementRequest, candidate: Candidate) -> tuple[int, int, float, str]:
    capacity = candidate.capacity
    # A task without devices should not take a CPU slot on an accelerator host if it can help it.
    on_accelerator = 0 if request.wants_device or capacity.spec.device_type == "cpu" else 1
    return (-candidate.score, on_accelerator, capacity.load(), capacity.worker_id)


def pick_worker(request: PlacementRequest, candidates: Sequence[Candidate]) -> WorkerCapacity | None:
    """The best live worker with room for one task now, or None."""
    best: tuple[tuple[int, int, float, str], WorkerCapacity] | None = None
    for candidate in candidates:
        capacity = candidate.capacity
        if not capacity.alive or capacity.shortfall(request.demand) is not None:
            continue
        rank = _rank(request, candidate)
        if best is None or rank < best[0]:
            best = (rank, capacity)
    return None if best is None else best[1]


def _group_order_key(capacity: WorkerCapacity) -> tuple[int, str]:
    # Within a TPU slice, task i should land on host i, so TPU_WORKER_ID matches the task index.
    worker_index = capacity.spec.attributes.get("tpu-worker-id")
    try:
        index = int(worker_index)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        index = 1 << 30
    return index, capacity.worker_id


def _groups(request: PlacementRequest, candidates: Sequence[Candidate]) -> list[tuple[int, list[WorkerCapacity]]]:
    """Candidates grouped by their `group_by` value, best-scoring groups first."""
    assert request.group_by is not None
    grouped: dict[str, list[Candidate]] = defaultdict(list)
    for candidate in candidates:
        value = candidate.capacity.spec.attributes.get(request.group_by)
        if value is not None:
            grouped[str(value)].append(candidate)
    result = []
    for key in sorted(grouped):
        members = grouped[key]
        score = max(m.score for m in members)
        result.append((score, sorted((m.capacity for m in members), key=_group_order_key)))
    result.sort(key=lambda item: -item[0])
    return result


def _fill(request: PlacementRequest, members: Sequence[WorkerCapacity], count: int, *, empty: bool) -> list[int] | None:
    """Indices into `members` for `count` tasks, trying each task on members in order."""
    trial = [m.clone() for m in members]
    if empty:
        for t, m in zip(trial, members):
            t.free_cpu, t.free_memory, t.free_disk = m.spec.cpu_millicores, m.spec.memory_bytes, m.spec.disk_bytes
            t.free_gpus = list(range(m.spec.gpu.count)) if m.spec.gpu is not None else []
            t.free_tpu_chips = m.spec.tpu.chips if m.spec.tpu is not None else 0
    chosen = []
    start = 0
    for _ in range(count):
        for offset in range(len(trial)):
            i = (start + offset) % len(trial)
            if (empty or trial[i].alive) and trial[i].shortfall(request.demand) is None:
                trial[i].take(request.demand)
                chosen.append(i)
                start = i + 1  # spread the gang over the group's hosts
                break
        else:
            return None
    return chosen


def pick_gang(request: PlacementRequest, candidates: Sequence[Candidate], count: int) -> list[WorkerCapacity] | None:
    """Workers for all `count` tasks at once in one group, or None if no group has room now."""
    for _, members in _groups(request, candidates):
        live = [m for m in members if m.alive]
        chosen = _fill(request, live, count, empty=False)
        if chosen is not None:
            return [live[i] for i in chosen]
    return None


def unsatisfiable_reason(
    request: PlacementRequest, capacities: Sequence[WorkerCapacity], job_id: str = "the job"
) -> str | None:
    """Why no live worker could ever run this job (naming the missing resource), or None."""
    live = [c for c in capacities if c.alive]
    if not live:
        return f"{job_id} cannot be scheduled: the cluster has no live workers"
    remaining = live
    for constraint in request.constraints:
        if constraint.mode != ConstraintMode.REQUIRED:
            continue
        kept = [c for c in remaining if required_match((constraint,), c.spec.attributes)]
        if not kept:
            seen = sorted({str(c.spec.attributes[constraint.key]) for c in live if constraint.key in c.spec.attributes})
            offered = (
                f"workers offer {constraint.key} = {', '.join(seen)}" if seen else f"no worker has {constraint.key}"
            )
            return f"{job_id} is unschedulable: no worker satisfies constraint {describe(constraint)} ({offered})"
        remaining = kept
    reasons = {c.worker_id: c.shortfall_when_empty(request.demand) for c in remaining}
    fitting = [c for c in remaining if reasons[c.worker_id] is None]
    if not fitting:
        detail = "; ".join(f"{worker}: {why}" for worker, why in sorted(reasons.items()))
        kind = next(iter(reasons.values()), "resources") or "resources"
        resource = kind.split(":", 1)[0]
        return f"{job_id} is unschedulable: not enough {resource} on any worker ({detail})"
    if request.group_by is not None:
        candidates = [Candidate(0, c) for c in fitting]
        groups = _groups(request, candidates)
        if not groups:
            return (
                f"{job_id} is unschedulable: coscheduling group_by={request.group_by!r} but no fitting worker "
                f"has attribute {request.group_by!r}"
            )
        if not any(_fill(request, members, request.replicas, empty=True) is not None for _, members in groups):
            largest = max(len(members) for _, members in groups)
            return (
                f"{job_id} is unschedulable: coscheduling {request.replicas} tasks with "
                f"group_by={request.group_by!r} needs room for all of them in one group; the largest group has "
                f"{largest} fitting worker(s)"
            )
    return None


def pending_reason(request: PlacementRequest, candidates: Sequence[Candidate]) -> str:
    """A short human explanation of why a job's task is still waiting."""
    live = [c.capacity for c in candidates if c.capacity.alive]
    if not live:
        return "waiting for a live worker that satisfies the job's constraints"
    if request.group_by is not None:
        return f"waiting for {request.replicas} task slots at once on workers sharing one {request.group_by!r} value"
    why = live[0].shortfall(request.demand) or "busy"
    return f"waiting for resources ({live[0].worker_id}: {why})"
