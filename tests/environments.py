"""The environment a test gives a driver it starts as a process of its own."""

from __future__ import annotations

import os

#: Settings that would tie a child driver to this test's session, cluster or token.
SESSION_PREFIXES = ("RAY_", "FRAY_RAY_", "IRIS_")
#: Kept all the same: where this run's workers keep compiled shipped code and where its drivers
#: record cluster addresses (`tests/conftest.py`).
KEPT = ("FRAY_RAY_BYTECODE_CACHE", "FRAY_RAY_TEMP_DIR")


def unrelated_environment() -> dict[str, str]:
    """`os.environ` without the settings that would point a child driver at this test's
    session, cluster or token."""
    return {k: v for k, v in os.environ.items() if not k.startswith(SESSION_PREFIXES) or k in KEPT}
