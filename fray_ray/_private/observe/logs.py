"""Task output in the driver: workers forward what tasks print, the driver prints it prefixed.

As with Ray's `log_to_driver`, a line `hello` printed by task `f` in process 1234 appears in
the driver as `(f pid=1234) hello`. The worker still writes to its own stdout/stderr, so the
task's Iris logs keep everything.

Python `logging` in a worker is set up as in a Ray worker, so records of tasks and actors
reach the driver the way prints do: the root logger is at WARNING with no handler of its own,
so a record goes through whatever handler the user configured in the worker (`basicConfig`,
which `logging.warning()` calls, writes to the forwarded stderr) or Python's last-resort
handler (also the forwarded stderr). fray_ray's own loggers keep the task runner's handler and
write to the worker's log only.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any, Protocol, TextIO

from fray_ray._private import messages
from fray_ray._private.core.task_context import current_task
from fray_ray._private.messages import Log
from fray_ray._private.stream.protocol import Connection, ConnectionClosed


class WorkerLink(Protocol):
    """A worker's runtime as the forwarder sees it: its (current) connection to the driver."""

    @property
    def connection(self) -> Connection: ...

FLUSH_INTERVAL_S = 0.05


class _ForwardingStream(io.TextIOBase):
    """A text stream that writes through and queues complete lines for the driver."""

    def __init__(self, original: TextIO, stream_name: str, forwarder: _Forwarder) -> None:
        self._original = original
        self._stream_name = stream_name
        self._forwarder = forwarder
        self._partial = ""
        self._lock = threading.Lock()

    def retarget(self, forwarder: _Forwarder) -> None:
        """Forward to `forwarder` from now on (the process's session changed)."""
        self._forwarder = forwarder

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._original.write(text)
        with self._lock:
            text = self._partial + text
            *lines, self._partial = text.split("\n")
        if lines:
            self._forwarder.add(self._stream_name, lines)
        return len(text)

    def flush(self) -> None:
        self._original.flush()

    def fileno(self) -> int:
        return self._original.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._original, "encoding", "utf-8")

    def isatty(self) -> bool:
        return False


class _Forwarder:
    """Batches lines with their task prefix and sends them to the driver every few ms."""

    def __init__(self, runtime: WorkerLink) -> None:
        self._runtime = runtime
        self._lock = threading.Lock()
        self._lines: list[list[Any]] = []
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="log-forwarder", daemon=True)
        self._thread.start()

    def add(self, stream_name: str, lines: Sequence[str]) -> None:
        context = current_task.get()
        if context is None:
            return  # output outside any task (startup noise) stays in the worker's own logs
        prefix = context.actor_name or context.function_name
        with self._lock:
            self._lines.extend([stream_name, prefix, line] for line in lines)
        self._wake.set()

    def flush(self) -> None:
        """Send queued lines now (before a task's result, so they print before `get` returns)."""
        if not self._lines:
            return  # lines the calling thread printed are there already; nothing to send
        with self._lock:
            lines, self._lines = self._lines, []
            if lines:
                try:
                    messages.notify(self._runtime.connection, Log(os.getpid(), lines))
                except ConnectionClosed:
                    pass

    def stop(self) -> None:
        """Send what is queued and let the thread end (another forwarder takes over)."""
        self.flush()
        self._stopped = True
        self._wake.set()

    def _run(self) -> None:
        while not self._runtime.connection.closed and not self._stopped:
            self._wake.wait()
            self._wake.clear()
            self.flush()
            self._wake.wait(FLUSH_INTERVAL_S)


_active: _Forwarder | None = None


def flush_forwarded() -> None:
    """Send lines printed so far; call before reporting a task's result."""
    if _active is not None:
        _active.flush()


def forward_output(runtime: WorkerLink) -> None:
    """Route this worker process's stdout/stderr lines, and the logging records of its tasks
    and actors, to the driver as well."""
    global _active
    previous, forwarder = _active, _Forwarder(runtime)
    _active = forwarder
    if previous is not None:  # a lent executor now hosting an actor: its streams forward anew
        previous.stop()
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, _ForwardingStream):
                stream.retarget(forwarder)
        _reset_root_logger()
        return
    sys.stdout = _ForwardingStream(sys.stdout, "stdout", forwarder)
    sys.stderr = _ForwardingStream(sys.stderr, "stderr", forwarder)
    _configure_worker_logging()


#: The root logger's level in a worker, as in a Ray worker.
WORKER_ROOT_LEVEL = logging.WARNING


def _reset_root_logger() -> None:
    """The root logger as a fresh worker has it, whatever the tasks before configured (an actor
    that starts in a lent executor logs as one in a process of its own would)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(WORKER_ROOT_LEVEL)


def _configure_worker_logging() -> None:
    """The root logger as a Ray worker has it (WARNING, no handler); the handlers it had (the
    task runner's, writing to the task's own stderr) move to fray_ray's logger, which stops
    propagating, so fray_ray's diagnostics stay in the worker's log and off the driver."""
    root = logging.getLogger()
    inherited = list(root.handlers)
    for handler in inherited:
        root.removeHandler(handler)
    root.setLevel(WORKER_ROOT_LEVEL)
    internal = logging.getLogger("fray_ray")
    for handler in inherited:
        internal.addHandler(handler)
    if internal.level == logging.NOTSET:
        internal.setLevel(logging.INFO)
    internal.propagate = not inherited
