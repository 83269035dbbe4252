"""Calls from this driver to a named actor that another driver of the cluster created.

Such an actor is not this driver's to restart or to kill for good: its calls go over the
actor's ActorService (Iris's protocol), one at a time in submission order, so each caller's
calls keep their order.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fray_ray._private.actor_restarts import died_error
from fray_ray._private.execution import error_results, make_task_error, package_results, resolve_arguments
from fray_ray._private.serialization import SerializedValue
from fray_ray._private.task_spec import ActorCallSpec, ActorCreationSpec

#: Completes a call with its result values (one per return).
CompleteCall = Callable[[ActorCallSpec, Sequence[SerializedValue]], None]
#: Waits for this session's objects and returns their values (raising their errors).
ResolveValues = Callable[[Sequence[bytes]], Mapping[bytes, Any]]


class RemoteActor:
    """The sending end for one adopted actor: a thread that makes its calls in order."""

    def __init__(self, handle: Any, spec: ActorCreationSpec, complete: CompleteCall, resolve: ResolveValues) -> None:
        self._handle = handle
        self._spec = spec
        self._complete = complete
        self._resolve = resolve
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
                return
            name = f"{self._spec.class_name}.{call.method}"
            try:
                if call.num_returns in ("streaming", "dynamic"):
                    raise ValueError("generator methods of another driver's actor cannot be called from here")
                args, kwargs = resolve_arguments(call.arguments.value, self._resolve, call.arguments.top_level)
                result = self._handle.call(call.method, *args, **kwargs)
                values = package_results(result, call.num_returns, name)
            except BaseException as exc:  # noqa: BLE001 - the caller's refs carry it
                from fray_ray.fray import ActorUnavailableError

                if isinstance(exc, ActorUnavailableError):
                    error: BaseException = died_error(self._spec.class_name, self._spec.actor_id,
                                                      "process_died", f"it is unreachable: {exc}")
                else:
                    error = make_task_error(exc, name, actor_repr=self._spec.class_name)
                values = error_results(error, len(call.return_ids))
            self._complete(call, values)
