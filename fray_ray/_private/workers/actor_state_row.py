"""A hosted actor's own row for the state API: how `fray-ray list actors` finds an actor whose
driver is gone.

The CLI lists actors from every session's feed, and a session's feed ends with its driver. A
detached actor lives on, so the CLI also asks the hosts of named actors for their rows (over
ActorService, as another driver would call them) and lists those no session listed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from fray_ray._private.objects.ids import JOB_ID_HEX
from fray_ray.exceptions import ActorDeathInfo, ActorDeathReason, ActorDiedError
from fray_ray.fray.job_info import get_job_info


class ActorStateRow:
    """`state_row()`, a base of `RayActorHost`, reading the host's state below."""

    _actor_id: bytes
    _class_name: str
    _given_name: str | None
    _detached: bool
    _resources: Mapping[str, float]
    _restarted: bool
    _created: threading.Event
    _creation_error: BaseException | None
    _killed: threading.Event

    def state_row(self) -> dict[str, Any]:
        """Its row as Ray's `list_actors` gives it, while it lives (ALIVE once built, else
        PENDING_CREATION). `host` names the Iris worker it runs on; the lister turns it into
        a node id. ActorDiedError once killed or when its creation failed."""
        if self._killed.is_set() or self._creation_error is not None:
            reason = ActorDeathReason.KILLED if self._killed.is_set() else ActorDeathReason.PROCESS_DIED
            raise ActorDiedError(ActorDeathInfo(reason, class_name=self._class_name))
        info = get_job_info()
        return {
            "actor_id": self._actor_id.hex(),
            "class_name": self._class_name,
            "state": "ALIVE" if self._created.is_set() else "PENDING_CREATION",
            "job_id": JOB_ID_HEX,
            "name": self._given_name or "",
            "host": info.worker_id if info is not None else None,
            "pid": os.getpid(),
            "serialized_runtime_env": None,
            "required_resources": dict(self._resources),
            "death_cause": None,
            "is_detached": self._detached,
            "placement_group_id": getattr(self, "_placement_group", None),  # set once created
            "repr_name": "",
            "num_restarts": 1 if self._restarted else 0,
            "num_restarts_due_to_lineage_reconstruction": 0,
            "num_restarts_due_to_node_preemption": 0,
            "call_site": None,
            "label_selector": None,
            "fallback_strategy": None,
        }
