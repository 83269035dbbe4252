"""How a task process dies with its parent: the parent-death signal (PR_SET_PDEATHSIG).

Set either by util-linux's `setpriv --pdeathsig KILL` in front of the argv (`pdeathsig_prefix`,
which keeps subprocess's fast vfork path) or by `die_with_parent` as a `preexec_fn` (a full
fork). The signal fires when the *thread* that forked the child exits, which is why one
long-lived supervisor thread forks every task process (see `_process`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable

__all__ = ["die_with_parent", "pdeathsig_prefix", "prctl"]

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    # Try the usual name first: find_library() runs ldconfig, which costs ~100 ms at import.
    for name in ("libc.so.6", None):
        try:
            libc = ctypes.CDLL(name or ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            return libc.prctl
        except (OSError, AttributeError):
            continue
    return None


prctl = _load_prctl()


def die_with_parent() -> None:
    """Runs in the child between fork and exec: die when the forking thread dies."""
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@functools.lru_cache(maxsize=1)
def pdeathsig_prefix() -> tuple[str, ...]:
    """`setpriv --pdeathsig KILL --` if that works on this machine, else ()."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or not sys.platform.startswith("linux"):
        return ()
    prefix = (setpriv, "--pdeathsig", "KILL", "--")
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ()
    return prefix if probe.returncode == 0 else ()
