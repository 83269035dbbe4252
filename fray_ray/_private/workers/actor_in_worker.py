"""An idle executor's process becoming an actor's host (Ray places actors in idle workers too).

The driver lends an idle executor to a new actor by sending it `HostActor`. The executor stops
taking tasks, closes its executor session and, in the same process, serves a `RayActorHost`
through the Fray client's `host_actor`: the actor is registered as `<the executor's job>/<group>-0`
in Iris's endpoint registry and greets the session as the actor's host, exactly as a host in an
actor job of its own does. From then on the process belongs to that actor alone: when the actor
ends, the process exits and its job ends with it; it never runs tasks again.
"""

from __future__ import annotations

import sys
import threading
import traceback
from typing import Any, NoReturn

from fray_ray._private.messages import HostActor
from fray_ray._private.workers.actor_host import RayActorHost
from fray_ray.fray import ActorConfig, host_actor
from fray_ray.fray._iris_actors import end_replica_process

#: Exit status of a lent worker whose actor could not be hosted (as an actor job's replica).
FAILED_TO_HOST = 1


class _LentWorkerHost(RayActorHost):
    """A `RayActorHost` that tells the lent executor's main thread when the actor has stopped."""

    def __init__(self, stopped: threading.Event, *args: Any) -> None:
        self._stopped_event = stopped
        super().__init__(*args)

    def _stop(self) -> None:
        super()._stop()
        self._stopped_event.set()


def host_lent_actor(session_address: str, token: str, hosting: HostActor) -> NoReturn:
    """Serve actor `hosting.actor` from this process until it stops, then end the process.

    Never returns: exits 0 once the actor stopped on purpose (`exit_actor`, or the driver's
    `die`, which exits on its own), and 1 when it could not be hosted at all."""
    stopped = threading.Event()
    try:
        hosted = host_actor(
            _LentWorkerHost, stopped, session_address, token, hosting.actor,
            name=hosting.group, actor_config=ActorConfig(max_concurrency=1_000_000),
        )
    except BaseException:  # noqa: BLE001 - the driver learns of it when the job ends
        traceback.print_exc(file=sys.stderr)
        end_replica_process(FAILED_TO_HOST)
    stopped.wait()
    hosted.shutdown()
    end_replica_process(0)
