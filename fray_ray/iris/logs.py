"""Reading task output from an Iris controller: finelog's FetchLogs, or the older GetTaskLogs.

Iris controllers have served task logs at several paths (`FETCH_LOGS_ROUTES`, newest first):
through the endpoint proxy in front of the `/system/log-server` endpoint, at finelog's own
service path, and at the path the service had before finelog; controllers older than finelog
serve only `ControllerService.GetTaskLogs`. `LogReader` tries them in that order, remembers the
first that answers, and accepts zstd, gzip or identity responses. Output is keyed
`/user/job/<index>:<attempt>`, so a job's lines are a prefix query and one attempt's an exact one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from connectrpc.client import ConnectClientSync
from connectrpc.compression.gzip import GzipCompression
from connectrpc.compression.zstd import ZstdCompression
from connectrpc.method import IdempotencyLevel, MethodInfo

from fray_ray.iris.errors import IrisRpcError, translate_connect_errors
from fray_ray.iris.http_clients import http_client_for
from fray_ray.iris.rpc import finelog_logging_pb2
from fray_ray.iris.types import LogLine

FetchLogsRequest = finelog_logging_pb2.FetchLogsRequest
FetchLogsResponse = finelog_logging_pb2.FetchLogsResponse

#: Lines asked for per request when reading everything (finelog's own default page).
PAGE_LINES = 1000
#: Pages read at most for one "everything" read, so a task that never stops printing cannot
#: keep a reader busy forever.
MAX_PAGES = 1000
ACCEPTED_COMPRESSIONS = (ZstdCompression(), GzipCompression())


@dataclass(frozen=True)
class FetchLogsRoute:
    """One place a controller may serve FetchLogs: `<controller><base>/<service>/FetchLogs`."""

    base: str
    service: str
    #: Also move on to the next route when this one answers `unavailable` (a proxy whose
    #: upstream log server is missing says so).
    unavailable_means_absent: bool = False

    def method(self) -> MethodInfo[FetchLogsRequest, FetchLogsResponse]:
        return MethodInfo(
            name="FetchLogs",
            service_name=self.service,
            input=FetchLogsRequest,
            output=FetchLogsResponse,
            idempotency_level=IdempotencyLevel.UNKNOWN,
        )


FETCH_LOGS_ROUTES = (
    FetchLogsRoute("/proxy/system.log-server", "finelog.logging.LogService", unavailable_means_absent=True),
    FetchLogsRoute("", "finelog.logging.LogService"),
    FetchLogsRoute("", "iris.logging.LogService"),
)
_ABSENT_CODES = frozenset({"unimplemented", "not_found"})


class LogsNotServed(IrisRpcError):
    """The controller serves task logs at none of the known paths."""

    code = "unimplemented"


@dataclass(frozen=True)
class LogSelection:
    """Which keys a read covers: finelog's `source` and match scope, plus the task to name
    lines by when the server leaves an entry's key empty (exact reads)."""

    source: str
    scope: int
    task_id: str = ""
    only_job: str = ""  # keep only this job's own tasks (a prefix read also covers child jobs)
    only_attempt: int = -1  # keep only this attempt of each task (-1: all)

    @classmethod
    def of(cls, id: str, *, attempt_id: int = -1, include_children: bool = False) -> LogSelection:
        """`id` is a job (`/user/job`), a task (`/user/job/3`) or an attempt (`/user/job/3:1`)."""
        wire, colon, attempt = id.partition(":")
        segments = wire.strip("/").split("/")
        is_task = len(segments) >= 3 and segments[-1].isdigit()
        if colon and is_task and attempt.isdigit():
            return cls(f"{wire}:{attempt}", finelog_logging_pb2.MATCH_SCOPE_EXACT, task_id=wire)
        if is_task and not colon:
            if attempt_id >= 0:
                return cls(f"{wire}:{attempt_id}", finelog_logging_pb2.MATCH_SCOPE_EXACT, task_id=wire)
            return cls(f"{wire}:", finelog_logging_pb2.MATCH_SCOPE_PREFIX, task_id=wire)
        if colon or not wire.startswith("/") or len(segments) < 2 or "" in segments:
            raise ValueError(f"{id!r} is not a job (/user/job), task (/user/job/0) or attempt (/user/job/0:1) id")
        return cls(
            f"{wire}/",
            finelog_logging_pb2.MATCH_SCOPE_PREFIX,
            only_job="" if include_children else wire,
            only_attempt=attempt_id,
        )

    def keeps(self, line: LogLine) -> bool:
        if self.only_job and line.task_id.rpartition("/")[0] != self.only_job:
            return False
        return self.only_attempt < 0 or line.attempt_id == self.only_attempt


class LogReader:
    """FetchLogs against one controller, over whichever route it serves. Thread-safe."""

    def __init__(self, address: str, *, headers: Mapping[str, str], timeout_ms: int) -> None:
        self._address = address
        self._headers = dict(headers)
        self._timeout_ms = timeout_ms
        self._lock = threading.Lock()
        self._clients: dict[str, ConnectClientSync] = {}
        self._route: FetchLogsRoute | None = None  # the route that answered
        self._absent = False  # no route answered: this controller does not serve FetchLogs

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    def _client(self, base: str) -> ConnectClientSync:
        with self._lock:
            client = self._clients.get(base)
            if client is None:
                client = self._clients[base] = ConnectClientSync(
                    self._address + base,
                    accept_compression=ACCEPTED_COMPRESSIONS,
                    send_compression=None,
                    timeout_ms=self._timeout_ms,
                    http_client=http_client_for(self._address),
                )
            return client

    def fetch(self, request: FetchLogsRequest) -> FetchLogsResponse:
        """One FetchLogs call. `LogsNotServed` if no route answers it (remembered after)."""
        if self._absent:
            raise LogsNotServed(f"the controller at {self._address} does not serve FetchLogs", method="FetchLogs")
        route = self._route
        routes = (route,) if route is not None else FETCH_LOGS_ROUTES
        last: IrisRpcError | None = None
        for candidate in routes:
            try:
                with translate_connect_errors("FetchLogs"):
                    response = self._client(candidate.base).execute_unary(
                        request=request, method=candidate.method(), headers=self._headers
                    )
            except IrisRpcError as exc:
                absent = exc.code in _ABSENT_CODES or (exc.code == "unavailable" and candidate.unavailable_means_absent)
                if not absent or route is not None:
                    raise
                last = exc
                continue
            self._route = candidate
            return response
        self._absent = True
        raise LogsNotServed(
            f"the controller at {self._address} serves FetchLogs at none of "
            + ", ".join(f"{r.base}/{r.service}/FetchLogs" for r in FETCH_LOGS_ROUTES)
            + (f" (last answer: {last.message})" if last is not None else ""),
            method="FetchLogs",
        )

    def read(self, selection: LogSelection, *, max_lines: int = 0, tail: bool = True, since_ms: int = 0) -> list[LogLine]:
        """Lines of `selection`, oldest first: the newest (`tail`) or oldest `max_lines`, or every
        kept line when `max_lines` is 0."""
        request = FetchLogsRequest(source=selection.source, match_scope=selection.scope, since_ms=since_ms)
        entries = []
        if max_lines > 0:
            request.max_lines = max_lines
            request.tail = tail
            entries.extend(self.fetch(request).entries)
        else:
            request.max_lines = PAGE_LINES
            for _ in range(MAX_PAGES):
                page = self.fetch(request)
                entries.extend(page.entries)
                if len(page.entries) < PAGE_LINES or page.cursor <= request.cursor:
                    break
                request.cursor = page.cursor
        lines = [LogLine.from_proto(_task_of(entry.key) or selection.task_id, entry) for entry in entries]
        lines = [line for line in lines if selection.keeps(line)]
        lines.sort(key=lambda line: line.timestamp_ms)
        return lines


    def read_after(self, selection: LogSelection, cursor: int = 0) -> tuple[list[LogLine], int]:
        """Lines of `selection` stored after `cursor` (0: from the start), oldest first, and the
        cursor to pass next time: how a reader follows output as it is written."""
        request = FetchLogsRequest(source=selection.source, match_scope=selection.scope, cursor=cursor,
                                   max_lines=PAGE_LINES)
        entries = []
        for _ in range(MAX_PAGES):
            page = self.fetch(request)
            entries.extend(page.entries)
            if page.cursor > request.cursor:
                request.cursor = page.cursor
            if len(page.entries) < PAGE_LINES:
                break
        lines = [LogLine.from_proto(_task_of(entry.key) or selection.task_id, entry) for entry in entries]
        return [line for line in lines if selection.keeps(line)], request.cursor


def _task_of(key: str) -> str:
    """`/user/job/0:2` → `/user/job/0` (empty for an empty key)."""
    task, colon, _ = key.rpartition(":")
    return task if colon else key
