"""`uv` for task setup scripts.

The newest Iris clients' default job environment is a `uv sync` of the submitted workspace into
`$IRIS_VENV`; Iris's task images carry `uv`. A host of the embedded cluster is whatever machine
it runs on, so tasks get the `uv` that ships with fray_ray (the `uv` wheel) on their `PATH`
when the host has none of its own.
"""

from __future__ import annotations

import functools
import os
import shutil


@functools.cache
def bundled_uv_directory() -> str | None:
    """The directory holding fray_ray's own `uv` executable, if the `uv` package is installed."""
    try:
        import uv
    except ImportError:
        return None
    try:
        return os.path.dirname(uv.find_uv_bin())
    except FileNotFoundError:
        return None


def path_with_uv(path: str) -> str:
    """`path` (a `PATH` value) with the bundled `uv` appended when `path` finds no `uv`: a
    host's own `uv` (the one its images or users installed) always wins."""
    if shutil.which("uv", path=path) is not None:
        return path
    directory = bundled_uv_directory()
    if directory is None:
        return path
    return os.pathsep.join(part for part in (path, directory) if part)
