"""Tracebacks that show the user's code: fray_ray's own frames are left out unless asked for.

A task's error is formatted where it ran (`format_task_traceback`, the text of RayTaskError),
and an error nobody catches is printed by the driver's `sys.excepthook` (`excepthook`). Both
leave out frames from files of the fray_ray package, frames of the standard library and of
the libraries fray_ray is built on (pickling, RPC) that fray_ray called, and the frames
`fray-ray run` adds above the user's script, so a traceback reads as it would for the user's
code alone; an uncaught error that is not a task's (bad input fray_ray refused, or a fray_ray
bug) ends with a note saying how to see the rest. When every frame is fray_ray's,
the failure is fray_ray's and all are kept; but a chained cause with none of the user's
frames under an error that has some is fray_ray's plumbing (a pickling or connection error
the error's own message already states), and is left out.

FRAY_RAY_BACKTRACE_INTERNALS=1 keeps every frame, in the driver and (forwarded by the driver)
in its workers.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sysconfig
import traceback

#: Set to 1 (or any value but 0/false/no) to see fray_ray's own frames in tracebacks.
INTERNALS_ENV = "FRAY_RAY_BACKTRACE_INTERNALS"

#: fray_ray/ (this file is fray_ray/_private/core/user_tracebacks.py)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_RUNPY_FILES = ("<frozen runpy>", os.sep + "runpy.py")
_STDLIB_DIRS = tuple({os.path.join(sysconfig.get_paths()[key], "") for key in ("stdlib", "platstdlib")})
#: Libraries fray_ray calls to pickle values and to reach a cluster: their frames below fray_ray's
#: are its plumbing, not the user's code.
_PLUMBING = ("cloudpickle", "connectrpc", "pyqwest", "google.protobuf", "msgpack", "zstandard", "uvicorn")


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
        if any(not is_internal(frame.filename) for frame in current.stack):
            _drop_plumbing_causes(current)
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
        pending += getattr(current, "exceptions", None) or []


def _drop_plumbing_causes(formatted: traceback.TracebackException) -> None:
    """Leave out the chained exceptions of `formatted` raised wholly inside fray_ray."""
    for name in ("__cause__", "__context__"):
        chained = getattr(formatted, name)
        if chained is not None and chained.stack and not _user_frames(chained.stack, keep_all=False):
            setattr(formatted, name, None)
            if name == "__cause__":
                formatted.__suppress_context__ = True


def _user_frames(stack: traceback.StackSummary, keep_all: bool = True) -> list[traceback.FrameSummary]:
    """The user's frames: neither fray_ray's nor those of the standard library or of fray_ray's
    libraries that fray_ray called. None found: all of them (`keep_all`) or none."""
    frames = _below_launcher(list(stack))
    kept, inside = [], False  # inside: below a fray_ray frame, with no user frame since
    for frame in frames:
        if is_internal(frame.filename):
            inside = True
        elif not (inside and (_is_stdlib(frame.filename) or _is_plumbing(frame.filename))):
            kept.append(frame)
            inside = False
    if not kept:
        return frames if keep_all else []
    return frames if len(kept) == len(frames) else kept


def _below_launcher(frames: list[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
    """The frames below the script's start when fray_ray ran it (`fray-ray run`: its console
    script, its own frames, then runpy's); all of `frames` otherwise."""
    seen_internal, start = False, 0
    for index, frame in enumerate(frames):
        if is_internal(frame.filename):
            seen_internal = True
        elif frame.filename.endswith(_RUNPY_FILES) and seen_internal:
            start = index + 1
        elif start:
            break
    return frames[start:] if 0 < start < len(frames) else frames


def _is_stdlib(filename: str) -> bool:
    return filename.startswith(_STDLIB_DIRS) or filename.startswith("<frozen ")


def _is_plumbing(filename: str) -> bool:
    return filename.startswith(_plumbing_dirs())


@functools.cache
def _plumbing_dirs() -> tuple[str, ...]:
    """Where the libraries in `_PLUMBING` are installed (found without importing them)."""
    found = []
    for name in _PLUMBING:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec is not None else []:
            found.append(os.path.join(os.path.abspath(location), ""))
    return tuple(found)
