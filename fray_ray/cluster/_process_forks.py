"""The process supervisor's side of the worker template: launches forked from it.

With a worker template (`_template.py`), a launch that is the template's own Python running a
script is forked from that warm process instead (a few ms instead of an interpreter start).
The template starts with the supervisor, or (`TemplateSettings.start_after`) only once that
many such launches have spawned: a session that starts a process or two never pays for one.
Launches that could fork wait while it imports.
The child's pipes are made here and handed over; the template is its parent, reports its exit
status, and reaps it only when told to, so the guarantees of `_process.py` hold for forked
children too: each is a session of its own, dies with the template (which dies with the
supervisor thread), joins the cluster's cgroup by birth, is reported to the guard, and has its
group killed before its leader is reaped. A fork is asked for and answered asynchronously on
the supervisor's selector, so a busy template delays only the launches it forks. Should the
template die or misbehave, launches spawn as before; should it leave a fork unanswered too
long, that launch spawns and the template forks no more, but the children it runs are left
alone.

`ForkedLaunches` is a base of `ProcessSupervisor` and shares its state, its lock and its
thread; its methods run on the supervisor thread.
"""

from __future__ import annotations

import functools
import logging
import os
import selectors
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fray_ray.cluster._parent_death import die_with_parent, pdeathsig_prefix, prctl
from fray_ray.cluster._process_types import (
    ProcessListener,
    ProcessSpec,
    SpawnGuard,
    SupervisorState,
    _Running,
    kill_group_or_leader,
)
from fray_ray.cluster._template import (
    ChildExit,
    ForkFailed,
    ForkReply,
    TemplateDown,
    TemplateSettings,
    TemplateState,
    WorkerTemplate,
    fork_request,
)

logger = logging.getLogger(__name__)


@dataclass
class _PendingFork:
    """A launch sent to the template, waiting for its reply (our ends of its pipes held)."""

    key: int
    spec: ProcessSpec
    listener: ProcessListener
    stdout_fd: int
    stderr_fd: int
    deadline: float


class ForkedLaunches:
    """Starting the worker template and forking launches from it; `ProcessSupervisor` sets the
    state below (in its `__init__`) and supplies the methods declared for type checkers."""

    _lock: threading.Lock  # guards _state, _queue, _starting, _forking, _running, _cancelled
    _state: SupervisorState
    _queue: deque[tuple[int, ProcessSpec, ProcessListener]]
    _running: dict[int, _Running]
    _cancelled: set[int]
    _starting: int | None
    _selector: selectors.BaseSelector | None
    _guard: SpawnGuard | None
    _use_setpriv: bool
    _template_settings: TemplateSettings | None
    _template: WorkerTemplate | None
    _template_started: bool
    _spawned_before_template: int
    _forking: dict[int, _PendingFork]  # fork request id -> launch awaiting the template

    if TYPE_CHECKING:

        @staticmethod
        def _kill_group(running: _Running) -> None: ...

        def _watch_output(self, running: _Running, stdout_fd: int, stderr_fd: int) -> None: ...

        def _register(self, running: _Running) -> None: ...

        def _on_exit(self, running: _Running) -> None: ...

    def _start_template_when_due(self, spawned: ProcessSpec | None) -> None:
        """Start the template along with the `start_after`-th launch that could have forked
        (`spawned`, just started fresh), or at once (`spawned` None) when that is 0."""
        settings = self._template_settings
        if settings is None or self._template_started:
            return
        if spawned is not None:
            if spawned.fork is None:
                return
            self._spawned_before_template += 1
        if self._spawned_before_template >= settings.start_after:
            self._template_started = True
            self._start_template(settings)

    def _start_template(self, settings: TemplateSettings) -> None:
        template = WorkerTemplate(settings)
        prefix = pdeathsig_prefix() if self._use_setpriv else ()
        preexec = die_with_parent if not prefix and prctl is not None else None
        try:
            template.start(self._guard.environment if self._guard is not None else {}, prefix, preexec)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            logger.warning("cannot start the worker template (%s): task processes start without it", exc)
            return
        assert self._selector is not None
        watched = template.watched()
        for fd, handler in watched:
            self._selector.register(fd, selectors.EVENT_READ, handler)
        template.before_close = functools.partial(self._template_closing, [fd for fd, _ in watched])
        self._template = template

    def _template_closing(self, fds: list[int]) -> None:
        """The template is going away: unregister it; its children die with it (parent-death
        signal), so wait for each through a pidfd and report it killed."""
        assert self._selector is not None
        for fd in fds:
            try:
                self._selector.unregister(fd)
            except (KeyError, ValueError):
                pass
        self._respawn_pending_forks()
        with self._lock:
            orphans = [r for r in self._running.values() if r.popen is None]
            for running in orphans:
                self._kill_group(running)
        for running in orphans:
            if running.pidfd is not None and self._state == SupervisorState.RUNNING:
                self._selector.register(running.pidfd, selectors.EVENT_READ, lambda r=running: self._on_exit(r))

    def _respawn_pending_forks(self) -> None:
        """Launches the template will not answer go back to the front of the queue to spawn (a
        child it forked without answering dies with it, or is killed when the answer comes)."""
        with self._lock:
            pending, self._forking = list(self._forking.values()), {}
            for launch in reversed(pending):
                self._queue.appendleft((launch.key, launch.spec, launch.listener))
        for launch in pending:
            os.close(launch.stdout_fd)
            os.close(launch.stderr_fd)

    def _template_events(self) -> None:
        template = self._template
        if template is None:
            return
        template.check_deadline()
        now = time.monotonic()
        if any(pending.deadline < now for pending in self._forking.values()):
            template.drain(f"the worker template did not answer a fork within {template.settings.reply_timeout_s:.0f} s")
            self._respawn_pending_forks()
        for event in template.take_events():
            if isinstance(event, ForkReply):
                self._fork_answered(template, event)
            else:
                self._forked_child_exited(template, event)

    def _fork_answered(self, template: WorkerTemplate, reply: ForkReply) -> None:
        with self._lock:
            launch = self._forking.pop(reply.request_id, None)
        if launch is None:  # given up on: that launch spawned instead, so this child must go
            if reply.pid is not None:
                kill_group_or_leader(reply.pid)  # unreaped (the template reaps on `reap`)
            return
        if reply.pid is None:
            os.close(launch.stdout_fd)
            os.close(launch.stderr_fd)
            with self._lock:
                self._cancelled.discard(launch.key)
            launch.listener.process_exited(127, f"cannot start {launch.spec.argv[0]!r}: {reply.error}")
            return
        if self._guard is not None:
            self._guard.group_started(reply.pid)
        running = _Running(launch.key, reply.pid, None, launch.listener)
        self._watch_output(running, launch.stdout_fd, launch.stderr_fd)
        try:
            running.pidfd = os.pidfd_open(reply.pid)  # watched only should the template die
        except OSError:
            pass
        self._register(running)

    def _forked_child_exited(self, template: WorkerTemplate, child: ChildExit) -> None:
        with self._lock:
            running = next((r for r in self._running.values() if r.pid == child.pid and r.popen is None), None)
        if running is None:  # a child whose launch was given up on
            template.reap(child.pid)
            return
        running.returncode = child.returncode
        self._on_exit(running)

    def _waits_for_template(self, spec: ProcessSpec) -> bool:
        """The next launch may fork, but the template is still importing: hold the queue."""
        template = self._template
        return spec.fork is not None and template is not None and template.state == TemplateState.STARTING

    def _start_forked(self, key: int, spec: ProcessSpec, env: dict[str, str], listener: ProcessListener) -> bool:
        """Ask the template to fork `spec` if it may (the child registers when the answer
        comes); False when it must spawn instead."""
        template = self._template
        if spec.fork is None or template is None or template.state != TemplateState.READY:
            return False
        request = fork_request(spec.fork, template.settings, env, spec.cwd)
        if request is None:
            return False
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        try:
            request_id = template.request_fork(request, env, spec.cwd, stdout_w, stderr_w)
        except (TemplateDown, ForkFailed) as exc:
            for fd in (stdout_r, stderr_r):
                os.close(fd)
            if isinstance(exc, TemplateDown):
                return False
            with self._lock:
                self._starting = None
                self._cancelled.discard(key)
            listener.process_exited(127, f"cannot start {spec.argv[0]!r}: {exc}")
            return True
        finally:
            os.close(stdout_w)  # the template holds its own copies now
            os.close(stderr_w)
        deadline = time.monotonic() + template.settings.reply_timeout_s
        with self._lock:
            self._forking[request_id] = _PendingFork(key, spec, listener, stdout_r, stderr_r, deadline)
            self._starting = None
        return True
