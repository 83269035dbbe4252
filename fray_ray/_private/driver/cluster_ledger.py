"""The session's resource accounting across the cluster's nodes: one ledger per node.

Ray's feasibility is per node, and so is this ledger's: a demand that no node could ever hold
is infeasible, one that fits a node but finds no node with room now waits. Where a demand is
charged follows where its process runs when that node has room (the Iris controller, not the
driver, places processes), else the first node with room, so the cluster's totals stay exact.

It also remembers what each of the session's processes asked the cluster for (`ask`), so a
new process asks for its CPU only while the cluster has that much not yet asked for by this
session: otherwise it runs on CPU that the session's idle or blocked processes hold, and asks
for none, which keeps a task whose parent blocks in `get` from waiting on its own parent.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from fray_ray._private.driver.nodes import Node, node_id_for
from fray_ray._private.driver.resources import Holding, Ledger, describe_amount
from fray_ray._private.driver.tpu_nodes import SLICE_NAME_LABEL

#: Placement group strategies, as Ray names them.
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def _total(bundles: Sequence[Mapping[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for bundle in bundles:
        for key, amount in bundle.items():
            total[key] = total.get(key, 0.0) + amount
    return total


class ClusterLedger:
    """Per-node capacity and availability of the session. Thread-safe.

    Nodes come from `update()` (the cluster view); until the first update the ledger is not
    `ready` and no demand is judged infeasible. A lost node's ledger is kept (its holdings are
    released as their processes go) but its resources no longer count.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the fields below; node ledgers have their own locks
        self._ledgers: dict[str, Ledger] = {}  # by host id, in the cluster's order
        self._nodes: dict[str, Node] = {}
        #: the CPU each live process of the session asked for, and its host once known
        self._asks: dict[bytes, tuple[float, str | None]] = {}
        #: the node each starting process was aimed at (`aim`), until it is placed
        self._aims: dict[bytes, str] = {}
        self._ready = threading.Event()
        #: infeasible() answers by demand, until the nodes change (it runs for every task)
        self._judged: dict[tuple[tuple[str, float], ...], str | None] = {}
        self._generation = 0  # counts changes of the nodes, so no stale answer is kept
        self._capacity: tuple[int, dict[str, float]] | None = None  # (generation, the totals then)
        self._live_cache: tuple[int, list[Ledger]] | None = None  # (generation, the live nodes' ledgers)
        #: retires idle processes of the session until this much CPU is not asked for (set by
        #: the driver to the task scheduler's `make_room`)
        self.make_room: Callable[[float], None] | None = None

    @classmethod
    def of_one_node(cls, resources: Mapping[str, float], host_id: str = "local") -> ClusterLedger:
        """A ledger of one node with `resources` (for tests and one-host sessions)."""
        ledger = cls()
        ledger.update([Node(node_id_for(host_id), host_id, "127.0.0.1", host_id, True, dict(resources))])
        return ledger

    # ---- nodes ---------------------------------------------------------------------------

    def update(self, nodes: Sequence[Node]) -> bool:
        """Take the cluster's current nodes; returns whether anything changed."""
        changed = False
        with self._lock:
            seen = set()
            for node in nodes:
                seen.add(node.host_id)
                old = self._nodes.get(node.host_id)
                if old == node:
                    continue
                changed = True
                self._nodes[node.host_id] = node
                ledger = self._ledgers.get(node.host_id)
                if ledger is None:
                    self._ledgers[node.host_id] = Ledger(node.resources, name=node.host_id)
                else:
                    ledger.resize(node.resources)
            for host_id, node in list(self._nodes.items()):
                if host_id not in seen and node.alive:
                    self._nodes[host_id] = _lost(node)
                    changed = True
            if changed:
                self._judged.clear()
                self._generation += 1
        self._ready.set()
        return changed

    @property
    def generation(self) -> int:
        """Counts changes of the nodes (any update that changed something)."""
        return self._generation

    def wait_ready(self, timeout: float | None) -> bool:
        """Block until the first update (at most `timeout` seconds); whether it came."""
        return self._ready.wait(timeout)

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def nodes(self) -> list[Node]:
        with self._lock:
            return list(self._nodes.values())

    def slice_names(self) -> frozenset[str]:
        """The names of the TPU slices the cluster's nodes belong to."""
        with self._lock:
            return frozenset(
                name for node in self._nodes.values() if (name := node.labels.get(SLICE_NAME_LABEL))
            )

    def node(self, host_id: str | None) -> Node | None:
        with self._lock:
            return self._nodes.get(host_id) if host_id else None

    def _live(self) -> list[Ledger]:
        with self._lock:
            if self._live_cache is None or self._live_cache[0] != self._generation:
                self._live_cache = (self._generation, [self._ledgers[h] for h, n in self._nodes.items() if n.alive])
            return self._live_cache[1]  # never changed in place: a change of the nodes makes a new list

    def _ordered(self, prefer: str | None) -> list[Ledger]:
        live = self._live()
        if not prefer or len(live) < 2:
            return live
        return sorted(live, key=lambda ledger: ledger.name != prefer)

    # ---- totals --------------------------------------------------------------------------

    def capacity(self) -> dict[str, float]:
        """The sum of the live nodes' totals."""
        return dict(self._totals())

    def total(self, resource: str, default: float = 0.0) -> float:
        """The live nodes' total of one resource (`default` if none has any)."""
        return self._totals().get(resource, default)

    def _totals(self) -> dict[str, float]:
        # The scheduler reads the totals for every task: they are summed once per change of the nodes.
        with self._lock:
            cached, generation = self._capacity, self._generation
        if cached is None or cached[0] != generation:
            cached = (generation, _sum(ledger.capacity() for ledger in self._live()))
            with self._lock:
                if generation == self._generation:
                    self._capacity = cached
        return cached[1]

    def available(self) -> dict[str, float]:
        """The sum of what the live nodes have free; keys with nothing free are omitted."""
        return {k: v for k, v in _sum(ledger.available() for ledger in self._live()).items() if v > 0}

    def available_on(self, host_id: str) -> dict[str, float]:
        with self._lock:
            ledger = self._ledgers.get(host_id)
        return {} if ledger is None else ledger.available()

    # ---- feasibility ---------------------------------------------------------------------

    def infeasible(self, demand: Mapping[str, float], placement: Mapping[str, float] | None = None) -> str | None:
        """Why no live node could ever hold `demand` (and `placement`), naming the resource and
        the largest node; None when one could, while the cluster has no live node at all
        (workers may join) or has not been seen yet, or when a lost node could have held it
        (a replacement may join: a task rebuilding a lost node's object waits for one)."""
        wanted = dict(demand)
        for key, amount in (placement or {}).items():
            wanted[key] = max(wanted.get(key, 0.0), amount)
        wanted = {k: v for k, v in wanted.items() if v > 0}
        key = tuple(sorted(wanted.items()))
        with self._lock:
            if key in self._judged:
                return self._judged[key]
            generation = self._generation
        problem = self._judge(wanted)
        with self._lock:
            if generation == self._generation:
                self._judged[key] = problem
        return problem

    def _judge(self, wanted: Mapping[str, float]) -> str | None:
        live = self._live()
        if not live or any(ledger.fits_when_empty(wanted) for ledger in live):
            return None
        with self._lock:
            lost = [self._ledgers[h] for h, node in self._nodes.items() if not node.alive]
        if any(ledger.fits_when_empty(wanted) for ledger in lost):
            return None
        totals = [(ledger.name, ledger.capacity()) for ledger in live]
        for key, amount in wanted.items():
            host, have = max(((name, cap.get(key, 0.0)) for name, cap in totals), key=lambda item: item[1])
            if have < amount:
                if have == 0:
                    return f"{key} (requested {describe_amount(amount)}; no worker of the cluster has any)"
                return (
                    f"{key} (requested {describe_amount(amount)}; the largest worker, {host}, "
                    f"has {describe_amount(have)})"
                )
        names = " and ".join(f"{key} {describe_amount(amount)}" for key, amount in wanted.items())
        return f"{names} together (each fits some worker, but no single worker has them all)"

    # ---- holdings ------------------------------------------------------------------------

    def try_acquire(self, demand: Mapping[str, float], *, prefer: str | None = None) -> Holding | None:
        """Take `demand` on `prefer` if it has room, else on the first live node with room;
        None when none has (the caller waits for a release)."""
        for ledger in self._ordered(prefer):
            holding = ledger.try_acquire(demand)
            if holding is not None:
                return holding
        return None

    def force_acquire(self, demand: Mapping[str, float], *, prefer: str | None = None) -> Holding:
        """Take `demand` even if no node has room: where it fits, else on `prefer` (or the first node)."""
        holding = self.try_acquire(demand, prefer=prefer)
        if holding is not None:
            return holding
        candidates = self._ordered(prefer)
        holding = Holding(candidates[0].name if candidates else prefer or "", dict(demand))
        self.retake(holding)
        return holding

    def retake(self, holding: Holding) -> None:
        """Take again what `holding` released, on its node, even if that oversubscribes."""
        with self._lock:
            ledger = self._ledgers.get(holding.node)
        if ledger is not None:
            ledger.retake(holding)

    def release(self, holding: Holding) -> None:
        with self._lock:
            ledger = self._ledgers.get(holding.node)
        if ledger is not None:
            ledger.release(holding)

    def move(self, holding: Holding, host_id: str | None) -> Holding:
        """Charge `holding` to `host_id` (where its process turned out to run) if that node has
        room; otherwise it stays where it is."""
        if not host_id or host_id == holding.node:
            return holding
        with self._lock:
            target = self._ledgers.get(host_id)
            alive = host_id in self._nodes and self._nodes[host_id].alive
        if target is None or not alive:
            return holding
        moved = target.try_acquire(holding.demand)
        if moved is None:
            return holding
        self.release(holding)
        return moved

    def count_fits(self, demand: Mapping[str, float], limit: int) -> int:
        """How many copies of `demand` the live nodes have room for now (at most `limit`)."""
        fits = 0
        for ledger in self._live():
            fits += ledger.count_fits(demand, limit - fits)
            if fits >= limit:
                break
        return fits

    # ---- placement groups ----------------------------------------------------------------

    def bundles_infeasible(self, bundles: Sequence[Mapping[str, float]], strategy: str) -> str | None:
        """Why the bundles could never be placed with `strategy`, or None."""
        live = self._live()
        if not live:
            return None
        if strategy == "STRICT_PACK":
            problem = self.infeasible(_total(bundles))
            return None if problem is None else f"STRICT_PACK needs one worker with {problem}"
        if strategy == "STRICT_SPREAD" and len(bundles) > len(live):
            return f"STRICT_SPREAD needs one worker per bundle ({len(bundles)}); the cluster has {len(live)}"
        for bundle in bundles:
            problem = self.infeasible(bundle)
            if problem is not None:
                return f"a bundle asks for {problem}"
        return None

    def try_acquire_bundles(self, bundles: Sequence[Mapping[str, float]], strategy: str) -> list[Holding] | None:
        """One holding per bundle, placed by `strategy`, all or none."""
        if strategy in ("PACK", "STRICT_PACK"):
            for ledger in self._live():  # every bundle on one worker, when one has room
                if ledger.count_fits(_total(bundles), 1):
                    held = [ledger.try_acquire(bundle) for bundle in bundles]
                    if all(h is not None for h in held):
                        return [h for h in held if h is not None]
                    self._release_all([h for h in held if h is not None])
            if strategy == "STRICT_PACK":
                return None
        held: list[Holding] = []
        for bundle in bundles:
            used = {h.node for h in held}
            fresh = [ledger for ledger in self._live() if ledger.name not in used]
            others = [] if strategy == "STRICT_SPREAD" else [ledger for ledger in self._live() if ledger.name in used]
            order = fresh + others if strategy in ("SPREAD", "STRICT_SPREAD") else self._live()
            holding = next((h for ledger in order if (h := ledger.try_acquire(bundle)) is not None), None)
            if holding is None:
                self._release_all(held)
                return None
            held.append(holding)
        return held

    def _release_all(self, holdings: Sequence[Holding]) -> None:
        for holding in holdings:
            self.release(holding)

    # ---- what processes ask the cluster for ----------------------------------------------

    def ask(self, key: bytes, cpu: float, needs: Iterable[str] = ()) -> float:
        """Record a process about to be launched; returns the CPU it should ask the cluster
        for: `cpu` while the live nodes have that much not asked for by this session's
        processes (one node at least `cpu` of it), after `make_room` retired idle ones if
        needed; else 0. With `needs` (custom resources that pin it to the nodes declaring
        them), only those nodes count. Call it without holding other locks (`make_room` takes
        the scheduler's)."""
        needs = tuple(needs)
        fits = cpu <= 0 or self._room_for(cpu, needs)
        if not fits and self.make_room is not None:
            self.make_room(cpu)
            fits = self._room_for(cpu, needs)
        with self._lock:
            self._asks[key] = (cpu if fits else 0.0, None)
        return cpu if fits else 0.0

    def _room_for(self, cpu: float, needs: tuple[str, ...] = ()) -> bool:
        with self._lock:
            if not self._nodes:
                return True  # not seen yet: ask for what it holds
            asked: dict[str | None, float] = {}
            for amount, host in self._asks.values():
                asked[host] = asked.get(host, 0.0) + amount
            rooms = [n.resources.get("CPU", 0.0) - asked.get(h, 0.0) for h, n in self._nodes.items()
                     if n.alive and all(n.resources.get(name, 0.0) > 0 for name in needs)]
            return bool(rooms) and max(rooms) >= cpu and sum(max(r, 0.0) for r in rooms) - asked.get(None, 0.0) >= cpu

    def asked(self, key: bytes) -> float:
        """The CPU the process `key` asked the cluster for (0 if unknown)."""
        with self._lock:
            return self._asks.get(key, (0.0, None))[0]

    def aim(self, key: bytes, demand: Mapping[str, float], needs: Iterable[str]) -> Node | None:
        """A live node having `needs` where `demand` fits now and no other starting process is
        aimed, for the process `key` to be started on (None if there is none): processes that
        need one host's own resources (a TPU slice's host) go where a task can use them."""
        needs = tuple(needs)
        with self._lock:
            aimed = set(self._aims.values())
            for host_id, node in self._nodes.items():
                if (node.alive and host_id not in aimed and all(node.resources.get(n, 0.0) > 0 for n in needs)
                        and self._ledgers[host_id].count_fits(demand, 1)):
                    self._aims[key] = host_id
                    return node
        return None

    def placed(self, key: bytes, host_id: str | None) -> None:
        """The process `key` runs on `host_id`."""
        with self._lock:
            self._aims.pop(key, None)
            if key in self._asks:
                self._asks[key] = (self._asks[key][0], host_id or None)

    def transfer_ask(self, old_key: bytes, new_key: bytes) -> None:
        """The process `old_key` now runs as `new_key` (an idle executor lent to an actor):
        what it asked the cluster for is counted under the new key instead."""
        with self._lock:
            ask = self._asks.pop(old_key, None)
            if ask is not None:
                self._asks[new_key] = ask

    def forget(self, key: bytes) -> None:
        """The process `key` is gone (or never started)."""
        with self._lock:
            self._asks.pop(key, None)
            self._aims.pop(key, None)


def _sum(parts: Iterable[Mapping[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for part in parts:
        for key, amount in part.items():
            total[key] = total.get(key, 0.0) + amount
    return total


def _lost(node: Node) -> Node:
    return dataclasses.replace(node, alive=False)
