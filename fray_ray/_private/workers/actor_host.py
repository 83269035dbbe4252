"""RayActorHost: the object a Ray actor's Iris job (a Fray actor group of one) hosts.

It connects to the driver's session, builds the user's instance when told to, and runs method
calls the driver pushes, with Ray's semantics: one call at a time in arrival order by default,
`max_concurrency` threads for threaded actors, one event loop for async actors, and a pool per
concurrency group. Its public `call()` lets Iris and Fray clients call the actor over ActorService.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import cloudpickle

from fray_ray._private import messages
from fray_ray._private.core import object_ref, runtime_state
from fray_ray._private.core.actor_builtins import actor_method
from fray_ray._private.core.actor_handles import own_handle
from fray_ray._private.core.execution import (
    error_results,
    make_task_error,
    package_results,
    resolve_call_arguments,
    within_store,
)
from fray_ray._private.core.function_names import actor_display_name
from fray_ray._private.core.runtime_env import RuntimeEnv
from fray_ray._private.core.task_context import TaskContext, current_task, reset_quietly
from fray_ray._private.core.task_spec import CallArguments, gang_member_id
from fray_ray._private.messages import (
    ActorExiting,
    ActorFailed,
    ActorReady,
    CallDone,
    CallMethod,
    CancelCall,
    CreateInstance,
    Die,
    HandOffHeld,
    Message,
)
from fray_ray._private.objects.serialization import SCALAR_TYPES, SerializedValue, serialize_error
from fray_ray._private.observe.logs import flush_forwarded, forward_output
from fray_ray._private.stream.frames import MessageTooLarge
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray._private.workers.actor_service_calls import ActorServiceCalls, creation_failed
from fray_ray._private.workers.actor_state_row import ActorStateRow
from fray_ray._private.workers.call_endings import (
    SendItem,
    exit_worker,
    send_any_items,
    send_any_items_async,
    to_driver,
)
from fray_ray._private.workers.call_threads import CallThreads
from fray_ray._private.workers.foreign_calls import ForeignCallGate
from fray_ray._private.workers.group_loops import GroupLoop
from fray_ray._private.workers.held_results import HAND_OFF_TIMEOUT_S, WORKER_HOLDER
from fray_ray._private.workers.runtime import WorkerRuntime, open_session
from fray_ray._private.workers.task_interrupts import interrupt_thread
from fray_ray._private.workers.unplanned_exits import end_own_job, guard_process_exits, plan_exit
from fray_ray._private.workers.worker_start import prepare_worker
from fray_ray.exceptions import RayActorError
from fray_ray.fray import current_actor
from fray_ray.fray.job_info import get_job_info

logger = logging.getLogger(__name__)

#: What a call's message holds in place of its arguments once they are resolved.
_RESOLVED = CallArguments(SerializedValue(b""))


class ActorExit(BaseException):
    """Raised by exit_actor() to end the actor after the current call."""


class RayActorHost(ActorStateRow, ActorServiceCalls):
    """Hosts one Ray actor. Constructed by the Fray backend inside the actor's job."""

    def __init__(
        self, session_address: str, token: str, actor_id: bytes, in_process: bool = False, gang: bool = False
    ) -> None:
        """`gang`: this host is one member of a gang of actors; its id follows from its index."""
        self._in_process = in_process
        if not in_process:
            guard_process_exits()  # the actor's own os._exit(0) is a crash, as in Ray
        try:
            self._fray_context = current_actor()
        except RuntimeError:
            self._fray_context = None
        index = self._fray_context.index if self._fray_context is not None else 0
        self._actor_id = gang_member_id(actor_id, index) if gang else actor_id
        self._instance: Any = None
        self._handle: Any = None
        self._placement_group: str | None = None
        self._capture_child_tasks = False
        self._given_name: str | None = None
        self._restarted = False
        self._methods_blob = b""
        self._resources: Mapping[str, float] = {}
        self._class_name = "Actor"
        self._qualified_name = "Actor"
        self._display_name = "Actor"  # the log prefix: the instance's own __repr__, else the class name
        self._is_async = False
        self._default_pool: CallThreads | None = None
        self._group_pools: dict[str, CallThreads] = {}
        #: async actors: one event loop thread per concurrency group (None: the default group)
        self._loops: dict[str | None, GroupLoop] = {}
        self._created = threading.Event()
        #: a method's (function_name, qualified_name) for its calls' contexts
        self._call_names: dict[str, tuple[str, str]] = {}
        self._creating: concurrent.futures.Future[None] | None = None  # an `async def __init__` running
        self._creation_error: BaseException | None = None
        self._stopped = threading.Event()
        self._killed = threading.Event()  # ray.kill without restart: no driver finds it by name now
        handlers = messages.handlers({CreateInstance: self._on_create, CallMethod: self._on_call, Die: self._on_die,
                                      CancelCall: self._on_cancel})
        self._calls_lock = threading.Lock()  # guards _cancelled and _running
        self._cancelled: set[bytes] = set()
        self._running: dict[bytes, Any] = {}  # call id -> TaskContext or asyncio.Task
        self._call_threads: dict[bytes, int] = {}  # call id -> thread running it (sync calls)
        self._deferred_borrows: dict[bytes, list[bytes]] = {}  # call id -> first refs its arguments made
        # Set before the session opens: its reader may deliver `create` (which sets it) at once.
        self._detached = False
        info = None if in_process else get_job_info()
        #: where other processes send calls (`foreign_calls`); None in-process. Set before the
        #: session opens too: a call may arrive, and be answered, at once.
        self._foreign = (
            ForeignCallGate(self._on_call, bind_host=info.bind_host, advertise_host=info.advertise_host,
                            cancel=self._on_cancel, before_answer=lambda: self._runtime.notices.confirm(),
                            released=lambda: self._runtime.references.flush(), lent=lambda: self._runtime.direct.lent,
                            lending=lambda: self._runtime.direct.lending)
            if info is not None else None
        )
        handlers.update(self._foreign.owner_handlers() if self._foreign is not None else {})
        self._runtime: WorkerRuntime = open_session(
            session_address, token, "actor", self._actor_id, handlers, on_runtime=self._set_runtime,
            in_process=in_process,
        )
        self._runtime.connection.add_close_callback(lambda _: self._session_lost())

    def _set_runtime(self, runtime: WorkerRuntime) -> None:
        """Runs before any message is handled: the constructor's arguments (which may hold
        refs and handles) must be unpickled with this runtime in place."""
        self._runtime = runtime
        if not self._in_process:
            runtime_state.install(runtime)
            forward_output(runtime)

    # ---- creation ------------------------------------------------------------------------

    def _on_create(self, connection: Connection, message_id: int | None, create: CreateInstance) -> None:
        self._class_name = create.class_name
        self._display_name = create.class_name
        self._qualified_name = create.qualified_name or create.class_name
        self._call_names.clear()  # named after the class from now on
        self._placement_group = create.placement_group
        self._capture_child_tasks = bool(create.capture_child_tasks and create.placement_group)
        self._given_name = create.options.name
        self._restarted = bool(create.options.restarted)
        self._detached = bool(create.options.detached)
        self._methods_blob = create.methods
        self._resources = create.resources or {}
        self._handle = own_handle(
            self._actor_id, self._class_name, cloudpickle.loads(create.methods), bool(create.options.is_async)
        )
        self._is_async = bool(create.options.is_async)
        groups: Mapping[str, int] = create.options.concurrency_groups or {}
        max_concurrency = int(create.options.max_concurrency or 1)
        if self._is_async:
            self._loops[None] = GroupLoop("actor-loop", max_concurrency)
            for name, size in groups.items():
                self._loops[name] = GroupLoop(f"actor-loop-{name}", size)
        else:
            # One thread and no concurrency groups: that thread reads the session while idle,
            # so a call runs where it was read (`read_lending`).
            reader = connection if max_concurrency == 1 and not groups else None
            self._default_pool = CallThreads(max_concurrency, "actor", reader)
            for name, size in groups.items():
                self._group_pools[name] = CallThreads(size, f"actor-{name}")
        if self._is_async:  # on the actor's loop, where Ray awaits an `async def __init__`
            self._creating = asyncio.run_coroutine_threadsafe(self._create_async(create), self._loops[None].loop)
        else:
            self._submit_sync(None, self._create, create)

    async def _create_async(self, create: CreateInstance) -> None:
        with self._creation():
            started = self._construct(create)
            if inspect.isawaitable(started):
                await started

    def _create(self, create: CreateInstance) -> None:
        with self._creation():
            self._construct(create)

    def _construct(self, create: CreateInstance) -> Any:
        """Build the instance; returns what `__init__` returned (a coroutine when it is async)."""
        cls = cloudpickle.loads(create.code)
        args, kwargs = resolve_call_arguments(create.args, self._runtime.fetch)
        self._instance = cls.__new__(cls)
        os.environ.update(create.env or {})
        return self._instance.__init__(*args, **kwargs)

    @contextlib.contextmanager
    def _creation(self) -> Iterator[None]:
        """The context `__init__` runs in; reports the actor ready, or failed with its error."""
        context = TaskContext(task_id=None, function_name=f"{self._class_name}.__init__", actor_id=self._actor_id,
                              qualified_name=f"{self._qualified_name}.__init__",
                              actor_name=self._class_name, resources=self._resources,
                              actor_handle=self._handle, placement_group_id=self._placement_group,
                              capture_child_tasks=self._capture_child_tasks,
                              actor_given_name=self._given_name, actor_restarted=self._restarted)
        token = current_task.set(context)
        runtime_token = runtime_state.set_context_runtime(self._runtime) if self._in_process else None
        try:
            yield
            self._display_name = actor_display_name(self._instance, self._class_name)
            self._send(ActorReady(self._actor_id, os.getpid()))
        except BaseException as exc:  # noqa: BLE001 - the creation error is every later call's error
            self._creation_error = exc
            error = make_task_error(exc, f"{self._class_name}.__init__")
            self._send(ActorFailed(self._actor_id, serialize_error(error)))
        finally:
            reset_quietly(current_task.reset, token)
            if runtime_token is not None:
                reset_quietly(runtime_state.reset_context_runtime, runtime_token)
            self._created.set()

    # ---- calls ---------------------------------------------------------------------------

    def _on_call(self, connection: Connection, message_id: int | None, call: CallMethod) -> None:
        if self._is_async:
            group = self._loop(call.group)
            group.spawn(lambda: self._run_async_call(call, group.semaphore))
        else:
            self._submit_sync(call.group, self._run_sync_call, call)

    def _pool(self, group: str | None) -> CallThreads | None:
        """The threads that run a sync call of concurrency group `group` (None: async actors)."""
        return (self._group_pools.get(group) if group else None) or self._default_pool

    def _loop(self, group: str | None) -> GroupLoop:
        """The event loop that runs an async actor's call of concurrency group `group`."""
        return self._loops.get(group) or self._loops[None]

    def _submit_sync(self, group: str | None, fn: Any, *args: Any) -> None:
        pool = self._pool(group)
        if pool is None:  # async actors build their instance on the default loop thread
            self._loops[None].call(lambda: fn(*args))
            return
        try:
            pool.submit(fn, *args)
        except RuntimeError:
            pass  # shutting down

    def _prepare(self, call: CallMethod) -> tuple[Any, tuple, dict]:
        # Calls in other concurrency groups run on other threads; none may start before __init__ ends.
        if not self._created.is_set():
            self._created.wait()
        if call.method == "__ray_terminate__":
            raise ActorExit()  # a graceful end, queued behind earlier calls
        if self._creation_error is not None or self._instance is None:
            raise creation_failed(self._class_name)
        if call.args.names_refs():  # their borrows are announced as it is answered
            with self._runtime.notices.borrows_deferred(self._deferred_borrows, call.call):
                args, kwargs = resolve_call_arguments(call.args, self._runtime.fetch)
        else:
            args, kwargs = resolve_call_arguments(call.args, self._runtime.fetch)
        call.args = _RESOLVED  # the frame's buffers are the arguments' memory: held only by them now
        method = actor_method(self._instance, call.method)
        return method, args, kwargs

    def _context(self, call: CallMethod) -> TaskContext:
        names = self._call_names.get(call.method)
        if names is None:
            names = self._call_names[call.method] = (f"{self._class_name}.{call.method}",
                                                     f"{self._qualified_name}.{call.method}")
        return TaskContext(
            task_id=call.call, function_name=names[0], actor_id=self._actor_id, qualified_name=names[1],
            actor_name=self._display_name, actor_handle=self._handle, resources=self._resources,
            placement_group_id=self._placement_group, actor_given_name=self._given_name,
            capture_child_tasks=self._capture_child_tasks,
            actor_restarted=self._restarted,
        )

    def _on_cancel(self, connection: Connection, message_id: int | None, cancel: CancelCall) -> None:
        call_id = cancel.call
        with self._calls_lock:
            running = self._running.get(call_id)
            if running is None:
                self._cancelled.add(call_id)  # skipped when its turn comes
                return
        if isinstance(running, TaskContext):
            running.cancelled.set()  # a sync method sees it through is_canceled()
        else:
            running.get_loop().call_soon_threadsafe(running.cancel)  # an asyncio.Task

    def _start_call(self, call: CallMethod, handle: Any, thread: int | None = None) -> bool:
        """Record a call as running (on `thread`, for a sync call); False if it was cancelled
        before it started."""
        with self._calls_lock:
            if self._cancelled and call.call in self._cancelled:
                self._cancelled.discard(call.call)
                if self._runtime.direct is not None:
                    self._runtime.direct.lent.ended(call.call)  # skipped: nothing reads what it lent
                return False
            self._running[call.call] = handle
            if thread is not None:
                self._call_threads[call.call] = thread
            return True

    def _end_call(self, call: CallMethod) -> None:
        with self._calls_lock:
            self._running.pop(call.call, None)
            self._call_threads.pop(call.call, None)

    def _run_sync_call(self, call: CallMethod) -> None:
        context = self._context(call)
        if not self._start_call(call, context, threading.get_ident()):
            return
        token = current_task.set(context)
        runtime_token = runtime_state.set_context_runtime(self._runtime) if self._in_process else None
        try:
            method, args, kwargs = self._prepare(call)
            result = method(*args, **kwargs)
            method = args = kwargs = None  # dropped before the result goes (`_complete`)
            if inspect.iscoroutine(result):
                result = asyncio.run(result)
            if call.num_returns == "streaming":
                send_any_items(self._item_sender(call), call.call, result)
                self._complete(call, [], None)
            else:
                self._complete(call, *self._results(call, result))
        except ActorExit:
            self._exit_requested(call)
        except SystemExit as exc:
            self._system_exit(call, exc)
        except BaseException as exc:  # noqa: BLE001 - delivered to the caller
            self._complete(call, None, self._wrap(exc, call))
        finally:
            method = args = kwargs = result = None
            self._runtime.references.flush()  # refs the call held: an idle actor makes no later call
            self._end_call(call)
            current_task.reset(token)
            if runtime_token is not None:
                runtime_state.reset_context_runtime(runtime_token)

    async def _run_async_call(self, call: CallMethod, semaphore: asyncio.Semaphore) -> None:
        if not self._start_call(call, asyncio.current_task()):
            return
        async with semaphore:
            token = current_task.set(self._context(call))
            runtime_token = runtime_state.set_context_runtime(self._runtime) if self._in_process else None
            try:
                loop = asyncio.get_running_loop()
                creating = self._creating
                if creating is not None and not creating.done():
                    # An `async def __init__` still runs: calls start in order once it ends.
                    await asyncio.shield(asyncio.wrap_future(creating))
                fetches = call.args.top_level or call.args.stored is not None
                if fetches or not self._created.is_set():  # never block the loop
                    method, args, kwargs = await loop.run_in_executor(None, self._prepare, call)
                else:
                    method, args, kwargs = self._prepare(call)
                result = method(*args, **kwargs)
                method = args = kwargs = None
                if inspect.isawaitable(result):
                    result = await result
                if call.num_returns == "streaming":
                    await send_any_items_async(self._item_sender(call), call.call, result)
                    self._complete(call, [], None)
                else:
                    self._complete(call, *self._results(call, result))
            except ActorExit:
                self._exit_requested(call)
            except SystemExit as exc:
                self._system_exit(call, exc)
            except asyncio.CancelledError:
                from fray_ray.exceptions import TaskCancelledError

                self._complete(call, None, TaskCancelledError(call.call.hex()))
            except BaseException as exc:  # noqa: BLE001 - delivered to the caller
                self._complete(call, None, self._wrap(exc, call))
            finally:
                method = args = kwargs = result = None
                self._runtime.references.flush()  # refs the call held: an idle actor makes no later call
                self._end_call(call)
                reset_quietly(current_task.reset, token)
                if runtime_token is not None:
                    reset_quietly(runtime_state.reset_context_runtime, runtime_token)

    def _results(self, call: CallMethod, result: Any) -> tuple[list[SerializedValue], None, list[bytes]]:
        """(the results, no error, the refs they name: lent on with the answer, or handed over)."""
        if type(result) in SCALAR_TYPES:  # the commonest result names no ref: nothing to hold
            packaged, named = package_results(result, call.num_returns, call.method), []
        else:
            with object_ref.escapes_held():
                packaged = package_results(result, call.num_returns, call.method)
                named = object_ref.take_held_escapes()
        return within_store(packaged, self._runtime.object_store_memory, call.method), None, named

    def _wrap(self, exc: BaseException, call: CallMethod) -> BaseException:
        if isinstance(exc, RayActorError) and self._creation_error is not None:
            return exc
        return make_task_error(exc, f"{self._class_name}.{call.method}", actor_repr=self._display_name,
                               actor_id=self._actor_id.hex())

    def _complete(self, call: CallMethod, results: list[SerializedValue] | None, error: BaseException | None,
                  named: Sequence[bytes] = ()) -> None:
        values = error_results(error, len(call.returns)) if error is not None else list(results or [])
        sys.stdout.flush()
        sys.stderr.flush()
        flush_forwarded()
        self._runtime.return_shared()  # the arguments' blocks the driver may reuse for the next call
        kept: list[bytes] = []  # lent with the call and still held: borrowed from its caller from now on
        if (deferred := self._deferred_borrows.pop(call.call, None)) is not None:  # its caller kept them so far
            lent = self._runtime.direct.lent if self._runtime.direct else None
            kept = self._runtime.notices.announce(deferred, (lambda held: lent.keep(call.call, held)) if lent else None)
        done = CallDone(call.call, values, error is not None, kept=kept)
        direct = self._runtime.direct
        caller = self._foreign.worker_caller(call.call) if self._foreign is not None and named else None
        if direct is not None and named:
            direct.lending.with_answer(done, named, caller)
        try:
            if self._foreign is None or not self._foreign.answer(done):
                if caller is not None and direct is not None:  # its caller went meanwhile
                    direct.lending.answer_not_lent(done, caller)
                if error is None and not self._in_process:  # large results stay here, as a task's do
                    done.results, done.held = WORKER_HOLDER.keep_large(done.results, call.returns)
                self._send(done, defer=self._has_other_calls(call))
        except MessageTooLarge as exc:  # the caller hears which limit its results exceed
            if caller is not None and direct is not None:
                direct.lending.answer_not_lent(done, caller)
            failed = error_results(self._wrap(exc, call), len(call.returns))
            self._send(CallDone(call.call, failed, True))

    def _item_sender(self, call: CallMethod) -> SendItem:
        """Where a generator method's items go: to the caller of a call that came through the
        gate (`foreign_calls.py`), else to the driver."""
        driver = to_driver(self._runtime.connection, keep_large=call.keep_items and not self._in_process)
        return driver if self._foreign is None else self._foreign.item_sender(driver)

    def _has_other_calls(self, call: CallMethod) -> bool:
        """Whether other calls are running or waiting here: then this one's answer can go
        out with theirs, written by the connection's writer thread."""
        if len(self._running) > 1:  # a glance without the lock: a stale answer only delays or hurries a write
            return True
        if self._is_async:
            return self._loop(call.group).backlog() > 0
        pool = self._pool(call.group)
        return pool is not None and (pool.backlog() > 0 or self._runtime.connection.lender_has_input())

    def _exit_requested(self, call: CallMethod) -> None:
        sys.stdout.flush()  # what the method printed reaches the driver before its error
        sys.stderr.flush()
        flush_forwarded()
        self._hand_off_held()
        self._send(ActorExiting(self._actor_id, call.call))
        self._stop()

    def _hand_off_held(self) -> None:
        """What this actor returned or lent on outlives it: the driver takes the values held
        here first, and what callers borrow from this process."""
        if self._in_process:
            return
        if WORKER_HOLDER.holds_values():
            with contextlib.suppress(Exception):
                messages.call(self._runtime.connection, HandOffHeld(), timeout=HAND_OFF_TIMEOUT_S)
        if self._runtime.direct is not None:
            self._runtime.direct.lending.hand_off()

    def _system_exit(self, call: CallMethod, exc: SystemExit) -> None:
        """`sys.exit()` in a method ends the actor's process, as in Ray: with status 0 (or none)
        it is an intended exit, as `exit_actor()`; any other status is a crash, which
        `max_restarts` may restart. Either way the caller gets ActorDiedError."""
        if exc.code is None or exc.code == 0 or self._in_process:
            self._exit_requested(call)
            return
        self._runtime.connection.flush()  # earlier calls' answers still queued go first
        exit_worker(exc)

    # ---- lifecycle -----------------------------------------------------------------------

    def _on_die(self, connection: Connection, message_id: int | None, die: Die) -> None:
        if not die.restart:
            plan_exit()
        if self._in_process:
            self._stop()
        else:
            connection.flush()  # earlier calls' answers still queued go first
            os._exit(1 if die.restart else 0)

    def _send(self, message: Message, defer: bool = False) -> None:
        try:
            messages.notify(self._runtime.connection, message, defer=defer)
        except ConnectionClosed:
            pass

    def _stop(self) -> None:
        plan_exit()  # the process may now end with status 0: the actor is done
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._fray_context is not None and self._fray_context.shutdown_event is not None:
            self._fray_context.shutdown_event.set()
        for pool in [self._default_pool, *self._group_pools.values()]:
            if pool is not None:
                pool.shutdown()
        for group in self._loops.values():
            group.stop()
        if self._foreign is not None:
            self._foreign.close()

    # ---- ActorService (Iris and Fray clients) ------------------------------------------

    def _open_foreign_gate(self) -> dict[str, str] | None:
        """Where other processes send calls over the stream protocol; None where it cannot be served."""
        if self._foreign is None:
            return None
        try:
            return self._foreign.open()
        except OSError as exc:
            logger.warning("cannot serve other drivers' calls over the stream protocol: %s", exc)
            return None

    def kill(self, restart: bool = False) -> None:
        """End the actor's process shortly after answering (ray.kill from another driver).

        With `restart` it exits 1, so Iris starts it again under its restart budget; without,
        it has its own job terminated, so the job ends as killed (exiting 0 would report it
        succeeded), and exits anyway if the controller does not act within seconds."""
        if not restart:
            self._killed.set()  # before answering: a lookup after ray.kill returns finds it dead
            plan_exit()

        def end() -> None:
            self._hand_off_held()
            if restart or self._in_process:
                time.sleep(0.05)  # the answer leaves first
                os._exit(1 if restart else 0)
            end_own_job()

        threading.Thread(target=end, name="actor-kill", daemon=True).start()

    def _session_lost(self) -> None:
        """The creating driver went away: a detached actor keeps serving other drivers; any
        other ends at once, a running call included, and its job fails (it never ends as
        succeeded after losing its driver)."""
        if self._detached:
            return
        if self._in_process or self._stopped.is_set():
            self._stop()
            if self._in_process:
                # A thread cannot be killed: interrupt running calls, or the process could not exit.
                with self._calls_lock:
                    threads = list(self._call_threads.values())
                for thread_id in threads:
                    interrupt_thread(thread_id)
            return
        print(f"fray_ray: actor {self._class_name} lost its driver's session; exiting", file=sys.__stderr__, flush=True)
        os._exit(1)


class CheckedActorHost(RayActorHost):
    """A `RayActorHost` that runs `prepare_worker` before it connects to the driver."""

    def __init__(self, driver_version: str, runtime_env: RuntimeEnv, *args: Any, **kwargs: Any) -> None:
        prepare_worker(driver_version, runtime_env)
        super().__init__(*args, **kwargs)
