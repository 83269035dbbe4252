"""Workspace bundles the controller received, and how a simulated host unpacks one into a
task attempt's workdir.

Iris gives every task attempt a fresh workdir holding the job's bundle. One bundle usually
serves many attempts (every executor of a session ships the same project), and creating a file
costs several times more than linking one. So the controller decompresses a bundle once
(its member names checked once), each host writes it once into a directory of its own, and an
attempt's workdir gets hard links to those files, in directories of its own: files an attempt
creates, deletes or replaces stay its own. A shipped file written in place is shared with the
host's other live attempts (as Ray's per-node working_dir is); the host notices the change at
its next unpack and writes the bundle again. Bundles whose contents would take more than
`DECODED_LIMIT` bytes are unpacked straight from the zip every time instead.
"""

from __future__ import annotations

import collections
import concurrent.futures
import io
import os
import posixpath
import shutil
import threading
import uuid
import zipfile
from dataclasses import dataclass

from fray_ray.cluster._paths import PathEscape, path_inside

#: Decoded bundles the controller keeps (least recently used dropped first), their total size,
#: and the bundles each host keeps written out.
DECODED_BUNDLES = 4
DECODED_LIMIT = 256 << 20
HOST_BUNDLES = 4
#: A bundle of this many files or more is written out by `WRITER_THREADS` threads at once.
PARALLEL_WRITES_FROM = 64
WRITER_THREADS = 4


@dataclass(frozen=True)
class _Member:
    name: str  # a checked relative posix path
    mode: int  # permission bits, 0 when the zip gives none
    data: bytes


@dataclass(frozen=True)
class _Decoded:
    directories: tuple[str, ...]  # parents first
    files: tuple[_Member, ...]
    size: int


class BundleStore:
    """Workspace bundles uploaded inline with LaunchJob, by id. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blobs: dict[str, bytes] = {}
        self._decoded: collections.OrderedDict[str, _Decoded] = collections.OrderedDict()

    def put(self, bundle_id: str, blob: bytes) -> None:
        with self._lock:
            self._blobs[bundle_id] = blob

    def decoded(self, bundle_id: str) -> _Decoded | bytes | None:
        """The bundle's members, decoded once and kept; its zip when it is too large to keep
        decoded; None if it was never uploaded. PathEscape for a member whose name would land
        outside the workdir."""
        with self._lock:
            blob = self._blobs.get(bundle_id)
            decoded = self._decoded.get(bundle_id)
            if decoded is not None:
                self._decoded.move_to_end(bundle_id)
                return decoded
        if blob is None:
            return None
        decoded = _decode(blob)
        if decoded is None:
            return blob
        self._keep(bundle_id, decoded)
        return decoded

    def _keep(self, bundle_id: str, decoded: _Decoded) -> None:
        with self._lock:
            self._decoded[bundle_id] = decoded
            self._decoded.move_to_end(bundle_id)
            while len(self._decoded) > DECODED_BUNDLES or sum(d.size for d in self._decoded.values()) > DECODED_LIMIT:
                self._decoded.popitem(last=False)


class HostBundles:
    """One host's written-out bundles, under `root`, linked into its attempts' workdirs.
    Thread-safe."""

    def __init__(self, store: BundleStore, root: str) -> None:
        self._store = store
        self._root = root
        self._lock = threading.Lock()
        #: bundle id -> (its directory, each file's (name, mtime_ns, size, mode) as written)
        self._written: collections.OrderedDict[str, tuple[str, tuple[_Written, ...]]] = collections.OrderedDict()

    def unpack(self, bundle_id: str, workdir: str) -> bool:
        """Give the empty directory `workdir` the bundle's files; False if the bundle was
        never uploaded. PathEscape for a member whose name would land outside it."""
        found = self._store.decoded(bundle_id)
        if found is None:
            return False
        if isinstance(found, bytes):  # too large to keep: straight from the zip
            _unpack_zip(found, workdir)
            return True
        with self._lock:
            source = self._written_out(bundle_id, found)
        for directory in found.directories:
            os.makedirs(os.path.join(workdir, directory), exist_ok=True)
        for member in found.files:
            try:
                os.link(os.path.join(source, member.name), os.path.join(workdir, member.name))
            except OSError:  # a disk without hard links, or the file was removed meanwhile
                _write_file(member, os.path.join(workdir, member.name))
        return True

    def _written_out(self, bundle_id: str, decoded: _Decoded) -> str:
        entry = self._written.get(bundle_id)
        if entry is not None and _unchanged(*entry):
            self._written.move_to_end(bundle_id)
            return entry[0]
        if entry is not None:
            shutil.rmtree(entry[0], ignore_errors=True)
        directory = path_inside(self._root, f"{bundle_id}-{uuid.uuid4().hex[:8]}")  # ids are SHA-256 digests
        os.makedirs(directory)
        try:
            _write(decoded, directory)
            written = tuple(_written(directory, member.name) for member in decoded.files)
        except BaseException:  # a full disk, say: no half-written copy is left behind
            shutil.rmtree(directory, ignore_errors=True)
            raise
        self._written[bundle_id] = (directory, written)
        self._written.move_to_end(bundle_id)
        while len(self._written) > HOST_BUNDLES:
            shutil.rmtree(self._written.popitem(last=False)[1][0], ignore_errors=True)
        return directory


_Written = tuple[str, int, int, int]


def _written(directory: str, name: str) -> _Written:
    status = os.stat(os.path.join(directory, name))
    return name, status.st_mtime_ns, status.st_size, status.st_mode


def _unchanged(directory: str, written: tuple[_Written, ...]) -> bool:
    """Whether every file written to `directory` is still as it was (no attempt wrote to one
    in place, or changed its mode)."""
    try:
        return all(_written(directory, entry[0]) == entry for entry in written)
    except OSError:
        return False


def _checked_name(name: str) -> str:
    """`name` as a relative path that stays below the directory it is written into (the
    workdir is fresh and only directories and regular files are made in it, so no symlink can
    redirect a checked name)."""
    clean = posixpath.normpath(name)
    if not name or "\0" in name or clean.startswith(("/", "../")) or clean in ("..", "."):
        raise PathEscape(f"bundle member {name!r} would land outside the workdir")
    return clean


def _decode(blob: bytes) -> _Decoded | None:
    """The bundle's members, decompressed and checked; None if they would take more than
    `DECODED_LIMIT` (the sizes the zip declares bound what reading it yields)."""
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        members = archive.infolist()
        if sum(member.file_size for member in members) > DECODED_LIMIT:
            return None
        directories: set[str] = set()
        files: dict[str, _Member] = {}  # by name: of two members with one name, the later wins, as in unzip
        for member in members:
            if member.is_dir():
                if member.filename.strip("./") != "":  # not the workdir itself
                    directories.add(_checked_name(member.filename.rstrip("/")))
                continue
            name = _checked_name(member.filename)
            parent = posixpath.dirname(name)
            while parent:
                directories.add(parent)
                parent = posixpath.dirname(parent)
            files[name] = _Member(name, (member.external_attr >> 16) & 0o777, archive.read(member))
    return _Decoded(tuple(sorted(directories)), tuple(files.values()), sum(len(f.data) for f in files.values()))


def _write(decoded: _Decoded, workdir: str) -> None:
    for directory in decoded.directories:  # sorted: a parent comes before its children
        os.makedirs(os.path.join(workdir, directory), exist_ok=True)
    if len(decoded.files) < PARALLEL_WRITES_FROM:
        for member in decoded.files:
            _write_file(member, os.path.join(workdir, member.name))
        return
    # Creating a file is mostly the kernel's work, done without the GIL: several at once take
    # about 40% less time for a 650-file project on two cores.
    with concurrent.futures.ThreadPoolExecutor(WRITER_THREADS, thread_name_prefix="bundle-writer") as writers:
        for done in [writers.submit(_write_file, member, os.path.join(workdir, member.name)) for member in decoded.files]:
            done.result()  # the first error (a full disk, say) is raised here


def _write_file(member: _Member, path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(member.data)
        while view:
            view = view[os.write(fd, view):]
        if member.mode:
            os.fchmod(fd, member.mode)
    finally:
        os.close(fd)


def _unpack_zip(blob: bytes, workdir: str) -> None:
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        for member in archive.infolist():
            if member.is_dir() and member.filename.strip("./") == "":
                continue  # the workdir itself
            target = path_inside(workdir, member.filename)
            if member.is_dir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with archive.open(member) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out)
            mode = (member.external_attr >> 16) & 0o777
            if mode:
                os.chmod(target, mode)
