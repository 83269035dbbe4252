"""The controller's dashboard: a page at `/` that shows the cluster, its jobs, their tasks and
logs, its endpoints and the Ray sessions that run on it, kept current by polling JSON routes.

Routes (all GET unless said):

- `/`: the page, or the login form without a session; `/?token=...` (the token link) opens a
  session and redirects to `/`; `/?job=<id>` selects a job;
- `POST /login` (form field `token`, a body of at most `LOGIN_MAX_BYTES`) opens a session;
  `POST /logout` ends it;
- `/dashboard/api/panels?job=`, `/dashboard/api/sessions`, `/dashboard/api/logs?job=&cursor=`
  and `/dashboard/api/state?job=`: the panels as HTML fragments, the Ray sessions panel, new
  log lines of a job, and the raw view as JSON;
- `/metrics`: every Ray session's application metrics as one Prometheus text exposition, each
  sample labelled with its session (a scrape target: send the token as a bearer header);
- `/dashboard/static/<file>`: the page's stylesheet and script (public: no secrets in them).

Every route but the static files and the login itself checks the session cookie (or a bearer
token) before it reads anything of the request; RPC routes never accept the cookie. Answers
carry a strict Content-Security-Policy and are never cached.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs

from fray_ray.cluster._dashboard_auth import DashboardAuth
from fray_ray.cluster._dashboard_html import (
    cluster_panel,
    endpoints_panel,
    job_panel,
    jobs_panel,
    login_page,
    sessions_panel,
)
from fray_ray.cluster._dashboard_html import page as dashboard_page
from fray_ray.cluster._dashboard_metrics import METRICS_PATH, PROMETHEUS_TYPE, session_metrics
from fray_ray.cluster._dashboard_sessions import fetch_panels
from fray_ray.cluster._dashboard_view import cluster_view, job_view, session_feeds
from fray_ray.cluster._request_names import job_id_arg
from fray_ray.cluster._state import ClusterState
from fray_ray.iris.errors import IrisRpcError
from fray_ray.iris.rpc import controller_pb2

Controller = controller_pb2.Controller

LOGIN_MAX_BYTES = 1024
LOG_PAGE_LINES = 1000
API_PREFIX = "/dashboard/api/"
STATIC_PREFIX = "/dashboard/static/"
STATIC_DIR = Path(__file__).with_name("dashboard_static")
STATIC_FILES = {"dashboard.css": "text/css; charset=utf-8", "dashboard.js": "text/javascript; charset=utf-8"}
_SECURITY_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
]


class DashboardSource(Protocol):
    """What the dashboard reads: the controller's state under its lock, and task logs."""

    def read(self, view: Callable[[ClusterState], Any]) -> Any: ...

    def task_logs(self, request: Controller.GetTaskLogsRequest) -> Controller.GetTaskLogsResponse: ...


def is_dashboard_path(path: str) -> bool:
    """Whether a request path belongs to the dashboard (the rest are RPCs and `/health`)."""
    return path in ("/", "/login", "/logout", METRICS_PATH) or path.startswith("/dashboard/")


def _now_ms() -> int:
    return int(time.time() * 1000)


class DashboardApp:
    """The dashboard's ASGI app for one controller and token."""

    def __init__(self, source: DashboardSource, *, token: str | None) -> None:
        self._source = source
        self._token = token
        self._auth = DashboardAuth(token)
        self._static = {name: (STATIC_DIR / name).read_bytes() for name in STATIC_FILES}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path, method = scope.get("path", ""), scope.get("method", "GET")
        if path.startswith(STATIC_PREFIX):
            name = path[len(STATIC_PREFIX):]
            if method != "GET" or name not in STATIC_FILES:
                await self._send(send, 404, b"not found\n", b"text/plain")
                return
            await self._send(send, 200, self._static[name], STATIC_FILES[name].encode())
            return
        if path == "/login":
            await self._login(scope, receive, send)
            return
        if path == "/logout":
            await self._redirect(send, "/", cookie=self._auth.clearing_cookie(scope))
            return
        if path == "/":
            await self._root(scope, send)
            return
        if not self._auth.allows(scope):
            await self._send(send, 401, b'{"error": "log in first: open / with the cluster token"}\n',
                             b"application/json", close=True)
            return
        if path == METRICS_PATH and method == "GET":
            feeds = self._source.read(session_feeds)
            text = await asyncio.to_thread(session_metrics, feeds, self._token)
            await self._send(send, 200, text.encode(), PROMETHEUS_TYPE.encode())
            return
        if method != "GET" or not path.startswith(API_PREFIX):
            await self._send(send, 404, b'{"error": "no such dashboard route"}\n', b"application/json")
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), max_num_fields=8)
        try:
            job_id = self._job_arg(query)
            answer = await self._api(path[len(API_PREFIX):], job_id, query)
        except IrisRpcError as exc:
            await self._json(send, 400, {"error": exc.message})
            return
        if answer is None:
            await self._send(send, 404, b'{"error": "no such dashboard route"}\n', b"application/json")
            return
        await self._json(send, 200, answer)

    # ---- routes ------------------------------------------------------------------------------

    async def _root(self, scope: dict, send: Any) -> None:
        if scope.get("method") != "GET":
            await self._send(send, 405, b"use GET\n", b"text/plain")
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), max_num_fields=8)
        address = _address(scope)
        offered = query.get("token")
        if offered is not None:
            if self._auth.token_matches(offered[0]):
                await self._redirect(send, "/", cookie=self._auth.session_cookie(scope))
            else:
                form = login_page(address=address, problem="That token link is not this cluster's token.")
                await self._send(send, 401, form.encode(), b"text/html; charset=utf-8", close=True)
            return
        if not self._auth.allows(scope):
            await self._send(send, 401, login_page(address=address).encode(), b"text/html; charset=utf-8")
            return
        try:
            job_id = self._job_arg(query)
        except IrisRpcError:
            job_id = ""
        panels, sessions = await asyncio.gather(self._panels(job_id), self._sessions())
        panels["sessions"] = sessions["html"]
        document = dashboard_page(panels, address=address, job_id=job_id, with_logout=self._auth.enabled)
        await self._send(send, 200, document.encode(), b"text/html; charset=utf-8")

    async def _login(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("method") != "POST":
            await self._redirect(send, "/")
            return
        headers = {key.lower(): value for key, value in scope.get("headers", ())}
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > LOGIN_MAX_BYTES):
            await self._send(send, 413, b"login form too large\n", b"text/plain", close=True)
            return
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > LOGIN_MAX_BYTES:
                await self._send(send, 413, b"login form too large\n", b"text/plain", close=True)
                return
            if not message.get("more_body", False):
                break
        form = parse_qs(body.decode("utf-8", errors="replace"), max_num_fields=4)
        offered = form.get("token", [""])[0].strip()
        if offered and self._auth.token_matches(offered):
            await self._redirect(send, "/", cookie=self._auth.session_cookie(scope))
            return
        form = login_page(address=_address(scope), problem="Wrong token.")
        await self._send(send, 401, form.encode(), b"text/html; charset=utf-8", close=True)

    async def _api(self, route: str, job_id: str, query: dict[str, list[str]]) -> dict[str, Any] | None:
        if route == "panels":
            return await self._panels(job_id)
        if route == "sessions":
            return await self._sessions()
        if route == "state":
            now = _now_ms()
            return self._source.read(
                lambda state: {"cluster": cluster_view(state, now), "job": job_view(state, job_id, now) if job_id else None}
            )
        if route == "logs":
            cursor_text = query.get("cursor", ["0"])[0]
            cursor = int(cursor_text) if cursor_text.isdigit() else 0
            return await asyncio.to_thread(self._logs, job_id, cursor)
        return None

    async def _panels(self, job_id: str) -> dict[str, str]:
        now = _now_ms()

        def render(state: ClusterState) -> tuple[dict[str, Any], dict[str, Any] | None]:
            return cluster_view(state, now), job_view(state, job_id, now) if job_id else None

        view, job = self._source.read(render)
        return {
            "cluster": cluster_panel(view),
            "jobs": jobs_panel(view),
            "job": job_panel(job, job_id),
            "endpoints": endpoints_panel(view),
        }

    async def _sessions(self) -> dict[str, str]:
        feeds = self._source.read(session_feeds)
        panels = await asyncio.to_thread(fetch_panels, feeds, self._token)
        return {"html": sessions_panel(panels)}

    def _logs(self, job_id: str, cursor: int) -> dict[str, Any]:
        if not job_id:
            return {"lines": [], "cursor": cursor}
        request = Controller.GetTaskLogsRequest(
            id=job_id, cursor=cursor, max_total_lines=LOG_PAGE_LINES, tail=cursor == 0
        )
        response = self._source.task_logs(request)
        lines = [
            {
                "ms": entry.timestamp.epoch_ms,
                "task": batch.task_id.rpartition("/")[2],
                "attempt": entry.attempt_id,
                "source": entry.source,
                "text": entry.data,
            }
            for batch in response.task_logs
            for entry in batch.logs
        ]
        lines.sort(key=lambda line: line["ms"])
        return {"lines": lines, "cursor": max(response.cursor, cursor), "truncated": response.truncated}

    @staticmethod
    def _job_arg(query: dict[str, list[str]]) -> str:
        job = query.get("job", [""])[0]
        return job_id_arg(job, "job") if job else ""

    # ---- answers -----------------------------------------------------------------------------

    @staticmethod
    async def _send(send: Any, status: int, body: bytes, content_type: bytes, *, close: bool = False,
                    extra: list[tuple[bytes, bytes]] | None = None) -> None:
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                   *_SECURITY_HEADERS, *(extra or [])]
        if close:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _json(self, send: Any, status: int, value: object) -> None:
        await self._send(send, status, json.dumps(value).encode(), b"application/json")

    async def _redirect(self, send: Any, location: str, *, cookie: bytes | None = None) -> None:
        extra = [(b"location", location.encode())]
        if cookie is not None:
            extra.append((b"set-cookie", cookie))
        await self._send(send, 303, b"", b"text/plain", extra=extra)


def _address(scope: dict) -> str:
    for key, value in scope.get("headers", ()):
        if key.lower() == b"host":
            return "http://" + value.decode("latin-1")
    server = scope.get("server") or ("", 0)
    return f"http://{server[0]}:{server[1]}"


def with_dashboard(dashboard: ASGIAppLike, rpc: ASGIAppLike) -> Callable[..., Any]:
    """One app: dashboard paths to `dashboard`, everything else (RPCs, `/health`) to `rpc`."""

    async def app(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and is_dashboard_path(scope.get("path", "")):
            await dashboard(scope, receive, send)
        else:
            await rpc(scope, receive, send)

    return app


ASGIAppLike = Callable[[dict, Any, Any], Any]
