"""Logical resources, as Ray counts them: a ledger of what running tasks and actors hold.

Ray's resources are logical: `num_cpus=1` reserves one CPU slot in the accounting, not a
core. A `Ledger` is that accounting for one node (or one placement group bundle); what it
hands out is a `Holding`, given back with `release`. `ClusterLedger` (cluster_ledger.py) keeps
one ledger per node. A ledger has its own lock, taken after the scheduler's when both are held.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

#: Resources are counted in units of 1/10000, as Ray does, to keep fractions exact.
_PRECISION = 10000


def _units(value: float) -> int:
    return round(value * _PRECISION)


def describe_amount(value: float) -> str:
    """An amount as people read it: `2`, `0.5`, `1.5e+10`."""
    return f"{value:g}"


@dataclass(frozen=True, eq=False)
class Holding:
    """Resources taken from a ledger: on which node (`""` for a ledger of its own) and how much."""

    node: str
    demand: Mapping[str, float] = field(default_factory=dict)


def lent_while_blocked(holding: Holding) -> Holding:
    """What a task blocked in `get` lends to others: its CPU alone, as in Ray; its GPUs, TPU
    chips and custom resources (a slice's name, say) stay its own."""
    return Holding(holding.node, {"CPU": holding.demand.get("CPU", 0.0)})


class Ledger:
    """Capacity and availability of each resource of one node. Thread-safe."""

    def __init__(self, capacity: Mapping[str, float], name: str = "") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._capacity = {k: _units(v) for k, v in capacity.items() if v > 0}
        self._available = dict(self._capacity)

    def capacity(self) -> dict[str, float]:
        with self._lock:
            return {k: v / _PRECISION for k, v in self._capacity.items()}

    def available(self) -> dict[str, float]:
        """What is free now; keys with nothing free are omitted (as Ray does)."""
        with self._lock:
            return {k: v / _PRECISION for k, v in self._available.items() if v > 0}

    def resize(self, capacity: Mapping[str, float]) -> None:
        """New totals (the node changed size); what is held stays held."""
        new = {k: _units(v) for k, v in capacity.items() if v > 0}
        with self._lock:
            for key in set(new) | set(self._capacity):
                delta = new.get(key, 0) - self._capacity.get(key, 0)
                if delta:
                    self._available[key] = self._available.get(key, 0) + delta
            self._capacity = new

    def fits_when_empty(self, demand: Mapping[str, float]) -> bool:
        """Whether the node could ever hold `demand` (its totals are enough)."""
        with self._lock:
            return all(_units(v) <= self._capacity.get(k, 0) for k, v in demand.items() if v > 0)

    def infeasible(self, demand: Mapping[str, float]) -> str | None:
        """The first resource the demand asks more of than this ledger has in all, or None."""
        with self._lock:
            for key, amount in demand.items():
                if amount > 0 and _units(amount) > self._capacity.get(key, 0):
                    have = self._capacity.get(key, 0) / _PRECISION
                    return f"{key} (requested {describe_amount(amount)}, the cluster has {describe_amount(have)})"
        return None

    def try_acquire(self, demand: Mapping[str, float], *, prefer: str | None = None) -> Holding | None:
        """Take `demand` if it is free now, else None. (`prefer` is the multi-node ledger's.)"""
        needed = {k: _units(v) for k, v in demand.items() if v > 0}
        with self._lock:
            if any(self._available.get(k, 0) < v for k, v in needed.items()):
                return None
            for key, value in needed.items():
                self._available[key] -= value
        return Holding(self.name, dict(demand))

    def count_fits(self, demand: Mapping[str, float], limit: int) -> int:
        """How many copies of `demand` fit in what is free now (at most `limit`)."""
        fits = limit
        with self._lock:
            for key, value in demand.items():
                if value > 0:
                    fits = min(fits, max(0, self._available.get(key, 0)) // _units(value))
        return fits

    def force_acquire(self, demand: Mapping[str, float], *, prefer: str | None = None) -> Holding:
        """Take resources even if that oversubscribes (an actor placed into a bundle)."""
        holding = Holding(self.name, dict(demand))
        self.retake(holding)
        return holding

    def retake(self, holding: Holding) -> None:
        """Take again what `holding` released, even if that oversubscribes (a task resuming
        after a blocked get)."""
        with self._lock:
            for key, value in holding.demand.items():
                if value > 0:
                    self._available[key] = self._available.get(key, 0) - _units(value)

    def release(self, holding: Holding) -> None:
        with self._lock:
            for key, value in holding.demand.items():
                if value > 0:
                    self._available[key] = self._available.get(key, 0) + _units(value)
