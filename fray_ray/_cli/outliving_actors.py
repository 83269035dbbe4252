"""Actors that outlive their drivers, for `fray-ray list actors` and `fray-ray summary actors`.

A session lists its actors while its driver runs (its feed, `state_list.gather`). A detached
actor runs on after its driver exits, so its row comes from the actor itself: every named
actor registers an Iris endpoint (`.../rayactor.<namespace>.<name>-0`), and its host answers
`state_row` over ActorService. Rows of actors a session already listed are left out; an actor
that does not answer in time (ending, restarting) is not listed.
"""

from __future__ import annotations

import concurrent.futures
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fray_ray.iris.controller_client import ControllerClient
    from fray_ray.iris.types import EndpointInfo

__all__ = ["outliving_actor_rows"]

#: The last segment of a named actor's endpoint: `rayactor.<namespace>.<name>-<replica>`.
_NAMED_ACTOR = re.compile(r"^rayactor\.(?P<group>.+)-0$")
_THREADS = 8


class _Known:
    """Resolves the one endpoint already listed: no second trip to the controller."""

    def __init__(self, endpoint: EndpointInfo) -> None:
        self._endpoint = endpoint

    def resolve(self, name: str) -> list[EndpointInfo]:
        return [self._endpoint] if name == self._endpoint.name else []


def outliving_actor_rows(
    controller: ControllerClient, token: str | None, listed: set[str], timeout: float
) -> list[dict[str, Any]]:
    """Rows of live named actors whose actor ids are not in `listed` (those no session listed),
    asked of their hosts at once; each answers within `timeout` or is left out."""
    endpoints = [e for e in controller.list_endpoints("", exact=False) if _NAMED_ACTOR.match(e.name.rpartition("/")[2])]
    if not endpoints:
        return []
    rows = []
    with concurrent.futures.ThreadPoolExecutor(min(len(endpoints), _THREADS), thread_name_prefix="actor-row") as pool:
        for row in pool.map(lambda e: _ask(e, token, timeout), endpoints):
            if row is not None and row.get("actor_id") not in listed:
                rows.append(row)
    return rows


def _ask(endpoint: EndpointInfo, token: str | None, timeout: float) -> dict[str, Any] | None:
    from fray_ray._private.driver.nodes import node_id_for
    from fray_ray.iris.actor_client import ActorClient

    try:
        with ActorClient(_Known(endpoint), endpoint.name, call_timeout=timeout, max_call_attempts=1, token=token) as actor:
            row = actor.call("state_row")
    except Exception:  # noqa: BLE001 - gone, ending, or not a Ray actor: not listed
        return None
    if not isinstance(row, dict) or not isinstance(row.get("actor_id"), str):
        return None
    host = row.pop("host", None)
    group = _NAMED_ACTOR.match(endpoint.name.rpartition("/")[2])
    return {
        "session": None,  # its driver's session has ended (or never listed it)
        **row,
        "node_id": node_id_for(host).hex() if isinstance(host, str) and host else None,
        "ray_namespace": _namespace(group.group("group") if group else "", str(row.get("name") or "")),
    }


def _namespace(group: str, name: str) -> str | None:
    """The namespace in `<namespace>.<name>` (as the driver spells the group), when the name
    is written there whole; None when the group name was shortened."""
    spelled = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    return group[: -len(spelled) - 1] if name and group.endswith("." + spelled) else None
