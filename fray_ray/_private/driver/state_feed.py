"""The state routes of a session's dashboard feed: `GET /state/<kind>` answers the session's
rows of Ray's state API, so `fray-ray list` and `fray-ray summary` can read every session on a
cluster the way the dashboard reads their sections.

A route answers `{"session": <session name>, "rows": [...]}`, one dict per row with every
column `fray_ray._private.driver.state_source` gives (Ray's, detail ones included); filters, limits
and layout are the reader's. Nodes and jobs are not here: the controller knows them for
every session.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fray_ray._private.driver import state_source

STATE_PREFIX = "/state/"

#: The kinds a feed serves, each read from the driver at the moment it is asked.
STATE_KINDS: dict[str, Callable[[Any], list[dict[str, Any]]]] = {
    "tasks": state_source.task_rows,
    "actors": state_source.actor_rows,
    "objects": state_source.object_rows,
    "placement_groups": state_source.placement_group_rows,
}

StateReader = Callable[[str], "list[dict[str, Any]] | None"]


def state_reader(driver: Any) -> StateReader:
    """A reader of `driver`'s rows by kind: None for a kind that is not served."""

    def read(kind: str) -> list[dict[str, Any]] | None:
        source = STATE_KINDS.get(kind)
        return None if source is None else source(driver)

    return read


def state_kind(path: str) -> str | None:
    """The kind a request path asks for (`/state/actors` -> "actors"), None for other paths."""
    return path[len(STATE_PREFIX):] if path.startswith(STATE_PREFIX) else None
