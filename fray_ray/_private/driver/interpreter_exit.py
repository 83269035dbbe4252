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

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

_lock = threading.Lock()  # guards the two fields below
_hook: Callable[[], None] | None = None  # what runs before threads are joined; None: nothing
_registered = False  # set once: threading's exit hooks cannot be removed


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
