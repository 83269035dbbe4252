"""What a worker keeps about the actors it calls directly (`direct_calls.py`): how it reaches
each actor (`ActorWay`), its connection to each actor host's gate (`HostLink`), and each call
in flight (`DirectCall`)."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from fray_ray._private import messages
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.core.task_spec import ActorCallSpec
from fray_ray._private.messages import AskRoute, Route
from fray_ray._private.objects.serialization import SerializedValue
from fray_ray._private.stream.protocol import Connection, ConnectionClosed, RemoteError

#: How long after a "call through the driver" answer a caller asks again (doubling to the
#: longest while the answer stays the same): a routing choice, no result depends on it.
ASK_AGAIN_S = 0.05
ASK_AGAIN_LONGEST_S = 2.0
#: How long connecting to a host's gate may take before calls go through the driver.
CONNECT_TIMEOUT_S = 10.0


@dataclass(eq=False)
class DirectCall:
    """A direct call in flight: what the driver needs if it is handed back."""

    spec: ActorCallSpec
    incarnation: int
    link: HostLink
    future: concurrent.futures.Future[list[SerializedValue]]
    #: refs to the objects its arguments name, kept until it ends (the host fetches them); None once ended
    keep: list[ObjectRef[Any]] | None
    cancelled: bool = False
    #: times it may still be sent again for an exception its `retry_exceptions` names (-1: no limit)
    retries_left: int = 0
    events: bool = True  # listed by the state API
    lent: list[bytes] = field(default_factory=list)  # results of ours its arguments name (`lent_refs.py`)


@dataclass(eq=False)
class HostLink:
    """The connection to one actor host's gate."""

    address: str
    connection: Connection
    lock: threading.Lock = field(default_factory=threading.Lock)  # keeps sends in order
    in_flight: dict[bytes, DirectCall] = field(default_factory=dict)
    closed: bool = False


@dataclass(eq=False)
class ActorWay:
    """How this process reaches one actor."""

    link: HostLink | None = None
    incarnation: int = 0
    asked_at: float = float("-inf")
    ask_again_s: float = ASK_AGAIN_S
    #: this process's calls to it sent through the driver that may not have ended
    through_driver: list[bytes] = field(default_factory=list)
    max_task_retries: int = 0  # the actor's
    task_events: bool = True  # the actor's `enable_task_events`

    def ask(self, session: Connection, actor_id: bytes) -> Route | None:
        """The driver's answer to where the actor's host takes calls, if it is time to ask
        (asked again later, and less often while the answer is to call through the driver)."""
        now = time.monotonic()
        if now - self.asked_at < self.ask_again_s:
            return None
        self.asked_at = now
        try:
            route: Route = messages.call(session, AskRoute(actor_id, list(self.through_driver)))
        except (ConnectionClosed, RemoteError):
            return None
        self.through_driver = list(route.pending)
        if route.address is None:
            self.ask_again_s = min(self.ask_again_s * 2, ASK_AGAIN_LONGEST_S)
        else:
            self.ask_again_s = ASK_AGAIN_S
        return route
