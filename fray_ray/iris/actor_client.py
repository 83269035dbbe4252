"""ActorClient: calls an actor served over `iris.actor.ActorService`, found by name.

The name is resolved lazily and again after a connection failure, so an actor that restarts
elsewhere is found at its new address. Failed calls that never reached a server are retried
with backoff; an exception raised by the method is re-raised here with its original type.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle

from fray_ray.iris.controller_client import Backoff
from fray_ray.iris.errors import ActorCallError, NotFound, Unavailable, translate_connect_errors
from fray_ray.iris.http_clients import http_client_for
from fray_ray.iris.resolver import Resolver
from fray_ray.iris.rpc import actor_pb2
from fray_ray.iris.rpc.actor_connect import ActorServiceClientSync
from fray_ray.iris.types import EndpointInfo


class OperationState(enum.IntEnum):
    PENDING = 0
    RUNNING = 1
    SUCCEEDED = 2
    FAILED = 3
    CANCELLED = 4

    @property
    def finished(self) -> bool:
        return self >= OperationState.SUCCEEDED


@dataclass(frozen=True)
class OperationStatus:
    """What GetOperation reported. `result()` returns the value or raises the method's error."""

    operation_id: str
    state: OperationState
    _payload: bytes = b""
    _error: actor_pb2.ActorError | None = None

    def result(self) -> Any:
        if self.state is OperationState.SUCCEEDED:
            return cloudpickle.loads(self._payload) if self._payload else None
        if self.state is OperationState.FAILED and self._error is not None:
            raise decode_error(self._error)
        if self.state is OperationState.CANCELLED:
            raise ActorCallError("Cancelled", f"operation {self.operation_id} was cancelled")
        raise RuntimeError(f"operation {self.operation_id} is still {self.state.name.lower()}")


@dataclass(frozen=True)
class CallOutcome:
    """What one Call came back with: the method's `value`, or the `error` it raised.

    `not_found` is True when the server has no such actor or method (the call never ran).
    """

    value: Any = None
    error: BaseException | None = None
    not_found: bool = False

    def unwrap(self) -> Any:
        """The value, or raise the error."""
        if self.error is not None:
            raise self.error
        return self.value


def decode_error(error: actor_pb2.ActorError) -> BaseException:
    """The exception an actor raised, rebuilt; ActorCallError/NotFound when it cannot be."""
    if error.serialized_exception:
        try:
            exc = cloudpickle.loads(error.serialized_exception)
            if isinstance(exc, BaseException):
                return exc
        except Exception:  # noqa: BLE001 - fall through to a generic error naming the type
            pass
    if error.error_type == "NotFound":
        return NotFound(error.message, method="Call")
    return ActorCallError(error.error_type, error.message)


class ActorClient:
    """Calls to the actor registered as `name`. Thread-safe."""

    def __init__(
        self,
        resolver: Resolver,
        name: str,
        *,
        call_timeout: float | None = None,
        max_call_attempts: int = 10,
        backoff: Callable[[], Backoff] = lambda: Backoff(0.05, 2.0, 2.0),
        token: str | None = None,
        actor_name: str = "",
    ) -> None:
        """`actor_name` selects one of several actors served by the same server (empty: the first)."""
        self._resolver = resolver
        self.name = name
        self._actor_name = actor_name
        self._call_timeout_ms = None if call_timeout is None else int(call_timeout * 1000)
        self._max_call_attempts = max(1, max_call_attempts)
        self._new_backoff = backoff
        self._token = token
        self._lock = threading.Lock()  # guards the cached endpoint and stub
        self._endpoint: EndpointInfo | None = None
        self._stub: ActorServiceClientSync | None = None

    def close(self) -> None:
        with self._lock:
            stub, self._stub, self._endpoint = self._stub, None, None
        if stub is not None:
            stub.close()

    def __enter__(self) -> ActorClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- connection ----------------------------------------------------------------------

    def _connect(self) -> tuple[ActorServiceClientSync, dict[str, str]]:
        with self._lock:
            if self._stub is None:
                endpoints = self._resolver.resolve(self.name)
                if not endpoints:
                    raise Unavailable(f"no endpoint registered for actor {self.name!r}", method="resolve")
                self._endpoint = endpoints[0]
                self._stub = ActorServiceClientSync(
                    self._endpoint.url, accept_compression=[], send_compression=None, timeout_ms=self._call_timeout_ms,
                    http_client=http_client_for(self._endpoint.url),
                )
            headers = dict(self._endpoint.metadata) if self._endpoint is not None else {}
            # An endpoint that names its own credentials (an actor server's secret) knows best;
            # otherwise the client's token (the cluster's) is what actor servers accept.
            if self._token and "authorization" not in {key.lower() for key in headers}:
                headers["authorization"] = f"Bearer {self._token}"
            return self._stub, headers

    def _forget_connection(self) -> None:
        with self._lock:
            stub, self._stub, self._endpoint = self._stub, None, None
        if stub is not None:
            stub.close()

    @property
    def address(self) -> str | None:
        """The URL currently in use, resolving the name if needed."""
        self._connect()
        return self._endpoint.url if self._endpoint else None

    def _rpc(self, method: str, invoke: Callable[[ActorServiceClientSync, dict[str, str]], Any]) -> Any:
        """Run one RPC, re-resolving and retrying while the actor is unreachable."""
        backoff = self._new_backoff()
        for attempt in range(1, self._max_call_attempts + 1):
            try:
                stub, headers = self._connect()
                with translate_connect_errors(method):
                    return invoke(stub, headers)
            except Unavailable:
                self._forget_connection()
                if attempt == self._max_call_attempts:
                    raise
                time.sleep(backoff.next_delay())
        raise AssertionError("unreachable")

    # ---- calls ---------------------------------------------------------------------------

    def _encode(self, method: str, args: Sequence[Any], kwargs: dict[str, Any]) -> actor_pb2.ActorCall:
        return actor_pb2.ActorCall(
            method_name=method,
            actor_name=self._actor_name,
            serialized_args=cloudpickle.dumps(tuple(args)) if args else b"",
            serialized_kwargs=cloudpickle.dumps(kwargs) if kwargs else b"",
        )

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call `method` and block for its result; raises what the method raised."""
        return self.call_outcome(method, *args, **kwargs).unwrap()

    def call_outcome(self, method: str, *args: Any, **kwargs: Any) -> CallOutcome:
        """Call `method` and block; return what the method did instead of raising it.

        Raises only when the call did not complete (`Unavailable` and other `IrisRpcError`s
        after retries), so callers can tell a lost actor from a method that raised.
        """
        request = self._encode(method, args, kwargs)
        response = self._rpc(
            "Call", lambda stub, headers: stub.call(request, headers=headers, timeout_ms=self._call_timeout_ms)
        )
        if response.WhichOneof("result") == "error":
            error = response.error
            not_found = error.error_type == "NotFound" and not error.serialized_exception
            return CallOutcome(error=decode_error(error), not_found=not_found)
        return CallOutcome(value=cloudpickle.loads(response.serialized_value))

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.call(method, *args, **kwargs)

    def start_operation(self, method: str, *args: Any, **kwargs: Any) -> str:
        """Start a long call; returns its operation id at once."""
        request = self._encode(method, args, kwargs)
        operation = self._rpc("StartOperation", lambda stub, headers: stub.start_operation(request, headers=headers))
        return operation.operation_id

    def get_operation(self, operation_id: str) -> OperationStatus:
        """The operation's state. A terminal state is reported once, then the server forgets it."""
        request = actor_pb2.OperationId(operation_id=operation_id)
        return _status(self._rpc("GetOperation", lambda stub, headers: stub.get_operation(request, headers=headers)))

    def cancel_operation(self, operation_id: str) -> OperationStatus:
        """Ask the method to stop (cooperative); its result will be discarded."""
        request = actor_pb2.OperationId(operation_id=operation_id)
        return _status(self._rpc("CancelOperation", lambda stub, headers: stub.cancel_operation(request, headers=headers)))

    def run_operation(
        self, method: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None, *, timeout: float | None = None,
        poll_interval: float = 1.0,
    ) -> Any:
        """Start `method` as an operation and poll until it ends.

        Raises TimeoutError (after cancelling the operation) when `timeout` passes first.
        """
        operation_id = self.start_operation(method, *args, **(kwargs or {}))
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = min(0.02, poll_interval)
        while True:
            status = self.get_operation(operation_id)
            if status.state.finished:
                return status.result()
            if deadline is not None and time.monotonic() >= deadline:
                try:
                    self.cancel_operation(operation_id)
                except NotFound:
                    pass
                raise TimeoutError(f"{method} on {self.name} did not finish within {timeout} s")
            wait = delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic()))
            time.sleep(wait)
            delay = min(poll_interval, delay * 2)

    def health_check(self) -> bool:
        response = self._rpc("HealthCheck", lambda stub, headers: stub.health_check(actor_pb2.Empty(), headers=headers))
        return response.healthy

    def list_methods(self) -> list[tuple[str, str, str]]:
        """(name, signature, docstring) of each method of this actor."""
        request = actor_pb2.ListMethodsRequest(actor_name=self._actor_name)
        response = self._rpc("ListMethods", lambda stub, headers: stub.list_methods(request, headers=headers))
        return [(m.name, m.signature, m.docstring) for m in response.methods]

    def list_actors(self) -> list[str]:
        """Names of every actor served by the same server."""
        response = self._rpc(
            "ListActors", lambda stub, headers: stub.list_actors(actor_pb2.ListActorsRequest(), headers=headers)
        )
        return [a.name for a in response.actors]


def _status(operation: actor_pb2.Operation) -> OperationStatus:
    return OperationStatus(
        operation.operation_id,
        OperationState(operation.state),
        operation.serialized_result,
        operation.error if operation.HasField("error") else None,
    )
