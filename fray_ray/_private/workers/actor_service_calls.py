"""What Iris and Fray clients ask of a hosted actor over its ActorService: `call` a method,
`ping` it, `describe` it to another driver (which then sends calls to its gate)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from typing import Any

from fray_ray._private.workers.group_loops import GroupLoop
from fray_ray.exceptions import ActorDeathInfo, ActorDeathReason, ActorDiedError


class ActorServiceCalls:
    """`call`, `ping` and `describe`, a base of `RayActorHost`, on the host's state below."""

    _class_name: str
    _instance: Any
    _is_async: bool
    _loops: dict[str | None, GroupLoop]
    _methods_blob: bytes
    _created: threading.Event
    _creation_error: BaseException | None
    _killed: threading.Event

    def _submit_sync(self, group: str | None, fn: Any, *args: Any) -> None: ...

    def _open_foreign_gate(self) -> dict[str, str] | None: ...

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a method of the hosted instance (for Iris/Fray clients), in the actor's order."""
        self._created.wait()
        if self._creation_error is not None:
            raise creation_failed(self._class_name)
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                result = getattr(self._instance, method)(*args, **kwargs)
                if inspect.iscoroutine(result):
                    result = asyncio.run(result)
                future.set_result(result)
            except BaseException as exc:  # noqa: BLE001 - delivered to the caller
                future.set_exception(exc)

        if self._is_async:
            async def run_async() -> None:
                try:
                    result = getattr(self._instance, method)(*args, **kwargs)
                    if inspect.isawaitable(result):
                        result = await result
                    future.set_result(result)
                except BaseException as exc:  # noqa: BLE001 - delivered to the caller
                    future.set_exception(exc)

            self._loops[None].spawn(run_async)
        else:
            self._submit_sync(None, run)
        return future.result()

    def ping(self) -> bool:
        """True once the instance exists (for health checks)."""
        return self._created.is_set() and self._creation_error is None

    def describe(self) -> dict[str, Any]:
        """What another driver needs to make a handle: class name, method table, async-ness."""
        self._created.wait()
        if self._creation_error is not None:
            raise creation_failed(self._class_name)
        if self._killed.is_set():  # still ending: its name is already free, as in Ray
            raise ActorDiedError(ActorDeathInfo(ActorDeathReason.KILLED, class_name=self._class_name))
        return {"class_name": self._class_name, "methods": self._methods_blob, "is_async": self._is_async,
                "calls": self._open_foreign_gate()}


def creation_failed(class_name: str) -> BaseException:
    return ActorDiedError(ActorDeathInfo(
        ActorDeathReason.PROCESS_DIED, class_name=class_name, detail="Its creation task failed."
    ))
