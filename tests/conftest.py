"""Settings every test process shares: the workers tests start keep compiled shipped code in
a directory of this run's own (removed at its end), not in the user's `~/.cache`."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from fray_ray.iris.bytecode_cache import ENV as BYTECODE_CACHE_ENV

_made = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    if BYTECODE_CACHE_ENV not in os.environ:  # xdist workers inherit the controller's
        config.stash[_made] = os.environ[BYTECODE_CACHE_ENV] = tempfile.mkdtemp(prefix="fray-ray-test-bytecode-")


def pytest_unconfigure(config: pytest.Config) -> None:
    made = config.stash.get(_made, None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)
        del os.environ[BYTECODE_CACHE_ENV]
