"""Warn-once helpers (`ray.util.log_once` and its two switches), for user code that logs.

The state is per process, as in Ray: these are user-facing switches for user log lines, not
runtime state, so it does not live on the runtime object and survives `init`/`shutdown`.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import Final

__all__ = ["disable_log_once_globally", "enable_periodic_logging", "log_once"]

PERIOD_S: Final = 60.0
"""With periodic logging on, a key's `log_once` is True again this long after it last was."""


class _Mode(enum.Enum):
    ONCE = "once"  # the default: True the first time a key is seen
    PERIODIC = "periodic"  # True the first time, then again every PERIOD_S
    DISABLED = "disabled"  # always False


_lock = threading.Lock()  # guards _mode and _last_true
_mode = _Mode.ONCE
_last_true: dict[str, float] = {}  # key -> _clock() of the last True answer
_clock = time.monotonic  # a module attribute so tests can move time forward


def log_once(key: str) -> bool:
    """True if this is the first call with `key` in this process (see the switches below).

    Args:
        key: what the message is about.

    Returns:
        True the first time for `key` (never once disabled; again after each period when periodic).

    >>> from fray_ray.util import log_once
    >>> log_once("doc-example-key"), log_once("doc-example-key")
    (True, False)
    """
    now = _clock()
    with _lock:
        if _mode is _Mode.DISABLED:
            return False
        last = _last_true.get(key)
        if last is not None and (_mode is _Mode.ONCE or now - last < PERIOD_S):
            return False
        _last_true[key] = now
        return True


def disable_log_once_globally() -> None:
    """Make `log_once` return False from now on, in this process.

    >>> from fray_ray.util import disable_log_once_globally  # doctest: +SKIP
    >>> disable_log_once_globally()  # doctest: +SKIP
    """
    global _mode
    with _lock:
        _mode = _Mode.DISABLED


def enable_periodic_logging() -> None:
    """Make `log_once` return True again for a key every `PERIOD_S` seconds, in this process.

    >>> from fray_ray.util import enable_periodic_logging  # doctest: +SKIP
    >>> enable_periodic_logging()  # doctest: +SKIP
    """
    global _mode
    with _lock:
        _mode = _Mode.PERIODIC
