"""Tasks find `uv` (for Iris's default `uv sync` setup) on their PATH."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fray_ray.cluster._uv import bundled_uv_directory, path_with_uv


def test_the_bundled_uv_is_appended_when_the_path_has_none(tmp_path: Path) -> None:
    directory = bundled_uv_directory()
    assert directory is not None, "the uv package is a dependency of fray_ray"
    assert os.access(os.path.join(directory, "uv"), os.X_OK)
    empty = str(tmp_path)
    assert path_with_uv(empty) == os.pathsep.join([empty, directory])
    assert path_with_uv("") == directory


def test_a_host_s_own_uv_wins(tmp_path: Path) -> None:
    own = tmp_path / "uv"
    own.write_text("#!/bin/sh\n")
    own.chmod(own.stat().st_mode | stat.S_IXUSR)
    assert path_with_uv(str(tmp_path)) == str(tmp_path)
