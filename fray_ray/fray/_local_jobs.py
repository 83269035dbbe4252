"""Local jobs: a callable on the client's pool or a binary in its own process group, and the
output each one leaves (`LocalJobHandle.logs`). The client owns the pool and the log dir;
`JobOwner` is what a job asks of it.
"""

from __future__ import annotations

import contextvars
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TextIO

from fray_ray.fray.client import FrayError
from fray_ray.fray.types import JobRequest, JobStatus


class JobOwner(Protocol):
    """What a job asks of the `LocalClient` that runs it."""

    def _job_finished(self, job: _LocalJob) -> None: ...

    def _log_path(self) -> str: ...


#: Lines of output kept per job.
LOG_LINES_KEPT = 10_000
#: Seconds a terminated binary job gets between SIGTERM and SIGKILL.
TERMINATE_GRACE = 3.0


# ---------------------------------------------------------------------------------------------
# Logs


class _LogBuffer:
    """A job's output: a log file while a binary job runs, then (and for callables) kept lines."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards all fields
        self._lines: deque[str] = deque(maxlen=LOG_LINES_KEPT)
        self._partial = ""
        self._path: str | None = None

    def write(self, text: str) -> None:
        with self._lock:
            pieces = (self._partial + text).split("\n")
            self._partial = pieces.pop()
            self._lines.extend(piece.rstrip("\r") for piece in pieces)

    def end(self) -> None:
        """Keep an unterminated last line."""
        with self._lock:
            if self._partial:
                self._lines.append(self._partial.rstrip("\r"))
                self._partial = ""

    def follow_file(self, path: str) -> None:
        with self._lock:
            self._path = path

    def seal_file(self) -> None:
        """Keep the log file's last lines in memory and delete the file."""
        with self._lock:
            path, self._path = self._path, None
            if path is None:
                return
            self._lines.extend(_read_lines(path))
            try:
                os.unlink(path)
            except OSError:
                pass

    def tail(self, max_lines: int) -> tuple[str, ...]:
        with self._lock:
            lines = _read_lines(self._path) if self._path is not None else list(self._lines)
            if self._partial:
                lines.append(self._partial)
        return tuple(lines[-max_lines:] if max_lines > 0 else lines)


def _read_lines(path: str) -> list[str]:
    try:
        # Split on "\n" only, as callable output is; a progress line's "\r"s stay inside it.
        with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
            return [line.rstrip("\r\n") for line in deque(f, maxlen=LOG_LINES_KEPT)]
    except OSError:
        return []


# The log of the callable job whose context is running, if any.
_log_sink: contextvars.ContextVar[_LogBuffer | None] = contextvars.ContextVar("fray_local_log_sink", default=None)


class _RoutedStream:
    """Stands in for sys.stdout or sys.stderr: text written from a job's context is also
    added to that job's log; everything still reaches the stream it wraps."""

    def __init__(self, target: TextIO) -> None:
        self._target = target

    def write(self, text: str) -> int:
        sink = _log_sink.get()
        if sink is not None:
            sink.write(text)
        return self._target.write(text)

    def writelines(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


class _StreamRouting:
    """Installs the `_RoutedStream` proxies when the first callable job runs.

    The proxies stay installed afterwards (they pass text straight through when no job's
    context is writing): swapping sys.stdout back while another thread is inside print() can
    free the stream under it, which crashes CPython 3.11. If something else replaces them
    (pytest's capture does), the next job wraps the new streams.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def acquire(self) -> None:
        """Make sure the current sys.stdout/sys.stderr are proxies (someone may have replaced ours)."""
        with self._lock:
            if sys.stdout is not None and not isinstance(sys.stdout, _RoutedStream):
                sys.stdout = _RoutedStream(sys.stdout)  # type: ignore[assignment]
            if sys.stderr is not None and not isinstance(sys.stderr, _RoutedStream):
                sys.stderr = _RoutedStream(sys.stderr)  # type: ignore[assignment]

    def release(self) -> None:
        """Nothing to undo (see the class docstring)."""


_routing = _StreamRouting()


# ---------------------------------------------------------------------------------------------
# Jobs


def _kill_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, give it `grace` seconds, then SIGKILL it; reaps the leader."""
    if grace > 0:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except OSError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


class _LocalJob:
    """One job and its runner: the producer side behind a `LocalJobHandle`."""

    def __init__(self, client: JobOwner, request: JobRequest, context: contextvars.Context) -> None:
        self.request = request
        self.job_id = f"local-{request.name}-{uuid.uuid4().hex[:8]}"
        self.log = _LogBuffer()
        self.handle = LocalJobHandle(self)
        self._client = client
        self._context = context
        self._cond = threading.Condition()  # guards the fields below
        self._status = JobStatus.PENDING
        self._error: BaseException | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._future: Future[None] | None = None  # the pool's work item, cancelled if stopped while queued
        self._deadline: float | None = None  # monotonic time JobRequest.timeout runs out

    # -- reader side --------------------------------------------------------------------------

    def status(self) -> JobStatus:
        self._expire_if_due()
        with self._cond:
            return self._status

    def wait(self, timeout: float | None, raise_on_failure: bool) -> JobStatus:
        until = None if timeout is None else time.monotonic() + timeout
        while True:
            self._expire_if_due()
            with self._cond:
                if self._status.finished():
                    status, error = self._status, self._error
                    break
                now = time.monotonic()
                if until is not None and now >= until:
                    raise TimeoutError(f"job {self.job_id} is still {self._status} after {timeout} s")
                wakes = [] if until is None else [until - now]
                if self._proc is None and self._deadline is not None:
                    wakes.append(self._deadline - now)  # a callable's timeout is noticed by its readers
                self._cond.wait(max(0.0, min(wakes)) if wakes else None)
        if status is JobStatus.FAILED and raise_on_failure:
            # The job's own exception (or CalledProcessError for a binary), not JobFailed.
            raise error if error is not None else FrayError(f"job {self.job_id} failed")
        return status

    def terminate(self, grace: float = TERMINATE_GRACE) -> None:
        with self._cond:
            if self._status.finished():
                return
            self._status = JobStatus.STOPPED
            proc, future = self._proc, self._future
            self._cond.notify_all()
        self._client._job_finished(self)
        if future is not None:
            future.cancel()
        if proc is not None:
            _kill_group(proc, grace)

    # -- producer side ------------------------------------------------------------------------

    def attach(self, future: Future[None]) -> None:
        with self._cond:
            self._future = future

    def _finish(self, status: JobStatus, error: BaseException | None = None) -> None:
        with self._cond:
            if self._status.finished():
                return  # stopped earlier; the late outcome is dropped
            self._status, self._error = status, error
            self._cond.notify_all()
        self._client._job_finished(self)

    def _start(self) -> bool:
        with self._cond:
            if self._status is not JobStatus.PENDING:
                return False
            self._status = JobStatus.RUNNING
            if self.request.timeout is not None:
                self._deadline = time.monotonic() + self.request.timeout
            self._cond.notify_all()
            return True

    def _expire_if_due(self) -> None:
        with self._cond:
            due = (
                self._status is JobStatus.RUNNING
                and self._proc is None  # binary jobs are timed out by their runner, which kills them
                and self._deadline is not None
                and time.monotonic() >= self._deadline
            )
        if due:
            self._finish(JobStatus.STOPPED)

    def run(self) -> None:
        """Pool-thread body."""
        if self.request.entrypoint.binary_entrypoint is not None:
            self._run_binary()
        else:
            self._run_callable()

    def _run_callable(self) -> None:
        if not self._start():
            return
        entry = self.request.entrypoint.callable_entrypoint
        assert entry is not None
        status, error = JobStatus.SUCCEEDED, None
        _routing.acquire()
        try:
            self._context.run(self._call, entry.callable, entry.args, entry.kwargs)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                status, error = JobStatus.FAILED, exc
        except BaseException as exc:  # the job's failure is its result, reported by wait()
            status, error = JobStatus.FAILED, exc
        finally:
            _routing.release()
            self.log.end()
        self._finish(status, error)

    def _call(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        token = _log_sink.set(self.log)
        try:
            fn(*args, **kwargs)
        finally:
            _log_sink.reset(token)

    def _run_binary(self) -> None:
        entry = self.request.entrypoint.binary_entrypoint
        assert entry is not None
        environment = self.request.environment
        env = dict(os.environ)
        if environment is not None:
            env.update(environment.env_vars)
        try:
            log_path = self._client._log_path()
        except FrayError:
            self._finish(JobStatus.STOPPED)  # the client shut down before the job could start
            return
        with self._cond:
            # Started under the condition so terminate() either prevents it or sees the process.
            if self._status is not JobStatus.PENDING:
                return
            try:
                with open(log_path, "wb") as out:
                    proc = subprocess.Popen(
                        list(entry.argv),
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,  # own process group, so terminate() reaches its children
                    )
            except OSError as exc:
                start_error: OSError | None = exc
            else:
                start_error = None
                self._proc = proc
                self._status = JobStatus.RUNNING
                if self.request.timeout is not None:
                    self._deadline = time.monotonic() + self.request.timeout
                self.log.follow_file(log_path)
                self._cond.notify_all()
        if start_error is not None:
            self.log.write(f"cannot start {entry.command!r}: {start_error}\n")
            self._finish(JobStatus.FAILED, start_error)
            return
        timed_out = False
        try:
            returncode = proc.wait(self.request.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc, TERMINATE_GRACE)
            returncode = proc.wait()
        # A job is its process group: nothing it started outlives it.
        _kill_group(proc, 0)
        self.log.seal_file()
        if timed_out:
            self._finish(JobStatus.STOPPED)
        elif returncode == 0:
            self._finish(JobStatus.SUCCEEDED)
        else:
            self._finish(JobStatus.FAILED, subprocess.CalledProcessError(returncode, list(entry.argv)))

    def stop_for_shutdown(self) -> None:
        """Client shutdown: stop queued jobs and binary jobs; running callables finish."""
        with self._cond:
            stop = self._status is JobStatus.PENDING or self._proc is not None
        if stop:
            self.terminate()


class LocalJobHandle:
    """A `JobHandle` for a job of a `LocalClient`."""

    def __init__(self, job: _LocalJob) -> None:
        self._job = job

    @property
    def job_id(self) -> str:
        """`local-<name>-<8 hex digits>`."""
        return self._job.job_id

    def status(self) -> JobStatus:
        """PENDING while queued for a pool thread, RUNNING, then SUCCEEDED, FAILED or STOPPED."""
        return self._job.status()

    def wait(self, timeout: float | None = None, *, raise_on_failure: bool = True) -> JobStatus:
        """Block until the job finishes and return its status.

        With `raise_on_failure`, a FAILED callable job re-raises the exception the callable
        raised (not `JobFailed`), and a FAILED binary job raises `subprocess.CalledProcessError`.
        STOPPED is returned, not raised. Raises TimeoutError after `timeout` seconds.
        """
        return self._job.wait(timeout, raise_on_failure)

    def logs(self, max_lines: int = 0) -> tuple[str, ...]:
        """The job's last `max_lines` output lines (0: all kept, up to `LOG_LINES_KEPT`).

        Binary jobs: their stdout and stderr. Callable jobs: what the callable wrote to
        sys.stdout/sys.stderr from its own thread.
        """
        return self._job.log.tail(max_lines)

    def terminate(self) -> None:
        """Mark the job STOPPED; a binary job's process group is killed before this returns
        (SIGTERM, then SIGKILL after `TERMINATE_GRACE` s). A running callable keeps running
        in its thread, since threads cannot be killed; its outcome is ignored."""
        self._job.terminate()

    def __repr__(self) -> str:
        return f"LocalJobHandle({self.job_id!r}, {self.status()})"

