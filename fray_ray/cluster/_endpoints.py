"""The endpoint registry: names → addresses, each tied to the task attempt that registered it.

An endpoint lives until its attempt ends, its job finishes, it is unregistered, or its lease
runs out without renewal. Re-registering with the same endpoint id replaces the entry. Owned
by `ClusterState` and used only under the controller's lock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EndpointRecord:
    """One registered endpoint."""

    endpoint_id: str
    name: str
    address: str
    task_id: str
    attempt_uid: int
    job_id: str
    expires_at: float  # monotonic
    metadata: Mapping[str, str] = field(default_factory=dict)
    access: int = 0


class EndpointRegistry:
    """Endpoints indexed by id, by exact name and by owning attempt."""

    def __init__(self) -> None:
        self._by_id: dict[str, EndpointRecord] = {}
        self._by_name: dict[str, set[str]] = defaultdict(set)
        self._by_attempt: dict[int, set[str]] = defaultdict(set)
        self._order: dict[str, int] = {}  # endpoint id -> registration sequence, for stable listing
        self._next = 0

    def __len__(self) -> int:
        return len(self._by_id)

    def put(self, record: EndpointRecord) -> None:
        """Add `record`, replacing any endpoint with the same id."""
        self.remove(record.endpoint_id)
        self._by_id[record.endpoint_id] = record
        self._by_name[record.name].add(record.endpoint_id)
        self._by_attempt[record.attempt_uid].add(record.endpoint_id)
        self._order[record.endpoint_id] = self._next
        self._next += 1

    def remove(self, endpoint_id: str) -> bool:
        record = self._by_id.pop(endpoint_id, None)
        if record is None:
            return False
        self._discard(self._by_name, record.name, endpoint_id)
        self._discard(self._by_attempt, record.attempt_uid, endpoint_id)
        self._order.pop(endpoint_id, None)
        return True

    @staticmethod
    def _discard(index: dict, key: object, endpoint_id: str) -> None:
        ids = index.get(key)
        if ids is not None:
            ids.discard(endpoint_id)
            if not ids:
                del index[key]

    def remove_attempt(self, attempt_uid: int) -> None:
        for endpoint_id in list(self._by_attempt.get(attempt_uid, ())):
            self.remove(endpoint_id)

    def remove_attempts(self, attempt_uids: Iterable[int]) -> None:
        for uid in attempt_uids:
            self.remove_attempt(uid)

    def find(
        self,
        prefix: str,
        *,
        exact: bool,
        task_ids: Iterable[str] = (),
        now: float,
        visible: Callable[[EndpointRecord], bool] = lambda record: True,
    ) -> list[EndpointRecord]:
        """Live endpoints named `prefix` (exact) or starting with it, oldest registration first."""
        if exact:
            ids: Iterable[str] = list(self._by_name.get(prefix, ()))
        else:
            ids = [i for i, r in self._by_id.items() if r.name.startswith(prefix)]
        wanted_tasks = set(task_ids)
        expired = []
        found = []
        for endpoint_id in ids:
            record = self._by_id[endpoint_id]
            if record.expires_at <= now:
                expired.append(endpoint_id)
                continue
            if wanted_tasks and record.task_id not in wanted_tasks:
                continue
            if visible(record):
                found.append(record)
        for endpoint_id in expired:
            self.remove(endpoint_id)
        found.sort(key=lambda record: self._order[record.endpoint_id])
        return found
