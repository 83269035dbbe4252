"""The worker template as the supervisor sees it: which launches may fork from it, and its control
socket (the template process itself is `_template_main.py`).

A task command forks from the template only when it is exactly what the template is: the
template's own Python running a script (`PYTHON [-u] script.py args...`, directly or as Iris's
callable command `bash -c "exec $IRIS_PYTHON -u $IRIS_WORKDIR/_callable_runner.py"`), with the
variables an interpreter or a preloaded library reads when it starts equal to the template's.
Every other launch (another Python, setup scripts, binaries, device-shaped tasks, a launch
that sets `OMP_NUM_THREADS` differently...) spawns as before. So does every launch once the
template has died or misbehaved. `FRAY_RAY_WORKER_TEMPLATE=0` or
`ClusterConfig(worker_template=False)` turns the template off.

All methods run on the supervisor thread.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

logger = logging.getLogger(__name__)

ENV_SWITCH = "FRAY_RAY_WORKER_TEMPLATE"
_OFF = ("0", "false", "no", "off")
#: The template's program, run as a script by path (never imported into the cluster's process).
_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_template_main.py")
_BOOT = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
_MAX_MESSAGE = 1 << 16
_WORD = re.compile(r"^(?:\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*)))?([A-Za-z0-9_./+=:,@%-]*)$")
_UNSAFE_VALUE = re.compile(r"[\s*?\[\]]")


def template_enabled(configured: bool) -> bool:
    """The cluster's setting, unless the environment switch turns the template off."""
    return configured and os.environ.get(ENV_SWITCH, "1").strip().lower() not in _OFF


def startup_variable(name: str) -> bool:
    """Whether `name` is read when an interpreter or a preloaded library starts (so a forked
    child could not honour a value other than the template's)."""
    if name in ("PYTHONPATH", "PYTHONUNBUFFERED"):
        return False  # rebuilt in the child
    return (
        name.startswith(("PYTHON", "LD_", "MALLOC_", "OPENBLAS_", "MKL_", "OMP_", "GOTO", "NPY_", "NUMPY_", "LC_",
                         "OTEL_"))  # OpenTelemetry reads its settings as it is imported
        or name.endswith("_NUM_THREADS")
        or name in ("LANG", "TZ")
    )


def _startup_view(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if startup_variable(k)}


@dataclass(frozen=True)
class TemplateSettings:
    """One template: the task Python it runs, what it imports, and the environment it starts in
    (the tasks' common environment: a launch that differs in a startup variable spawns)."""

    python: str
    preload: tuple[str, ...]
    environment: Mapping[str, str]
    cwd: str
    ready_timeout_s: float = 60.0
    #: A fork unanswered this long spawns instead, and the template forks no more (its
    #: children run on): slow is not dead, but launches must not wait on it for ever.
    reply_timeout_s: float = 30.0
    #: Launches that could fork but spawn before the template starts, which it does along with
    #: the last of them (0: with the supervisor).
    start_after: int = 0


@dataclass(frozen=True)
class ForkCandidate:
    """A launch that may fork: its command before any spawn-only wrapping, and the memory cgroup
    (`cgroup.procs`) the child must join."""

    argv: tuple[str, ...]
    join_cgroup: str | None = None


@dataclass(frozen=True)
class ForkRequest:
    script: str  # as the command names it (relative to the workdir, or absolute)
    args: tuple[str, ...]
    unbuffered: bool
    join_cgroup: str | None


def resolve_command(argv: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...] | None:
    """The argv a command execs, or None if it is not plain: `bash -c "exec WORD..."` whose words
    are literals or `$VAR`-prefixed literals (what a shell would expand them to, refusing values
    it would split or glob), or any other argv as it is."""
    if len(argv) == 3 and os.path.basename(argv[0]) in ("bash", "sh") and argv[1] == "-c":
        words = argv[2].split(" ")
        if not words or words[0] != "exec" or len(words) < 2:
            return None
        expanded = []
        for word in words[1:]:
            match = _WORD.match(word)
            if match is None:
                return None
            name = match.group(1) or match.group(2)
            value = ""
            if name is not None:
                if name not in env or _UNSAFE_VALUE.search(env[name]) or not env[name]:
                    return None
                value = env[name]
            expanded.append(value + match.group(3))
        return tuple(expanded)
    return tuple(argv)


def fork_request(candidate: ForkCandidate, settings: TemplateSettings, env: Mapping[str, str], cwd: str) -> ForkRequest | None:
    """How the template would run `candidate`, or None when it must spawn."""
    command = resolve_command(candidate.argv, env)
    if command is None or len(command) < 2 or command[0] != settings.python:
        return None
    unbuffered = command[1] == "-u"
    rest = command[2:] if unbuffered else command[1:]
    if not rest or not rest[0].endswith(".py") or rest[0].startswith("-"):
        return None
    if not os.path.isfile(os.path.join(cwd, rest[0])):
        return None  # the interpreter's own error message says it best
    if _startup_view(env) != _startup_view(settings.environment):
        return None
    return ForkRequest(rest[0], tuple(rest[1:]), unbuffered, candidate.join_cgroup)


class TemplateState(enum.Enum):
    STARTING = "starting"  # importing its preload list
    READY = "ready"  # forks on request
    DRAINING = "draining"  # too slow to answer a fork: forks no more, still reports its children
    DOWN = "down"  # refused, died, misbehaved or stopped: launches spawn


class TemplateDown(Exception):
    """The template cannot serve (it is stopped now): spawn instead."""


class ForkFailed(Exception):
    """The template is fine but could not fork this one (fork(2) failed)."""


@dataclass(frozen=True)
class ForkReply:
    """The template's answer to fork request `request_id`: the child's pid, or why not."""

    request_id: int
    pid: int | None
    error: str | None = None


@dataclass(frozen=True)
class ChildExit:
    """A forked child exited (the template reaps it once told to)."""

    pid: int
    returncode: int


class WorkerTemplate:
    """One running template process and its control socket. Forks are asynchronous: a request
    is sent and its `ForkReply` arrives later among `take_events()`, so a busy template never
    holds up the supervisor thread."""

    def __init__(self, settings: TemplateSettings) -> None:
        self.settings = settings
        self.state = TemplateState.STARTING
        self._popen: subprocess.Popen | None = None
        self._control: socket.socket | None = None
        self._pidfd: int | None = None
        self._next_id = 0
        self._events: list[ForkReply | ChildExit] = []  # in arrival order, not yet taken
        self._started_at = time.monotonic()
        self.pid: int | None = None
        #: Called before the template's descriptors close (the supervisor unregisters them).
        self.before_close: Callable[[], None] | None = None

    def start(self, environment: Mapping[str, str], prefix: Sequence[str], preexec_fn: Callable[[], None] | None) -> None:
        """Start the process (from the supervisor thread, so it dies with it); does not wait."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            try:
                ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            except OSError:
                pass
            argv = [*prefix, self.settings.python, "-c", _BOOT, _MAIN,
                    str(theirs.fileno()), json.dumps(list(self.settings.preload))]
            self._popen = subprocess.Popen(
                argv, env={**self.settings.environment, **environment}, cwd=self.settings.cwd,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                start_new_session=True, close_fds=True, pass_fds=(theirs.fileno(),), preexec_fn=preexec_fn,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.pid = self._popen.pid
        self._control = ours
        self._started_at = time.monotonic()
        try:
            self._pidfd = os.pidfd_open(self._popen.pid)
        except OSError:
            self.stop()
            raise

    # ---- what the supervisor's selector watches ------------------------------------------------

    def watched(self) -> list[tuple[int, Callable[[], None]]]:
        """(fd, handler) pairs to register; each handler may turn the template DOWN."""
        assert self._control is not None and self._popen is not None and self._pidfd is not None
        assert self._popen.stderr is not None
        os.set_blocking(self._popen.stderr.fileno(), False)
        return [(self._control.fileno(), self._on_control), (self._popen.stderr.fileno(), self._on_stderr),
                (self._pidfd, lambda: self._down("the worker template exited"))]

    def ready_deadline(self) -> float | None:
        """When a STARTING template is given up (monotonic), else None."""
        return self._started_at + self.settings.ready_timeout_s if self.state == TemplateState.STARTING else None

    def check_deadline(self) -> None:
        deadline = self.ready_deadline()
        if deadline is not None and time.monotonic() > deadline:
            self._down(f"the worker template was not ready within {self.settings.ready_timeout_s:.0f} s")

    def take_events(self) -> list[ForkReply | ChildExit]:
        events, self._events = self._events, []
        return events

    def drain(self, reason: str) -> None:
        """Fork no more, but keep serving (and reporting) the children it has: they run on."""
        if self.state == TemplateState.READY:
            self.state = TemplateState.DRAINING
            logger.warning("%s; new task processes start without the worker template", reason)

    def _on_control(self) -> None:
        while self.state != TemplateState.DOWN:
            try:
                message = self._receive()
            except BlockingIOError:
                return
            except TemplateDown as exc:
                self._down(str(exc))
                return
            self._handle(message)

    def _on_stderr(self) -> None:
        if self._popen is None or self._popen.stderr is None:
            return
        try:
            data = os.read(self._popen.stderr.fileno(), 65536)
        except (BlockingIOError, OSError):
            return
        for line in data.decode("utf-8", "replace").splitlines():
            logger.warning("worker template: %s", line)

    def _receive(self) -> dict:
        """The next message; BlockingIOError when none is waiting."""
        assert self._control is not None
        self._control.settimeout(0.0)
        try:
            data = self._control.recv(_MAX_MESSAGE)
        except (BlockingIOError, TimeoutError) as exc:
            raise BlockingIOError from exc
        except OSError as exc:
            raise TemplateDown(f"the worker template's socket failed: {exc}") from exc
        if not data:
            raise TemplateDown("the worker template closed its socket")
        try:
            message = json.loads(data)
            if not isinstance(message, dict):
                raise ValueError("not an object")
            return message
        except ValueError as exc:
            raise TemplateDown(f"the worker template sent a bad message: {exc}") from exc

    def _handle(self, message: dict) -> None:
        op = message.get("op")
        if op == "ready" and self.state == TemplateState.STARTING:
            self.state = TemplateState.READY
            logger.debug("worker template %s ready in %.2f s (preloaded %s, skipped %s)", self.pid,
                         time.monotonic() - self._started_at, message.get("preloaded"), message.get("skipped"))
        elif op == "exited":
            self._events.append(ChildExit(int(message["pid"]), int(message["returncode"])))
        elif op == "forked":
            self._events.append(ForkReply(int(message["id"]), int(message["pid"])))
        elif op == "fork_failed":
            self._events.append(ForkReply(int(message["id"]), None, str(message.get("error"))))
        elif op == "refused":
            self._down(f"the worker template refused to serve: {message.get('reason')}")
        else:
            self._down(f"the worker template sent an unexpected message: {message!r}")

    # ---- requests ---------------------------------------------------------------------------------

    def request_fork(self, request: ForkRequest, env: Mapping[str, str], cwd: str, stdout_fd: int, stderr_fd: int) -> int:
        """Ask for a child running `request` and return the request's id; its `ForkReply` comes
        later. Raises ForkFailed (this request cannot be sent), or TemplateDown (the template
        is stopped now and this launch should spawn)."""
        if self.state != TemplateState.READY or self._control is None:
            raise TemplateDown("the worker template is not ready")
        self._next_id += 1
        body = {"op": "fork", "id": self._next_id, "script": request.script, "args": list(request.args),
                "unbuffered": request.unbuffered, "cgroup_procs": request.join_cgroup, "env": dict(env), "cwd": cwd}
        payload = json.dumps(body).encode()
        try:
            self._control.settimeout(self.settings.reply_timeout_s)
            socket.send_fds(self._control, [payload], [stdout_fd, stderr_fd])
        except OSError as exc:
            if getattr(exc, "errno", None) == 90:  # EMSGSIZE: this request only is too big
                raise ForkFailed("the launch is too large for the worker template") from exc
            self._down(f"cannot reach the worker template: {exc}")
            raise TemplateDown(str(exc)) from exc
        return self._next_id

    def reap(self, pid: int) -> None:
        """The supervisor has let go of `pid`: the template may reap it."""
        if self.state not in (TemplateState.READY, TemplateState.DRAINING) or self._control is None:
            return
        try:
            self._control.settimeout(self.settings.reply_timeout_s)
            self._control.send(json.dumps({"op": "reap", "pid": pid}).encode())
        except OSError as exc:
            self._down(f"cannot reach the worker template: {exc}")

    def _down(self, reason: str) -> None:
        if self.state == TemplateState.DOWN:
            return
        if self._popen is not None and self._popen.poll() is None:
            logger.warning("%s; task processes start without it from now on", reason)
        else:
            logger.warning("%s (exit status %s); task processes start without it from now on", reason,
                           self._popen.returncode if self._popen is not None else None)
        self._terminate(kill=True)  # its children die with it (their parent-death signal)

    def stop(self, timeout: float = 10.0) -> None:
        """Close the socket (the template then kills and reaps its children and exits) and wait
        for it; SIGKILL if it does not go. Idempotent."""
        self._terminate(kill=False, timeout=timeout)

    def _terminate(self, *, kill: bool, timeout: float = 10.0) -> None:
        if self.state == TemplateState.DOWN and self._popen is None:
            return
        self.state = TemplateState.DOWN
        if self.before_close is not None:
            self.before_close()
            self.before_close = None
        if kill and self._popen is not None and self._popen.poll() is None:
            self._popen.send_signal(signal.SIGKILL)
        if self._control is not None:
            self._control.close()
            self._control = None
        popen = self._popen
        if popen is not None:
            try:
                popen.wait(timeout)
            except subprocess.TimeoutExpired:
                popen.send_signal(signal.SIGKILL)
                popen.wait()
            if popen.stderr is not None:
                self._on_stderr()  # its last words, if any
                popen.stderr.close()
            self._popen = None
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
