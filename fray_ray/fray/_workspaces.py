"""The workspaces one Fray client ships: each captured once, bundled once, reused by every job.

A job's `EnvironmentConfig.workspace` (with its `workspace_excludes` and `py_modules`) names
local directories; what the job's tasks see is their content at the moment the client first
met that environment (or was told to capture it with `prepare`), not whatever is on disk when
a later job starts. Inside an Iris task whose workdir is the workspace itself, the task's own
bundle (`IRIS_BUNDLE_ID`) is reused as it is: the controller already holds it.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from fray_ray.fray.types import CapturedWorkspace
from fray_ray.iris.addresses import normalize_address
from fray_ray.iris.bundles import (
    MAX_BUNDLE_BYTES,
    PY_MODULES_DIR,
    WorkspaceBundle,
    WorkspaceSnapshot,
    snapshot_workspace,
)
from fray_ray.iris.job_info import get_job_info

if TYPE_CHECKING:
    from fray_ray.fray.types import EnvironmentConfig

__all__ = ["PY_MODULES_DIR", "WorkspaceBundles"]

_Key = tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...] | None]


class WorkspaceBundles:
    """Snapshots by (workspace, excludes, py_modules, only). Thread-safe; holds file contents in
    memory until they are zipped."""

    def __init__(self, controller_address: str, limit: int = MAX_BUNDLE_BYTES) -> None:
        self._address = normalize_address(controller_address)
        self._limit = limit
        self._lock = threading.Lock()  # guards _snapshots and _capturing
        self._snapshots: dict[_Key, WorkspaceSnapshot | WorkspaceBundle] = {}
        self._capturing: dict[_Key, threading.Lock] = {}

    @staticmethod
    def _key(environment: EnvironmentConfig) -> _Key | None:
        if not environment.workspace:
            return None
        return (
            os.path.realpath(environment.workspace),
            tuple(environment.workspace_excludes),
            tuple(os.path.realpath(m) for m in environment.py_modules),
            None if environment.workspace_only is None else tuple(sorted(environment.workspace_only)),
        )

    def prepare(self, environment: EnvironmentConfig) -> CapturedWorkspace | None:
        """Capture the environment's workspace now, unless it was captured before, and say how
        much it holds (None without a workspace, or for a bundle the controller already holds).
        Blocks for the walk; raises what `snapshot_workspace` raises (BundleTooLarge, a missing
        path)."""
        key = self._key(environment)
        if key is None:
            return None
        found = self._snapshot(key)
        if isinstance(found, WorkspaceBundle):
            return None
        return CapturedWorkspace(found.files, found.raw_bytes)

    def bundle(self, environment: EnvironmentConfig | None) -> WorkspaceBundle | None:
        """The bundle of the environment's workspace (captured now if it never was), or None."""
        key = None if environment is None else self._key(environment)
        if key is None:
            return None
        found = self._snapshot(key)
        return found if isinstance(found, WorkspaceBundle) else found.bundle()

    def _snapshot(self, key: _Key) -> WorkspaceSnapshot | WorkspaceBundle:
        with self._lock:
            found = self._snapshots.get(key)
            if found is not None:
                return found
            capturing = self._capturing.setdefault(key, threading.Lock())
        with capturing:  # one walk per workspace, however many jobs ask at once
            with self._lock:
                found = self._snapshots.get(key)
            if found is None:
                found = _task_bundle(key, self._address) or snapshot_workspace(
                    key[0], excludes=key[1], py_modules=key[2], only=key[3], limit=self._limit
                )
                with self._lock:
                    self._snapshots[key] = found
            return found


def _task_bundle(key: _Key, address: str) -> WorkspaceBundle | None:
    """The current Iris task's own bundle, when the workspace is that task's workdir as shipped
    and the jobs go to the controller that holds it."""
    info = get_job_info()
    bundle_id = os.environ.get("IRIS_BUNDLE_ID", "")
    workdir = os.environ.get("IRIS_WORKDIR", "")
    if info is None or not bundle_id or not workdir or key[1] or key[2] or key[3] is not None:
        return None
    if not info.controller_address or normalize_address(info.controller_address) != address:
        return None
    return WorkspaceBundle.existing(bundle_id) if os.path.realpath(workdir) == key[0] else None
