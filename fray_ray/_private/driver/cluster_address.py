"""Where a running cluster is recorded, so `init(address="auto")` finds it (Ray's address file).

`fray-ray start` (and `ray.cluster_utils.Cluster`) record the cluster's address and token in
a per-user file, `fray_ray_current_cluster` in `--temp-dir`/`init(_temp_dir=...)`, else in
`$FRAY_RAY_TEMP_DIR`, else in `fray-ray-<uid>/` under `$RAY_TMPDIR` or the system temp dir; it
is removed when that cluster stops. The directory must
belong to this user and be closed to others (mode 0700): the file holds a bearer token, so a
directory anyone else could write to is refused rather than trusted. Like Ray's
`/tmp/ray/ray_current_cluster`, the last cluster started wins.

Clusters this process started are also remembered in memory (`remember`), so connecting to one
by its address needs no token from the environment.

A script run by `fray-ray run` has a cluster of its own, as a script run by `ray job submit` has
its job's (through RAY_ADDRESS): `mark_run()` says so, and `init(address="auto")` in that process
then starts the run's embedded cluster where it would otherwise look for a recorded one.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

TEMP_DIR_ENV = "FRAY_RAY_TEMP_DIR"
FILE_NAME = "fray_ray_current_cluster"

_in_run = False  # this process is a `fray-ray run`: its embedded cluster answers "auto"

_known_lock = threading.Lock()
_known: dict[str, str | None] = {}  # address -> token, of clusters this process started


@dataclass(frozen=True)
class ClusterRecord:
    """A running cluster: its controller address, bearer token and the pid that serves it."""

    address: str
    token: str | None
    pid: int

    def alive(self) -> bool:
        """Whether the recording process still runs (the file is per host, so its pid is too)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # it exists, owned by someone else (the pid was reused)
        return True


def record_dir(temp_dir: str | None = None) -> str:
    """The directory of the address file: `temp_dir`, `$FRAY_RAY_TEMP_DIR`, else a per-user
    directory in `$RAY_TMPDIR` (Ray's temp root) or the system temp dir."""
    explicit = temp_dir or os.environ.get(TEMP_DIR_ENV)
    if explicit:
        return explicit
    return os.path.join(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir(), f"fray-ray-{os.getuid()}")


def _private_dir(path: str, *, create: bool) -> bool:
    """True when `path` is a directory of this user that no one else may enter or write.

    With `create`, make it (mode 0700) when missing. Raises PermissionError when it exists but
    is not private, so a token is never written where another user could read or swap it.
    """
    if create:
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except FileExistsError:
            pass
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(
            f"{path} must be a directory owned by this user with mode 0700 (it holds cluster tokens); "
            f"fix it or set {TEMP_DIR_ENV} to such a directory"
        )
    return True


def write(address: str, token: str | None, *, temp_dir: str | None = None) -> str:
    """Record this process's cluster as the current one; returns the file's path.

    The file is written whole (a temp file renamed over it) with mode 0600. Raises OSError or
    PermissionError when the directory cannot be made private.
    """
    directory = record_dir(temp_dir)
    _private_dir(directory, create=True)
    path = os.path.join(directory, FILE_NAME)
    body = json.dumps({"address": address, "token": token, "pid": os.getpid()})
    fd, staging = tempfile.mkstemp(prefix=".cluster-", dir=directory)  # mode 0600
    try:
        with os.fdopen(fd, "w") as out:
            out.write(body)
        os.replace(staging, path)
    except BaseException:
        try:
            os.unlink(staging)
        except OSError:
            pass
        raise
    return path


def read(*, temp_dir: str | None = None) -> ClusterRecord | None:
    """The current cluster, or None when none is recorded or its process has ended.

    A file left by a process that died (SIGKILL) is treated as absent. Raises PermissionError
    when the directory or file is not private to this user.
    """
    directory = record_dir(temp_dir)
    if not _private_dir(directory, create=False):
        return None
    path = os.path.join(directory, FILE_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd) as handle:
        info = os.fstat(handle.fileno())
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise PermissionError(f"{path} must be owned by this user with mode 0600 (it holds a cluster token)")
        try:
            data: Any = json.loads(handle.read())
            record = ClusterRecord(str(data["address"]), data.get("token"), int(data["pid"]))
        except (ValueError, KeyError, TypeError):
            logger.warning("ignoring %s: it does not hold a cluster record", path)
            return None
    return record if record.alive() else None


def remove(address: str, *, temp_dir: str | None = None) -> None:
    """Remove the file if it still records `address` for this process (a later start keeps its own)."""
    path = os.path.join(record_dir(temp_dir), FILE_NAME)
    try:
        current = read(temp_dir=temp_dir)
    except (OSError, PermissionError):
        return
    if current is not None and current.address == address and current.pid == os.getpid():
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def mark_run() -> None:
    """Say that this process runs a script for `fray-ray run`, whose cluster `init(address="auto")`
    reaches (the run starts it as `init()` would, with the run's --tpu/--gpu layout)."""
    global _in_run
    _in_run = True


def in_run() -> bool:
    """Whether `mark_run()` was called in this process."""
    return _in_run


def remember(address: str, token: str | None) -> None:
    """Note the token of a cluster this process started (for `token_for`)."""
    with _known_lock:
        _known[_normal(address)] = token


def forget(address: str) -> None:
    with _known_lock:
        _known.pop(_normal(address), None)


def token_for(address: str, *, temp_dir: str | None = None) -> str | None:
    """The token of the cluster at `address`, if this process started it or it is the recorded one."""
    key = _normal(address)
    with _known_lock:
        if key in _known:
            return _known[key]
    try:
        record = read(temp_dir=temp_dir)
    except (OSError, PermissionError):
        return None
    if record is not None and _normal(record.address) == key:
        return record.token
    return None


def _normal(address: str) -> str:
    """`iris://h:p`, `http://h:p` and `h:p` name the same controller."""
    for scheme in ("iris://", "http://"):
        if address.startswith(scheme):
            address = address[len(scheme):]
    return address.rstrip("/")
