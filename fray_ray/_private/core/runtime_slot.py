"""Where the one runtime object of this process (or of this executor thread, in local mode) is kept.

`init()` installs a driver runtime; a worker process installs a worker runtime. Code running
on an in-process executor thread (local mode) sees its own worker runtime through a
ContextVar, so the same task code behaves the same in every mode.

The slot holds the runtime without knowing its type, so the values the API hands out (refs,
generators, placement group handles) can reach it from below the runtime's interface: each
reads it as the small protocol it needs (`object_ref.RefRuntime`, ...), and everything above
them reads it as a whole `runtime.CoreRuntime` through `runtime_state`. Its functions return
`Any` for that reason: a reader says what it reads by the type of the variable it assigns.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()  # guards _process_runtime changes (init/shutdown)
_process_runtime: Any = None
_context_runtime: contextvars.ContextVar[Any] = contextvars.ContextVar("fray_ray_runtime", default=None)
#: How a first use starts a session (`init()` with defaults); the API registers it on import.
_auto_init: Callable[[], Any] | None = None


def set_auto_init(hook: Callable[[], Any]) -> None:
    """Register what `current()` calls when no runtime exists yet."""
    global _auto_init
    _auto_init = hook


def current_or_none() -> Any:
    """The runtime of this thread's context, else of this process; None before `init()`."""
    runtime = _context_runtime.get()
    return runtime if runtime is not None else _process_runtime


def process_runtime_or_none() -> Any:
    """This process's runtime, whatever thread asks (in local mode: the driver's)."""
    return _process_runtime


def current() -> Any:
    """The runtime, auto-initialising a local session like Ray does on first use."""
    runtime = current_or_none()
    if runtime is not None:
        return runtime
    if _auto_init is None:
        raise RuntimeError("Ray has not been started yet. You can start Ray with 'ray.init()'.")
    return _auto_init()


def install(runtime: Any) -> None:
    global _process_runtime
    with _lock:
        _process_runtime = runtime


def uninstall(runtime: Any) -> None:
    global _process_runtime
    with _lock:
        if _process_runtime is runtime:
            _process_runtime = None


def set_context_runtime(runtime: Any) -> Any:
    return _context_runtime.set(runtime)


def reset_context_runtime(token: Any) -> None:
    _context_runtime.reset(token)


def process_lock() -> threading.Lock:
    return _lock
