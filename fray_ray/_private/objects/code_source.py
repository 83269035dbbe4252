"""Functions and classes pickled by value keep their file name and the source lines they span.

cloudpickle ships code defined in the driver's main script (or any module pickled by value) as
bare code objects and, since 3.1.3, renames their file `<dynamic-code>`; a traceback from a
worker then shows neither the user's file nor the line that failed. Ray shows both. The worker
may not share the driver's disk, so the lines travel with the code: each code object pickled by
value keeps its real `co_filename` and carries the lines from its first to its last, read on
the driver through `linecache` (which also knows notebook cells). Unpickling puts those lines
in the worker's `linecache`, where the traceback module finds them, unless the worker's own
copy of the file already says the same.

Only code objects pickled by value pay: functions importable on the worker travel by name and
the worker reads its own files. Lines of a file beyond MAX_SOURCE_BYTES are not shipped.
"""

from __future__ import annotations

import io
import linecache
import pickle
import threading
import types
from collections import ChainMap
from typing import Any

import cloudpickle

#: A code object spanning more source than this travels without its lines.
MAX_SOURCE_BYTES = 1 << 20

_plain_code_reduce = cloudpickle.Pickler.dispatch_table[types.CodeType]
_lock = threading.Lock()  # guards _written and the linecache entries it names
_written: set[str] = set()  # file names whose linecache entry this module wrote


def dumps(obj: Any, protocol: int = pickle.HIGHEST_PROTOCOL, buffer_callback: Any = None) -> bytes:
    """cloudpickle's bytes of `obj`, whose by-value code keeps its file name and lines."""
    with io.BytesIO() as buffer:
        _SourcePickler(buffer, protocol=protocol, buffer_callback=buffer_callback).dump(obj)  # as cloudpickle.dumps
        return buffer.getvalue()


def _code_reduce(code: types.CodeType) -> tuple[Any, ...]:
    constructor, args = _plain_code_reduce(code)[:2]
    first, lines = _span(code)
    return _restore_code, (constructor, args, code.co_filename, first, lines)


class _SourcePickler(cloudpickle.Pickler):
    # One level of maps (cloudpickle's own are a ChainMap too): every object pickled looks here.
    dispatch_table = ChainMap({types.CodeType: _code_reduce}, *cloudpickle.Pickler.dispatch_table.maps)


def _span(code: types.CodeType) -> tuple[int, tuple[str, ...] | None]:
    """The first line of `code` and its source lines through its last, if they are known."""
    first = code.co_firstlineno
    last = max((line for _, _, line in code.co_lines() if line is not None), default=first)
    if first <= 0:
        return 0, None
    lines = linecache.getlines(code.co_filename)
    if len(lines) < last:
        return first, None
    span = tuple(lines[first - 1 : last])
    if sum(map(len, span)) > MAX_SOURCE_BYTES:
        return first, None
    return first, span


def _restore_code(constructor: Any, args: tuple[Any, ...], filename: str, first: int,
                  lines: tuple[str, ...] | None) -> types.CodeType:
    """Rebuild a code object under its own file name, its lines known to this process."""
    code = constructor(*args)
    if code.co_filename != filename:
        code = code.replace(co_filename=filename)
    if lines:
        remember_lines(filename, first, lines)
    return code


def remember_lines(filename: str, first: int, lines: tuple[str, ...]) -> None:
    """Make lines `first`.. of `filename` readable through linecache in this process, for good.

    A local file that already has them lends all its lines (the driver, a worker on its host);
    otherwise they join the lines this module holds for that name, other lines left blank. The
    entry has no mtime, so linecache never drops it, even if the local file changes or goes.
    """
    end = first - 1 + len(lines)
    with _lock:
        known = linecache.getlines(filename)
        if known[first - 1 : end] == list(lines):
            held = list(known)
        else:
            held = list(known) if _written_here(filename) else []
            held += ["\n"] * (end - len(held))
            held[first - 1 : end] = lines
        linecache.cache[filename] = (sum(map(len, held)), None, held, filename)
        _written.add(filename)


def _written_here(filename: str) -> bool:
    entry = linecache.cache.get(filename)
    return filename in _written and entry is not None and len(entry) == 4 and entry[1] is None
