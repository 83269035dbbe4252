"""Calls from this driver to a named actor that another driver of the cluster created.

Such an actor is not this driver's to restart or to kill for good. Its calls go, in submission
order, over the stream protocol to the actor's gate for other drivers (`foreign_calls.py`),
pipelined as the owner's calls are, with every top-level argument value sent along. Where the
actor offers no gate, or it cannot be reached, they go over the actor's ActorService (Iris's
protocol) one at a time.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fray_ray._private import messages
from fray_ray._private.core.execution import error_results, make_task_error, package_results, resolve_arguments
from fray_ray._private.core.task_spec import ActorCallSpec, ActorCreationSpec
from fray_ray._private.driver.actor_restarts import died_error
from fray_ray._private.messages import CallDone, CallMethod
from fray_ray._private.objects.serialization import SerializedValue
from fray_ray._private.stream.protocol import Connection, ConnectionClosed, RemoteError
from fray_ray._private.stream.stream_server import introduce

logger = logging.getLogger(__name__)

#: Completes a call with its result values (one per return).
CompleteCall = Callable[[ActorCallSpec, Sequence[SerializedValue]], None]
#: Waits for this session's objects and returns their values (raising their errors).
ResolveValues = Callable[[Sequence[bytes]], Mapping[bytes, Any]]
#: Waits for this session's objects and returns their stored values (errors as values).
StoredValues = Callable[[Sequence[bytes]], Mapping[bytes, SerializedValue]]

#: How long connecting to an actor's gate may take before its calls use ActorService instead.
GATE_CONNECT_TIMEOUT_S = 5.0


class RemoteActor:
    """The sending end for one adopted actor: a thread that sends its calls in order."""

    def __init__(
        self,
        handle: Any,
        spec: ActorCreationSpec,
        complete: CompleteCall,
        resolve: ResolveValues,
        stored: StoredValues,
        gate: Mapping[str, str] | None = None,
    ) -> None:
        """`gate`: the actor's {"address", "token"} for other drivers' calls, if it has one."""
        self._handle = handle
        self._spec = spec
        self._complete = complete
        self._resolve = resolve
        self._stored = stored
        self._gate = dict(gate) if gate else None
        self._stream: Connection | None = None  # used by the sending thread only
        self._lock = threading.Lock()  # guards _in_flight and _stream_lost
        self._in_flight: dict[bytes, ActorCallSpec] = {}  # sent over the stream, not answered
        self._stream_lost = False
        self._calls: queue.SimpleQueue[ActorCallSpec | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"remote-actor-{spec.class_name}", daemon=True)
        self._thread.start()

    def submit(self, call: ActorCallSpec) -> None:
        self._calls.put(call)

    def stop(self) -> None:
        self._calls.put(None)

    def kill(self, restart: bool) -> None:
        try:
            self._handle.kill(restart)
        except Exception:  # noqa: BLE001 - it may be gone already
            pass

    def _run(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                if self._stream is not None:
                    self._stream.close()  # calls still unanswered fail (`_stream_closed`)
                return
            if call.num_returns in ("streaming", "dynamic"):
                error = ValueError("generator methods of another driver's actor cannot be called from here")
                self._fail(call, self._task_error(call, error))
                continue
            stream = self._stream_connection()
            if stream is None or not self._send_over(stream, call):
                self._call_through_service(call)

    def _fail(self, call: ActorCallSpec, error: BaseException) -> None:
        self._complete(call, error_results(error, len(call.return_ids)))

    def _task_error(self, call: ActorCallSpec, exc: BaseException) -> BaseException:
        return make_task_error(exc, f"{self._spec.class_name}.{call.method}", actor_repr=self._spec.class_name)

    # ---- over the stream protocol --------------------------------------------------------

    def _stream_connection(self) -> Connection | None:
        """The connection to the actor's gate, made on first use; None: use ActorService."""
        if self._stream is not None or self._gate is None:
            return self._stream
        gate, self._gate = self._gate, None  # one attempt: an unreachable gate stays unused
        try:
            connection, _ = introduce(
                gate["address"], {"token": gate["token"]},
                name=f"remote-actor-{self._spec.class_name}", timeout=GATE_CONNECT_TIMEOUT_S,
            )
        except (ConnectionClosed, RemoteError, OSError, ValueError, KeyError) as exc:
            logger.info("calling %s through ActorService: its gate %s is unreachable (%s)",
                        self._spec.class_name, gate.get("address"), exc)
            return None
        connection.add_close_callback(self._stream_closed)
        connection.start(messages.handlers({CallDone: self._on_done}))
        self._stream = connection
        return connection

    def _send_over(self, connection: Connection, call: ActorCallSpec) -> bool:
        """Send `call` to the actor's gate; False if that connection is gone (use ActorService)."""
        try:
            stored = call.arguments.stored
            values = self._stored(call.arguments.top_level if stored is None else (*call.arguments.top_level, stored))
        except BaseException as exc:  # noqa: BLE001 - an argument freed before it could be sent
            self._fail(call, self._task_error(call, exc))
            return True
        # Every value goes along: the actor can fetch objects from its owner only.
        message = CallMethod.of(call, values.get, inline_limit=None)
        with self._lock:
            if self._stream_lost:
                return False
            self._in_flight[call.call_id] = call
        try:
            messages.notify(connection, message)
        except ConnectionClosed:
            pass  # the connection's close fails the call (`_stream_closed`)
        return True

    def _on_done(self, connection: Connection, message_id: int | None, done: CallDone) -> None:
        with self._lock:
            call = self._in_flight.pop(done.call, None)
        if call is not None:
            self._complete(call, done.results)

    def _stream_closed(self, connection: Connection) -> None:
        """The actor's process ended (or closed its gate): calls sent and not answered die with
        it, as the owner's would; later ones try ActorService."""
        with self._lock:
            self._stream_lost = True
            unanswered, self._in_flight = list(self._in_flight.values()), {}
        for call in unanswered:
            self._fail(call, died_error(self._spec.class_name, self._spec.actor_id, "process_died",
                                        "its connection to this driver closed while the call ran"))

    # ---- over ActorService ---------------------------------------------------------------

    def _call_through_service(self, call: ActorCallSpec) -> None:
        try:
            value = call.arguments.value
            if call.arguments.stored is not None:
                value = self._stored([call.arguments.stored])[call.arguments.stored]
            args, kwargs = resolve_arguments(value, self._resolve, call.arguments.top_level)
            result = self._handle.call(call.method, *args, **kwargs)
            values = package_results(result, call.num_returns, f"{self._spec.class_name}.{call.method}")
        except BaseException as exc:  # noqa: BLE001 - the caller's refs carry it
            from fray_ray.fray import ActorUnavailableError

            if isinstance(exc, ActorUnavailableError):
                error: BaseException = died_error(self._spec.class_name, self._spec.actor_id,
                                                  "process_died", f"it is unreachable: {exc}")
            else:
                error = self._task_error(call, exc)
            values = error_results(error, len(call.return_ids))
        self._complete(call, values)
