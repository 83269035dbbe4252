"""Workspace bundles: a directory (plus extra modules) as the zip Iris unpacks into task workdirs.

Iris ships a job's code as a workspace bundle: a zip the controller stores under its SHA-256
(`bundle_id`) and every worker unpacks into the task's `$IRIS_WORKDIR` before the command runs.
A client sends the zip inline once (`bundle_blob`, at most `MAX_BUNDLE_BYTES`) and later jobs
name it by id.

Building one happens in two steps, so callers can capture a directory at a moment of their
choosing and pay for compression later:

- `snapshot_workspace(root, ...)` walks the directory now, leaving out what `excludes` and
  the directory's `.gitignore` files name (plus `DEFAULT_EXCLUDES` and any virtualenv), and
  reads every file into memory. It raises `BundleTooLarge` (naming the size and how to
  exclude) when the result cannot fit.
- `WorkspaceSnapshot.bundle()` zips it, deterministically (sorted names, fixed timestamps), so
  equal content gives an equal id in every process.

Extra modules (Ray's `py_modules`) are stored under `PY_MODULES_DIR` inside the bundle.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import threading
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pathspec

from fray_ray.iris.job_info import PY_MODULES_DIR

__all__ = [
    "DEFAULT_EXCLUDES",
    "MAX_BUNDLE_BYTES",
    "PY_MODULES_DIR",
    "BundleTooLarge",
    "WorkspaceBundle",
    "WorkspaceSnapshot",
    "snapshot_workspace",
]

#: Iris's limit on an inline bundle (`bundle_blob`): the controller refuses larger ones.
MAX_BUNDLE_BYTES = 25 * 1024 * 1024
#: Left out of every bundle, in .gitignore syntax, besides what the directory's own
#: .gitignore files name: version control, caches, virtualenvs, build droppings.
DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".git/",
    ".hg/",
    ".svn/",
    "__pycache__/",
    "*.py[cod]",
    ".venv/",
    "venv/",
    ".tox/",
    ".nox/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    ".ipynb_checkpoints/",
    "node_modules/",
    "*.egg-info/",
    ".DS_Store",
)
_DEFAULT_SPEC = pathspec.GitIgnoreSpec.from_lines(DEFAULT_EXCLUDES)
# Every entry gets this timestamp, so the zip of equal content is byte-for-byte equal.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_COMPRESS_LEVEL = 1  # fast: the bundle is built on the way to the first task


class BundleTooLarge(ValueError):
    """The directory cannot be shipped as one bundle: it is larger than the limit."""


@dataclass(frozen=True)
class WorkspaceBundle:
    """A zip as Iris stores it: `bundle_id` is the SHA-256 of `blob` (hex). `blob` is empty for
    a bundle the controller already holds (say, the current task's own, from IRIS_BUNDLE_ID)."""

    bundle_id: str
    blob: bytes = b""
    files: int = 0

    @classmethod
    def of(cls, blob: bytes, files: int = 0) -> WorkspaceBundle:
        return cls(hashlib.sha256(blob).hexdigest(), blob, files)

    @classmethod
    def existing(cls, bundle_id: str) -> WorkspaceBundle:
        """A bundle known only by id (already stored by the controller)."""
        return cls(bundle_id)


@dataclass(frozen=True)
class _Entry:
    name: str  # posix path inside the bundle
    mode: int
    data: bytes


@dataclass
class WorkspaceSnapshot:
    """What a bundle will hold, captured from disk at one moment. Thread-safe."""

    root: str
    entries: tuple[_Entry, ...]
    raw_bytes: int
    limit: int = MAX_BUNDLE_BYTES
    _bundle: WorkspaceBundle | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def files(self) -> int:
        return self._bundle.files if self._bundle is not None else len(self.entries)

    def bundle(self) -> WorkspaceBundle:
        """The zip (built once, then kept). BundleTooLarge if it exceeds the limit."""
        with self._lock:
            if self._bundle is None:
                blob = _zip(self.entries, self.limit)  # stops as soon as it is over the limit
                if blob is None:
                    raise BundleTooLarge(_too_large(self.root, self.limit, self.entries))
                self._bundle = WorkspaceBundle.of(blob, len(self.entries))
                self.entries = ()  # the zip holds it all now
            return self._bundle


def snapshot_workspace(
    root: str,
    *,
    excludes: Sequence[str] = (),
    py_modules: Sequence[str] = (),
    limit: int = MAX_BUNDLE_BYTES,
    use_gitignore: bool = True,
    only: Sequence[str] | None = None,
) -> WorkspaceSnapshot:
    """Capture `root` (and each of `py_modules`, a directory or a single file) now.

    `excludes` are .gitignore-style patterns relative to `root` (and to each module); with
    `use_gitignore`, each directory's `.gitignore` applies below it, as in git. Files are read
    into memory, so the snapshot survives the directory being changed or moved afterwards.
    Raises FileNotFoundError/NotADirectoryError for a missing root or module, ValueError for
    two modules of one name, BundleTooLarge when the content cannot fit in `limit` bytes: at
    once, before a file is read, when their sizes alone rule it out. `only` names the top-level
    entries of `root` to ship (None: all); the rest of `root` is not even walked.
    """
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise NotADirectoryError(f"the workspace {root} is not a directory")
    user = pathspec.GitIgnoreSpec.from_lines(excludes)
    found = list(_walk(root, "", user, use_gitignore, only=None if only is None else frozenset(only)))
    names: dict[str, str] = {}
    for module in py_modules:
        path = os.path.abspath(module)
        name = os.path.basename(path.rstrip(os.sep))
        if name in names:
            raise ValueError(f"py_modules {names[name]} and {path} would both be imported as {name!r}")
        names[name] = path
        prefix = f"{PY_MODULES_DIR}/{name}"
        if os.path.isdir(path):
            found.extend(_walk(path, prefix, user, use_gitignore))
        elif os.path.isfile(path):
            found.append(_Found(path, prefix, os.path.getsize(path)))
        else:
            raise FileNotFoundError(f"py_modules entry {path} does not exist")
    raw = sum(f.size for f in found)
    if raw > limit * GIVE_UP_FACTOR:  # no compression saves it: refuse before reading a byte
        raise BundleTooLarge(
            f"{root} holds {_mib(raw)} in {len(found)} files to ship, far over the {_mib(limit)} limit of an Iris "
            f"bundle; {_largest(found)}. {_how_to_exclude(found)}"
        )
    entries = sorted((_read(f) for f in found), key=lambda e: e.name)
    snapshot = WorkspaceSnapshot(root, tuple(entries), sum(len(e.data) for e in entries), limit)
    if snapshot.raw_bytes > limit:
        snapshot.bundle()  # compressed it may still fit; raises BundleTooLarge if not
    return snapshot


#: Text compresses well, but not beyond this: content this many times the limit is refused
#: from its sizes alone, without reading or compressing it.
GIVE_UP_FACTOR = 10


@dataclass(frozen=True)
class _Found:
    path: str  # on disk
    name: str  # posix path inside the bundle
    size: int


def _how_to_exclude(found: Sequence[_Found] = ()) -> str:
    biggest = [name for name, _, _ in _by_top_entry(found)[:3]]
    patterns = ", ".join(repr(n) for n in biggest) if biggest else "'data/', '*.ckpt'"
    return (
        f"Leave files out with runtime_env={{'excludes': [{patterns}]}} (.gitignore syntax) or a .gitignore "
        "in the directory, or point runtime_env={'working_dir': ...} at a smaller directory."
    )


def _by_top_entry(found: Sequence[_Found]) -> list[tuple[str, int, int]]:
    """(top-level name, bytes, files) of what is shipped, largest first: `data/` sums its files."""
    totals: dict[str, list[int]] = {}
    for f in found:
        head, sep, _ = f.name.removeprefix(PY_MODULES_DIR + "/").partition("/")
        total = totals.setdefault(head + sep, [0, 0])
        total[0] += f.size
        total[1] += 1
    return sorted(((name, size, files) for name, (size, files) in totals.items()), key=lambda t: -t[1])


def _largest(found: Sequence[_Found]) -> str:
    listing = ", ".join(
        f"{name} ({_mib(size)}{f', {files} files' if name.endswith('/') else ''})"
        for name, size, files in _by_top_entry(found)[:5]
    )
    return f"largest entries: {listing}"


def _walk(
    directory: str, prefix: str, user: pathspec.PathSpec, use_gitignore: bool,
    rules: tuple[tuple[str, pathspec.PathSpec], ...] = (), rel: str = "", seen: frozenset[str] = frozenset(),
    only: frozenset[str] | None = None,
) -> Iterator[_Found]:
    """Files below `directory` that no rule excludes, named `<prefix>/<rel path>`, with their
    sizes (nothing is read)."""
    real = os.path.realpath(directory)
    if real in seen:  # a symlink loop
        return
    seen = seen | {real}
    if use_gitignore:
        ignore_file = os.path.join(directory, ".gitignore")
        if os.path.isfile(ignore_file):
            with open(ignore_file, encoding="utf-8", errors="replace") as f:
                rules = (*rules, (rel, pathspec.GitIgnoreSpec.from_lines(f.read().splitlines())))
    if os.path.isfile(os.path.join(directory, "pyvenv.cfg")) and rel:
        return  # a virtualenv, whatever its name
    try:
        children = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as exc:
        raise OSError(f"cannot read {directory} to ship it: {exc}") from exc
    for child in children:
        if only is not None and child.name not in only:
            continue
        child_rel = f"{rel}/{child.name}" if rel else child.name
        is_dir = child.is_dir()  # follows symlinks, as a copy of the tree would
        if _excluded(child_rel, is_dir, user, rules):
            continue
        if is_dir:
            yield from _walk(child.path, prefix, user, use_gitignore, rules, child_rel, seen)
        elif child.is_file():
            yield _Found(child.path, f"{prefix}/{child_rel}" if prefix else child_rel, child.stat().st_size)


def _excluded(rel: str, is_dir: bool, user: pathspec.PathSpec, rules: tuple[tuple[str, pathspec.PathSpec], ...]) -> bool:
    candidate = rel + "/" if is_dir else rel
    # The defaults apply on their own: a pattern of `excludes` letting a directory back in
    # ("!/pkg/") does not let its caches back in too.
    if _DEFAULT_SPEC.match_file(candidate) or user.match_file(candidate):
        return True
    for base, spec in rules:
        inner = candidate[len(base) + 1 :] if base else candidate
        if spec.match_file(inner):
            return True
    return False


def _read(found: _Found) -> _Entry:
    with open(found.path, "rb") as f:
        data = f.read()
    mode = stat.S_IMODE(os.stat(found.path).st_mode) or 0o644
    return _Entry(found.name, mode, data)


def _zip(entries: Sequence[_Entry], limit: int) -> bytes | None:
    """The zip of `entries`, or None as soon as it grows past `limit` bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=_COMPRESS_LEVEL) as archive:
        for entry in entries:
            info = zipfile.ZipInfo(entry.name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (stat.S_IFREG | entry.mode) << 16
            archive.writestr(info, entry.data, compresslevel=_COMPRESS_LEVEL)
            if buffer.tell() > limit:
                return None
    blob = buffer.getvalue()
    return blob if len(blob) <= limit else None


def _too_large(root: str, limit: int, entries: Sequence[_Entry]) -> str:
    found = [_Found("", e.name, len(e.data)) for e in entries]
    return (
        f"the bundle of {root} is over the {_mib(limit)} limit of an Iris bundle compressed "
        f"({_mib(sum(f.size for f in found))} in {len(entries)} files); {_largest(found)}. {_how_to_exclude(found)}"
    )


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"
