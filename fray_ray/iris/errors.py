"""Errors of the Iris client layer, translated from Connect at one boundary.

    IrisError
    ├── IrisRpcError            a Connect error answered by a server (carries `.code`)
    │   ├── InvalidArgument       the request is malformed
    │   ├── NotFound              no such job, task, endpoint, actor or operation
    │   ├── AlreadyExists         a job with that name is still running
    │   ├── FailedPrecondition    the cluster is not in a state that allows it
    │   ├── Unauthenticated       missing or wrong bearer token
    │   ├── PermissionDenied
    │   ├── DeadlineExceeded
    │   └── Unavailable           nothing answered, or the server is going away
    └── ActorCallError          the actor answered with an error it could not pickle

Connect and protobuf exceptions never leave `fray_ray.iris`: `translate_connect_errors()` is
the only place they are caught. The server side uses the same tree: the embedded cluster
refuses a request by raising an `IrisRpcError` subclass, which its Connect service answers
with that class's `code`, so each Connect code has one name on both ends of the wire.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from connectrpc.code import Code
from connectrpc.errors import ConnectError


class IrisError(Exception):
    """Base class of every error raised by `fray_ray.iris`."""


class IrisRpcError(IrisError):
    """A Connect RPC failed; `code` is the Connect code name, e.g. `not_found`."""

    code: str = "unknown"

    def __init__(self, message: str, *, code: str | None = None, method: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.method = method

    def __str__(self) -> str:
        where = f"{self.method}: " if self.method else ""
        return f"{where}{self.message} ({self.code})"


class InvalidArgument(IrisRpcError, ValueError):
    """The server rejected the request as malformed."""

    code = "invalid_argument"


class NotFound(IrisRpcError, LookupError):
    """The job, task, endpoint, actor or operation does not exist."""

    code = "not_found"


class AlreadyExists(IrisRpcError):
    """A job with this name exists and the existing-job policy forbids replacing it."""

    code = "already_exists"


class FailedPrecondition(IrisRpcError):
    """The request is valid but the cluster cannot honour it now (or ever, for resources)."""

    code = "failed_precondition"


class Unauthenticated(IrisRpcError, PermissionError):
    """No valid `Authorization: Bearer <token>` was sent."""

    code = "unauthenticated"


class PermissionDenied(IrisRpcError, PermissionError):
    """The caller may not do this."""

    code = "permission_denied"


class DeadlineExceeded(IrisRpcError, TimeoutError):
    """The RPC did not finish within its deadline."""

    code = "deadline_exceeded"


class Unavailable(IrisRpcError, ConnectionError):
    """Nothing answered at the address, or the server is shutting down. Safe to retry."""

    code = "unavailable"


class ActorCallError(IrisError, RuntimeError):
    """An actor method failed and its exception could not be rebuilt here."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message


_BY_CODE: dict[Code, type[IrisRpcError]] = {
    Code.INVALID_ARGUMENT: InvalidArgument,
    Code.NOT_FOUND: NotFound,
    Code.ALREADY_EXISTS: AlreadyExists,
    Code.FAILED_PRECONDITION: FailedPrecondition,
    Code.UNAUTHENTICATED: Unauthenticated,
    Code.PERMISSION_DENIED: PermissionDenied,
    Code.DEADLINE_EXCEEDED: DeadlineExceeded,
    Code.UNAVAILABLE: Unavailable,
}


def error_from_connect(exc: ConnectError, method: str | None = None) -> IrisRpcError:
    """The `IrisRpcError` subclass matching a Connect error's code."""
    cls = _BY_CODE.get(exc.code, IrisRpcError)
    return cls(exc.message or str(exc), code=exc.code.value, method=method)


@contextlib.contextmanager
def translate_connect_errors(method: str | None = None) -> Iterator[None]:
    """Re-raise Connect errors and socket failures as `IrisRpcError`s, chained with `from`."""
    try:
        yield
    except ConnectError as exc:
        raise error_from_connect(exc, method) from exc
    except (ConnectionError, OSError) as exc:
        raise Unavailable(f"cannot reach the server: {exc}", method=method) from exc
