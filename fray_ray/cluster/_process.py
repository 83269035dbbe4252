"""Task processes: each in its own session, output streamed line by line, exits pushed.

One long-lived thread (`ProcessSupervisor`) forks every task process, so the
parent-death signal each child sets (PR_SET_PDEATHSIG, which fires when the *thread* that
forked it exits) fires only when the supervisor itself goes away. The signal is set by
util-linux's `setpriv --pdeathsig KILL` in front of the task's argv when that works here
(keeping subprocess's fast vfork path: about 1 ms a spawn); otherwise by a `preexec_fn`
calling prctl (a full fork: 3-4 ms a spawn from a large process). The same thread watches
all stdout/stderr pipes and one pidfd per process in a single selector, so a task's exit is
seen the moment it happens, with no polling and no thread per process. Killing means SIGKILL
to the whole process group; a finished task's leftover children are killed the same way,
before its leader is reaped (so the group id cannot have been reused). An optional
`SpawnGuard` (the cluster's `ProcessGuard`) marks every process's environment, places the
supervisor thread in the cluster's cgroup, and hears of every group, so that a reaper can kill
them all should this process die.

With a worker template, a launch that is the template's own Python running a script is forked
from that warm process instead, under the same guarantees (`_process_forks.py`, the
supervisor's side of the template). The values the supervisor is called with and its records of
running processes are in `_process_types.py`.
"""

from __future__ import annotations

import logging
import os
import select
import selectors
import signal
import subprocess
import threading
import time
from collections import deque

from fray_ray.cluster._parent_death import die_with_parent, pdeathsig_prefix, prctl
from fray_ray.cluster._process_forks import ForkedLaunches, _PendingFork
from fray_ray.cluster._process_types import (
    ProcessListener,
    ProcessSpec,
    SpawnGuard,
    SupervisorState,
    _Running,
    _Stream,
    kill_group_or_leader,
)
from fray_ray.cluster._template import TemplateSettings, TemplateState, WorkerTemplate

__all__ = ["ProcessListener", "ProcessSpec", "ProcessSupervisor", "SpawnGuard", "SupervisorState"]

logger = logging.getLogger(__name__)

_READ_CHUNK = 65536


class ProcessSupervisor(ForkedLaunches):
    """Owns task processes. `start()`, then `spawn`/`kill`; `stop()` kills and reaps them all."""

    def __init__(
        self,
        *,
        name: str = "fray-ray-processes",
        max_line_bytes: int = 64 * 1024,
        use_setpriv: bool = True,
        use_pidfd: bool = True,
        guard: SpawnGuard | None = None,
        template: TemplateSettings | None = None,
    ) -> None:
        self._name = name
        self._guard = guard
        self._use_setpriv = use_setpriv
        self._max_line_bytes = max_line_bytes
        self._lock = threading.Lock()  # guards _state, _queue, _starting, _forking, _running, _cancelled
        self._state = SupervisorState.NEW
        self._queue: deque[tuple[int, ProcessSpec, ProcessListener]] = deque()
        self._exited: deque[int] = deque()  # keys whose waiter thread saw an exit (no pidfd support)
        self._running: dict[int, _Running] = {}
        self._cancelled: set[int] = set()  # kill() arrived before the process was registered
        self._starting: int | None = None  # key being spawned right now (out of _queue, not in _running)
        self._selector: selectors.BaseSelector | None = None
        self._wake_r: int | None = None
        self._wake_w: int | None = None
        self._thread: threading.Thread | None = None
        self._use_pidfd = use_pidfd and hasattr(os, "pidfd_open")
        self._template_settings = template if self._use_pidfd else None
        self._template: WorkerTemplate | None = None
        self._template_started = False  # once: a template that went down is not started again
        self._spawned_before_template = 0  # launches that could have forked, had it been there
        self._forking: dict[int, _PendingFork] = {}  # fork request id -> launch awaiting the template

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> ProcessSupervisor:
        with self._lock:
            if self._state != SupervisorState.NEW:
                raise RuntimeError(f"process supervisor is {self._state.value}")
            self._selector = selectors.DefaultSelector()
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
            self._selector.register(self._wake_r, selectors.EVENT_READ, None)
            self._state = SupervisorState.RUNNING
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Kill every process group, reap them, join the thread. Idempotent."""
        with self._lock:
            if self._state != SupervisorState.RUNNING:
                self._state = SupervisorState.STOPPED
                return
            self._state = SupervisorState.STOPPED
            self._queue.clear()
            for running in self._running.values():
                self._kill_group(running)
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.warning("%s did not stop within %.1f s", self._name, timeout)
        self._thread = None

    def __enter__(self) -> ProcessSupervisor:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---- requests (any thread) ------------------------------------------------------------

    def spawn(self, key: int, spec: ProcessSpec, listener: ProcessListener) -> None:
        """Start `spec` soon on the supervisor thread; events go to `listener`."""
        with self._lock:
            if self._state != SupervisorState.RUNNING:
                raise RuntimeError("process supervisor is not running")
            self._queue.append((key, spec, listener))
        self._wake()

    def kill(self, key: int) -> None:
        """SIGKILL the process group of `key` (or cancel it if not started yet)."""
        with self._lock:
            running = self._running.get(key)
            if running is not None:
                self._kill_group(running)
                return
            if (key == self._starting or any(queued[0] == key for queued in self._queue)
                    or any(pending.key == key for pending in self._forking.values())):
                self._cancelled.add(key)
        self._wake()

    def pids(self) -> list[int]:
        """Leaders of the process groups alive now."""
        with self._lock:
            return [r.pid for r in self._running.values()]

    @property
    def template_pid(self) -> int | None:
        """The worker template's pid while it serves (None: off, starting, or down)."""
        template = self._template
        return template.pid if template is not None and template.state == TemplateState.READY else None

    # ---- internals --------------------------------------------------------------------------

    @staticmethod
    def _kill_group(running: _Running) -> None:
        # Called with the lock held and the leader unreaped, so the group id is still ours.
        kill_group_or_leader(running.pid)

    def _wake(self) -> None:
        with self._lock:  # the supervisor thread closes the pipe under this lock
            if self._wake_w is None:
                return
            try:
                os.write(self._wake_w, b"x")
            except (BlockingIOError, OSError):
                pass  # the pipe is full: a wake-up is pending anyway

    def _run(self) -> None:
        assert self._selector is not None
        try:
            if self._guard is not None:
                self._guard.enter_thread()
            self._start_template_when_due(None)
            while True:
                for key, _ in self._selector.select(timeout=self._select_timeout()):
                    if key.data is None:
                        self._drain_wake_pipe()
                    else:
                        key.data()
                self._process_queue()
                if self._state == SupervisorState.STOPPED and self._finish_stop():
                    return
        except Exception:  # noqa: BLE001 - a supervisor crash must not leave processes behind
            logger.exception("%s crashed; killing its processes", self._name)
            if self._template is not None:
                self._template.stop(timeout=0)
            with self._lock:
                self._state = SupervisorState.STOPPED
                for running in self._running.values():
                    self._kill_group(running)
            self._finish_stop(wait=5.0)
        finally:
            self._close()

    def _drain_wake_pipe(self) -> None:
        assert self._wake_r is not None
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _select_timeout(self) -> float | None:
        if self._state != SupervisorState.RUNNING:
            return 0.05
        deadlines = [pending.deadline for pending in self._forking.values()]
        ready = self._template.ready_deadline() if self._template is not None else None
        if ready is not None:
            deadlines.append(ready)
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _process_queue(self) -> None:
        while True:
            self._template_events()
            with self._lock:
                if self._exited:
                    exited_key = self._exited.popleft()
                    running = self._running.get(exited_key)
                    item = None
                elif self._queue and self._state == SupervisorState.RUNNING:
                    if self._waits_for_template(self._queue[0][1]):
                        return
                    item = self._queue.popleft()
                    cancelled = item[0] in self._cancelled
                    self._cancelled.discard(item[0])
                    self._starting = None if cancelled else item[0]
                    running = None
                else:
                    return
            if item is None:
                if running is not None:
                    self._on_exit(running)
            elif cancelled:
                item[2].process_exited(-signal.SIGKILL, "")
            else:
                self._start(*item)

    def _start(self, key: int, spec: ProcessSpec, listener: ProcessListener) -> None:
        prefix = pdeathsig_prefix() if self._use_setpriv else ()
        env = dict(spec.env)
        if self._guard is not None:
            env.update(self._guard.environment)
        if self._start_forked(key, spec, env, listener):
            return
        try:
            popen = subprocess.Popen(
                [*prefix, *spec.argv],
                env=env,
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=die_with_parent if not prefix and prctl is not None else None,
                close_fds=True,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            with self._lock:
                self._starting = None
                self._cancelled.discard(key)
            listener.process_exited(127, f"cannot start {spec.argv[0]!r}: {exc}")
            return
        if self._guard is not None:
            self._guard.group_started(popen.pid)
        running = _Running(key, popen.pid, popen, listener)
        assert popen.stdout is not None and popen.stderr is not None
        self._watch_output(running, popen.stdout.fileno(), popen.stderr.fileno())
        if self._use_pidfd:
            try:
                running.pidfd = os.pidfd_open(popen.pid)
            except OSError:
                self._use_pidfd = False
        if running.pidfd is not None:
            self._selector.register(running.pidfd, selectors.EVENT_READ, lambda r=running: self._on_exit(r))
        else:
            running.waiter = threading.Thread(
                target=self._wait_without_reaping, args=(running,), name=f"{self._name}-wait-{popen.pid}", daemon=True
            )
        self._register(running)
        self._start_template_when_due(spec)

    def _watch_output(self, running: _Running, stdout_fd: int, stderr_fd: int) -> None:
        assert self._selector is not None
        for source, fd in (("stdout", stdout_fd), ("stderr", stderr_fd)):
            os.set_blocking(fd, False)
            stream = _Stream(source, fd, owned=running.popen is None)
            running.streams.append(stream)
            self._selector.register(fd, selectors.EVENT_READ, lambda r=running, s=stream: self._on_readable(r, s))

    def _register(self, running: _Running) -> None:
        key = running.key
        with self._lock:
            self._running[key] = running
            self._starting = None
            kill_now = key in self._cancelled or self._state != SupervisorState.RUNNING
            self._cancelled.discard(key)
            if kill_now:
                self._kill_group(running)
        if running.waiter is not None:
            running.waiter.start()
        running.listener.process_started(running.pid)

    def _wait_without_reaping(self, running: _Running) -> None:
        # Fallback for kernels without pidfds: wait for the exit but leave the zombie, so the
        # supervisor thread can still kill leftover group members before reaping.
        try:
            os.waitid(os.P_PID, running.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            pass
        with self._lock:
            self._exited.append(running.key)
        self._wake()

    def _on_readable(self, running: _Running, stream: _Stream) -> None:
        try:
            data = os.read(stream.fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close_stream(running, stream)
            return
        self._emit(running, stream, data)

    def _emit(self, running: _Running, stream: _Stream, data: bytes) -> None:
        buffer = stream.buffer + data
        now_ms = int(time.time() * 1000)
        *lines, rest = buffer.split(b"\n")
        while len(rest) > self._max_line_bytes:
            lines.append(rest[: self._max_line_bytes])
            rest = rest[self._max_line_bytes :]
        stream.buffer = rest
        for line in lines:
            text = line.decode("utf-8", "replace").rstrip("\r")
            try:
                running.listener.process_output(stream.source, text, now_ms)
            except Exception:  # noqa: BLE001 - a listener bug must not stop output capture
                logger.exception("log listener failed")

    def _close_stream(self, running: _Running, stream: _Stream) -> None:
        if stream.fd < 0:
            return
        if stream.buffer:
            leftover, stream.buffer = stream.buffer, b""
            self._emit(running, stream, leftover + b"\n")
        assert self._selector is not None
        try:
            self._selector.unregister(stream.fd)
        except (KeyError, ValueError):
            pass
        stream.fd = -1

    def _drain_stream(self, running: _Running, stream: _Stream) -> None:
        """Read whatever the exited process left in the pipe, then close our end."""
        while stream.fd >= 0:
            try:
                data = os.read(stream.fd, _READ_CHUNK)
            except BlockingIOError:
                break
            except OSError:
                break
            if not data:
                break
            self._emit(running, stream, data)
        self._close_stream(running, stream)

    def _on_exit(self, running: _Running) -> None:
        assert self._selector is not None
        with self._lock:
            self._kill_group(running)  # leftover children of the task die with it
        for stream in running.streams:
            self._drain_stream(running, stream)
        if running.pidfd is not None:
            try:
                self._selector.unregister(running.pidfd)
            except (KeyError, ValueError):
                pass
            os.close(running.pidfd)
            running.pidfd = None
        with self._lock:
            if running.popen is not None:
                returncode = running.popen.wait()
            else:  # reported by the template; unknown if it died with the template
                returncode = running.returncode if running.returncode is not None else -signal.SIGKILL
            self._running.pop(running.key, None)
            stopping = self._state != SupervisorState.RUNNING
        if running.popen is None and self._template is not None:
            self._template.reap(running.pid)  # only now: its group can no longer be signalled from here
        if self._guard is not None:
            self._guard.group_reaped(running.pid)
        self._close_pipes(running)
        if running.waiter is not None:
            running.waiter.join()
        if not stopping:
            try:
                running.listener.process_exited(returncode, "")
            except Exception:  # noqa: BLE001
                logger.exception("exit listener failed")

    def _finish_stop(self, wait: float = 10.0) -> bool:
        """Called on the supervisor thread once stopping: reap everything, True when done."""
        if self._template is not None:
            self._template.stop()  # it kills and reaps its children, then exits
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                remaining = list(self._running.values())
                exited = list(self._exited)
                self._exited.clear()
            if not remaining:
                return True
            for running in remaining:
                if running.key in exited or self._is_zombie(running):
                    self._on_exit(running)
            if time.monotonic() > deadline:
                logger.warning("%d task process(es) did not die after SIGKILL", len(remaining))
                return True
            time.sleep(0.005)

    @staticmethod
    def _is_zombie(running: _Running) -> bool:
        if running.popen is None:  # the template's child: its pidfd turns readable when it exits
            return running.pidfd is None or bool(select.select([running.pidfd], [], [], 0)[0])
        try:
            result = os.waitid(os.P_PID, running.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return result is not None

    @staticmethod
    def _close_pipes(running: _Running) -> None:
        if running.popen is not None:
            for pipe in (running.popen.stdout, running.popen.stderr):
                if pipe is not None:
                    pipe.close()
            return
        for stream in running.streams:  # a forked child's pipes are plain descriptors of ours
            if stream.owned_fd >= 0:
                os.close(stream.owned_fd)
                stream.owned_fd = -1

    def _close(self) -> None:
        with self._lock:
            leftovers = list(self._running.values())
            self._running.clear()
        for running in leftovers:
            self._close_pipes(running)
            if running.pidfd is not None:
                os.close(running.pidfd)
        if self._selector is not None:
            self._selector.close()
        with self._lock:
            fds = (self._wake_r, self._wake_w)
            self._wake_r = self._wake_w = None
        for fd in fds:
            if fd is not None:
                os.close(fd)
