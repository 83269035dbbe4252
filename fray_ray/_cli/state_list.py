"""`fray-ray list` and `fray-ray summary`: Ray's state API from the command line, for every
Ray session on a cluster, as `ray list` and `ray summary` do.

Tasks, actors, objects and placement groups live in the sessions' drivers: the controller
lists the sessions' dashboard feeds (Iris endpoints named `<job>/fray-ray-dashboard`) and each
feed answers `GET /state/<kind>` with its rows (see `fray_ray._private.driver.state_feed`); a session
that does not answer in time is reported, not fatal. Nodes and jobs come from the controller
itself. Rows keep Ray's columns plus `session`; filters are Ray's (`key=value`, `key!=value`,
strings compared case-insensitively, only filterable columns); the table never cuts a cell.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fray_ray.iris.controller_client import ControllerClient
    from fray_ray.util.state.common import StateSchema

#: Ray's default for `ray list --limit` (the state API's DEFAULT_LIMIT).
DEFAULT_LIMIT = 100

FEED_SUFFIX = "/fray-ray-dashboard"
FETCH_TIMEOUT_S = 5.0
MAX_STATE_BYTES = 64 << 20
FETCH_THREADS = 8


@dataclass(frozen=True)
class Kind:
    """What one `fray-ray list <kind>` lists: where its rows come from and how they are keyed."""

    feed_kind: str | None  # the feed's /state/<kind>; None: read from the controller
    key: str  # the id column rows are sorted by
    schema_name: str | None  # the record of `fray_ray.util.state.common` (loaded when used)
    #: for kinds without a schema: the filterable columns and the table's columns
    columns: tuple[str, ...] = ()

    @property
    def schema(self) -> type[StateSchema] | None:
        from fray_ray.util.state import common

        return getattr(common, self.schema_name) if self.schema_name else None


_JOB_COLUMNS = ("job_id", "parent_job_id", "state", "task_count", "completed_count", "failure_count",
                "preemption_count", "exit_code", "error", "pending_reason")

KINDS: dict[str, Kind] = {
    "actors": Kind("actors", "actor_id", "ActorState"),
    "tasks": Kind("tasks", "task_id", "TaskState"),
    "objects": Kind("objects", "object_id", "ObjectState"),
    "placement-groups": Kind("placement_groups", "placement_group_id", "PlacementGroupState"),
    "nodes": Kind(None, "node_id", "NodeState"),
    "jobs": Kind(None, "job_id", None, _JOB_COLUMNS),
}


class UsageError(ValueError):
    """A bad option (a malformed filter, an unknown column): exit status 2."""


Filter = tuple[str, str, str]


def parse_filters(kind_name: str, expressions: Sequence[str]) -> list[Filter]:
    """`key=value` / `key!=value` strings as (column, predicate, value); UsageError for
    anything else or a column that cannot be filtered on."""
    kind = KINDS[kind_name]
    allowed = filterable(kind)
    filters = []
    for expression in expressions:
        if "!=" in expression:
            key, _, value = expression.partition("!=")
            predicate = "!="
        elif "=" in expression:
            key, _, value = expression.partition("=")
            predicate = "="
        else:
            raise UsageError(f"bad filter {expression!r}: write key=value or key!=value, e.g. --filter state=ALIVE")
        key = key.strip().lower()
        if key not in allowed:
            raise UsageError(f"bad filter {expression!r}: {kind_name} cannot be filtered on {key!r}; "
                             f"filterable columns: {', '.join(sorted(allowed))}")
        filters.append((key, predicate, value.strip()))
    return filters


def filterable(kind: Kind) -> set[str]:
    if kind.schema is not None:
        columns = kind.schema.filterable_columns()
    else:
        columns = set(kind.columns)
    return columns | ({"session"} if kind.feed_kind is not None else set())


def table_columns(kind: Kind) -> list[str]:
    """The columns the text table shows: Ray's default ones (`--json` has every column)."""
    base = kind.schema.list_columns(detail=False) if kind.schema is not None else list(kind.columns)
    return (["session"] if kind.feed_kind is not None else []) + base

# ---- reading rows ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionFeed:
    job: str
    address: str


@dataclass(frozen=True)
class Gathered:
    """Rows of every session that answered, and what the others said."""

    rows: list[dict[str, Any]]
    problems: list[str]
    sessions: int


def session_feeds(controller: ControllerClient) -> list[SessionFeed]:
    """Every Ray session's feed the controller knows (endpoints `<job>/fray-ray-dashboard`)."""
    return [
        SessionFeed(endpoint.name[: -len(FEED_SUFFIX)], endpoint.url)
        for endpoint in controller.list_endpoints("", exact=False)
        if endpoint.name.endswith(FEED_SUFFIX)
    ]


def _fetch(feed: SessionFeed, feed_kind: str, token: str | None, timeout: float) -> list[dict[str, Any]]:
    from fray_ray.iris.endpoint_http import endpoint_url, http_get

    answer = json.loads(http_get(f"{endpoint_url(feed.address)}/state/{feed_kind}", token, timeout=timeout,
                                 limit=MAX_STATE_BYTES))
    if not isinstance(answer, dict) or not isinstance(answer.get("rows"), list):
        raise ValueError("the answer is not {\"session\": ..., \"rows\": [...]}")
    session = str(answer.get("session") or feed.job)
    return [{"session": session, **row} for row in answer["rows"] if isinstance(row, dict)]


def _problem(feed: SessionFeed, exc: BaseException) -> str:
    import urllib.error

    if isinstance(exc, urllib.error.HTTPError):
        why = f"HTTP {exc.code}" + (" (the token was refused)" if exc.code == 401 else "")
    elif isinstance(exc, urllib.error.URLError):
        why = str(exc.reason)
    else:
        why = f"{type(exc).__name__}: {exc}"
    return f"the session of {feed.job} at {feed.address} did not answer: {why}"


def gather(controller: ControllerClient, feed_kind: str, token: str | None,
           timeout: float = FETCH_TIMEOUT_S) -> Gathered:
    """Fetch `/state/<feed_kind>` of every session at once; returns within about `timeout` per
    batch of `FETCH_THREADS` sessions whatever they do."""
    feeds = session_feeds(controller)
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    if not feeds:
        return Gathered(rows, problems, 0)
    with concurrent.futures.ThreadPoolExecutor(min(len(feeds), FETCH_THREADS), thread_name_prefix="state") as pool:
        futures = [pool.submit(_fetch, feed, feed_kind, token, timeout) for feed in feeds]
        for feed, future in zip(feeds, futures):
            try:
                rows.extend(future.result())
            except Exception as exc:  # noqa: BLE001 - one session's failure is reported, not fatal
                problems.append(_problem(feed, exc))
    return Gathered(rows, problems, len(feeds))


def node_rows(controller: ControllerClient) -> list[dict[str, Any]]:
    """The controller's workers as Ray's node records (the node id is the one sessions use for
    the worker), with what `fray-ray status` computes of their use. `is_head_node` is false:
    which host is the head depends on the driver, and no driver answers here."""
    from fray_ray._cli.status import read_status
    from fray_ray._private.driver.nodes import node_id_for

    return [
        {
            "node_id": node_id_for(node.node_id).hex(),
            "node_ip": node.address,
            "is_head_node": False,
            "state": "ALIVE" if node.healthy else "DEAD",
            "state_message": None if node.healthy else (node.status_message or "unhealthy"),
            "node_name": node.node_id,
            "resources_total": dict(node.total),
            "labels": dict(node.attributes),
            "resources_used": dict(node.used),
            "running_tasks": node.running_tasks,
        }
        for node in read_status(controller).nodes
    ]


def job_rows(controller: ControllerClient) -> list[dict[str, Any]]:
    """The controller's jobs as `fray-ray jobs --json` shows them."""
    from fray_ray._cli.jobs import job_record

    return [job_record(job) for job in controller.list_jobs("")]


def select(rows: list[dict[str, Any]], kind: Kind, filters: list[Filter], limit: int) -> tuple[list[dict[str, Any]], int]:
    """(the first `limit` matching rows sorted by session and id, how many matched)."""
    from fray_ray.util.state.api import row_matches

    chosen = [row for row in rows if all(row_matches(row, c, p, v) for c, p, v in filters)]
    chosen.sort(key=lambda row: (str(row.get("session") or ""), str(row.get(kind.key) or "")))
    return chosen[:limit], len(chosen)

# ---- text --------------------------------------------------------------------------------------


def cell(value: Any) -> str:
    """One table cell: whole, on one line (a multi-line text keeps its first line)."""
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), default=str)
    text = str(value).strip()
    return text.splitlines()[0] if text else ""


def render_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, upper-case headers as Ray's, no cell ever cut."""
    table = [[column.upper() for column in columns], *[list(row) for row in rows]]
    widths = [max(len(row[index]) for row in table) for index in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)


def render_rows(kind: Kind, rows: list[dict[str, Any]]) -> str:
    columns = table_columns(kind)
    return render_table(columns, [[cell(row.get(column)) for column in columns] for row in rows])


def _counts(state_counts: dict[str, int]) -> str:
    return ", ".join(f"{state}: {count}" for state, count in sorted(state_counts.items()))


def summary_of(what: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Ray's `summarize_tasks`/`summarize_actors` answer over every session's rows."""
    from fray_ray.util.state.api import summarize_actor_rows, summarize_task_rows

    return summarize_task_rows(rows) if what == "tasks" else summarize_actor_rows(rows)


def render_summary(what: str, summary: dict[str, Any]) -> str:
    """Stats, then one line per function (or class) with its counts by state, as `ray summary`."""
    cluster = summary["cluster"]
    stats = sorted((key, value) for key, value in cluster.items() if key.startswith("total_"))
    lines = ["Stats:", "-" * 36, *(f"{key}: {value}" for key, value in stats), ""]
    if what == "tasks":
        lines.append("Table (group by func_name):")
        columns = ["func_or_class_name", "type", "state_counts"]
        body = [[entry["func_or_class_name"], entry["type"], _counts(entry["state_counts"])]
                for _, entry in sorted(cluster["summary"].items())]
    else:
        lines.append("Table (group by class):")
        columns = ["class_name", "state_counts"]
        body = [[entry["class_name"], _counts(entry["state_counts"])] for _, entry in sorted(cluster["summary"].items())]
    lines.append("-" * 36)
    lines.append(render_table(columns, body) if body else f"(no {what})")
    return "\n".join(lines)


SESSIONS_NOTE = (
    "Tasks, actors, objects and placement groups are read from each Ray session on the cluster "
    "through its dashboard feed: a session shows while its driver runs and has a job to register "
    "under (every driver on a `fray-ray start` cluster or another standalone one; a cluster "
    "init() starts in process only with include_dashboard=True). Nodes and jobs come from the "
    "controller."
)
