"""Pickling remote functions and actor classes so their tracebacks still name their files.

cloudpickle (3.1 and later) ships code defined in `__main__` or inside functions by value and
renames its file to "<dynamic-code>" so that equal code pickles to equal bytes. A task's
traceback then shows `File "<dynamic-code>", line 7` and no source line, where Ray's (whose
pickler keeps the file name) shows the script's path and the failing line. This pickler keeps
each code object's own file name; equal code from one file still pickles to equal bytes.
"""

from __future__ import annotations

import io
import types
from collections import ChainMap
from typing import Any

import cloudpickle
from cloudpickle import cloudpickle as _cloudpickle_impl

_RENAMED_FILE = "<dynamic-code>"


def _code_reduce_keeping_file(code: types.CodeType) -> tuple[Any, tuple[Any, ...]]:
    rebuild, args = _cloudpickle_impl._code_reduce(code)
    return rebuild, tuple(code.co_filename if arg == _RENAMED_FILE else arg for arg in args)


class _CodePickler(cloudpickle.Pickler):
    dispatch_table = ChainMap({types.CodeType: _code_reduce_keeping_file}, cloudpickle.Pickler.dispatch_table)


def dumps_code(obj: Any) -> bytes:
    """`cloudpickle.dumps(obj)`, but code pickled by value keeps its file name."""
    if not hasattr(_cloudpickle_impl, "_code_reduce"):  # another cloudpickle: its own rules
        return cloudpickle.dumps(obj)
    buffer = io.BytesIO()
    _CodePickler(buffer).dump(obj)
    return buffer.getvalue()
