"""The worker template: a warm interpreter that forks task processes on request.

Run by `_template.WorkerTemplate` as `python -c BOOT _template_main.py CONTROL_FD PRELOAD_JSON`,
with the standard library only at the top, so it starts in any Python 3. It imports the
preload modules, checks it is still single-threaded and has loaded no device library (a
CUDA/TPU runtime must never be inherited through fork), says `ready`, and then serves its
control socket (an inherited AF_UNIX SOCK_SEQPACKET end; there is no listening port). All
preload modules are in before `ready`, so no fork request ever waits behind an import:

- `fork` (JSON, with the child's stdout and stderr pipe ends attached by SCM_RIGHTS): fork a
  child that becomes the task as a fresh `python [-u] script.py args...` would be (see
  `_become_task`); answer `forked` with its pid, or `fork_failed`.
- When a child exits (its pidfd turns readable) the template SIGKILLs the child's process group
  while the leader is still a zombie, reads the status without reaping, and sends `exited`.
- `reap`: the supervisor has dropped that pid; only now is the zombie reaped, so a group id
  the supervisor may still signal can never have been reused.
- EOF on the socket: kill every child's group, reap them all and exit.

The template dies with the thread that started it (the parent-death signal), and each child
with the template, so nothing it forks outlives the cluster.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import importlib
import io
import json
import os
import select
import signal
import socket
import sys
import threading
import traceback
import types

_PR_SET_PDEATHSIG = 1
_MAX_MESSAGE = 1 << 22
#: Top-level packages that open or configure accelerator devices when imported: a template
#: that loaded one refuses to serve (fork would hand every child the parent's device state).
DEVICE_PACKAGES = frozenset(
    {"torch", "jax", "jaxlib", "tensorflow", "cupy", "pycuda", "numba", "libtpu", "tpu_info", "paddle", "mxnet",
     "triton", "tensorrt", "flax", "torch_xla", "nvidia", "cuda"}
)

_kept_alive: list[object] = []  # the template's own stdio objects, never finalized in a child


def _prctl_pdeathsig() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _settle_threads() -> int:
    """Native thread pools started by imports (OpenBLAS under numpy) shut down in their fork
    handlers and start again on first use; one throwaway fork lets them do so here."""
    if _thread_count() > 1:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    return _thread_count()


def _returncode(pid: int) -> int:
    """The exit status of zombie `pid`, as Popen reports it, without reaping it."""
    result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    if result is None:
        return -signal.SIGKILL
    if result.si_code == os.CLD_EXITED:
        return result.si_status
    return -result.si_status


def _new_stdio(fd: int, writing: bool, unbuffered: bool, like: io.TextIOWrapper | None) -> io.TextIOWrapper:
    """A standard stream over `fd`, buffered as a fresh interpreter's would be on a pipe."""
    if writing and unbuffered:
        buffer = io.FileIO(fd, "wb", closefd=False)
    else:
        buffer = open(fd, "wb" if writing else "rb", buffering=-1, closefd=False)
    encoding = getattr(like, "encoding", None) or "utf-8"
    errors = "backslashreplace" if fd == 2 else (getattr(like, "errors", None) or "strict")
    stream = io.TextIOWrapper(
        buffer, encoding=encoding, errors=errors, newline="\n",
        line_buffering=(fd == 2 and not unbuffered), write_through=writing and unbuffered,
    )
    stream.mode = "w" if writing else "r"  # type: ignore[misc]
    return stream


def _exit_status(exc: SystemExit) -> int:
    """What a fresh interpreter exits with for an uncaught SystemExit."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:  # noqa: BLE001
        pass
    return 1


def _run_main(script: str) -> int:
    """Run `script` as `__main__`; the exit status a fresh `python script.py` would have."""
    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__builtins__ = __builtins__  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    try:
        with open(script, "rb") as f:
            source = f.read()
        from importlib.machinery import SourceFileLoader

        main.__loader__ = SourceFileLoader("__main__", script)
        exec(compile(source, script, "exec"), main.__dict__)
    except SystemExit as exc:
        return _exit_status(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        return -signal.SIGINT
    except BaseException:  # noqa: BLE001 - the interpreter's own behaviour: traceback, exit 1
        exc_type, value, tb = sys.exc_info()
        tb = tb.tb_next if tb is not None else None  # the traceback starts in the script, as Python's
        if value is not None:
            value.__traceback__ = tb
        sys.excepthook(exc_type, value, tb)  # type: ignore[arg-type]
        return 1
    return 0


def _finish(code: int) -> None:
    """Interpreter shutdown as a fresh process does it: threads, atexit, flushes; then exit."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # waits for non-daemon threads
    except BaseException:  # noqa: BLE001
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:  # noqa: BLE001
            if stream is sys.stdout and code == 0:
                code = 120
    if code == -signal.SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _become_task(request: dict, stdout_fd: int, stderr_fd: int, template_pid: int, base_path: list[str]) -> None:
    """In the forked child: turn into the task process. Never returns."""
    try:
        os.setsid()
        _prctl_pdeathsig()
        if os.getppid() != template_pid:  # the template died before the signal was armed
            os._exit(1)
        procs = request.get("cgroup_procs")
        if procs:
            try:
                with open(procs, "w") as f:
                    f.write(str(os.getpid()))
            except OSError as exc:
                os.write(stderr_fd, f"cannot join the memory cgroup {procs}: {exc}\n".encode())
                os._exit(126)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536)
        cwd = request["cwd"]
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(request["env"])
        script = os.path.abspath(request["script"])  # __file__; sys.argv[0] stays as given
        unbuffered = bool(request["unbuffered"]) or bool(os.environ.get("PYTHONUNBUFFERED"))
        python_path = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = list(dict.fromkeys([os.path.dirname(os.path.realpath(script)), *python_path, *base_path]))
        importlib.invalidate_caches()
        sys.argv = [request["script"], *request["args"]]
        sys.orig_argv = [sys.executable, *(["-u"] if request["unbuffered"] else []), *sys.argv]
        _kept_alive.extend((sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__))
        sys.stdin = sys.__stdin__ = _new_stdio(0, False, unbuffered, sys.__stdin__)  # type: ignore[misc]
        sys.stdout = sys.__stdout__ = _new_stdio(1, True, unbuffered, sys.__stdout__)  # type: ignore[misc]
        sys.stderr = sys.__stderr__ = _new_stdio(2, True, unbuffered, sys.__stderr__)  # type: ignore[misc]
        numpy_random = sys.modules.get("numpy.random")
        if numpy_random is not None:  # its global generator was seeded in the template
            numpy_random.seed()
    except BaseException as exc:  # noqa: BLE001
        try:
            os.write(2, f"the worker template could not start the task: {exc!r}\n".encode())
        finally:
            os._exit(127)
    _finish(_run_main(script))


def _preload(names: list[str], skipped: dict[str, str]) -> str:
    """Import `names`; the reason to refuse serving afterwards, or ""."""
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - an optional module (numpy) may be missing
            skipped[name] = f"{type(exc).__name__}: {exc}"
    devices = sorted({name.split(".")[0] for name in sys.modules} & DEVICE_PACKAGES)
    if devices:
        return f"loaded device libraries {devices}"
    threads = _settle_threads()
    return f"has {threads} threads after preloading" if threads > 1 else ""


class _Template:
    def __init__(self, control: socket.socket, base_path: list[str], later: list[str]) -> None:
        self.control = control
        self.base_path = base_path
        self.later = later  # preload modules still to import while idle
        self.poll = select.poll()  # holds no fd of its own (an epoll would leak into children)
        self.children: dict[int, int] = {}  # pidfd -> pid, running
        self.zombies: set[int] = set()  # exited and reported, reaped on `reap`

    def send(self, message: dict) -> None:
        self.control.send(json.dumps(message).encode())

    def serve(self) -> None:
        self.poll.register(self.control.fileno(), select.POLLIN)
        while True:
            events = self.poll.poll(0 if self.later else None)
            if not events and self.later:
                refusal = _preload([self.later.pop(0)], {})
                if refusal:
                    self.send({"op": "refused", "reason": refusal})
                    return
                continue
            for fd, _ in events:
                if fd == self.control.fileno():
                    if not self.on_request():
                        return
                else:
                    self.on_child_exit(fd)

    def on_request(self) -> bool:
        try:
            data, fds, _, _ = socket.recv_fds(self.control, _MAX_MESSAGE, 4)
        except ConnectionError:
            return False
        if not data:
            return False
        try:
            request = json.loads(data)
            op = request["op"]
            if op == "fork":
                given, fds = fds, []  # `fork` closes them, whatever happens
                self.fork(request, given)
            elif op == "reap":
                pid = int(request["pid"])
                if pid in self.zombies:
                    self.zombies.discard(pid)
                    os.waitpid(pid, 0)
        except ConnectionError:  # the cluster closed the control socket while we answered
            return False
        finally:
            for fd in fds:
                os.close(fd)
        return True

    def fork(self, request: dict, fds: list[int]) -> None:
        try:
            if len(fds) != 2:
                raise ValueError(f"a fork request carries 2 descriptors, got {len(fds)}")
            sys.stdout.flush()
            sys.stderr.flush()
            template_pid = os.getpid()
            gc.freeze()  # the child's collector leaves the template's objects (and their pages) alone
            pid = os.fork()
        except (OSError, ValueError) as exc:
            for fd in fds:
                os.close(fd)
            self.send({"op": "fork_failed", "id": request.get("id"), "error": str(exc)})
            return
        if pid == 0:
            self.control.detach()  # its fd is closed with the rest; the object must not close a reused number
            _become_task(request, fds[0], fds[1], template_pid, self.base_path)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = pid
        self.poll.register(pidfd, select.POLLIN)
        self.send({"op": "forked", "id": request.get("id"), "pid": pid})

    def on_child_exit(self, pidfd: int) -> None:
        pid = self.children.pop(pidfd)
        self.poll.unregister(pidfd)
        os.close(pidfd)
        try:
            os.killpg(pid, signal.SIGKILL)  # leftovers of the task, while the leader holds the group id
        except (ProcessLookupError, PermissionError):
            pass
        self.zombies.add(pid)
        self.send({"op": "exited", "pid": pid, "returncode": _returncode(pid)})

    def shut_down(self) -> None:
        for pid in self.children.values():
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:  # not yet the leader of its own group (setsid is its first step)
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            except PermissionError:
                pass
        for pid in [*self.children.values(), *self.zombies]:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def main(argv: list[str]) -> int:
    control = socket.socket(fileno=int(argv[1]))
    preload = json.loads(argv[2])
    own_path = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    # What a fresh interpreter's path holds besides its script's directory and PYTHONPATH.
    base_path = [p for p in sys.path if p and os.path.abspath(p) not in own_path]
    sys.path[:] = [p for p in sys.path if p]  # not the working directory `-c` put first
    skipped: dict[str, str] = {}
    # Everything is imported before `ready`: an import between forks would keep a fork request
    # (and the supervisor thread that waits for its answer) waiting behind it.
    refusal = _preload(preload, skipped)
    if refusal:
        control.send(json.dumps({"op": "refused", "reason": refusal}).encode())
        return 1
    template = _Template(control, base_path, [])
    try:
        template.send({"op": "ready", "pid": os.getpid(), "preloaded": preload, "skipped": skipped})
    except OSError:  # the cluster stopped while this template was still importing
        return 0
    try:
        template.serve()
    finally:
        template.shut_down()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
