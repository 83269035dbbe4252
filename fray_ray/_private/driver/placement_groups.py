"""Placement groups in the driver: bundles of resources reserved all at once, or not at all.

A group is PENDING until every bundle fits on the cluster's nodes by its strategy (PACK and
STRICT_PACK on one node, SPREAD and STRICT_SPREAD on different ones; see
`ClusterLedger.try_acquire_bundles`); then the bundles are taken from the session's ledger
together (CREATED) and each gets a ledger of its own, from which tasks and actors scheduled
into that bundle draw. A group that can never fit stays PENDING (as in Ray) and says why in a
warning. Removing a group returns its resources.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fray_ray._private.driver.cluster_ledger import STRATEGIES, ClusterLedger
from fray_ray._private.driver.nodes import node_id_for
from fray_ray._private.driver.resources import Holding, Ledger
from fray_ray._private.objects.object_table import ObjectTable
from fray_ray._private.objects.serialization import serialize, serialize_error
from fray_ray.exceptions import RaySystemError

logger = logging.getLogger(__name__)


class GroupState(enum.Enum):
    PENDING = "PENDING"
    CREATED = "CREATED"
    REMOVED = "REMOVED"


@dataclass(eq=False)
class PlacementGroupRecord:
    group_id: bytes
    bundles: list[dict[str, float]]
    strategy: str
    name: str
    ready_id: bytes
    detached: bool = False
    state: GroupState = GroupState.PENDING
    ledgers: list[Ledger] = field(default_factory=list)
    holdings: list[Holding] = field(default_factory=list)  # one per bundle, on its node
    # For the table's `stats`, as Ray reports them.
    requested_at: float = field(default_factory=time.monotonic)
    attempts: int = 0  # tries to reserve it while it could fit somewhere
    infeasible: bool = False  # no node set of the cluster could ever hold it
    creation_ms: float = 0.0  # from the request to its reservation
    reserve_ms: float = 0.0  # the reservation that succeeded


def validate_bundles(bundles: Any) -> list[dict[str, float]]:
    """Bundles as Ray accepts them: a non-empty list of non-empty {resource: amount} dicts."""
    if not isinstance(bundles, list) or not bundles:
        raise ValueError(
            "The placement group `bundles` argument must be a list of resource dictionaries. For example, "
            '`[{"CPU": 1.0, "GPU": 1.0}]`.'
        )
    checked = []
    for bundle in bundles:
        if not isinstance(bundle, dict) or not bundle:
            raise ValueError(
                f"Bundles must be a non-empty dictionary of resources, e.g. {{'CPU': 1}}; got {bundle!r}."
            )
        values = {}
        for key, amount in bundle.items():
            if not isinstance(amount, int | float) or isinstance(amount, bool) or amount < 0:
                raise ValueError(f"Bundle resource values must be non-negative numbers; got {key}={amount!r}.")
            values[str(key)] = float(amount)
        if all(v == 0 for v in values.values()):
            raise ValueError(f"Bundles cannot be an empty dictionary or resources with only 0 values; got {bundle!r}.")
        checked.append(values)
    return checked


class PlacementGroupManager:
    """Reserves and releases placement groups against the session's ledger. Thread-safe."""

    def __init__(self, ledger: ClusterLedger, objects: ObjectTable, on_released: Callable[[], None]) -> None:
        self._ledger = ledger
        self._objects = objects
        self._on_released = on_released
        self._lock = threading.Lock()
        self._groups: dict[bytes, PlacementGroupRecord] = {}

    def create(self, group_id: bytes, bundles: Sequence[Mapping[str, float]], strategy: str, name: str,
               ready_id: bytes, detached: bool = False) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"Invalid placement group strategy {strategy}. Supported strategies are: {list(STRATEGIES)}.")
        record = PlacementGroupRecord(group_id, [dict(b) for b in bundles], strategy, name, ready_id, detached)
        self._objects.create_pending([ready_id])
        self._objects.incref([ready_id])  # ready() may be called any time while the group exists
        with self._lock:
            if name and any(g.name == name and g.state is not GroupState.REMOVED for g in self._groups.values()):
                raise ValueError(f"A placement group named {name!r} already exists in this session.")
            self._groups[group_id] = record
        problem = self._never_fits(record)
        if problem:
            logger.warning("Placement group %s can never be placed: %s. It stays pending.", name or group_id.hex(), problem)
        self.try_reserve()

    def _never_fits(self, record: PlacementGroupRecord) -> str | None:
        return self._ledger.bundles_infeasible(record.bundles, record.strategy)

    def try_reserve(self) -> None:
        """Reserve every pending group that now fits (in creation order)."""
        if not self._groups:  # the common case, checked without the lock (it runs for every task)
            return
        ready = []
        with self._lock:
            for record in self._groups.values():
                if record.state is not GroupState.PENDING:
                    continue
                record.infeasible = bool(self._never_fits(record))
                if record.infeasible:
                    continue
                record.attempts += 1
                started = time.monotonic()
                holdings = self._ledger.try_acquire_bundles(record.bundles, record.strategy)
                if holdings is not None:
                    record.reserve_ms = (time.monotonic() - started) * 1000
                    record.creation_ms = (time.monotonic() - record.requested_at) * 1000
                    record.state = GroupState.CREATED
                    record.holdings = holdings
                    record.ledgers = [Ledger(bundle) for bundle in record.bundles]
                    ready.append(record.ready_id)
        for ready_id in ready:
            self._objects.fulfil(ready_id, serialize(True))

    def remove(self, group_id: bytes) -> None:
        with self._lock:
            record = self._groups.get(group_id)
            if record is None or record.state is GroupState.REMOVED:
                return
            was_created = record.state is GroupState.CREATED
            record.state = GroupState.REMOVED
        self._objects.decref([record.ready_id])
        if was_created:
            for holding in record.holdings:
                self._ledger.release(holding)
            self._on_released()
        else:
            try:
                self._objects.fulfil(record.ready_id, serialize_error(
                    RaySystemError(f"Placement group {group_id.hex()} was removed before it was placed.")
                ))
            except RuntimeError:
                pass
        self.try_reserve()

    def bundle_ledger(self, group_id: bytes, index: int, demand: Mapping[str, float]) -> tuple[Ledger, int] | None:
        """The ledger of bundle `index` (-1: the first that can hold `demand` now), or None."""
        with self._lock:
            record = self._groups.get(group_id)
            if record is None or record.state is not GroupState.CREATED:
                return None
            if index >= 0:
                return (record.ledgers[index], index) if index < len(record.ledgers) else None
            for position, ledger in enumerate(record.ledgers):
                if ledger.count_fits(demand, 1):
                    return ledger, position
            return record.ledgers[0], 0

    def is_removed(self, group_id: bytes) -> bool:
        with self._lock:
            record = self._groups.get(group_id)
            return record is None or record.state is GroupState.REMOVED

    def bundle_count(self, group_id: bytes) -> int:
        with self._lock:
            record = self._groups.get(group_id)
            return 0 if record is None else len(record.bundles)

    def by_name(self, name: str) -> PlacementGroupRecord | None:
        with self._lock:
            for record in self._groups.values():
                if record.name == name and record.state is not GroupState.REMOVED:
                    return record
        return None

    def get(self, group_id: bytes) -> PlacementGroupRecord | None:
        with self._lock:
            return self._groups.get(group_id)

    def table(self, group_id: bytes | None) -> dict[str, Any]:
        with self._lock:
            records = [self._groups[group_id]] if group_id is not None and group_id in self._groups else (
                [] if group_id is not None else list(self._groups.values())
            )
            rows = {r.group_id.hex(): _row(r) for r in records}
        if group_id is not None:
            return rows.get(group_id.hex(), {})
        return rows

    def close(self) -> None:
        with self._lock:
            self._groups.clear()


def _row(record: PlacementGroupRecord) -> dict[str, Any]:
    return {
        "placement_group_id": record.group_id.hex(),
        "name": record.name,
        "bundles": {i: dict(b) for i, b in enumerate(record.bundles)},
        "bundles_to_node_id": {i: node_id_for(h.node).hex() if h.node else None for i, h in enumerate(record.holdings)}
        or {i: None for i in range(len(record.bundles))},
        "strategy": record.strategy,
        "state": record.state.value,
        "stats": {
            "end_to_end_creation_latency_ms": round(record.creation_ms, 3),
            "scheduling_latency_ms": round(record.reserve_ms, 3),
            "scheduling_attempt": max(record.attempts, 1),
            "highest_retry_delay_ms": 0.0,  # a pending group is tried again when resources free up, at once
            "scheduling_state": _scheduling_state(record),
        },
    }


def _scheduling_state(record: PlacementGroupRecord) -> str:
    """Ray's PlacementGroupStats.SchedulingState names for where the group stands."""
    if record.state is GroupState.REMOVED:
        return "REMOVED"
    if record.state is GroupState.CREATED:
        return "FINISHED"
    if record.infeasible:
        return "INFEASIBLE"
    return "NO_RESOURCES" if record.attempts else "QUEUED"
