"""The session's spill directory: values that do not fit in object_store_memory, one file each.

The directory is made on the first spill, under the system temp dir (or the configured
parent), by `mkdtemp` with the session's name in its prefix, so two sessions never share a
file; it holds an `owner.pid` file, and a later session removes the directories of owners
that died without cleaning up (SIGKILL). A file is removed when its object is freed, the
directory when the session shuts down.

A file holds the pickle stream, then each out-of-band buffer at a 64-byte aligned offset.
Reading maps the file, so a spilled numpy array comes back as a read-only view of the page
cache, without a copy into the driver's heap.
"""

from __future__ import annotations

import logging
import mmap
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence

from fray_ray._private.objects.serialization import SerializedValue
from fray_ray._private.objects.stored_values import SpilledValue

logger = logging.getLogger(__name__)

SPILL_PREFIX = "fray-ray-spill-"
OWNER_FILE = "owner.pid"
ALIGNMENT = 64
#: Ray's default: do not spill once the disk would be more than 95% full.
DEFAULT_CAPACITY_THRESHOLD = 0.95


class SpillFailed(Exception):
    """A value could not be written: the disk is (nearly) full, or an I/O error."""


def remove_orphaned_spill_dirs(parent: str | None = None) -> list[str]:
    """Delete spill directories whose owning process is gone; returns what was removed."""
    parent = parent or tempfile.gettempdir()
    removed = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(SPILL_PREFIX)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(parent, name)
        try:
            with open(os.path.join(path, OWNER_FILE)) as owner:
                pid = int(owner.read().strip() or 0)
        except (OSError, ValueError):
            continue  # being created right now, or not ours to judge
        if pid and pid != os.getpid() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _write_all(fd: int, view: memoryview) -> None:
    while view.nbytes:
        written = os.write(fd, view)
        view = view[written:]


class SpillDirectory:
    """One session's spill files. Thread-safe; `close()` removes the directory."""

    def __init__(
        self, parent: str | None = None, *, session_name: str = "", capacity_threshold: float = DEFAULT_CAPACITY_THRESHOLD
    ) -> None:
        self._parent = parent
        self._prefix = f"{SPILL_PREFIX}{session_name}-" if session_name else SPILL_PREFIX
        self._threshold = capacity_threshold
        self._lock = threading.Lock()  # guards _path and _closed
        self._path: str | None = None
        self._closed = False

    @property
    def path(self) -> str | None:
        """The directory, once something was spilled (None before, and after close)."""
        return self._path

    def _directory(self) -> str:
        with self._lock:
            if self._closed:
                raise SpillFailed("the session is shut down")
            if self._path is None:
                parent = self._parent or tempfile.gettempdir()
                try:
                    os.makedirs(parent, exist_ok=True)
                    path = tempfile.mkdtemp(prefix=self._prefix, dir=parent)
                    with open(os.path.join(path, OWNER_FILE), "w") as owner:
                        owner.write(str(os.getpid()))
                except OSError as exc:
                    raise SpillFailed(f"cannot create a spill directory under {parent}: {exc}") from exc
                self._path = path
            return self._path

    def _check_space(self, directory: str, size: int) -> None:
        try:
            stats = os.statvfs(directory)
        except OSError as exc:
            raise SpillFailed(f"cannot read the free space of {directory}: {exc}") from exc
        total = stats.f_blocks * stats.f_frsize
        available = stats.f_bavail * stats.f_frsize
        if total <= 0 or size > available:
            raise SpillFailed(f"the disk holding {directory} has {available} bytes free, {size} are needed")
        if (total - available + size) / total > self._threshold:
            raise SpillFailed(
                f"the disk holding {directory} would be more than {self._threshold:.0%} full "
                f"({available} bytes free, {size} needed)"
            )

    def write(
        self, object_id: bytes, parts: Sequence[memoryview], contained_refs: tuple[bytes, ...], is_error: bool
    ) -> SpilledValue:
        """Write the payload (`parts[0]`) and buffers to a new file; SpillFailed if it cannot."""
        directory = self._directory()
        size = sum(p.nbytes for p in parts) + ALIGNMENT * len(parts)
        self._check_space(directory, size)
        path = os.path.join(directory, object_id.hex())
        offsets: list[int] = []
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise SpillFailed(f"cannot create {path}: {exc}") from exc
        try:
            position = 0
            for index, part in enumerate(parts):
                if index:
                    padding = -position % ALIGNMENT
                    if padding:
                        _write_all(fd, memoryview(bytes(padding)))
                        position += padding
                    offsets.append(position)
                _write_all(fd, part.cast("B") if part.format != "B" or part.ndim != 1 else part)
                position += part.nbytes
        except OSError as exc:
            os.close(fd)
            _unlink(path)
            raise SpillFailed(f"writing {path} failed: {exc}") from exc
        os.close(fd)
        return SpilledValue(
            path, parts[0].nbytes, tuple(offsets), tuple(p.nbytes for p in parts[1:]), contained_refs, is_error
        )

    @staticmethod
    def read(spilled: SpilledValue) -> SerializedValue:
        """Map the file; buffers are read-only views of the mapping. OSError if it is gone."""
        fd = os.open(spilled.path, os.O_RDONLY)
        try:
            mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        whole = memoryview(mapping)
        payload = bytes(whole[: spilled.payload_size])
        buffers = [whole[offset : offset + size] for offset, size in zip(spilled.offsets, spilled.sizes)]
        return SerializedValue(payload, buffers, spilled.contained_refs, spilled.is_error)

    @staticmethod
    def remove(spilled: SpilledValue) -> None:
        _unlink(spilled.path)

    def files(self) -> list[str]:
        """The spill files that exist now (for tests and diagnostics)."""
        path = self._path
        if path is None:
            return []
        try:
            return sorted(os.path.join(path, n) for n in os.listdir(path) if n != OWNER_FILE)
        except OSError:
            return []

    def close(self) -> None:
        """Remove the directory and every file in it. Idempotent."""
        with self._lock:
            self._closed = True
            path, self._path = self._path, None
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        logger.debug("removing spill file %s failed", path, exc_info=True)
