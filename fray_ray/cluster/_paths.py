"""Paths built from names stay inside the directory they were meant for.

Names are validated where they enter (`_request_names`, `_wire`), so no `..` should ever get
here; this is the second line of defence, applied to every path a request's content can shape
(workdirs, workdir files, bundle members).
"""

from __future__ import annotations

import os


class PathEscape(ValueError):
    """A path built from a name would resolve outside the directory it belongs in."""


def path_inside(root: str, *parts: str) -> str:
    """`root` joined with `parts`, resolved (symlinks included); PathEscape if the result is not
    strictly below `root`, or if a part is absolute or holds a NUL."""
    for part in parts:
        if not part or "\0" in part or os.path.isabs(part):
            raise PathEscape(f"{part!r} is not a relative path below {root}")
    base = os.path.realpath(root)
    path = os.path.realpath(os.path.join(base, *parts))
    if path == base or os.path.commonpath([path, base]) != base:
        raise PathEscape(f"{os.path.join(*parts)!r} would land outside {root}")
    return path
