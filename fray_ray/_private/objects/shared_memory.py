"""Large buffers that workers on the driver's own host read in place, from shared memory.

A 100 MB task argument sent down a socket costs the copy into the socket, the kernel's copy
out of it and, in the reader, pages to put it in: about 2 GB/s here, against about 6 GB/s for
one memcpy into memory that is already mapped. So the driver's large stored buffers live in
files of a shared-memory directory (`/dev/shm`), and a worker that can open those files is
sent a file name instead of the bytes: the value crosses once, when the driver stores it.

Whether a worker can is decided by comparing identities, never by assuming one host: each
side names its shared-memory directory by boot id, device, inode and user (`host_identity`), and
the driver lends blocks only to a connection whose hello named the same directory. A worker
on another host, in another container, or with `FRAY_RAY_SHARED_MEMORY_DIR` set elsewhere
gets the bytes over its stream, as before; so does one that fails to open a file it was sent.

A lent block is never written again while a worker may still read it:

- The driver holds a view of the block for every lease (`LentBlocks`), so the stored value
  counts as pinned (`stored_values`) and its block cannot return to the pool.
- The worker maps each file once (privately: nothing it does can write to the driver's
  memory) and hands out each borrowed buffer as a fresh ctypes array over that mapping, so the
  reference count of the array says whether anything (an array built on it, the worker's
  object cache) still uses it. Free leases go back to the driver (`ReturnShared`): after a
  task, before the next fetch, and from a sweeper thread while any are out.
- If a connection closes with leases out, the worker may still be reading them: those
  blocks are marked tainted and are never reused, only unlinked once the driver drops them.

Files are created mode 0600 with random names carrying the creating process's pid (and pid
namespace); they are
unlinked when their block is collected or the driver exits, and a driver removes the files of
dead drivers of the same user when it creates its first block. A worker opens only names of
that exact form inside its own shared-memory directory.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import re
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fray_ray._private.stream.buffers import in_use

logger = logging.getLogger(__name__)

#: Where shared blocks live; empty turns shared memory off for this process.
SHARED_MEMORY_DIR_ENV = "FRAY_RAY_SHARED_MEMORY_DIR"
DEFAULT_SHARED_MEMORY_DIR = "/dev/shm"
_NAME = re.compile(r"fray_ray-(?P<namespace>[0-9]{1,20})-(?P<pid>[0-9]{1,10})-[0-9a-f]{32}")
#: Mappings of shared files a worker keeps while nothing borrows from them (bytes).
MAPPINGS_KEPT = 256 << 20
#: How often a worker with leases out looks for ones it no longer uses (seconds).
SWEEP_INTERVAL = 0.5


def shared_memory_dir() -> str | None:
    """This process's shared-memory directory, or None if it has none (or it is turned off)."""
    directory = os.environ.get(SHARED_MEMORY_DIR_ENV, DEFAULT_SHARED_MEMORY_DIR)
    if not directory or not os.path.isdir(directory):
        return None
    return directory


def _read_boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as boot:
            return boot.read().strip().decode()
    except OSError:
        return ""


#: This kernel's boot: read at import, so workers forked from a template do not read it again.
_BOOT_ID = _read_boot_id()


def host_identity(directory: str | None) -> str:
    """Names `directory` across processes: equal only if both see the same mounted directory on
    the same running kernel, as the same user (who alone can open the driver's 0600 files).
    "" for no directory (or no boot id to tell kernels apart)."""
    if directory is None or not _BOOT_ID:
        return ""
    try:
        status = os.stat(directory)
    except OSError:
        return ""
    return f"{_BOOT_ID}:{status.st_dev}:{status.st_ino}:{os.getuid()}"


def _unlink(path: str, creator: int) -> None:
    if os.getpid() != creator:  # a forked child must not remove its parent's files
        return
    try:
        os.unlink(path)
    except OSError:
        pass


class SharedBlock(mmap.mmap):
    """A driver buffer-pool block backed by a file in the shared-memory directory.

    `tainted` marks a block a worker may still read after its connection closed: it is never
    reused. The file is unlinked when the block is collected (or the process exits).
    """

    __slots__ = ("name", "tainted")

    name: str
    tainted: bool

    @classmethod
    def create(cls, directory: str, size: int) -> SharedBlock:
        """A new zero-filled block of `size` bytes; OSError if the directory cannot hold it."""
        _remove_stale_files(directory)
        name = f"fray_ray-{_pid_namespace()}-{os.getpid()}-{secrets.token_hex(16)}"
        path = os.path.join(directory, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            # Allocated now, so a full directory fails here instead of as SIGBUS on a later write.
            os.posix_fallocate(fd, 0, size)
            block = cls(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            _map_now(block)
        except BaseException:
            os.close(fd)
            _unlink(path, os.getpid())
            raise
        os.close(fd)
        block.name = name
        block.tainted = False
        weakref.finalize(block, _unlink, path, os.getpid())
        return block


#: Linux's MADV_POPULATE_WRITE (5.14 and later; Python's mmap module does not name it).
_MADV_POPULATE_WRITE = 23


def _map_now(block: mmap.mmap) -> None:
    """Map every page of a new block at once: the first write to 100 MB of a shared mapping
    otherwise takes a page fault per 4 KiB page, about three times the cost of the copy itself."""
    try:
        block.madvise(_MADV_POPULATE_WRITE)
    except (OSError, ValueError):  # an older kernel: the pages are mapped as they are written
        pass


class SharedArrivals:
    """Where a worker reads the large values it fetches from holders: each buffer of at least
    `min_size` bytes into a new shared block of this host's directory, allocated whole and mapped
    at once (the stream otherwise grows its buffer as bytes arrive, page by page). A value
    read so is kept without a copy when this worker serves it onward (`relays`), and readers on
    this host map it. Any buffer it cannot place goes to new private memory as before."""

    def __init__(self, directory: str | None, max_size: int, min_size: int = 1 << 20) -> None:
        """`max_size`: no object is larger (the session's `object_store_memory`); a buffer
        announced larger grows as its bytes arrive, as any unplaced one does."""
        self._directory = directory
        self._min_size = min_size
        self._max_size = max_size

    def take(self, size: int) -> SharedBlock | None:
        if self._directory is None or not self._min_size <= size <= self._max_size:
            return None
        try:
            return SharedBlock.create(self._directory, size)
        except OSError:  # a full directory: this buffer goes to private memory
            return None

    def keep(self, block: bytearray) -> None:
        """Nothing is reused: a block lives as long as the value read into it."""


def allocator(directory: str | None) -> Callable[[int], bytearray | SharedBlock]:
    """What a driver's `BufferPool` makes new blocks with: shared blocks in `directory`, or a
    bytearray when there is none or it cannot hold one more (a full tmpfs)."""
    if directory is None:
        return bytearray
    warned = False

    def allocate(size: int) -> bytearray | SharedBlock:
        nonlocal warned
        try:
            return SharedBlock.create(directory, size)
        except OSError as exc:
            if not warned:
                warned = True
                logger.warning("cannot create a %d-byte block in %s (%s): large objects use private "
                               "memory, and reach workers over their streams", size, directory, exc)
            return bytearray(size)

    return allocate


_stale_swept: set[str] = set()
_stale_lock = threading.Lock()


def _pid_namespace() -> int:
    """This process's pid namespace: a pid names a process only within one (containers that
    share a shared-memory directory each have their own)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _remove_stale_files(directory: str) -> None:
    """Once per directory and process (`remove_stale_files`, before its first block)."""
    with _stale_lock:
        if directory in _stale_swept:
            return
        _stale_swept.add(directory)
    remove_stale_files(directory)


def remove_stale_files(directory: str) -> None:
    """Remove blocks left in `directory` by processes of this user (in this pid namespace)
    that died without cleaning up: killed drivers and workers."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        match = _NAME.fullmatch(entry.name)
        if match is None:
            continue
        pid = int(match["pid"])
        if int(match["namespace"]) != _pid_namespace():
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.getuid() or pid == os.getpid():
                continue
            os.kill(pid, 0)
        except ProcessLookupError:
            _unlink(entry.path, os.getpid())
        except OSError:
            continue


# ---- the driver's side ---------------------------------------------------------------------


@dataclass(frozen=True)
class Lent:
    """A buffer sent as a file name: the frame buffer at `index` is an empty placeholder."""

    index: int
    name: str
    size: int
    lease: int

    def to_wire(self) -> list[Any]:
        return [self.index, self.name, self.size, self.lease]


class LentBlocks:
    """The driver's leases of shared blocks, per worker connection. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _leases and _next
        self._leases: dict[object, dict[int, memoryview]] = {}
        self._next = 0

    def outstanding(self, connection: object | None = None) -> int:
        """Leases not yet returned (by `connection`, or by every connection)."""
        with self._lock:
            if connection is not None:
                return len(self._leases.get(connection, ()))
            return sum(len(held) for held in self._leases.values())

    def lend(self, connection: object, values: Sequence[Any]) -> tuple[list[Any], list[Lent]]:
        """`values` (SerializedValues about to be sent on `connection`) with every view of a
        shared block replaced by an empty placeholder, and what the placeholders stand for.

        Views of a block start at its first byte: a `StoredValue` hands out prefixes."""
        sent: list[Any] = []
        lent: list[Lent] = []
        index = 0
        with self._lock:
            held = self._leases.setdefault(connection, {})
            for value in values:
                buffers = list(value.buffers)
                changed = False
                for position, buffer in enumerate(buffers):
                    block = buffer.obj if isinstance(buffer, memoryview) else None
                    if isinstance(block, SharedBlock) and not block.tainted:
                        self._next += 1
                        held[self._next] = buffer
                        lent.append(Lent(index + position, block.name, buffer.nbytes, self._next))
                        buffers[position] = b""
                        changed = True
                index += len(buffers)
                sent.append(value.with_buffers(buffers) if changed else value)
        return sent, lent

    def returned(self, connection: object, leases: Sequence[Any]) -> None:
        """The worker on `connection` no longer reads these leases (others' ids are ignored)."""
        with self._lock:
            held = self._leases.get(connection)
            if not held:
                return
            for lease in leases:
                if isinstance(lease, int):
                    held.pop(lease, None)

    def connection_closed(self, connection: object) -> None:
        """Its worker may still be reading what it was lent: those blocks are never reused."""
        with self._lock:
            held = self._leases.pop(connection, None)
        for view in (held or {}).values():
            block = view.obj
            if isinstance(block, SharedBlock):
                block.tainted = True


# ---- a worker's side -----------------------------------------------------------------------


class _Mapping:
    """One shared file mapped into this worker, privately and read-only in effect."""

    __slots__ = ("memory", "size", "path")

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.size = os.fstat(fd).st_size
            self.memory = mmap.mmap(fd, self.size, access=mmap.ACCESS_COPY)
        finally:
            os.close(fd)
        self.path = path

    def close(self) -> bool:
        """Unmap, unless something still uses it; True if unmapped."""
        try:
            self.memory.close()
        except BufferError:
            return False
        return True


#: release(connection, leases): tell the driver on `connection` these leases are free.
ReturnLeases = Callable[[Any, list[int]], None]


class BorrowedBlocks:
    """The shared blocks a worker process reads, and which of its leases are still in use.

    Mappings are kept (up to `MAPPINGS_KEPT` bytes of unused ones) so a block the driver
    reuses for the next argument needs no new mapping and no new page-table entries.
    Thread-safe.
    """

    def __init__(self, mappings_kept: int = MAPPINGS_KEPT) -> None:
        self.directory: str | None = None
        self.identity = ""
        self.mappings_kept = mappings_kept
        self._lock = threading.Lock()  # guards everything below
        self._mappings: dict[str, _Mapping] = {}
        self._borrowed: list[ctypes.Array] = []  # one fresh array per lease: its refcount is the test
        self._leases: list[tuple[Any, int]] = []  # (connection, lease) of each borrowed array
        self._return_leases: ReturnLeases | None = None
        self._sweeper: threading.Thread | None = None
        self._wake = threading.Condition(self._lock)

    def use_directory(self, directory: str | None) -> str:
        """Read blocks from `directory` from now on (a worker calls this as it says hello, when
        its environment is final); returns its identity for the hello."""
        with self._lock:
            if directory != self.directory:
                self.directory = directory
                self.identity = host_identity(directory)
            return self.identity

    @property
    def borrowed(self) -> int:
        """Leases this process has not returned yet."""
        return len(self._borrowed)

    def attach(self, connection: Any, values: Sequence[Any], lent: Sequence[Any],
               return_leases: ReturnLeases) -> list[Any]:
        """`values` with each placeholder `lent` describes ([index, name, size, lease]) replaced
        by a read-only view of the shared block. Raises OSError or ValueError (having returned
        every lease of this answer) if a block cannot be read here."""
        if not lent:
            return list(values)
        by_index: dict[int, memoryview] = {}
        taken: list[int] = []
        try:
            for entry in lent:
                index, name, size, lease = entry
                by_index[int(index)] = self._borrow(connection, str(name), int(size), int(lease))
                taken.append(int(lease))
        except (OSError, ValueError, TypeError) as exc:
            by_index.clear()
            self._forget(connection, taken)
            return_leases(connection, [int(e[3]) for e in lent if isinstance(e, (list, tuple)) and len(e) == 4
                                       and isinstance(e[3], int)])
            raise OSError(f"cannot read the driver's shared memory: {exc}") from exc
        self._start_sweeper(return_leases)
        attached: list[Any] = []
        offset = 0
        for value in values:
            count = len(value.buffers)
            if any(offset + i in by_index for i in range(count)):
                buffers = [by_index.get(offset + i, b) for i, b in enumerate(value.buffers)]
                value = value.with_buffers(buffers)
            attached.append(value)
            offset += count
        return attached

    def _borrow(self, connection: Any, name: str, size: int, lease: int) -> memoryview:
        if self.directory is None:
            raise ValueError("this worker has no shared-memory directory")
        if _NAME.fullmatch(name) is None:
            raise ValueError(f"{name!r} is not the name of a shared block")
        with self._lock:
            mapping = self._mappings.get(name)
            if mapping is None:
                mapping = _Mapping(os.path.join(self.directory, name))
                self._mappings[name] = mapping
            if not 0 < size <= mapping.size:
                raise ValueError(f"shared block {name} holds {mapping.size} bytes, not {size}")
            array = (ctypes.c_char * size).from_buffer(mapping.memory)
            self._borrowed.append(array)
            self._leases.append((connection, lease))
            self._wake.notify()
        return memoryview(array).cast("B").toreadonly()

    def _forget(self, connection: Any, leases: list[int]) -> None:
        with self._lock:
            for index in reversed(range(len(self._leases))):
                if self._leases[index][0] is connection and self._leases[index][1] in leases:
                    del self._leases[index]
                    del self._borrowed[index]

    def sweep(self) -> dict[Any, list[int]]:
        """The leases nothing uses any more, by connection (they are forgotten here), after
        unmapping files nothing borrows from if they are gone or too many are kept."""
        free: dict[Any, list[int]] = {}
        with self._lock:
            index = 0
            while index < len(self._borrowed):
                if in_use(self._borrowed, index):
                    index += 1
                    continue
                connection, lease = self._leases.pop(index)
                del self._borrowed[index]
                free.setdefault(connection, []).append(lease)
            if free:
                self._unmap_unused()
        return free

    def _unmap_unused(self) -> None:
        kept = 0
        for name in list(self._mappings):
            mapping = self._mappings[name]
            gone = not os.path.exists(mapping.path)
            if (gone or kept + mapping.size > self.mappings_kept) and mapping.close():
                del self._mappings[name]
            else:
                kept += mapping.size

    def return_free(self, return_leases: ReturnLeases) -> None:
        """Send the driver every lease this process no longer uses."""
        if not self._borrowed:
            return
        for connection, leases in self.sweep().items():
            return_leases(connection, leases)

    def _start_sweeper(self, return_leases: ReturnLeases) -> None:
        with self._lock:
            self._return_leases = return_leases
            if self._sweeper is not None:
                return
            self._sweeper = threading.Thread(target=self._sweep_forever, name="shared-memory-sweeper", daemon=True)
        self._sweeper.start()

    def _sweep_forever(self) -> None:
        while True:
            with self._lock:
                while not self._borrowed:
                    self._wake.wait()
                return_leases = self._return_leases
            time.sleep(SWEEP_INTERVAL)
            if return_leases is not None:
                try:
                    self.return_free(return_leases)
                except Exception:  # noqa: BLE001 - a closed connection must not end the sweeper
                    logger.debug("returning shared-memory leases failed", exc_info=True)


#: This worker process's borrowed blocks, shared by its sessions (a lent executor's serve the
#: actor it becomes). Its directory is set as a session opens.
WORKER_BORROWS = BorrowedBlocks()
