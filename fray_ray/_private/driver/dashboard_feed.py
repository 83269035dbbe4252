"""The session's dashboard feed: what the cluster's dashboard shows of this driver.

The controller knows nothing of Ray. A driver that wants its session shown serves
`GET /dashboard.json` (bearer token: the cluster's) answering
`{"title": str, "sections": [{"title": str, "columns": [str], "rows": [[scalar]]}]}` (and, here,
`GET /metrics`: its application metrics as Prometheus text, and `GET /state/<kind>`: its rows of
Ray's state API for `fray-ray list`, see `state_feed`), and
registers that address as the Iris endpoint `<its job>/fray-ray-dashboard` (the contract is in
ARCHITECTURE.md). Its job is the session's: the driver's own job when it runs inside an Iris
task, else the session's lease job; an endpoint must belong to a live task, so it is registered
once that job's task is placed, from a background thread (init never waits for it).

`DashboardFeed` serves whatever its `sections()` callable returns, so richer sources (a state
API) can replace `session_sections` without touching the server. The server is the standard
library's: it reads a request's head (bounded by http.server's line and header limits), checks
the token before anything else and never reads a body. A connection has `READ_TIMEOUT_S` for
its whole head, however its bytes trickle in. Until its token is checked it is one of at most
`MAX_UNVERIFIED`; a newcomer beyond that closes the oldest of them, so strangers holding
connections open cannot keep the controller's fetch (whose head arrives at once) out. Requests
whose token was accepted are served, at most `MAX_CONNECTIONS` at once.
"""

from __future__ import annotations

import hmac
import http.server
import io
import json
import logging
import os
import socket
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fray_ray._private.driver import state_source
from fray_ray._private.driver.lease import FateMode
from fray_ray._private.driver.state_feed import STATE_KINDS, StateReader, state_kind, state_reader
from fray_ray._private.observe.metrics import MetricKind, MetricSpec, process_registry, prometheus_text
from fray_ray._private.observe.task_events import TaskStatus, describe

logger = logging.getLogger(__name__)

FEED_ENDPOINT = "fray-ray-dashboard"
FEED_PATH = "/dashboard.json"
#: The session's application metrics (`ray.util.metrics`) in Prometheus's text format.
METRICS_PATH = "/metrics"
PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: A connection's whole request head must arrive within this many seconds of its accept.
READ_TIMEOUT_S = 5.0
#: Connections whose token is not checked yet; beyond this the oldest is closed.
MAX_UNVERIFIED = 16
#: Requests with the right token served at once; beyond this one is answered 503.
MAX_CONNECTIONS = 16
#: How long the registering thread waits for the session's job to exist and be placed.
REGISTER_TIMEOUT_S = 120.0
MAX_FAILURES = 20
MAX_ERROR_CHARS = 2000

Section = dict[str, Any]


@dataclass(frozen=True)
class DashboardSettings:
    """How a session shows on its cluster's dashboard.

    - `token`: the cluster's token, which the dashboard sends to fetch the feed;
    - `host`/`advertise_host`: where the feed binds and the address it registers (the session
      service's);
    - `session_job`: on a cluster the driver started itself, launch a session job to register
      the feed under (there is none otherwise); elsewhere the session already has one.
    """

    token: str | None
    host: str = "127.0.0.1"
    advertise_host: str = "127.0.0.1"
    session_job: bool = False


class _DeadlineReader(socket.SocketIO):
    """A socket's reading side that gives up at one deadline for everything read through it,
    rather than per read (a peer sending a byte every few seconds would never time out)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__(sock, "rb")
        self._deadline = deadline

    def readinto(self, buffer: Any) -> int | None:  # type: ignore[override]
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request was not read within its deadline")
        self._sock.settimeout(remaining)
        return super().readinto(buffer)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _FeedHttpServer
    timeout = READ_TIMEOUT_S  # also bounds writing the answer to a peer that does not read it
    protocol_version = "HTTP/1.0"  # one request per connection

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain reader: replaced, and closed so the socket can close
        deadline = self.server.accepted_at(self.request) + READ_TIMEOUT_S
        self.rfile = io.BufferedReader(_DeadlineReader(self.request, deadline))

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except TimeoutError:
            self.close_connection = True  # too slow: closed without an answer

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        feed = self.server.feed
        if not hmac.compare_digest(self.headers.get("authorization", "").encode(), feed.expected_authorization):
            self._answer(401, {"error": "missing or invalid bearer token"})
            return
        if not self.server.verified(self.request):
            self._answer(503, {"error": f"more than {MAX_CONNECTIONS} requests at once; try again"})
            return
        path = self.path.split("?", 1)[0]
        if path == METRICS_PATH:
            self._send(200, prometheus_text(process_registry()).encode(), PROMETHEUS_TYPE)
            return
        kind = state_kind(path)
        if kind is not None:
            self._answer_state(kind)
            return
        if path != FEED_PATH:
            self._answer(404, {"error": f"only {FEED_PATH}, {METRICS_PATH} and /state/<kind> are served here"})
            return
        try:
            document = {"title": feed.title, "sections": feed.sections()}
            body = json.dumps(document, default=str).encode()
        except Exception as exc:  # noqa: BLE001 - a broken section source must not end the server
            logger.debug("dashboard sections failed", exc_info=True)
            self._answer(500, {"error": f"sections failed: {type(exc).__name__}: {exc}"})
            return
        self._send(200, body)

    def _answer_state(self, kind: str) -> None:
        feed = self.server.feed
        try:
            rows = feed.state(kind) if feed.state is not None else None
            if rows is None:
                self._answer(404, {"error": f"no state kind {kind[:64]!r} here; kinds: {', '.join(STATE_KINDS)}"})
                return
            body = json.dumps({"session": feed.session, "rows": rows}, default=str).encode()
        except Exception as exc:  # noqa: BLE001 - a failing read must not end the server
            logger.debug("state rows failed", exc_info=True)
            self._answer(500, {"error": f"state rows failed: {type(exc).__name__}: {exc}"})
            return
        self._send(200, body)

    def _refuse(self) -> None:
        self._answer(405, {"error": f"use GET {FEED_PATH}"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _refuse  # noqa: N815 - http.server's names

    def _answer(self, status: int, value: dict[str, Any]) -> None:
        self._send(status, json.dumps(value).encode())

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("cache-control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass  # requests are not worth a line each


class _FeedHttpServer(http.server.ThreadingHTTPServer):
    """Tracks each connection from its accept: unverified (its head not read or its token not
    checked; at most MAX_UNVERIFIED, the oldest closed for a newcomer), then verified (at most
    MAX_CONNECTIONS being served)."""

    daemon_threads = True
    request_queue_size = MAX_UNVERIFIED

    def __init__(self, address: tuple[str, int], feed: DashboardFeed) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.feed = feed
        self._lock = threading.Lock()
        self._unverified: OrderedDict[socket.socket, float] = OrderedDict()  # in accept order
        self._accepted: dict[socket.socket, float] = {}
        self._serving: set[socket.socket] = set()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            now = time.monotonic()
            self._accepted[request] = self._unverified[request] = now
            evicted = self._unverified.popitem(last=False)[0] if len(self._unverified) > MAX_UNVERIFIED else None
        if evicted is not None:
            _wake(evicted)  # its thread's read returns, and it closes the connection
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def accepted_at(self, request: socket.socket) -> float:
        with self._lock:
            return self._accepted.get(request, 0.0)  # evicted before it started: already due

    def verified(self, request: socket.socket) -> bool:
        """Move a connection whose token was accepted out of the unverified ones; False when
        MAX_CONNECTIONS are being served already (or it was evicted meanwhile)."""
        with self._lock:
            if self._unverified.pop(request, None) is None or len(self._serving) >= MAX_CONNECTIONS:
                return False
            self._serving.add(request)
            return True

    def _forget(self, request: socket.socket) -> None:
        with self._lock:
            self._unverified.pop(request, None)
            self._accepted.pop(request, None)
            self._serving.discard(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)


def _wake(sock: socket.socket) -> None:
    """End a connection another thread is reading (closing its descriptor here could race with
    a new socket reusing the number): its read sees the end of the stream."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class DashboardFeed:
    """This session's feed: served from `start()` until `close()`, registered for `job_id()`.

    `job_id` returns the session's job once known (None until then); `register(job_id, address)`
    registers the endpoint and returns its id, `unregister(endpoint_id)` removes it (the Fray
    client's `register_job_endpoint` and `unregister_endpoint`). `state(kind)` gives the rows
    `GET /state/<kind>` answers (None: no such kind), labelled with `session`.
    """

    def __init__(
        self,
        sections: Callable[[], list[Section]],
        *,
        title: str,
        token: str | None,
        host: str,
        advertise_host: str,
        job_id: Callable[[], str | None],
        register: Callable[[str, str], str],
        unregister: Callable[[str], None],
        state: StateReader | None = None,
        session: str = "",
    ) -> None:
        self.sections = sections
        self.state = state
        self.session = session
        self.title = title
        self.expected_authorization = f"Bearer {token}".encode() if token else b""
        self._host = host
        self._advertise_host = advertise_host
        self._job_id = job_id
        self._register = register
        self._unregister = unregister
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # guards endpoint_id
        self.endpoint_id: str | None = None
        self._server: _FeedHttpServer | None = None
        self._serving: threading.Thread | None = None
        self._registering: threading.Thread | None = None

    @property
    def address(self) -> str:
        """`http://<advertised host>:<port>` (RuntimeError before `start()`)."""
        if self._server is None:
            raise RuntimeError("the dashboard feed is not serving")
        host = f"[{self._advertise_host}]" if ":" in self._advertise_host else self._advertise_host
        return f"http://{host}:{self._server.server_address[1]}"

    def start(self) -> DashboardFeed:
        """Bind and serve; register in the background. Returns at once (OSError if it cannot bind)."""
        self._server = _FeedHttpServer((self._host, 0), self)
        self._serving = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
                                         name="dashboard-feed", daemon=True)
        self._serving.start()
        self._registering = threading.Thread(target=self._register_when_ready, name="dashboard-feed-register",
                                             daemon=True)
        self._registering.start()
        return self

    def _register_when_ready(self) -> None:
        delay = 0.02
        waited = 0.0
        job_id = self._job_id()
        while job_id is None:
            if waited >= REGISTER_TIMEOUT_S or self._stopping.wait(delay):
                return
            waited += delay
            delay = min(delay * 1.5, 0.5)
            job_id = self._job_id()
        try:
            endpoint_id = self._register(job_id, self.address)
        except Exception as exc:  # noqa: BLE001 - the session runs on without a dashboard entry
            if not self._stopping.is_set():
                logger.info("this session is not shown on the cluster's dashboard: %s", exc)
            return
        with self._lock:
            keep = not self._stopping.is_set()
            if keep:
                self.endpoint_id = endpoint_id
        if not keep:
            self._try_unregister(endpoint_id)

    def _try_unregister(self, endpoint_id: str) -> None:
        try:
            self._unregister(endpoint_id)
        except Exception:  # noqa: BLE001 - the endpoint ends with its job anyway
            logger.debug("unregistering the dashboard feed failed", exc_info=True)

    def close(self) -> None:
        """Unregister (best effort) and stop serving. Idempotent; blocks for at most a few seconds."""
        self._stopping.set()
        with self._lock:
            endpoint_id, self.endpoint_id = self.endpoint_id, None
        if endpoint_id is not None:
            self._try_unregister(endpoint_id)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for thread in (self._serving, self._registering):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=5)
        self._serving = self._registering = None


def session_sections(driver: Any) -> Callable[[], list[Section]]:
    """The driver's own sections, from the rows of its state API (`state_source`): its actors,
    its tasks by state, the last failures, the objects it holds, and its application metrics."""

    def sections() -> list[Section]:
        actor_rows = [
            [row["actor_id"][:16], row["class_name"], row["name"], row["state"], row["pid"] or "", row["num_restarts"]]
            for row in state_source.actor_rows(driver)
        ]
        events = driver.task_events.snapshot()
        by_state = Counter(str(event.state) for event in events)
        failed = [event for event in events if event.state is TaskStatus.FAILED][-MAX_FAILURES:]
        failure_rows = [
            [event.task_id.hex()[:16], event.name, _error_text(describe(event)["error_message"])] for event in failed
        ]
        summary = driver.objects.summary()
        return [
            {"title": "Actors", "columns": ["actor id", "class", "name", "state", "pid", "restarts"], "rows": actor_rows},
            {"title": "Tasks and actor calls by state", "columns": ["state", "count"],
             "rows": [[state, count] for state, count in sorted(by_state.items())]},
            {"title": f"Failed tasks and actor calls (the last {MAX_FAILURES})",
             "columns": ["task id", "name", "error"], "rows": failure_rows},
            {"title": "Objects held by the driver", "columns": ["objects", "bytes", "store limit"],
             "rows": [[summary.held, summary.held_bytes, driver.objects.store.config.limit]]},
            {"title": "Metrics (ray.util.metrics)", "columns": ["name", "kind", "tags", "value"],
             "rows": [_metric_row(*sample) for sample in process_registry().samples()]},
        ]

    return sections


def _error_text(message: str | None) -> str:
    """What a failure says: the exception's own line first, then where it was raised."""
    lines = [line for line in (message or "").splitlines() if line.strip()]
    return "\n".join([lines[-1], *lines[:-1]])[:MAX_ERROR_CHARS] if lines else "(no message)"


def _metric_row(spec: MetricSpec, tags: tuple[tuple[str, str], ...], value: Any) -> list[Any]:
    shown = f"count={value[2]} sum={value[1]:g}" if spec.kind is MetricKind.HISTOGRAM else value
    return [spec.name, spec.kind.value, ", ".join(f"{k}={v}" for k, v in tags), shown]


def start_session_feed(driver: Any, settings: DashboardSettings) -> DashboardFeed | None:
    """Start the feed of a driver on a cluster (not in local mode), registered for the driver's
    own job or its session's lease job; None when the session has no job of its own or the
    feed cannot bind (the session runs on without it). A client that is not in process is an
    Iris one, whose `register_job_endpoint` registers the feed (a failure is logged, not raised)."""
    client = driver.client
    lease = driver.launcher.lease
    has_job = lease.mode in (FateMode.LEASE, FateMode.DRIVER_JOB) or settings.session_job
    if client.in_process or not has_job:
        return None

    def session_job() -> str | None:
        return client.parent_job if lease.mode is FateMode.DRIVER_JOB else lease.job_id

    feed = DashboardFeed(
        session_sections(driver),
        title=f"Ray session {driver.session_name} (driver pid {os.getpid()}, namespace {driver.namespace})",
        token=settings.token,
        host=settings.host,
        advertise_host=settings.advertise_host,
        job_id=session_job,
        register=lambda job_id, address: client.register_job_endpoint(
            FEED_ENDPOINT, address, job_id=job_id, timeout=REGISTER_TIMEOUT_S
        ),
        unregister=lambda endpoint_id: client.unregister_endpoint(endpoint_id),
        state=state_reader(driver),
        session=driver.session_name,
    )
    try:
        return feed.start()
    except OSError as exc:
        logger.info("this session is not shown on the cluster's dashboard: cannot serve its feed on %s: %s",
                    settings.host, exc)
        feed.close()
        return None
