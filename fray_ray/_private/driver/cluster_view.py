"""The cluster as the driver sees it: its hosts, read through the Fray client in one place.

One thread asks the client for the cluster's hosts (`list_hosts`, Iris's ListWorkers) as soon
as the session starts (so `init` does not wait for it), then again with backoff: every second
while the cluster changes or work waits for room, doubling to every 30 s while nothing
changes. Readers that must be current (`cluster_resources()`, a demand about to be judged
infeasible) refresh on demand when the view is older than a second. Each new view goes to the
session's `ClusterLedger`, and `on_change` tells the schedulers to look again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from fray_ray._private.driver.cluster_ledger import ClusterLedger
from fray_ray._private.driver.nodes import Node, node_id_for, nodes_from_hosts

logger = logging.getLogger(__name__)

#: Polling interval while the cluster changes, and the most it backs off to while it does not.
FIRST_INTERVAL_S = 1.0
MAX_INTERVAL_S = 30.0
#: A view younger than this is fresh enough for readers that refresh on demand.
FRESH_S = 1.0
#: How long a demand waits for the first view before it is judged without one.
FIRST_VIEW_WAIT_S = 30.0


class ClusterView:
    """Keeps the session's `ClusterLedger` in step with the cluster's hosts.

    `start()` starts the polling thread, `stop()` stops and joins it. `head_host` is the host
    the driver runs on (None: not one of the cluster's); the head node (that one, else the
    first live host) also carries `head_resources` (the driver's object store).
    """

    def __init__(
        self,
        client: Any,
        ledger: ClusterLedger,
        *,
        head_host: str | None,
        head_resources: Mapping[str, float],
        on_change: Callable[[], None],
        fallback: Callable[[], Any] | None = None,
    ) -> None:
        self._client = client
        self._ledger = ledger
        self._head_host = head_host
        self._head_resources = dict(head_resources)
        self._on_change = on_change
        self._fallback = fallback  # a HostInfo to size the session by when the cluster cannot be asked
        self._refresh_lock = threading.Lock()  # one ListWorkers at a time
        self._state_lock = threading.Lock()  # guards the fields below
        self._fetched_at = 0.0  # monotonic time of the last successful refresh
        self._interval = FIRST_INTERVAL_S
        self._failed = False  # the last refresh failed (warned once until one succeeds)
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cluster-view", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)  # a refresh in flight ends within the RPC timeout anyway

    def _run(self) -> None:
        while not self._stopped.is_set():
            changed = self.refresh()
            with self._state_lock:
                self._interval = FIRST_INTERVAL_S if changed else min(self._interval * 2, MAX_INTERVAL_S)
                interval = self._interval
            self._wake.wait(interval)
            self._wake.clear()

    def nudge(self) -> None:
        """Work waits for room: poll again soon, and every second until the cluster changes."""
        with self._state_lock:
            self._interval = FIRST_INTERVAL_S
        self._wake.set()

    # ---- reading the cluster -------------------------------------------------------------

    def refresh(self, max_age: float = 0.0) -> bool:
        """Ask the cluster for its hosts unless the view is younger than `max_age` seconds;
        returns whether the nodes changed. Blocks for one controller call (or while another
        refresh runs). A failure is logged and leaves the last view in place."""
        with self._refresh_lock:
            with self._state_lock:
                if max_age and time.monotonic() - self._fetched_at < max_age:
                    return False
            try:
                hosts = self._client.list_hosts()
            except Exception as exc:  # noqa: BLE001 - the cluster may be briefly unreachable
                return self._refresh_failed(exc)
            with self._state_lock:
                self._fetched_at = time.monotonic()
                recovered, self._failed = self._failed, False
            if recovered:
                logger.warning("the cluster's workers can be listed again")
            nodes = nodes_from_hosts(list(hosts), head_host=self._head_host, head_resources=self._head_resources)
            changed = self._ledger.update(nodes)
        if changed:
            self._notify()
        return changed

    def _refresh_failed(self, error: Exception) -> bool:
        with self._state_lock:
            first, self._failed = not self._failed, True
        if first:
            logger.warning("cannot list the cluster's workers (%s); will keep trying", error)
        if self._ledger.ready or self._fallback is None:
            return False
        # Never seen the cluster: size the session from this machine rather than run nothing.
        host = self._fallback()
        logger.warning("sizing the session from this machine (%g CPUs) until the cluster's workers can be listed",
                       host.cpu)
        self._ledger.update(nodes_from_hosts([host], head_host=host.host_id, head_resources=self._head_resources))
        self._notify()
        return True

    def _notify(self) -> None:
        try:
            self._on_change()
        except Exception:  # noqa: BLE001 - a failing listener must not stop the view
            logger.exception("reacting to a change of the cluster's nodes failed")

    def nodes(self) -> list[Node]:
        """Every node the cluster has reported (lost ones with alive=False), fresh to a second."""
        self._first_view()
        self.refresh(max_age=FRESH_S)
        return self._ledger.nodes()

    def current(self) -> ClusterLedger:
        """The ledger, refreshed if older than a second (for cluster_resources and friends)."""
        self._first_view()
        self.refresh(max_age=FRESH_S)
        return self._ledger

    def _first_view(self) -> None:
        if not self._ledger.ready:
            self._ledger.wait_ready(FIRST_VIEW_WAIT_S)

    # ---- judging demands -----------------------------------------------------------------

    def infeasible(self, demand: Mapping[str, float], placement: Mapping[str, float] | None = None) -> str | None:
        """Why no worker could ever hold `demand` (see `ClusterLedger.infeasible`), judged on
        a view at most a second old: a worker that just joined counts."""
        self._first_view()
        problem = self._ledger.infeasible(demand, placement)
        if problem is not None and self.refresh(max_age=FRESH_S):
            problem = self._ledger.infeasible(demand, placement)
        return problem

    def judge(self, strategy: Any, demand: Mapping[str, float], driver_node: bytes) -> str | None:
        """Why a task with this scheduling strategy and demand can never run, or None."""
        problem = self.infeasible(demand)
        if problem is not None or type(strategy).__name__ != "NodeAffinitySchedulingStrategy":
            return problem
        if getattr(strategy, "soft", True):
            return None  # soft affinity runs anywhere when it must
        return self.affinity_problem(str(getattr(strategy, "node_id", "")), driver_node)

    def affinity_problem(self, node_id: str, driver_node: bytes) -> str | None:
        """Why work cannot be pinned to `node_id` (hard node affinity), or None.

        Iris places jobs by resources and attributes, never on a worker named by the caller, so
        fray_ray can honour hard affinity only where every process runs on that one node.
        """
        live = [n for n in self._ledger.nodes() if n.alive]
        if node_id == driver_node.hex() and len(live) <= 1:
            return None
        if len(live) == 1 and live[0].node_id_hex == node_id:
            return None
        if any(n.node_id_hex == node_id for n in live) or node_id == driver_node.hex():
            return (
                f"node {node_id} (hard node affinity): fray_ray cannot pin work to one worker of a cluster with "
                f"{len(live)} workers (Iris places jobs by resources, not by worker); use soft=True"
            )
        return f"node {node_id} (hard node affinity), which is not part of this cluster"


def driver_node_id(head_host: str | None) -> bytes | None:
    """The node id of the host the driver runs on, or None when it runs on none of them."""
    return node_id_for(head_host) if head_host else None
