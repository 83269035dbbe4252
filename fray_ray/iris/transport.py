"""Serving Connect apps: a uvicorn server on a background thread, plus bearer-token auth.

Both the embedded controller and every actor host serve their Connect application this way.
The listening socket is bound before the server starts, so the port is known (and owned) at
once and no other process can take it in between. Every server runs under `ConnectionLimits`
(header and body deadlines, a head-size limit, a connection cap that sheds idle strangers),
and a request refused for its token also loses its connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import hmac
import json
import logging
import secrets
import select
import socket
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import uvicorn

from fray_ray.iris.http_limits import ConnectionLimits, ConnectionTable, LimitedHttpProtocol

logger = logging.getLogger(__name__)

ASGIApp = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]

#: Request bodies above this size are refused before they are parsed.
DEFAULT_MAX_REQUEST_BYTES = 512 * 1024 * 1024


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening TCP socket on host:port (port 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on sockets that say they are TCP,
    # and without it every response waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago. Prefer `bind_socket` where the caller can hold it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def new_token() -> str:
    """A fresh bearer token. Hex, so it never starts with "-": `--token -x...` would read as an option."""
    return secrets.token_hex(32)


def bearer_headers(token: str | None) -> dict[str, str]:
    """Request headers carrying `token`, or none."""
    return {"authorization": f"Bearer {token}"} if token else {}


def connect_error_body(code: str, message: str) -> bytes:
    return json.dumps({"code": code, "message": message}).encode()


_HTTP_STATUS = {"unauthenticated": 401, "not_found": 404, "unimplemented": 501}


async def send_connect_error(
    send: Callable[[dict], Awaitable[None]], code: str, message: str, *, close: bool = False
) -> None:
    """Answer an HTTP request with a Connect unary error envelope (and end the connection
    after it if `close`)."""
    body = connect_error_body(code, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": _HTTP_STATUS.get(code, 400), "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BearerAuth:
    """ASGI middleware: every request must carry `Authorization: Bearer <token>`.

    Paths in `public_paths` (health checks) are let through. The comparison is constant-time.
    A refused request's body is never read, and its connection is closed after the answer, so
    a client without the token cannot hold a kept-alive connection.
    """

    def __init__(self, app: ASGIApp, token: str, public_paths: tuple[str, ...] = ("/health",)) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()
        self._public_paths = public_paths

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path") not in self._public_paths:
            provided = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
            if not hmac.compare_digest(provided, self._expected):
                await send_connect_error(send, "unauthenticated", "missing or invalid bearer token", close=True)
                return
        await self._app(scope, receive, send)


class ThreadedService:
    """Adapts a synchronous Connect service to the async protocol the ASGI app expects.

    Each handler runs on `executor`, so a slow handler never stalls the event loop. Handler
    names are the generated snake_case method names (`launch_job`, `call`, ...).
    """

    def __init__(self, service: object, executor: concurrent.futures.Executor) -> None:
        self._service = service
        self._executor = executor

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        handler = getattr(self._service, name)

        async def run(request: Any, ctx: Any) -> Any:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, functools.partial(handler, request, ctx))

        return run


class _Server(uvicorn.Server):
    """uvicorn's server, woken by an event instead of its 100 ms polling tick."""

    def __init__(self, config: uvicorn.Config, started: threading.Event) -> None:
        super().__init__(config)
        self._started_event = started
        self._exit_event: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self._exit_event = asyncio.Event()
        await super().startup(sockets=sockets)
        self._started_event.set()

    async def main_loop(self) -> None:
        assert self._exit_event is not None
        if not self.should_exit:
            await self._exit_event.wait()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown always sleeps 100 ms after asking connections to close, then
        polls every 100 ms; this one stops as soon as they have closed (at most the graceful
        timeout, after which what still runs is cancelled). Lifespan is off: nothing else to do."""
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.config.timeout_graceful_shutdown or 0)
        while (self.server_state.connections or self.server_state.tasks) and loop.time() < deadline:
            await asyncio.sleep(0.005)
        for task in list(self.server_state.tasks):
            task.cancel()
        for server in self.servers:
            await server.wait_closed()

    def request_exit(self) -> None:
        self.should_exit = True
        if self.loop is not None and self._exit_event is not None:
            try:
                self.loop.call_soon_threadsafe(self._exit_event.set)
            except RuntimeError:  # loop already closed
                pass


class RpcServer:
    """One uvicorn server for one ASGI app, on a daemon thread with its own event loop.

    `start()` returns once the server accepts connections; `stop()` closes the socket and
    joins the thread. Usable as a context manager.

    With `start_on_first_connection`, `start()` binds and listens (the port is owned and
    connections queue in the kernel) but the event loop and uvicorn start only when the first
    connection arrives. An actor host is such a server: its driver speaks to it over the
    session stream, so most actors are never called over Connect, and an idle uvicorn costs
    each of them about a megabyte of pages of its own.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str = "rpc-server",
        limits: ConnectionLimits | None = None,
        start_on_first_connection: bool = False,
    ) -> None:
        self._app = app
        self._lazy = start_on_first_connection
        self._wake: tuple[socket.socket, socket.socket] | None = None  # stop() wakes a lazy server's wait
        self._limits = limits or ConnectionLimits()
        self._connections: ConnectionTable | None = None
        self._host = host
        self._requested_port = port
        self._name = name
        self._socket: socket.socket | None = None
        self._port: int | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._lock = threading.Lock()  # orders a lazy server's start against stop()
        self._stopping = False

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("server not started")
        return self._port

    @property
    def host(self) -> str:
        return self._host

    @property
    def connections(self) -> ConnectionTable | None:
        """The open connections and the eviction, refusal and timeout counters."""
        return self._connections

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self._host in ("0.0.0.0", "") else self._host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30.0) -> RpcServer:
        if self._thread is not None:
            raise RuntimeError("server already started")
        self._socket = bind_socket(self._host, self._requested_port)
        self._port = self._socket.getsockname()[1]
        self._connections = ConnectionTable(self._limits)
        self._stopping = False
        if self._lazy:
            self._wake = socket.socketpair()
        # uvicorn installs signal handlers only on the main thread; this one never is.
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        if self._lazy:
            return self
        if not self._started.wait(timeout) or self._failure is not None:
            failure = self._failure
            self.stop()
            raise RuntimeError(f"{self._name} failed to start") from failure
        return self

    def _new_server(self) -> _Server:
        config = uvicorn.Config(
            self._app,
            log_level="warning",
            log_config=None,  # the process's logging stays as it is (dictConfig costs each actor 4 ms)
            access_log=False,
            lifespan="off",
            http=functools.partial(LimitedHttpProtocol, table=self._connections),  # type: ignore[arg-type]
            loop="asyncio",
            timeout_keep_alive=self._limits.keep_alive_s,  # type: ignore[arg-type]
            timeout_graceful_shutdown=1,
        )
        return _Server(config, self._started)

    def _first_connection(self) -> bool:
        """Block until a connection is pending (True) or `stop()` was called (False)."""
        assert self._socket is not None and self._wake is not None
        waiting = select.poll()
        waiting.register(self._socket, select.POLLIN)
        waiting.register(self._wake[1], select.POLLIN)
        while True:
            events = dict(waiting.poll())
            if self._wake[1].fileno() in events or self._stopping:
                return False
            if self._socket.fileno() in events:
                return True

    def _run(self) -> None:
        assert self._socket is not None
        try:
            if self._lazy and not self._first_connection():
                return
            with self._lock:
                if self._stopping:
                    return
                self._server = self._new_server()
            asyncio.run(self._server.serve(sockets=[self._socket]))
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._failure = exc
            logger.exception("%s stopped with an error", self._name)
        finally:
            self._started.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and release the port. Idempotent."""
        with self._lock:
            self._stopping = True
            server = self._server
        if server is not None:
            server.request_exit()
        if self._wake is not None:
            try:
                self._wake[0].send(b"x")
            except OSError:
                pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self._socket is not None:
            self._socket.close()
        if self._wake is not None and (self._thread is None or not self._thread.is_alive()):
            for end in self._wake:
                end.close()
            self._wake = None
        self._thread = None

    def __enter__(self) -> RpcServer:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def route_by_prefix(routes: Mapping[str, ASGIApp], fallback: ASGIApp | None = None) -> ASGIApp:
    """Dispatch HTTP requests to the app whose path prefix matches (longest first)."""
    ordered = sorted(routes.items(), key=lambda item: -len(item[0]))

    async def app(scope: dict, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        for prefix, target in ordered:
            if path.startswith(prefix):
                await target(scope, receive, send)
                return
        if fallback is not None:
            await fallback(scope, receive, send)
        else:
            await send_connect_error(send, "unimplemented", f"no service at {path}")

    return app
