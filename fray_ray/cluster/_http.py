"""The controller's HTTP surface: Connect services, `GET /health`, bearer auth, request limits.

`RequestGuard` stands in front of the generated Connect applications so that no request body
can hurt the server: it refuses bodies over `read_max_bytes` (by header, while streaming, and
after gzip or zstd decompression, so a small compressed bomb cannot expand in memory), gives up
quietly on a client that disconnects mid-body, and answers a body that does not parse as the
method's request message with `invalid_argument`. What it passes on is a complete,
identity-encoded body.

finelog's LogService answers at every path Iris clients use for it (`LOG_SERVICE_ALIASES`), and
compresses its answers with zstd or gzip when the client accepts them, as Iris controllers do.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import zstandard
from connectrpc.compression.gzip import GzipCompression
from connectrpc.compression.zstd import ZstdCompression
from google.protobuf import json_format
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from fray_ray.cluster._dashboard import with_dashboard
from fray_ray.iris.rpc import controller_pb2, finelog_logging_pb2
from fray_ray.iris.rpc.controller_connect import ControllerServiceASGIApplication, EndpointServiceASGIApplication
from fray_ray.iris.rpc.finelog_logging_connect import LogServiceASGIApplication
from fray_ray.iris.transport import ASGIApp, BearerAuth, route_by_prefix, send_connect_error

HEALTH_PATH = "/health"
LOG_SERVICE_PATH = "/finelog.logging.LogService/"
#: Other paths Iris clients reach the log service at: the name it had before finelog, and the
#: controller's endpoint proxy in front of the `/system/log-server` endpoint (newest clients).
LOG_SERVICE_ALIASES = ("/iris.logging.LogService/", "/proxy/system.log-server/finelog.logging.LogService/")
#: Response encodings the log service offers, in preference order (Iris's: zstd first, fast level).
LOG_RESPONSE_COMPRESSIONS = (ZstdCompression(level=-1), GzipCompression())
_READ_CHUNK = 64 * 1024


def request_types(*services: str, file: FileDescriptor = controller_pb2.DESCRIPTOR) -> dict[str, type[Message]]:
    """`/pkg.Service/Method` → request message class, for the named services of `file`."""
    found: dict[str, type[Message]] = {}
    for service_name in services:
        service = file.services_by_name[service_name]
        for method in service.methods:
            found[f"/{service.full_name}/{method.name}"] = GetMessageClass(method.input_type)
    return found


def alias_paths(app: ASGIApp, aliases: Mapping[str, str]) -> ASGIApp:
    """Serve requests under each alias prefix as if they came to its canonical prefix."""

    async def rewritten(scope: dict, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        for alias, canonical in aliases.items():
            if path.startswith(alias):
                scope = dict(scope, path=canonical + path[len(alias) :])
                scope.pop("raw_path", None)
                break
        await app(scope, receive, send)

    return rewritten


class RequestGuard:
    """ASGI middleware that buffers, bounds, decompresses and checks unary request bodies."""

    def __init__(self, app: ASGIApp, *, read_max_bytes: int, request_types: Mapping[str, type[Message]]) -> None:
        self._app = app
        self._max = read_max_bytes
        self._types = dict(request_types)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", ())}
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self._max):
            await send_connect_error(
                send,
                "resource_exhausted",
                f"request body of {declared.decode(errors='replace')} bytes exceeds the limit of {self._max}",
            )
            return
        chunks = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away mid-request; nobody to answer
            body = message.get("body", b"")
            size += len(body)
            if size > self._max:
                await send_connect_error(
                    send, "resource_exhausted", f"request body exceeds the limit of {self._max} bytes"
                )
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        encoding = headers.get(b"content-encoding", b"identity").decode(errors="replace").strip().lower()
        if encoding in ("gzip", "zstd") and body:
            try:
                body = self._gunzip(body) if encoding == "gzip" else self._unzstd(body)
            except ValueError as exc:
                await send_connect_error(send, "resource_exhausted", str(exc))
                return
            except (zlib.error, zstandard.ZstdError) as exc:
                await send_connect_error(send, "invalid_argument", f"request body is not valid {encoding}: {exc}")
                return
        elif encoding not in ("identity", "", "gzip", "zstd"):
            await send_connect_error(
                send, "unimplemented", f"unsupported content-encoding {encoding!r}; use identity, gzip or zstd"
            )
            return
        problem = self._parse_problem(scope.get("path", ""), headers.get(b"content-type", b""), body)
        if problem is not None:
            await send_connect_error(send, "invalid_argument", problem)
            return
        scope = dict(scope)
        scope["headers"] = [
            (k, v) for k, v in scope.get("headers", ()) if k.lower() not in (b"content-encoding", b"content-length")
        ]
        scope["headers"].append((b"content-length", str(len(body)).encode()))
        delivered = False

        async def replay() -> dict:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self._app(scope, replay, send)

    def _gunzip(self, data: bytes) -> bytes:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = inflater.decompress(data, self._max + 1)
        if len(out) > self._max or inflater.unconsumed_tail:
            raise ValueError(f"decompressed request body exceeds the limit of {self._max} bytes")
        out += inflater.flush()
        if len(out) > self._max:
            raise ValueError(f"decompressed request body exceeds the limit of {self._max} bytes")
        return out

    def _unzstd(self, data: bytes) -> bytes:
        chunks = []
        size = 0
        with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
            while chunk := reader.read(_READ_CHUNK):
                size += len(chunk)
                if size > self._max:
                    raise ValueError(f"decompressed request body exceeds the limit of {self._max} bytes")
                chunks.append(chunk)
        return b"".join(chunks)

    def _parse_problem(self, path: str, content_type: bytes, body: bytes) -> str | None:
        message_type = self._types.get(path)
        if message_type is None:
            return None  # not ours to judge: the Connect app answers unknown paths and types
        kind = content_type.split(b";", 1)[0].strip().lower()
        try:
            if kind == b"application/proto":
                message_type().ParseFromString(body)
            elif kind == b"application/json":
                json_format.Parse(body or b"{}", message_type())
        except (DecodeError, json_format.ParseError, ValueError, UnicodeDecodeError) as exc:
            return f"malformed {path.rsplit('/', 1)[-1]} request: {exc}"
        return None


async def _health(scope: dict, receive: Any, send: Any) -> None:
    body = b"ok\n"
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def build_app(
    controller_service: object,
    endpoint_service: object,
    *,
    token: str | None,
    read_max_bytes: int,
    log_service: object | None = None,
    dashboard: ASGIApp | None = None,
) -> ASGIApp:
    """The whole controller app: routes, guard, and (with a token) bearer auth in front; the
    `dashboard` app, if given, answers its own paths (`/`, `/login`, `/dashboard/...`) and
    checks its own credentials (a session cookie or the bearer token)."""
    # compressions=() leaves only identity: controller responses are small and travel
    # uncompressed on loopback. Log pages can be large, so the log service compresses.
    routes: dict[str, ASGIApp] = {
        "/iris.cluster.ControllerService/": ControllerServiceASGIApplication(
            controller_service,
            read_max_bytes=read_max_bytes,
            compressions=(),  # type: ignore[arg-type]
        ),
        "/iris.cluster.EndpointService/": EndpointServiceASGIApplication(
            endpoint_service,
            read_max_bytes=read_max_bytes,
            compressions=(),  # type: ignore[arg-type]
        ),
        HEALTH_PATH: _health,
    }
    types = request_types("ControllerService", "EndpointService")
    if log_service is not None:
        routes[LOG_SERVICE_PATH] = LogServiceASGIApplication(
            log_service,  # type: ignore[arg-type]
            read_max_bytes=read_max_bytes,
            compressions=LOG_RESPONSE_COMPRESSIONS,
        )
        types.update(request_types("LogService", file=finelog_logging_pb2.DESCRIPTOR))
    app: ASGIApp = RequestGuard(route_by_prefix(routes), read_max_bytes=read_max_bytes, request_types=types)
    if log_service is not None:
        app = alias_paths(app, {alias: LOG_SERVICE_PATH for alias in LOG_SERVICE_ALIASES})
    if token:
        app = BearerAuth(app, token)
    if dashboard is not None:
        app = with_dashboard(dashboard, app)
    return app
