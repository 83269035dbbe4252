"""What actors hold for their lifetime, and the actors that wait for room to start.

As in Ray, an actor holds its `num_cpus`, `num_gpus`, `memory` and custom `resources` from its
creation until it dies, on one node. An actor that no node could ever hold is refused
(`problem`); one that fits a node but finds none with room now waits, unlaunched, in creation
order, and starts when a release (another actor killed, a task done) or a new worker makes
room. An actor in a placement group bundle draws from the bundle and never waits here.

Lock order: the actor manager's lock, then this one, then the ledgers'. Launch callbacks run
after this lock is released.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fray_ray._private.core.task_spec import ActorCreationSpec
from fray_ray._private.driver.cluster_ledger import ClusterLedger
from fray_ray._private.driver.nodes import Node, placement_needs
from fray_ray._private.driver.resources import Holding, Ledger
from fray_ray._private.driver.tpu_identity import tpu_identity
from fray_ray._private.driver.tpu_nodes import host_pins, needs_tpu_host

if TYPE_CHECKING:
    from fray_ray._private.driver.cluster_view import ClusterView

#: Starts an actor's process, asking the cluster for this much CPU.
Launch = Callable[[float], None]
#: Starts an actor in a process already running (an idle executor); False if none was free.
Lend = Callable[[], bool]


@dataclass(eq=False)
class _Waiting:
    spec: ActorCreationSpec
    launch: Launch
    lend: Lend | None


class ActorReservations:
    """Lifetime holdings of one session's actors, and its queue of actors waiting for room."""

    def __init__(self, ledger: ClusterLedger, view: ClusterView | None = None) -> None:
        self._ledger = ledger
        self._view = view
        self._lock = threading.Lock()  # guards the two fields below
        self._held: dict[bytes, tuple[Ledger | ClusterLedger, Holding]] = {}
        self._waiting: dict[bytes, _Waiting] = {}  # in creation order

    def problem(self, spec: ActorCreationSpec) -> str | None:
        """Why no node could ever hold the actor (naming the resource and the largest worker)."""
        demand = spec.shape.as_dict()
        placement = spec.placement.as_dict() if spec.placement is not None else None
        if self._view is not None:
            return self._view.infeasible(demand, placement)
        return self._ledger.infeasible(demand, placement)

    def reserve(self, spec: ActorCreationSpec, launch: Launch, *, bundle: Ledger | None = None,
                in_group: bool = False, lend: Lend | None = None) -> bool:
        """Take what the actor holds and start it, or queue it until there is room; returns
        whether it started now. It starts in a running process if `lend()` finds one, else
        `launch` starts one. In a placement group (`in_group`) it draws from its bundle (or,
        while the group is not placed, from the session) even beyond what is free."""
        demand = spec.shape.as_dict()
        if in_group:
            source: Ledger | ClusterLedger = bundle if bundle is not None else self._ledger
            holding: Holding | None = source.force_acquire(demand)
        else:
            source = self._ledger
            with self._lock:
                holding = self._ledger.try_acquire(demand)
                if holding is None:
                    self._waiting[spec.actor_id] = _Waiting(spec, launch, lend)
            if holding is None:
                if self._view is not None:
                    self._view.nudge()  # a worker may be joining: look at the cluster more often
                return False
        assert holding is not None
        with self._lock:
            self._held[spec.actor_id] = (source, holding)
        self._start(spec, launch, lend)
        return True

    def _start(self, spec: ActorCreationSpec, launch: Launch, lend: Lend | None) -> None:
        # Lending comes first: asking for a new process may retire idle executors to make room.
        if lend is None or not lend():
            launch(self._ledger.ask(spec.actor_id, spec.shape.cpu, placement_needs(spec.shape.custom)))

    def adopt_process(self, actor_id: bytes, executor_id: bytes) -> None:
        """The actor runs in executor `executor_id`'s process: what that process asked the
        cluster for is the actor's now, and goes when the actor does."""
        self._ledger.transfer_ask(executor_id, actor_id)

    def retry(self) -> None:
        """Start the waiting actors that fit now, in creation order (one that does not fit does
        not keep a later, smaller one waiting, as Ray's scheduler does not)."""
        if not self._waiting:  # the common case, checked without the lock (it runs for every task)
            return
        started: list[_Waiting] = []
        with self._lock:
            for actor_id, waiting in list(self._waiting.items()):
                holding = self._ledger.try_acquire(waiting.spec.shape.as_dict())
                if holding is not None:
                    del self._waiting[actor_id]
                    self._held[actor_id] = (self._ledger, holding)
                    started.append(waiting)
        for waiting in started:
            self._start(waiting.spec, waiting.launch, waiting.lend)

    def is_waiting(self, actor_id: bytes) -> bool:
        with self._lock:
            return actor_id in self._waiting

    def _tpu_host(self, actor_id: bytes) -> Node | None:
        """The TPU host the actor's holding is on, when it holds TPU resources (chips, a
        slice's name or head); None otherwise."""
        with self._lock:
            held = self._held.get(actor_id)
        if held is None or held[0] is not self._ledger:
            return None
        node = self._ledger.node(held[1].node)
        custom = [(name, amount) for name, amount in held[1].demand.items()]
        if node is None or not needs_tpu_host(custom, self._ledger.slice_names()):
            return None
        return node

    def pins(self, actor_id: bytes) -> tuple[tuple[str, str | int], ...]:
        """The worker attribute values naming the TPU host the actor's holding is on, when it
        holds a host's own resources (a slice's name or head): its process must start there."""
        node = self._tpu_host(actor_id)
        return host_pins(node.labels) if node is not None else ()

    def identity(self, actor_id: bytes) -> dict[str, str]:
        """The `TPU_*` variables of the TPU host the actor's process starts on (see `pins`),
        for it to adopt where the host does not set them."""
        node = self._tpu_host(actor_id)
        return tpu_identity(node, self._ledger.nodes()) if node is not None else {}

    def placed(self, actor_id: bytes, host_id: str | None) -> None:
        """The actor's process runs on `host_id`: charge its holding there if that node has room."""
        self._ledger.placed(actor_id, host_id)
        with self._lock:
            held = self._held.get(actor_id)
            if held is not None and held[0] is self._ledger:
                self._held[actor_id] = (self._ledger, self._ledger.move(held[1], host_id))

    def release(self, actor_id: bytes) -> bool:
        """The actor is dead: give back what it held (or stop waiting); whether it held anything."""
        with self._lock:
            self._waiting.pop(actor_id, None)
            held = self._held.pop(actor_id, None)
        self._ledger.forget(actor_id)
        if held is None:
            return False
        held[0].release(held[1])
        return True

    def close(self) -> None:
        with self._lock:
            self._waiting.clear()
            self._held.clear()
