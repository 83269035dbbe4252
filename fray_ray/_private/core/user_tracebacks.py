"""Tracebacks that show the user's code: fray_ray's own frames are left out unless asked for.

A task's error is formatted where it ran (`format_task_traceback`, the text of RayTaskError),
and an error nobody catches is printed by the driver's `sys.excepthook` (`excepthook`). Both
leave out frames from files
of the fray_ray package, standard-library frames fray_ray called, and the `runpy` frames
`fray-ray run` adds above the user's script, so a traceback reads as it would for the user's
code alone; an uncaught error that is not a task's (bad input fray_ray refused, or a fray_ray
bug) ends with a note saying how to see the rest. When every frame is fray_ray's,
the failure is fray_ray's and all are kept.

FRAY_RAY_BACKTRACE_INTERNALS=1 keeps every frame, in the driver and (forwarded by the driver)
in its workers.
"""

from __future__ import annotations

import os
import sysconfig
import traceback

#: Set to 1 (or any value but 0/false/no) to see fray_ray's own frames in tracebacks.
INTERNALS_ENV = "FRAY_RAY_BACKTRACE_INTERNALS"

#: fray_ray/ (this file is fray_ray/_private/core/user_tracebacks.py)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_RUNPY_FILES = ("<frozen runpy>", os.sep + "runpy.py")
_STDLIB_DIRS = tuple({os.path.join(sysconfig.get_paths()[key], "") for key in ("stdlib", "platstdlib")})


def show_internals() -> bool:
    """True when FRAY_RAY_BACKTRACE_INTERNALS asks for fray_ray's frames."""
    return os.environ.get(INTERNALS_ENV, "").strip().lower() not in ("", "0", "false", "no")


def is_internal(filename: str) -> bool:
    """True for a frame in one of fray_ray's own files."""
    return filename.startswith(_PACKAGE_DIR)


def format_task_traceback(exc: BaseException) -> str:
    """`exc` formatted as the interpreter would, without fray_ray's frames (unless asked)."""
    formatted = traceback.TracebackException.from_exception(exc)
    if not show_internals():
        trim(formatted)
    return "".join(formatted.format())


def trim(formatted: traceback.TracebackException) -> None:
    """Leave fray_ray's frames out of `formatted` and the exceptions chained to it."""
    pending, seen = [formatted], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        current.stack = traceback.StackSummary.from_list(_user_frames(current.stack))
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
        pending += getattr(current, "exceptions", None) or []


def _user_frames(stack: traceback.StackSummary) -> list[traceback.FrameSummary]:
    """The user's frames: neither fray_ray's nor the standard library's that fray_ray called."""
    frames = list(stack)
    kept, inside = [], False  # inside: below a fray_ray frame, with no user frame since
    for frame in frames:
        if is_internal(frame.filename):
            inside = True
        elif not (inside and _is_stdlib(frame.filename)):
            kept.append(frame)
            inside = False
    if not kept or len(kept) == len(frames):
        return frames
    # Frames of runpy above the first user frame are how `fray-ray run` started the script.
    while len(kept) > 1 and kept[0].filename.endswith(_RUNPY_FILES):
        kept.pop(0)
    return kept


def _is_stdlib(filename: str) -> bool:
    return filename.startswith(_STDLIB_DIRS) or filename.startswith("<frozen ")
