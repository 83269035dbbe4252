"""Where each stored value lives: in the driver's memory up to `object_store_memory`, else on disk.

Every value the object table holds is admitted here first. While the values in memory (plus
values freed while an array from `get` still uses them) stay within the limit, a new value is
kept in memory. Otherwise the oldest unpinned values are spilled to the session's spill
directory to make room; if that is not enough (everything else is pinned), the new value
itself is written to disk. With spilling off, or when the disk is full, the caller gets
`ObjectStoreFullError` and nothing already stored is touched. A value larger than the whole
limit is refused outright: holding it would exceed the memory the session was given.

Settings follow Ray's names: `init(object_store_memory=...)`, and in `_system_config`
`automatic_object_spilling_enabled`, `object_spilling_config` (filesystem `directory_path`)
and `local_fs_capacity_threshold`; the environment variable
`RAY_automatic_object_spilling_enabled=0` turns spilling off as well.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fray_ray._private.objects.serialization import SerializedValue
from fray_ray._private.objects.shared_memory import allocator
from fray_ray._private.objects.spilling import DEFAULT_CAPACITY_THRESHOLD, SpillDirectory, SpillFailed
from fray_ray._private.objects.stored_values import HeldValue, SpilledValue, StoredValue
from fray_ray._private.stream.buffers import BufferPool
from fray_ray.exceptions import ObjectStoreFullError

logger = logging.getLogger(__name__)

SPILLING_ENV = "RAY_automatic_object_spilling_enabled"
SYSTEM_CONFIG_KEYS = ("automatic_object_spilling_enabled", "object_spilling_config", "local_fs_capacity_threshold")

#: `make_room(bytes_needed) -> bytes_freed`: spill unpinned values, oldest first.
MakeRoom = Callable[[int], int]


def _parse_bool(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "0", "false"):
        return value.strip().lower() in ("1", "true")
    raise ValueError(f"{what} must be a boolean, got {value!r}")


def _spill_directory_from(config: Any) -> str | None:
    """The `directory_path` of Ray's filesystem `object_spilling_config` (a JSON string or dict)."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError as exc:
            raise ValueError(f"object_spilling_config is not valid JSON: {exc}") from None
    if not isinstance(config, Mapping):
        raise ValueError(f"object_spilling_config must be a JSON object, got {config!r}")
    kind = config.get("type", "filesystem")
    if kind != "filesystem":
        raise ValueError(f"object_spilling_config type {kind!r} is not supported; only 'filesystem' is")
    directory = (config.get("params") or {}).get("directory_path")
    if isinstance(directory, list):
        if len(directory) != 1:
            raise ValueError("object_spilling_config: give exactly one directory_path")
        directory = directory[0]
    if directory is not None and (not isinstance(directory, str) or not directory):
        raise ValueError(f"object_spilling_config directory_path must be a non-empty string, got {directory!r}")
    return directory


@dataclass(frozen=True)
class ObjectStoreConfig:
    """The object store's limits, parsed once at init."""

    limit: int
    spilling: bool = True
    spill_parent: str | None = None  # None: the system temp dir
    capacity_threshold: float = DEFAULT_CAPACITY_THRESHOLD

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit <= 0:
            raise ValueError(f"object_store_memory must be a positive number of bytes, got {self.limit!r}")
        if not 0.0 <= self.capacity_threshold <= 1.0:
            raise ValueError(f"local_fs_capacity_threshold must be between 0 and 1, got {self.capacity_threshold!r}")

    @classmethod
    def from_init(
        cls, object_store_memory: Any, system_config: Mapping[str, Any] | None, default_limit: int
    ) -> ObjectStoreConfig:
        """From init()'s `object_store_memory` and `_system_config`; ValueError/TypeError on bad input."""
        limit = default_limit
        if object_store_memory is not None:
            if isinstance(object_store_memory, float) and object_store_memory.is_integer():
                object_store_memory = int(object_store_memory)
            if isinstance(object_store_memory, bool) or not isinstance(object_store_memory, int):
                raise TypeError(f"object_store_memory must be an int (bytes), got {object_store_memory!r}")
            limit = object_store_memory
        system_config = dict(system_config or {})
        spilling = True
        if SPILLING_ENV in os.environ:
            spilling = _parse_bool(os.environ[SPILLING_ENV], SPILLING_ENV)
        if "automatic_object_spilling_enabled" in system_config:
            spilling = _parse_bool(system_config["automatic_object_spilling_enabled"], "automatic_object_spilling_enabled")
        parent = None
        if system_config.get("object_spilling_config"):
            parent = _spill_directory_from(system_config["object_spilling_config"])
        threshold = system_config.get("local_fs_capacity_threshold", DEFAULT_CAPACITY_THRESHOLD)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise ValueError(f"local_fs_capacity_threshold must be a number, got {threshold!r}")
        return cls(limit, spilling, parent, float(threshold))


def _full(message: str) -> BaseException:
    return ObjectStoreFullError(message)


class ObjectStore:
    """Admits values within the memory limit and spills the rest. Thread-safe."""

    def __init__(self, config: ObjectStoreConfig, *, session_name: str = "", shared_dir: str | None = None) -> None:
        """`shared_dir`: where large buffers are kept as shared-memory files (None: private memory)."""
        self.config = config
        self.pool = BufferPool(max_kept=min(config.limit // 2, 1 << 30), allocate=allocator(shared_dir))
        self.spill_dir = SpillDirectory(
            config.spill_parent, session_name=session_name, capacity_threshold=config.capacity_threshold
        )
        self._lock = threading.Lock()  # guards _used and _lingering
        self._admit_lock = threading.Lock()  # one admission at a time makes room
        self._used = 0
        #: values freed while still pinned: their memory is in use, so it still counts
        self._lingering: list[StoredValue] = []

    @property
    def used(self) -> int:
        """Bytes held in memory: stored values plus freed ones still in use."""
        return self._used

    # ---- admission -----------------------------------------------------------------------

    def hold(self, object_id: bytes, value: SerializedValue, *, copy: bool, make_room: MakeRoom) -> HeldValue:
        """Hold `value` in memory if it fits (after spilling others), else on disk.

        `copy`: the buffers alias memory the caller keeps (a put); otherwise frames that
        arrived from a worker are taken over. Raises ObjectStoreFullError, holding nothing.
        """
        size = value.size
        limit = self.config.limit
        if size > limit:
            raise _full(
                f"Object {object_id.hex()} is {size} bytes, larger than the whole object store "
                f"(object_store_memory={limit} bytes); it is refused rather than exceed the limit."
            )
        if not self._reserve(size):
            with self._admit_lock:
                fits = self._reserve(size)
                while not fits:
                    if not self.config.spilling or make_room(self._used + size - limit) <= 0:
                        break
                    fits = self._reserve(size)
            if not fits:
                return self._hold_on_disk(object_id, value)
        try:
            return StoredValue.copy_of(value, self.pool) if copy else StoredValue.adopt(value, self.pool)
        except BaseException:
            self._unreserve(size)
            raise

    def hold_anyway(self, value: SerializedValue) -> StoredValue:
        """Hold an error value (small) whatever the limit says: it must reach its reader."""
        stored = StoredValue.adopt(value, self.pool)
        with self._lock:
            self._used += stored.size
        return stored

    def _reserve(self, size: int) -> bool:
        self._sweep_lingering()
        with self._lock:
            if self._used + size > self.config.limit:
                return False
            self._used += size
            room = self.config.limit - self._used
        if self.pool.kept > room:
            self.pool.trim(room)
        return True

    def _unreserve(self, size: int) -> None:
        with self._lock:
            self._used -= size

    def _hold_on_disk(self, object_id: bytes, value: SerializedValue) -> SpilledValue:
        if not self.config.spilling:
            raise _full(
                f"Object {object_id.hex()} ({value.size} bytes) does not fit: {self._used} of "
                f"{self.config.limit} bytes (object_store_memory) are in use by objects still in scope, "
                "and object spilling is disabled."
            )
        parts = [memoryview(value.payload), *(memoryview(b) for b in value.buffers)]
        try:
            spilled = self.spill_dir.write(object_id, parts, value.contained_refs, value.is_error)
        except SpillFailed as exc:
            raise _full(
                f"Object {object_id.hex()} ({value.size} bytes) does not fit in memory ({self._used} of "
                f"{self.config.limit} bytes in use) and could not be spilled: {exc}"
            ) from None
        finally:
            del parts
        return spilled

    # ---- spilling ------------------------------------------------------------------------

    def spill(self, object_id: bytes, stored: StoredValue) -> SpilledValue | None:
        """Write a stored value to disk (the table swaps it in); None if the disk refuses."""
        parts = stored.write_parts()
        try:
            spilled = self.spill_dir.write(object_id, parts, stored.contained_refs, stored.is_error)
        except SpillFailed as exc:
            logger.warning("spilling object %s failed: %s", object_id.hex(), exc)
            return None
        finally:
            del parts
        return spilled

    def spilled_out(self, stored: StoredValue) -> None:
        """`stored` left memory (now on disk and unpinned): release and recycle it."""
        self._release_memory(stored)

    # ---- reading and freeing -------------------------------------------------------------

    def read(self, spilled: SpilledValue) -> SerializedValue | None:
        """A spilled value, mapped from its file; None if the file is gone (freed meanwhile)."""
        try:
            return self.spill_dir.read(spilled)
        except FileNotFoundError:
            return None

    def release_all(self, values: list[HeldValue]) -> None:
        """`release` for many values; those without buffers (small results) under one lock."""
        plain = 0
        for held in values:
            if type(held) is StoredValue and not held.has_buffers:
                plain += held.size
            else:
                self.release(held)
        if plain:
            with self._lock:
                self._used -= plain

    def release(self, held: HeldValue) -> None:
        """The value's object was freed: delete its file, or release its memory once unused."""
        if isinstance(held, SpilledValue):
            self.spill_dir.remove(held)
            return
        if held.pinned():
            with self._lock:
                self._lingering.append(held)
            return
        self._release_memory(held)

    def _release_memory(self, stored: StoredValue) -> None:
        with self._lock:
            self._used -= stored.size
            room = self.config.limit - self._used
        stored.recycle(self.pool, room)

    def _sweep_lingering(self) -> None:
        if not self._lingering:
            return
        with self._lock:
            lingering, self._lingering = self._lingering, []
        still = []
        for stored in lingering:
            if stored.pinned():
                still.append(stored)
            else:
                self._release_memory(stored)
        if still:
            with self._lock:
                self._lingering.extend(still)

    def close(self) -> None:
        """Remove the spill directory and drop the free blocks."""
        self.spill_dir.close()
        self.pool.trim(0)
