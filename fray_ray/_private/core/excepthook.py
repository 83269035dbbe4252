"""The driver's `sys.excepthook`: an error nobody catches, printed without fray_ray's frames.

fray_ray sets it at `init()` when no other program has replaced Python's own. It trims frames
as a task's traceback is trimmed (`user_tracebacks`); an uncaught error that is not a task's
(bad input fray_ray refused, or a fray_ray bug) ends with a note saying how to see the rest.
"""

from __future__ import annotations

import sys
import traceback
from types import TracebackType

from fray_ray._private.core.user_tracebacks import INTERNALS_ENV, show_internals, trim
from fray_ray.exceptions import RayError

_NOTE = f"(fray_ray's own frames are not shown; {INTERNALS_ENV}=1 shows them)\n"


def install_excepthook() -> None:
    """Print uncaught errors without fray_ray's frames; leaves a hook another program set alone."""
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _print_uncaught


def _print_uncaught(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    if show_internals():
        sys.__excepthook__(kind, value, tb)
        return
    try:
        formatted = traceback.TracebackException(kind, value, tb)
        raised_at = formatted.stack[-1] if formatted.stack else None
        trim(formatted)
        text = "".join(formatted.format())
        if raised_at is not None and formatted.stack[-1] is not raised_at and not _is_ray_error(value):
            text += _NOTE  # raised inside fray_ray (bad input, or a bug): say where the rest is
    except Exception:  # noqa: BLE001 - never lose the error itself: print it as Python would
        sys.__excepthook__(kind, value, tb)
        return
    sys.stderr.write(text)
    sys.stderr.flush()


def _is_ray_error(value: BaseException) -> bool:
    """A task's or the cluster's error, or Ctrl-C, raised on purpose where the user called fray_ray."""
    return isinstance(value, (RayError, KeyboardInterrupt))
