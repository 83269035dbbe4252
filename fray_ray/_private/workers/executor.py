"""The executor process: runs the tasks its driver pushes, one at a time.

An executor opens its session with `open_session` (`worker.py`), whose runtime serves the
task code's `ray.get`/`put`/`remote`; the driver sends `ExecuteTask`, `CancelTask`, `Withdraw`
and `Exit`, and the executor answers each task with `TaskDone` (each withdrawal with `Withdrawn`). An idle executor may also be
lent to a new actor (`HostActor`): it then stops taking tasks and hosts that actor in this
process (`actor_in_worker`).
"""

from __future__ import annotations

import collections
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import cloudpickle

from fray_ray._private import messages
from fray_ray._private.core import runtime_state
from fray_ray._private.core.execution import (
    error_results,
    make_task_error,
    package_results,
    resolve_call_arguments,
    within_store,
)
from fray_ray._private.core.generators import DynamicObjectRefGenerator
from fray_ray._private.core.object_ref import ObjectRef
from fray_ray._private.core.runtime_env import RuntimeEnv
from fray_ray._private.core.task_context import TaskContext, current_task
from fray_ray._private.messages import (
    CancelTask,
    ExecuteTask,
    Exit,
    HostActor,
    TaskDone,
    Withdraw,
    Withdrawn,
    Yield,
)
from fray_ray._private.objects.ids import object_id_for
from fray_ray._private.objects.serialization import SerializedValue, serialize
from fray_ray._private.observe.logs import flush_forwarded
from fray_ray._private.stream.protocol import Connection, ConnectionClosed
from fray_ray._private.workers.call_endings import exit_worker, send_item, to_driver
from fray_ray._private.workers.held_results import WORKER_HOLDER
from fray_ray._private.workers.runtime import WorkerRuntime, open_session
from fray_ray._private.workers.task_interrupts import interrupt_thread
from fray_ray._private.workers.worker_start import prepare_worker
from fray_ray.exceptions import TaskCancelledError
from fray_ray.fray.job_info import get_job_info

logger = logging.getLogger(__name__)

#: How many early cancels an executor remembers for tasks that have not arrived.
_CANCELLED_EARLY_KEPT = 4096


class Executor:
    """Runs tasks the driver pushes, one at a time, on the thread that calls `serve()`.

    Tasks wait in a local queue while one runs; the driver may take queued ones back
    (`withdraw`: the running task blocks, or runs long while another executor idles) or cancel
    them before they start.
    """

    def __init__(self, *, max_calls: int = 0, in_process: bool = False) -> None:
        self.runtime: WorkerRuntime | None = None  # set once the session is open
        self._max_calls = max_calls
        self._in_process = in_process
        #: large results and items stay here; not in-process, nor when it exits soon (`max_calls`)
        self._keeps_large = not in_process and not max_calls
        self._functions: dict[bytes, Any] = {}
        # Every function's pickled code as it arrives: the driver sends it once per executor, and
        # the task that carried it may be handed back (`withdraw`) or cancelled before it runs.
        self._code: dict[bytes, bytes] = {}
        self._condition = threading.Condition()  # guards _queue, _running and _exiting
        self._queue: collections.deque[ExecuteTask] = collections.deque()
        self._running: TaskContext | None = None
        #: tasks cancelled before they started here: the cancel may overtake its task (a task
        #: sent in a batch frame leaves after the scheduling round, a cancel at once) or reach
        #: one just taken from the queue. Kept a while, in order, for the task to arrive.
        self._cancelled_early: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._exiting = False
        #: set when the driver lent this process to an actor: serve that actor once tasks end
        self.hosting: HostActor | None = None
        self._main_thread_id = threading.get_ident()

    def handlers(self) -> dict[str, Any]:
        return messages.handlers({
            ExecuteTask: self._on_execute, CancelTask: self._on_cancel, Exit: self._on_exit,
            Withdraw: self._on_withdraw, HostActor: self._on_host_actor,
        })

    def _on_execute(self, connection: Connection, message_id: int | None, task: ExecuteTask) -> None:
        with self._condition:
            if task.code is not None and task.fn not in self._functions:
                self._code.setdefault(task.fn, task.code)
            cancelled = self._take_early_cancel_locked(task.task)
            if not cancelled:
                self._queue.append(task)
                self._condition.notify()
        if cancelled:
            self._send_done(task.task, None, TaskCancelledError(task.task.hex()), len(task.returns))

    def _take_early_cancel_locked(self, task_id: bytes) -> bool:
        """Whether `task_id` was cancelled before it got here (and forget that it was)."""
        if task_id not in self._cancelled_early:
            return False
        del self._cancelled_early[task_id]
        return True

    def _on_exit(self, connection: Connection, message_id: int | None, exit_: Exit) -> None:
        with self._condition:
            self._exiting = True
            self._condition.notify()

    def _on_host_actor(self, connection: Connection, message_id: int | None, hosting: HostActor) -> None:
        """The driver lends this idle executor to an actor: stop serving tasks and host it."""
        with self._condition:
            self.hosting = hosting
            self._exiting = True
            self._condition.notify()

    def _on_withdraw(self, connection: Connection, message_id: int | None, withdraw: Withdraw) -> None:
        """Hand back the asked-for tasks still queued here. Taking them out of the queue under
        the lock `serve` takes its next task under is the claim: each one is either returned
        (and never runs here) or already taken to run (kept), never both."""
        wanted = set(withdraw.tasks)
        with self._condition:
            staying = [task for task in self._queue if task.task not in wanted]
            returned = {task.task for task in self._queue if task.task in wanted}
            if returned:
                self._queue.clear()
                self._queue.extend(staying)
        try:
            messages.notify(connection, Withdrawn([t for t in withdraw.tasks if t in returned],
                                                  [t for t in withdraw.tasks if t not in returned]))
        except ConnectionClosed:
            pass

    def _on_cancel(self, connection: Connection, message_id: int | None, cancel: CancelTask) -> None:
        with self._condition:
            queued = next((task for task in self._queue if task.task == cancel.task), None)
            if queued is not None:
                self._queue.remove(queued)
            running = self._running
            if queued is None and (running is None or running.task_id != cancel.task):
                # Not here yet, or taken from the queue and not started: it is cancelled when it
                # comes (a task this executor already answered leaves a harmless id behind).
                self._cancelled_early[cancel.task] = None
                while len(self._cancelled_early) > _CANCELLED_EARLY_KEPT:
                    self._cancelled_early.popitem(last=False)
                return
            if queued is None:
                running.cancelled.set()
        if queued is not None:
            self._send_done(cancel.task, None, TaskCancelledError(cancel.task.hex()), len(queued.returns))
            return
        if cancel.force and not self._in_process:
            os._exit(1)  # a forced cancel kills the worker, as in Ray
        interrupt_thread(self._main_thread_id)

    def _session_lost(self, _connection: Connection) -> None:
        """The driver went away without saying `exit`: end now, a running task included, and
        fail (exit 1), so the job never reports success for work nobody will collect."""
        with self._condition:
            told = self._exiting
            self._exiting = True
            self._condition.notify()
            running = self._running
            if running is not None:
                running.cancelled.set()
        if not told and not self._in_process:
            print("fray_ray: executor lost its driver's session; exiting", file=sys.__stderr__, flush=True)
            os._exit(1)
        if running is not None and self._in_process:
            # A thread cannot be killed: interrupt the task, or the process could not exit.
            interrupt_thread(self._main_thread_id)

    def finish(self) -> None:
        """Mark a normal end (max_calls reached, or told to exit) before the connection closes."""
        with self._condition:
            self._exiting = True

    def _has_work(self) -> bool:
        return bool(self._queue) or self._exiting

    def serve(self) -> None:
        """Run tasks until told to exit, the driver goes away, or max_calls is reached."""
        self._main_thread_id = threading.get_ident()
        self.runtime.connection.add_close_callback(self._session_lost)
        calls = 0
        while True:
            # This thread reads the session while it waits, so a task runs where it was read. It
            # looks for the next task a while before it sleeps (`spin_wait.py`): waking a
            # sleeping executor cost a synchronous task about a fifth of its time. A spin stops
            # when the machine has no CPU to spare, so a driver handing out a batch keeps its own.
            self.runtime.connection.serve_until(self._has_work)
            task = self._take_next()
            if task is None:
                return
            started = time.perf_counter()
            returns = task.returns if task.num_returns not in ("streaming", "dynamic") else ()
            done = self._run(task)
            ran_s = time.perf_counter() - started
            # The task's arguments are dropped before its result goes: the next task's arguments,
            # which may follow at once, can then be read into their memory (`buffers`).
            del task
            self.runtime.return_shared()  # before the result: the driver may reuse the block at once
            self._send_done(*done, ran_s=ran_s, returns=returns)
            del done
            # What the task dropped (refs and actor handles among its arguments) is released now,
            # not at the next task's first call: an actor whose last handle was here ends.
            self.runtime.references.flush()
            calls += 1
            if self._max_calls and calls >= self._max_calls:
                return

    def _take_next(self) -> ExecuteTask | None:
        """The next task to run, taken from the queue (from here on a `Withdraw` leaves it
        here); None when the executor should end."""
        with self._condition:
            while not self._queue and not self._exiting:  # the session closed: its close callback says what now
                self._condition.wait()
            if self._exiting and not self._queue:
                return None
            if self._exiting and self.runtime.connection.closed:
                return None
            return self._queue.popleft()

    def _function(self, task: ExecuteTask) -> Any:
        function = self._functions.get(task.fn)
        if function is None:
            with self._condition:
                code = task.code if task.code is not None else self._code.get(task.fn)
            if code is None:
                raise RuntimeError(f"the code of task {task.name!r} never reached this worker")
            function = cloudpickle.loads(code)
            self._functions[task.fn] = function
            with self._condition:
                self._code.pop(task.fn, None)  # loaded: the pickled bytes are no longer needed
        return function

    def _run(self, task: ExecuteTask) -> tuple[bytes, list[SerializedValue] | None, BaseException | None, int, bool]:
        """Run one task; returns what `_send_done` sends of it."""
        task_id = task.task
        name = task.name
        num_returns = task.num_returns
        context = TaskContext(
            task_id=task_id,
            function_name=name,
            qualified_name=task.function_name or name,
            resources=task.resources or {},
            placement_group_id=task.placement_group,
            capture_child_tasks=bool(task.capture_child_tasks and task.placement_group),
        )
        token = current_task.set(context)
        env_backup = _apply_env(task.env or {}, restore=not self._in_process)
        with self._condition:
            self._running = context
            if self._take_early_cancel_locked(task_id):
                context.cancelled.set()
        generator_failed = False
        try:
            if context.cancelled.is_set():
                raise KeyboardInterrupt  # cancelled between the queue and here: never started
            function = self._function(task)
            args, kwargs = resolve_call_arguments(task.args, self.runtime.fetch)
            result = function(*args, **kwargs)
            if num_returns == "streaming":
                self._stream(task_id, result)
                results = []
            elif num_returns == "dynamic":
                results = [self._dynamic(task_id, result)]
            else:
                results = within_store(package_results(result, num_returns, name), self.runtime.object_store_memory, name)
            error = None
        except _GeneratorRaised as raised:
            results, error = None, make_task_error(raised.cause, name)
            generator_failed = True
        except KeyboardInterrupt:
            results, error = None, TaskCancelledError(task_id.hex() if task_id else None)
            if not context.cancelled.is_set():
                raise
            error = make_task_error(error, name)
        except SystemExit as exc:
            if not self._in_process:
                exit_worker(exc)  # as in Ray: the worker dies, the task fails (or retries) as a crash
            results, error = None, make_task_error(exc, name)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the owner
            results, error = None, make_task_error(exc, name)
        finally:
            with self._condition:
                self._running = None
            _restore_env(env_backup)
            current_task.reset(token)
        sys.stdout.flush()
        sys.stderr.flush()
        flush_forwarded()
        return task_id, results, error, len(task.returns), generator_failed

    def _stream(self, stream_id: bytes, generator: Any) -> None:
        """Send each item of a streaming generator as it is produced; a large one stays here,
        as a large result does (the driver makes it again from the task if this process goes)."""
        send_item(to_driver(self.runtime.connection, keep_large=self._keeps_large), stream_id, generator)

    def _dynamic(self, task_id: bytes, generator: Any) -> SerializedValue:
        """Store every item, then return a DynamicObjectRefGenerator holding refs to them.

        When the generator raises, the items it yielded are sent all the same and the error
        goes as `_GeneratorRaised`: the driver then either retries the task or, as Ray does,
        hands out those items followed by one that raises the error."""
        items: list[SerializedValue] = []
        try:
            for item in generator:
                items.append(serialize(item))
        except Exception as exc:  # noqa: BLE001 - a cancel (KeyboardInterrupt) fails the task whole
            for index, value in enumerate(items, start=1):
                messages.notify(self.runtime.connection, Yield(task_id, index, value))
            raise _GeneratorRaised(exc) from exc
        for index, value in enumerate(items, start=1):
            messages.notify(self.runtime.connection, Yield(task_id, index, value))
        refs = [ObjectRef(object_id_for(task_id, i), _register=False) for i in range(1, len(items) + 1)]
        return serialize(DynamicObjectRefGenerator(refs))

    def _send_done(self, task_id: bytes, results: list[SerializedValue] | None, error: BaseException | None, count: int,
                   generator_failed: bool = False, ran_s: float | None = None, returns: Sequence[bytes] = ()) -> None:
        values = error_results(error, count) if error is not None else list(results or [])
        user_error = error is not None or any(r.is_error for r in values)
        held: list[list[Any]] = []
        if returns and not user_error and self._keeps_large:
            values, held = WORKER_HOLDER.keep_large(values, returns)  # large results stay here
        try:
            messages.notify(self.runtime.connection, TaskDone(task_id, values, user_error, ran_s, generator_failed, held))
        except ConnectionClosed:
            pass
        except Exception as exc:  # noqa: BLE001 - e.g. a result msgpack cannot carry
            logger.exception("cannot send the result of task %s", task_id.hex())
            fallback = error_results(make_task_error(exc, "result serialization"), count)
            messages.notify(self.runtime.connection, TaskDone(task_id, fallback, True))


class _GeneratorRaised(Exception):
    """A `num_returns="dynamic"` generator raised `cause` after its items so far were sent."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(cause)
        self.cause = cause


_ENV_LOCK = threading.Lock()  # setenv from two threads at once can crash the C library


def _apply_env(env: Mapping[str, str], *, restore: bool = True) -> dict[str, str | None]:
    """Set a task's env vars; returns what to restore afterwards.

    In-process executors (local mode) share one environment, so there the variables are set
    (under a lock) and left in place: concurrent tasks see each other's values.
    """
    backup: dict[str, str | None] = {}
    if not env:
        return backup
    with _ENV_LOCK:
        for key, value in env.items():
            if os.environ.get(key) == value:
                continue
            if restore:
                backup[key] = os.environ.get(key)
            os.environ[key] = value
    return backup


def _restore_env(backup: Mapping[str, str | None]) -> None:
    if not backup:
        return
    with _ENV_LOCK:
        for key, value in backup.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def start_executor(driver_version: str, runtime_env: RuntimeEnv, *args: Any, **kwargs: Any) -> None:
    """An executor's entry point in its Iris task: `prepare_worker`, then `executor_main`."""
    prepare_worker(driver_version, runtime_env)
    executor_main(*args, **kwargs)


def executor_main(
    session_address: str,
    token: str,
    executor_id: bytes,
    max_calls: int = 0,
    in_process: bool = False,
    *,
    gang_index: int | None = None,
    gang_base: int | None = None,
) -> None:
    """Entry point of an executor: an Iris task (or a LocalClient thread) that runs tasks.

    Gang members pass `gang_index`, or `gang_base` to which their Iris task index is added.
    """
    kind, index = "executor", 0
    if gang_index is not None or gang_base is not None:
        info = get_job_info()
        kind = "gang"
        index = gang_index if gang_index is not None else gang_base + (info.task_index if info else 0)
    executor = Executor(max_calls=max_calls, in_process=in_process)
    runtime = open_session(
        session_address, token, kind, executor_id, executor.handlers(),
        on_runtime=lambda r: setattr(executor, "runtime", r), index=index, in_process=in_process,
    )
    if in_process:
        context_token = runtime_state.set_context_runtime(runtime)
    else:
        runtime_state.install(runtime)
        from fray_ray._private.observe.logs import forward_output

        forward_output(runtime)
    try:
        executor.serve()
    finally:
        executor.finish()
        if in_process:
            runtime_state.reset_context_runtime(context_token)
        runtime.shutdown(hand_off=True)  # in Ray a worker that owns objects others hold would not end
    if executor.hosting is not None and not in_process:
        from fray_ray._private.workers.actor_in_worker import host_lent_actor  # the actor stack, only when lent

        host_lent_actor(session_address, token, executor.hosting)
