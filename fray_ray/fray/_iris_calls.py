"""Calling Fray actors on Iris: handles, their methods, call futures, and the call threads.

A handle names one actor by its endpoint (`<job_id>/<name>-<index>`) and resolves the address
through the controller's endpoint registry when first used, and again after a failure (a
restarted replica serves elsewhere). Calls go over `iris.actor.ActorService`: a direct call
blocks on this thread, `.remote()` runs the same call on one of the client's `CallThreads`
and returns a `concurrent.futures.Future`, and `.submit()` starts an ActorService operation
and polls it. Actor errors surface from `result()`, never from `.remote()`.

A handle pickles to its endpoint name alone and, once unpickled, resolves through the ambient
client (the current task's client, else the newest open `FrayIrisClient` in this process).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from fray_ray.fray._iris_registry import IrisClientCore, bound_client
from fray_ray.fray.actor import ActorUnavailableError
from fray_ray.fray.errors import FrayError
from fray_ray.iris.actor_client import ActorClient, OperationState
from fray_ray.iris.errors import ActorCallError, IrisError, NotFound

__all__ = [
    "CallThreads",
    "IrisActorHandle",
    "IrisActorMethod",
    "IrisOperationFuture",
]

logger = logging.getLogger(__name__)

# IrisActorMethod.submit polls GetOperation from this delay up to this cap (Fray polls ~1 s).
_OPERATION_POLL_FIRST = 0.005
_OPERATION_POLL_MAX = 1.0


class CallThreads:
    """The threads that run one client's `.remote()` and `.submit()` calls.

    A call goes to an idle thread if there is one and otherwise gets a new thread, so calls
    that block on one another never starve (as with a thread per call), while a steady stream
    of calls reuses a few threads and their open connections (a new thread costs a new
    connection: ~1.3 ms more per call on a 2-core machine). Threads are daemons, so a call
    stuck in a slow method never holds up interpreter exit, and leave after `idle_timeout`
    seconds without work.

    Invariant (under `_lock`): `_idle` threads wait on `_queue`, and `_claimed <= _idle` of
    them have a call put there for them.
    """

    def __init__(self, name: str, idle_timeout: float = 30.0) -> None:
        self._name = name
        self._idle_timeout = idle_timeout
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._claimed = 0
        self._threads: set[threading.Thread] = set()
        self._closed = False
        self._serial = itertools.count()

    def submit(self, call: Callable[[], None]) -> None:
        """Run `call` on a pool thread; RuntimeError after `close()`."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name} threads are closed")
            if self._idle > self._claimed:
                self._claimed += 1
                self._queue.put(call)
                return
            thread = threading.Thread(
                target=self._work, args=(call,), name=f"{self._name}-{next(self._serial)}", daemon=True
            )
            self._threads.add(thread)
        thread.start()

    def _work(self, call: Callable[[], None] | None) -> None:
        try:
            while call is not None:
                try:
                    call()
                except BaseException:  # noqa: BLE001 - calls deliver their own errors; never kill the thread
                    logger.exception("an actor call thread failed")
                with self._lock:
                    if self._closed:
                        return
                    self._idle += 1
                while True:
                    try:
                        call = self._queue.get(timeout=self._idle_timeout)
                    except queue.Empty:
                        with self._lock:
                            if self._idle > self._claimed:  # nobody is counting on this thread: leave
                                self._idle -= 1
                                return
                        continue  # a call was claimed for this thread and is on its way
                    with self._lock:
                        self._idle -= 1
                        self._claimed -= 1
                    break
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def close(self, timeout: float = 1.0) -> None:
        """Accept no more calls; idle threads leave at once, busy ones after their call.

        Waits up to `timeout` seconds for them (a call stuck in a slow method is abandoned:
        its thread is a daemon).
        """
        with self._lock:
            self._closed = True
            threads = list(self._threads)
            waiting = self._idle - self._claimed
        for _ in range(max(0, waiting)):
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))


class IrisActorHandle:
    """A handle to one actor served over Iris's ActorService, named by its endpoint.

    Picklable: it travels as its endpoint name alone and resolves the address when first used
    (again after a failure), through the client that made it or the ambient one.
    """

    __slots__ = ("_endpoint", "_client")

    def __init__(self, endpoint: str, client: IrisClientCore | None = None) -> None:
        self._endpoint = endpoint
        self._client = client

    @property
    def endpoint(self) -> str:
        """The absolute endpoint name, e.g. `/alice/workers/worker-3`."""
        return self._endpoint

    def __getattr__(self, method_name: str) -> IrisActorMethod:
        if method_name.startswith("_"):
            raise AttributeError(f"{method_name!r}: private attributes of an actor cannot be called remotely")
        return IrisActorMethod(self, method_name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (IrisActorHandle, (self._endpoint,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IrisActorHandle) and other._endpoint == self._endpoint

    def __hash__(self) -> int:
        return hash(("IrisActorHandle", self._endpoint))

    def __repr__(self) -> str:
        return f"IrisActorHandle({self._endpoint!r})"

    def _owner(self) -> IrisClientCore:
        self._client = bound_client(self._client)
        return self._client

    def _actor_client(self) -> ActorClient:
        return self._owner()._actor_client(self._endpoint)

    def _call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One direct call: the method's value or exception; ActorUnavailableError when the
        call could not be carried out, AttributeError for a method the actor does not have."""
        actor = self._actor_client()
        for attempt in range(2):
            try:
                outcome = actor.call_outcome(method, *args, **kwargs)
            except IrisError as exc:
                raise ActorUnavailableError(f"actor {self._endpoint} is unavailable: {exc}") from exc
            if not outcome.not_found:
                break
            text = str(outcome.error)
            if "has no method" in text:
                raise AttributeError(f"actor {self._endpoint} has no method {method!r}") from outcome.error
            if attempt == 1:
                raise ActorUnavailableError(f"actor {self._endpoint} is not served any more: {text}") from outcome.error
            # The cached address now serves something else (e.g. a port reused after a
            # restart): forget it, so the call goes where the registry says the actor is now.
            actor.close()
        if isinstance(outcome.error, ActorCallError):  # the method's error could not be rebuilt here
            raise FrayError(f"{method} on actor {self._endpoint} raised {outcome.error}") from outcome.error
        return outcome.unwrap()


class IrisActorMethod:
    """`handle.method`: `.remote()` and `.submit()` return futures, calling it blocks."""

    __slots__ = ("_handle", "_name")

    def __init__(self, handle: IrisActorHandle, name: str) -> None:
        self._handle = handle
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call and block for the value on this thread; raises what the method raised."""
        return self._handle._call(self._name, args, kwargs)

    def remote(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """Start the call on its own thread and return its `concurrent.futures.Future` at once.

        Errors, including an unreachable actor, surface from `result()`.
        """
        future: Future[Any] = Future()
        handle, name = self._handle, self._name

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                value = handle._call(name, args, kwargs)
            except BaseException as exc:  # noqa: BLE001 - delivered through the future
                future.set_exception(exc)
            else:
                future.set_result(value)

        try:
            handle._owner()._calls.submit(run)
        except (RuntimeError, ActorUnavailableError) as exc:  # the client is shut down
            future.set_exception(ActorUnavailableError(f"cannot call {name} on actor {handle.endpoint}: {exc}"))
        return future

    def submit(self, *args: Any, **kwargs: Any) -> IrisOperationFuture:
        """Start a long-running call as an ActorService operation; returns its future at once.

        The result is polled with GetOperation (backing off to once a second), so no
        connection stays open while the method runs. `result(timeout)` cancels the operation
        when the timeout passes first.
        """
        return IrisOperationFuture(self._handle, self._name, args, kwargs)

    def __repr__(self) -> str:
        return f"IrisActorMethod({self._handle.endpoint!r}, {self._name!r})"


class IrisOperationFuture(Future):
    """The future of an `ActorMethod.submit` call: a `concurrent.futures.Future` whose
    `result(timeout)` also cancels the remote operation when the timeout passes first."""

    def __init__(self, handle: IrisActorHandle, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        super().__init__()
        self._handle = handle
        self._method = method
        self._op_lock = threading.Lock()  # guards _operation_id and _abandoned
        self._operation_id: str | None = None
        self._abandoned = False
        self._stop = threading.Event()
        self._client: ActorClient | None = None
        try:
            handle._owner()._calls.submit(lambda: self._poll(args, kwargs))
        except (RuntimeError, ActorUnavailableError) as exc:  # the client is shut down
            self._fail(ActorUnavailableError(f"cannot call {method} on actor {handle.endpoint}: {exc}"), None)

    def _poll(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            if not self.set_running_or_notify_cancel():
                return
        except RuntimeError:  # result() already timed out before this thread got to run
            return
        endpoint = self._handle.endpoint
        try:
            client = self._client = self._handle._actor_client()
            operation_id = client.start_operation(self._method, *args, **kwargs)
            with self._op_lock:
                self._operation_id = operation_id
                abandoned = self._abandoned
            if abandoned:
                self._cancel_remote(client, operation_id)
                return
            delay = _OPERATION_POLL_FIRST
            while True:
                status = client.get_operation(operation_id)
                if status.state.finished:
                    break
                if self._stop.wait(delay):
                    return  # result() timed out and cancelled the operation
                delay = min(delay * 2, _OPERATION_POLL_MAX)
        except NotFound as exc:
            if self._client is not None:
                self._client.close()  # the next call re-resolves the actor's address
            self._fail(ActorUnavailableError(f"operation {self._method} on actor {endpoint} was lost: {exc}"), exc)
            return
        except IrisError as exc:
            self._fail(ActorUnavailableError(f"actor {endpoint} is unavailable: {exc}"), exc)
            return
        except BaseException as exc:  # noqa: BLE001 - e.g. arguments that cannot be pickled
            self._fail(exc, None)
            return
        if status.state is OperationState.CANCELLED:
            self._fail(TimeoutError(f"operation {self._method} on actor {endpoint} was cancelled"), None)
            return
        try:
            value = status.result()
        except ActorCallError as exc:
            self._fail(FrayError(f"{self._method} on actor {endpoint} raised {exc}"), exc)
        except BaseException as exc:  # noqa: BLE001 - the method's own exception
            self._fail(exc, None)
        else:
            try:
                self.set_result(value)
            except Exception:  # noqa: BLE001 - result() gave up and set a TimeoutError first
                pass

    def _fail(self, exc: BaseException, cause: BaseException | None) -> None:
        if cause is not None:
            exc.__cause__ = cause
        try:
            self.set_exception(exc)
        except Exception:  # noqa: BLE001 - already finished by result()'s timeout
            pass

    @staticmethod
    def _cancel_remote(client: ActorClient, operation_id: str) -> None:
        try:
            client.cancel_operation(operation_id)
        except IrisError:
            pass  # already finished and forgotten, or the actor is gone

    def result(self, timeout: float | None = None) -> Any:
        """Block for the method's value. On timeout the remote operation is cancelled (its
        method sees `operation_cancelled()`), this future fails with TimeoutError, and that
        TimeoutError is raised."""
        try:
            return super().result(timeout)
        except TimeoutError:
            if self.done():
                raise  # the method itself raised TimeoutError
        with self._op_lock:
            self._abandoned = True
            operation_id, client = self._operation_id, self._client
        self._stop.set()
        if operation_id is not None and client is not None:
            self._cancel_remote(client, operation_id)
        error = TimeoutError(f"{self._method} on actor {self._handle.endpoint} did not finish within {timeout} s")
        try:
            self.set_exception(error)
        except Exception:  # noqa: BLE001 - it finished just now after all
            return super().result(0)
        raise error
