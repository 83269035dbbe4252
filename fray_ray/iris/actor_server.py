"""ActorServer: serves Python objects over `iris.actor.ActorService`.

Every registered object's public callables are its methods. Arguments, results and exceptions
travel as cloudpickle. Iris runs calls concurrently on a shared pool; here each actor may also
have a concurrency limit (`max_concurrency=1` gives Ray's one-call-at-a-time, in arrival
order), because upper layers promise Ray's semantics.

Long calls use operations: StartOperation returns at once, GetOperation reports the state and
forgets a terminal operation after reporting it once, CancelOperation sets a flag that the
method can poll with `operation_cancelled()`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import logging
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from fray_ray.iris.rpc import actor_pb2
from fray_ray.iris.rpc.actor_connect import ActorServiceASGIApplication
from fray_ray.iris.transport import DEFAULT_MAX_REQUEST_BYTES, BearerAuth, RpcServer

logger = logging.getLogger(__name__)

DEFAULT_THREADS = 32
_current_cancel_flag: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "iris_operation_cancel", default=None
)


def operation_cancelled() -> bool:
    """Inside a method started as an operation: True once CancelOperation was received."""
    flag = _current_cancel_flag.get()
    return flag is not None and flag.is_set()


def public_methods(instance: object) -> dict[str, Callable[..., Any]]:
    """The callables an actor exposes: public, callable attributes."""
    methods = {}
    for name in dir(instance):
        if name.startswith("_"):
            continue
        try:
            attribute = getattr(instance, name)
        except Exception:  # noqa: BLE001 - a property may raise; it is not a method
            continue
        if callable(attribute):
            methods[name] = attribute
    return methods


def encode_error(exc: BaseException) -> actor_pb2.ActorError:
    """An ActorError carrying the exception pickled, with its traceback text attached."""
    try:
        exc.remote_traceback = "".join(traceback.format_exception(exc))  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        pass
    try:
        payload = cloudpickle.dumps(exc)
    except Exception:  # noqa: BLE001 - unpicklable exceptions still report type and message
        payload = b""
    return actor_pb2.ActorError(error_type=type(exc).__name__, message=str(exc), serialized_exception=payload)


@dataclass
class _HostedActor:
    name: str
    instance: object
    methods: dict[str, Callable[..., Any]]
    executor: concurrent.futures.Executor
    owns_executor: bool
    registered_at_ms: int
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass
class _Operation:
    operation_id: str
    future: concurrent.futures.Future
    cancel_flag: threading.Event


class ActorServer:
    """Serve actors on host:port. Start with `start()` (or `with`), stop with `stop()`."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_threads: int = DEFAULT_THREADS,
        token: str | None = None,
        read_max_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    ) -> None:
        self._lock = threading.Lock()  # guards _actors and _operations
        self._actors: dict[str, _HostedActor] = {}
        self._operations: dict[str, _Operation] = {}
        self._shared_executor = concurrent.futures.ThreadPoolExecutor(max_threads, thread_name_prefix="actor-call")
        app = ActorServiceASGIApplication(_ActorService(self), read_max_bytes=read_max_bytes)
        self._server = RpcServer(
            BearerAuth(app, token) if token else app, host=host, port=port, name="actor-server",
            start_on_first_connection=True,  # most actors are only ever called over the session stream
        )

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> ActorServer:
        self._server.start()
        return self

    def stop(self) -> None:
        """Stop serving, then stop the call threads (running calls are not interrupted)."""
        self._server.stop()
        with self._lock:
            actors = list(self._actors.values())
            self._actors.clear()
            self._operations.clear()
        for actor in actors:
            if actor.owns_executor:
                actor.executor.shutdown(wait=False, cancel_futures=True)
        self._shared_executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ActorServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def url(self) -> str:
        return self._server.url

    def address_for(self, advertise_host: str) -> str:
        """The URL other hosts should use: `http://<advertise_host>:<port>`."""
        return f"http://{advertise_host}:{self.port}"

    # ---- actors --------------------------------------------------------------------------

    def register(
        self,
        name: str,
        instance: object,
        *,
        max_concurrency: int | None = None,
        metadata: dict[str, str] | None = None,
    ) -> str:
        """Serve `instance` under `name`. `max_concurrency=None` lets calls run unbounded."""
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if max_concurrency is None:
            executor, owns = self._shared_executor, False
        else:
            executor = concurrent.futures.ThreadPoolExecutor(max_concurrency, thread_name_prefix=f"actor-{name[-24:]}")
            owns = True
        hosted = _HostedActor(
            name, instance, public_methods(instance), executor, owns, int(time.time() * 1000), dict(metadata or {})
        )
        with self._lock:
            previous = self._actors.get(name)
            self._actors[name] = hosted
        if previous is not None and previous.owns_executor:
            previous.executor.shutdown(wait=False)
        return name

    def add_alias(self, name: str, alias: str) -> None:
        """Answer calls addressed to `alias` as calls to the actor registered as `name` (one
        instance, one executor, so its order and concurrency limit hold across both names).
        KeyError if nothing is registered as `name`."""
        with self._lock:
            self._actors[alias] = self._actors[name]

    def unregister(self, name: str) -> None:
        with self._lock:
            hosted = self._actors.pop(name, None)
            still_served = any(other is hosted for other in self._actors.values())
        if hosted is not None and hosted.owns_executor and not still_served:
            hosted.executor.shutdown(wait=False)

    def _lookup(self, actor_name: str) -> _HostedActor | None:
        with self._lock:
            if actor_name:
                return self._actors.get(actor_name)
            return next(iter(self._actors.values()), None)

    def _respond(self, hosted: _HostedActor, call: actor_pb2.ActorCall) -> actor_pb2.ActorResponse:
        """Runs on the actor's executor thread: the call and its (de)serialisation, as a response."""
        try:
            result = self._invoke(hosted, call, None)
            return actor_pb2.ActorResponse(serialized_value=cloudpickle.dumps(result))
        except Exception as exc:  # noqa: BLE001 - the caller receives every failure
            return actor_pb2.ActorResponse(error=encode_error(exc))

    def _invoke(self, hosted: _HostedActor, call: actor_pb2.ActorCall, cancel_flag: threading.Event | None) -> Any:
        """Runs on the actor's executor thread: decode, call, return the raw result."""
        method = hosted.methods[call.method_name]
        args = cloudpickle.loads(call.serialized_args) if call.serialized_args else ()
        kwargs = cloudpickle.loads(call.serialized_kwargs) if call.serialized_kwargs else {}
        token = _current_cancel_flag.set(cancel_flag)
        try:
            result = method(*args, **kwargs)
            if inspect.iscoroutine(result):  # an `async def` method runs to completion on this thread
                result = asyncio.run(result)
            return result
        finally:
            _current_cancel_flag.reset(token)


class _ActorService:
    """The async ActorService handlers; method bodies run on actor executors."""

    def __init__(self, server: ActorServer) -> None:
        self._server = server

    def _resolve(self, call: actor_pb2.ActorCall) -> tuple[_HostedActor | None, str]:
        hosted = self._server._lookup(call.actor_name)
        if hosted is None:
            return None, f"no actor named {call.actor_name!r} is served here"
        if call.method_name not in hosted.methods:
            return None, f"actor {hosted.name!r} has no method {call.method_name!r}"
        return hosted, ""

    async def call(self, request: actor_pb2.ActorCall, ctx: Any) -> actor_pb2.ActorResponse:
        hosted, problem = self._resolve(request)
        if hosted is None:
            return actor_pb2.ActorResponse(error=actor_pb2.ActorError(error_type="NotFound", message=problem))
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(hosted.executor, self._server._respond, hosted, request)

    async def start_operation(self, request: actor_pb2.ActorCall, ctx: Any) -> actor_pb2.Operation:
        hosted, problem = self._resolve(request)
        if hosted is None:
            raise ConnectError(Code.NOT_FOUND, problem)
        operation_id = uuid.uuid4().hex
        cancel_flag = threading.Event()
        future = hosted.executor.submit(self._server._invoke, hosted, request, cancel_flag)
        with self._server._lock:
            self._server._operations[operation_id] = _Operation(operation_id, future, cancel_flag)
        return actor_pb2.Operation(operation_id=operation_id, state=actor_pb2.Operation.RUNNING)

    def _report(self, operation: _Operation, *, forget_if_done: bool = True) -> actor_pb2.Operation:
        message = actor_pb2.Operation(operation_id=operation.operation_id)
        future = operation.future
        if not future.done():
            message.state = actor_pb2.Operation.RUNNING if future.running() else actor_pb2.Operation.PENDING
            return message
        if operation.cancel_flag.is_set():
            message.state = actor_pb2.Operation.CANCELLED
        elif future.cancelled():
            message.state = actor_pb2.Operation.CANCELLED
        elif (exc := future.exception()) is not None:
            message.state = actor_pb2.Operation.FAILED
            message.error.CopyFrom(encode_error(exc))
        else:
            try:
                message.serialized_result = cloudpickle.dumps(future.result())
                message.state = actor_pb2.Operation.SUCCEEDED
            except Exception as exc:  # noqa: BLE001 - an unpicklable result is the caller's failure
                message.state = actor_pb2.Operation.FAILED
                message.error.CopyFrom(encode_error(exc))
        if forget_if_done:  # a terminal state is reported once by GetOperation, then forgotten
            with self._server._lock:
                self._server._operations.pop(operation.operation_id, None)
        return message

    def _operation(self, operation_id: str) -> _Operation:
        with self._server._lock:
            operation = self._server._operations.get(operation_id)
        if operation is None:
            raise ConnectError(Code.NOT_FOUND, f"no operation {operation_id!r} (unknown, or already reported)")
        return operation

    async def get_operation(self, request: actor_pb2.OperationId, ctx: Any) -> actor_pb2.Operation:
        return self._report(self._operation(request.operation_id))

    async def cancel_operation(self, request: actor_pb2.OperationId, ctx: Any) -> actor_pb2.Operation:
        operation = self._operation(request.operation_id)
        operation.cancel_flag.set()
        operation.future.cancel()  # only succeeds while still queued
        return self._report(operation, forget_if_done=False)

    async def health_check(self, request: actor_pb2.Empty, ctx: Any) -> actor_pb2.HealthResponse:
        return actor_pb2.HealthResponse(healthy=True)

    async def list_methods(self, request: actor_pb2.ListMethodsRequest, ctx: Any) -> actor_pb2.ListMethodsResponse:
        hosted = self._server._lookup(request.actor_name)
        if hosted is None:
            raise ConnectError(Code.NOT_FOUND, f"no actor named {request.actor_name!r} is served here")
        infos = []
        for name, method in sorted(hosted.methods.items()):
            try:
                signature = str(inspect.signature(method))
            except (TypeError, ValueError):
                signature = "(...)"
            infos.append(actor_pb2.MethodInfo(name=name, signature=signature, docstring=inspect.getdoc(method) or ""))
        return actor_pb2.ListMethodsResponse(methods=infos)

    async def list_actors(self, request: actor_pb2.ListActorsRequest, ctx: Any) -> actor_pb2.ListActorsResponse:
        with self._server._lock:
            actors = list({id(a): a for a in self._server._actors.values()}.values())  # aliases once
        return actor_pb2.ListActorsResponse(
            actors=[
                actor_pb2.ActorInfo(
                    name=a.name, actor_id=a.name, registered_at_ms=a.registered_at_ms, metadata=a.metadata
                )
                for a in actors
            ]
        )
