"""What the driver knows of each actor: its lifecycle state and its record."""

from __future__ import annotations

import collections
import enum
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from fray_ray._private.core.task_spec import ActorCallSpec, ActorCreationSpec
from fray_ray._private.driver.remote_actors import RemoteActor
from fray_ray._private.objects.serialization import SerializedValue
from fray_ray._private.stream.protocol import Connection


class ActorState(enum.Enum):
    STARTING = "starting"  # launched, host not connected yet
    ALIVE = "alive"
    RESTARTING = "restarting"  # its process died; the next one is starting or running __init__
    DEAD = "dead"


@dataclass(eq=False)
class ActorRecord:
    spec: ActorCreationSpec
    state: ActorState = ActorState.STARTING
    connection: Connection | None = None
    group: Any = None  # the Fray ActorGroup
    queued: list[ActorCallSpec] = field(default_factory=list)
    in_flight: dict[bytes, ActorCallSpec] = field(default_factory=dict)
    #: in-flight calls sent beyond `max_concurrency`, oldest first: as calls end, these start
    #: (as far as the driver can tell), one per ended call
    waiting: collections.deque[bytes] = field(default_factory=collections.deque)
    restarts: int = 0
    death: SerializedValue | None = None
    pid: int | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    killed: bool = False
    #: a named actor another driver created: calls go over ActorService, in order
    remote: RemoteActor | None = None
    placement_group: str | None = None
    #: held while sending to the host, so calls leave in the order they were accepted
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    #: live handles (in the driver, in workers, inside stored values)
    handles: int = 0
    out_of_scope: bool = False
    args_released: bool = False
    #: the host's call gate for this driver's workers, with the connection of the host that opened it
    gate: tuple[Connection, dict[str, str]] | None = None
    host: str | None = None  # the cluster host its process runs on, once it said hello
    created: float = field(default_factory=time.time)  # wall-clock seconds
    ended: float | None = None  # when it died for good
