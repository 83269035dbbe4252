"""Connection limits for the Connect servers: what a client can make a server hold open.

uvicorn (0.54, httptools) leaves gaps that ASGI middleware cannot close, because middleware
only runs once a request's headers are complete:

- its keep-alive timer is armed only after a response, so a connection that never sends a
  request, or sends its headers a byte at a time (every byte cancels the timer), lives forever;
- it has no limit on the size of a request head;
- its only connection cap, `limit_concurrency`, answers 503 to everyone once reached, so a
  flood of idle sockets would lock out authenticated callers too.

`LimitedHttpProtocol` (uvicorn's httptools protocol with these limits) adds a deadline for each
request head, a pause limit between body chunks, a head-size limit, and a cap on open
connections that, when reached, closes the oldest connection that has not yet sent anything
(then the longest idle one between requests) instead of refusing the newcomer. Connections
still waiting on a request head are never the victims while they have bytes waiting to be read,
so a real client that connects and writes at once survives a flood of silent ones.
"""

from __future__ import annotations

import array
import asyncio
import enum
import fcntl
import logging
import resource
import termios
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

logger = logging.getLogger(__name__)

#: How many of the oldest candidates an eviction inspects for bytes waiting to be read.
_EVICTION_SCAN = 64


@dataclass(frozen=True)
class ConnectionLimits:
    """Per-server limits on HTTP connections (see the module docstring)."""

    #: A request line and its headers must be complete this many seconds after the connection
    #: opens, or after the first byte of a later request on a kept-alive connection.
    header_timeout_s: float = 10.0
    #: Longest pause between two pieces of a request body.
    body_timeout_s: float = 30.0
    #: Idle time allowed between requests on a kept-alive connection (Iris uses 120 s).
    keep_alive_s: float = 120.0
    #: Largest request line plus headers.
    max_head_bytes: int = 64 * 1024
    #: Open connections per server (also never more than half the process's descriptor limit).
    max_connections: int = 4096

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if self.max_head_bytes < 1024:
            raise ValueError("max_head_bytes must be at least 1024")
        if self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")

    def effective_max_connections(self) -> int:
        """`max_connections`, lowered to half the soft RLIMIT_NOFILE so accepting never fails."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return min(self.max_connections, max(16, soft // 2))


class _Phase(enum.Enum):
    FRESH = "fresh"  # connected; no complete request head yet
    HEAD = "head"  # kept alive, now receiving the next request's head
    BUSY = "busy"  # a request is being received or answered
    IDLE = "idle"  # kept alive between requests


class ConnectionTable:
    """The open connections of one server, in the order eviction would pick them.

    Lives on the server's event loop thread; never touched from elsewhere.
    """

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.capacity = limits.effective_max_connections()
        # dicts as ordered sets: insertion order is the order in which a connection became
        # fresh (connected) or idle (answered), so the first entry is the best victim
        self._fresh: dict[LimitedHttpProtocol, None] = {}
        self._idle: dict[LimitedHttpProtocol, None] = {}
        self._others: set[LimitedHttpProtocol] = set()
        self.evicted = 0
        self.refused = 0
        self.timed_out = 0

    def __len__(self) -> int:
        return len(self._fresh) + len(self._idle) + len(self._others)

    def admit(self, connection: LimitedHttpProtocol) -> bool:
        """Make room for `connection` if the server is full; False if nothing can go."""
        if len(self) >= self.capacity:
            victim = self._victim()
            if victim is None:
                self.refused += 1
                return False
            self.evicted += 1
            victim.evict()
        self._fresh[connection] = None
        return True

    def _victim(self) -> LimitedHttpProtocol | None:
        fallback = None
        for index, candidate in enumerate(self._fresh):
            if fallback is None:
                fallback = candidate
            if index >= _EVICTION_SCAN:
                break
            if not candidate.has_unread_bytes():
                return candidate
        if self._idle:
            return next(iter(self._idle))
        return fallback

    def move(self, connection: LimitedHttpProtocol, phase: _Phase) -> None:
        self._fresh.pop(connection, None)
        self._idle.pop(connection, None)
        self._others.discard(connection)
        if phase is _Phase.IDLE:
            self._idle[connection] = None
        else:
            self._others.add(connection)

    def remove(self, connection: LimitedHttpProtocol) -> None:
        self._fresh.pop(connection, None)
        self._idle.pop(connection, None)
        self._others.discard(connection)


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of a `ConnectionTable`.

    Build it with `functools.partial(LimitedHttpProtocol, table=...)` as `uvicorn.Config(http=...)`.
    """

    def __init__(self, *args: Any, table: ConnectionTable, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._table = table
        self._phase = _Phase.FRESH
        self._head_bytes = 0  # bytes received since the current head began
        self._head_size = 0  # request line and header bytes parsed so far
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_pending = False
        self._gone = False

    # ---- lifecycle -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self._table.admit(self):
            self._gone = True
            transport.abort()
            return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone = True
        self._cancel_timers()
        self._table.remove(self)
        super().connection_lost(exc)

    def evict(self) -> None:
        """Close this connection to make room (it has sent nothing, or sits idle)."""
        self._gone = True
        self._cancel_timers()
        self._table.remove(self)
        self.transport.abort()

    def has_unread_bytes(self) -> bool:
        """True if the kernel holds bytes from the client that were not read yet."""
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return False
        waiting = array.array("i", [0])
        try:
            fcntl.ioctl(sock.fileno(), termios.FIONREAD, waiting)
        except OSError:
            return False
        return waiting[0] > 0

    # ---- receiving -----------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._gone:
            return
        if self._phase is _Phase.IDLE:  # the first byte of the next request on a kept-alive connection
            self._set_phase(_Phase.HEAD)
            self._head_bytes = 0
            self._arm_head_timer()
        reading_head = self._phase in (_Phase.FRESH, _Phase.HEAD)
        if reading_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._gone or self.transport.is_closing():
            return
        if self._phase in (_Phase.FRESH, _Phase.HEAD) and self._head_bytes > self._table.limits.max_head_bytes:
            self._refuse_head()
        elif self._body_pending:
            self._arm_body_timer()

    # httptools calls these as it parses; once a connection is refused, nothing more of what
    # it sent may reach uvicorn (or the app).

    def on_message_begin(self) -> None:
        if not self._gone:
            self._head_size = 0
            super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        if not self._gone:
            self._head_size += len(url)
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._gone:
            return
        self._head_size += len(name) + len(value) + 4
        if self._head_size > self._table.limits.max_head_bytes:
            self._refuse_head()
            return
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._gone:
            return
        self._cancel_head_timer()
        self._set_phase(_Phase.BUSY)
        self._body_pending = True
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._gone:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._gone:
            return
        self._body_pending = False
        self._cancel_body_timer()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._gone or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a pipelined request is now running
        self._set_phase(_Phase.IDLE)

    # ---- limits --------------------------------------------------------------------------

    def _set_phase(self, phase: _Phase) -> None:
        if phase is not self._phase:
            self._phase = phase
            self._table.move(self, phase)

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self._table.limits.header_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _arm_body_timer(self) -> None:
        self._cancel_body_timer()
        self._body_timer = self.loop.call_later(self._table.limits.body_timeout_s, self._body_timed_out)

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._gone and self._phase in (_Phase.FRESH, _Phase.HEAD):
            self._table.timed_out += 1
            self.transport.abort()

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if not self._gone and self._body_pending:
            self._table.timed_out += 1
            self.transport.abort()

    def _refuse_head(self) -> None:
        if self._gone:
            return
        self._cancel_timers()
        self._gone = True
        body = b"request head too large\n"
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body
        )
        self.transport.close()
