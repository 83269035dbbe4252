"""Ray's limits on the size of a pickled function or actor class.

A closure that captures a large array ships it with the code. Ray warns past
`FUNCTION_SIZE_WARN_THRESHOLD` bytes and refuses code of `FUNCTION_SIZE_ERROR_THRESHOLD` bytes or
more (settable with the environment variable of that name) with a `ValueError` at `.remote()`.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

#: Ray's thresholds (`ray.ray_constants` re-exports them); the error one may be set through
#: the environment variable of its name.
FUNCTION_SIZE_WARN_THRESHOLD = 10**7
FUNCTION_SIZE_ERROR_THRESHOLD = int(os.environ.get("FUNCTION_SIZE_ERROR_THRESHOLD", 10**8))

_MIB = 1024 * 1024
_TIP = (
    "Check that its definition is not implicitly capturing a large array or other object in scope. "
    "Tip: use ray.put() to put large objects in the Ray object store."
)


def check_code_size(payload: bytes, kind: str, name: str) -> None:
    """Warn about large pickled code, refuse code past the limit.

    Args:
        payload: the pickled function or class.
        kind: what it is, for the message ("remote function", "actor").
        name: its qualified name.

    Raises:
        ValueError: `payload` is at least `FUNCTION_SIZE_ERROR_THRESHOLD` bytes.
    """
    size = len(payload)
    if size <= FUNCTION_SIZE_WARN_THRESHOLD:
        return
    limit = FUNCTION_SIZE_ERROR_THRESHOLD
    if size >= limit:
        raise ValueError(f"The {kind} {name} is too large ({size // _MIB} MiB > FUNCTION_SIZE_ERROR_THRESHOLD={limit // _MIB} MiB). {_TIP}")
    logger.warning("Warning: The %s %s is very large (%d MiB). %s", kind, name, size // _MIB, _TIP)
