"""Which new actors may start in an idle executor's process instead of an Iris job of their own.

Ray places a new actor in an idle worker when one is running; fray_ray does the same with its
warm executors. An executor can take an actor whose process would be launched exactly like the
executor's own: same runtime env (code, packages, env vars), no GPU, memory limit, custom
resource or accelerator, and at most the CPU the executor's job asked the cluster for. The actor
must also need nothing an executor's job cannot give it: restarts (Iris reruns an actor's job;
an executor's job is never rerun), a name other drivers look up (named actors are jobs named
after them), a life beyond the session (detached actors are root jobs), a placement group
bundle, a TPU slice. Everything else goes to a job of its own, as before.

A lent executor hosts that one actor and nothing else: it never runs tasks again, and when the
actor ends, its process and its job end too. `FRAY_RAY_ACTORS_IN_IDLE_WORKERS=0` turns lending off.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from fray_ray._private.core.task_spec import ActorCreationSpec, PoolKey
from fray_ray._private.stream.protocol import Connection

#: Set to 0 to start every actor in a job of its own.
SWITCH = "FRAY_RAY_ACTORS_IN_IDLE_WORKERS"


@dataclass(frozen=True)
class LentWorker:
    """An idle executor handed to an actor: the scheduler has forgotten it."""

    executor_id: bytes
    connection: Connection
    #: the executor's Fray JobHandle, which becomes the actor's job
    job: Any
    host: str | None
    pid: int | None


def lending_enabled() -> bool:
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def may_use_idle_worker(spec: ActorCreationSpec) -> bool:
    """True when nothing about this actor needs an Iris job of its own."""
    shape = spec.shape
    return (
        spec.max_restarts == 0
        and not spec.name
        and not spec.detached
        and spec.gang is None
        and getattr(spec.scheduling_strategy, "placement_group", None) is None
        and spec.accelerator is None
        and shape.gpu == 0
        and shape.memory == 0
        and not shape.custom
    )


def pool_can_host(pool: PoolKey, spec: ActorCreationSpec) -> bool:
    """True when an executor of `pool` runs in the process `spec`'s own job would start."""
    return (
        not pool.max_calls
        and pool.accelerator is None
        and pool.shape.gpu == 0
        and pool.shape.memory == 0
        and not pool.shape.custom
        and spec.shape.cpu <= pool.shape.cpu
        and pool.runtime_env == spec.runtime_env
        and dict(pool.env_vars) == dict(spec.env_vars)
    )
