"""Logical resources, as Ray counts them: a ledger of what running tasks and actors hold.

Ray's resources are logical: `num_cpus=1` reserves one CPU slot in the accounting, not a
core. The ledger is that accounting for the whole session. It has its own lock, taken after
the scheduler's when both are held.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

#: Resources are counted in units of 1/10000, as Ray does, to keep fractions exact.
_PRECISION = 10000


def _units(value: float) -> int:
    return round(value * _PRECISION)


class Ledger:
    """Capacity and availability of each resource. Thread-safe."""

    def __init__(self, capacity: Mapping[str, float]) -> None:
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

    def infeasible(self, demand: Mapping[str, float]) -> str | None:
        """The first resource the demand asks more of than the whole session has, or None."""
        with self._lock:
            for key, amount in demand.items():
                if amount > 0 and _units(amount) > self._capacity.get(key, 0):
                    have = self._capacity.get(key, 0) / _PRECISION
                    return f"{key} (requested {amount:g}, the cluster has {have:g})"
        return None

    def try_acquire(self, demand: Mapping[str, float]) -> bool:
        needed = {k: _units(v) for k, v in demand.items() if v > 0}
        with self._lock:
            if any(self._available.get(k, 0) < v for k, v in needed.items()):
                return False
            for key, value in needed.items():
                self._available[key] -= value
        return True

    def count_fits(self, demand: Mapping[str, float], limit: int) -> int:
        """How many copies of `demand` fit in what is free now (at most `limit`)."""
        fits = limit
        with self._lock:
            for key, value in demand.items():
                if value > 0:
                    fits = min(fits, max(0, self._available.get(key, 0)) // _units(value))
        return fits

    def force_acquire(self, demand: Mapping[str, float]) -> None:
        """Take resources even if that oversubscribes (a task resuming after a blocked get)."""
        with self._lock:
            for key, value in demand.items():
                if value > 0:
                    self._available[key] = self._available.get(key, 0) - _units(value)

    def release(self, demand: Mapping[str, float]) -> None:
        with self._lock:
            for key, value in demand.items():
                if value > 0:
                    self._available[key] = self._available.get(key, 0) + _units(value)
