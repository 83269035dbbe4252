"""Ending a local-mode session when the main thread finishes, before Python joins threads.

When a script's main thread returns, Python first joins every non-daemon thread, thread-pool
workers included (`concurrent.futures` joins its pools from a `threading` exit hook), and only
then runs `atexit` functions. In local mode the session's executors and actors are pool threads
of this process that serve until told to stop, so the `atexit` shutdown that ends a cluster
session would come only after they gave up on their own: a script that never calls
`shutdown()` would hang. Ray ends the session as soon as the driver's script is done, so local
mode shuts the session down from a `threading` exit hook instead: those run before the join,
newest first, and ours is registered after the pools' own.

`threading._register_atexit` is private to the standard library; it is the hook
`concurrent.futures` relies on (Python 3.9 and later). Where it is missing, the ordinary
`atexit` shutdown remains.
"""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401 - its exit hook registers first, so ours runs before it
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator

logger = logging.getLogger(__name__)

_lock = threading.Lock()  # guards the two fields below
_hook: Callable[[], None] | None = None  # what runs before threads are joined; None: nothing
_registered = False  # set once: threading's exit hooks cannot be removed
_noting_registered = False  # the same, for `note_interrupts_at_exit`
_interrupted_at_exit = threading.Event()  # Ctrl-C came after the main thread finished


def before_thread_join(hook: Callable[[], None] | None) -> None:
    """Run `hook` when the main thread finishes, before Python joins the other threads.

    One hook at a time: a later call replaces it, and None clears it (a session that ended by
    `shutdown()` needs nothing at exit). The first hook registers with `threading`.
    """
    global _hook, _registered
    register = getattr(threading, "_register_atexit", None)
    with _lock:
        _hook = hook
        if hook is None or _registered or register is None:
            return
        _registered = True
    try:
        register(_run)
    except RuntimeError:  # the interpreter is already shutting down; the atexit shutdown remains
        logger.debug("cannot register a thread-exit hook", exc_info=True)


def _run() -> None:
    global _hook
    with _lock:
        hook, _hook = _hook, None
    if hook is None:
        return
    try:
        hook()
    except Exception:  # noqa: BLE001 - the interpreter is exiting; the atexit shutdown still follows
        logger.debug("exit hook failed", exc_info=True)


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ignore Ctrl-C for the block, in the main thread (elsewhere it cannot arrive anyway):
    the session's shutdown at exit takes moments, and an interrupt half-way would leave its
    processes to the cluster's reaper and print an internal traceback."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):  # no signals here (an embedded interpreter)
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(ValueError, OSError, TypeError):
            signal.signal(signal.SIGINT, previous)


def note_interrupts_at_exit() -> None:
    """From when the main thread finishes, note the first Ctrl-C instead of raising it.

    Python joins its thread pools after the script ends; a KeyboardInterrupt raised there
    prints a traceback of the standard library and skips nothing useful. Noted instead, it
    tells the session's exit to stop its work at once (`interrupted_at_exit`); a second Ctrl-C
    is raised as usual, so a thread that never ends can still be left behind. A SIGINT handler
    the program set itself is left alone.
    """
    global _noting_registered
    register = getattr(threading, "_register_atexit", None)
    with _lock:
        if _noting_registered or register is None:
            return
        _noting_registered = True
    try:
        register(_note_interrupts)
    except RuntimeError:  # the interpreter is already shutting down
        logger.debug("cannot register a thread-exit hook", exc_info=True)


def interrupted_at_exit() -> bool:
    """Whether Ctrl-C came after the main thread finished (see `note_interrupts_at_exit`)."""
    return _interrupted_at_exit.is_set()


def _note_interrupts() -> None:
    def noted(_signum: int, _frame: object) -> None:
        _interrupted_at_exit.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    try:
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.signal(signal.SIGINT, noted)
        if previous is not signal.default_int_handler:  # the program's own handler: keep it
            signal.signal(signal.SIGINT, previous)
    except KeyboardInterrupt:  # Ctrl-C came before the handler was in place
        _interrupted_at_exit.set()
    except (ValueError, OSError):
        logger.debug("cannot note interrupts at exit", exc_info=True)
