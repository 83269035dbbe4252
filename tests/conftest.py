"""Settings every test process shares, each a directory of this run's own (removed at its
end): the workers tests start keep compiled shipped code there, not in the user's `~/.cache`,
and drivers record cluster addresses there, not in the per-user temp directory."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from fray_ray._private.driver.cluster_address import TEMP_DIR_ENV
from fray_ray.iris.bytecode_cache import ENV as BYTECODE_CACHE_ENV

_made = pytest.StashKey[dict[str, str]]()
#: variable -> the prefix of the directory made for it
_DIRECTORIES = {BYTECODE_CACHE_ENV: "fray-ray-test-bytecode-", TEMP_DIR_ENV: "fray-ray-test-records-"}


def pytest_configure(config: pytest.Config) -> None:
    made = config.stash[_made] = {}
    for variable, prefix in _DIRECTORIES.items():
        if variable not in os.environ:  # xdist workers inherit the controller's
            made[variable] = os.environ[variable] = tempfile.mkdtemp(prefix=prefix)


def pytest_unconfigure(config: pytest.Config) -> None:
    for variable, directory in config.stash.get(_made, {}).items():
        shutil.rmtree(directory, ignore_errors=True)
        del os.environ[variable]
