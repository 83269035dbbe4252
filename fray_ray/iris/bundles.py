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
#: Where extra modules live inside a bundle; workers put `$IRIS_WORKDIR/<this>` on their path.
PY_MODULES_DIR = ".fray-ray/py_modules"
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
        return len(self.entries)

    def bundle(self) -> WorkspaceBundle:
        """The zip (built once, then kept). BundleTooLarge if it exceeds the limit."""
        with self._lock:
            if self._bundle is None:
                blob = _zip(self.entries)
                if len(blob) > self.limit:
                    raise BundleTooLarge(_too_large(self.root, len(blob), self.limit, self.entries))
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
) -> WorkspaceSnapshot:
    """Capture `root` (and each of `py_modules`, a directory or a single file) now.

    `excludes` are .gitignore-style patterns relative to `root` (and to each module); with
    `use_gitignore`, each directory's `.gitignore` applies below it, as in git. Files are read
    into memory, so the snapshot survives the directory being changed or moved afterwards.
    Raises FileNotFoundError/NotADirectoryError for a missing root or module, ValueError for
    two modules of one name, BundleTooLarge when the content cannot fit in `limit` bytes.
    """
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise NotADirectoryError(f"the workspace {root} is not a directory")
    user = pathspec.GitIgnoreSpec.from_lines([*DEFAULT_EXCLUDES, *excludes])
    budget = _Budget(root, limit)
    entries = list(_walk(root, "", user, use_gitignore, budget))
    names: dict[str, str] = {}
    for module in py_modules:
        path = os.path.abspath(module)
        name = os.path.basename(path.rstrip(os.sep))
        if name in names:
            raise ValueError(f"py_modules {names[name]} and {path} would both be imported as {name!r}")
        names[name] = path
        prefix = f"{PY_MODULES_DIR}/{name}"
        if os.path.isdir(path):
            entries.extend(_walk(path, prefix, user, use_gitignore, budget))
        elif os.path.isfile(path):
            entries.append(_read(path, prefix, budget))
        else:
            raise FileNotFoundError(f"py_modules entry {path} does not exist")
    entries.sort(key=lambda e: e.name)
    snapshot = WorkspaceSnapshot(root, tuple(entries), budget.used, limit)
    if budget.used > limit:
        snapshot.bundle()  # compressed it may still fit; raises BundleTooLarge if not
    return snapshot


class _Budget:
    """Counts bytes read; stops the walk early once even compression could not save it."""

    # Text compresses well, but not beyond this: a tree this much over the limit is refused
    # without reading the rest of it.
    GIVE_UP_FACTOR = 20

    def __init__(self, root: str, limit: int) -> None:
        self.root = root
        self.limit = limit
        self.used = 0

    def add(self, size: int, path: str) -> None:
        self.used += size
        if self.used > self.limit * self.GIVE_UP_FACTOR:
            raise BundleTooLarge(
                f"{self.root} holds more than {_mib(self.used)} of files to ship (stopped reading at {path}); "
                f"an Iris bundle is at most {_mib(self.limit)}. {_HOW_TO_EXCLUDE}"
            )


_HOW_TO_EXCLUDE = (
    "Leave files out with runtime_env={'excludes': ['data/', '*.ckpt', ...]} (.gitignore syntax) or a "
    ".gitignore in the directory, or point runtime_env={'working_dir': ...} at a smaller directory."
)


def _walk(
    directory: str, prefix: str, user: pathspec.PathSpec, use_gitignore: bool, budget: _Budget,
    rules: tuple[tuple[str, pathspec.PathSpec], ...] = (), rel: str = "", seen: frozenset[str] = frozenset(),
) -> Iterator[_Entry]:
    """Files below `directory` that no rule excludes, named `<prefix>/<rel path>`."""
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
        child_rel = f"{rel}/{child.name}" if rel else child.name
        is_dir = child.is_dir()  # follows symlinks, as a copy of the tree would
        if _excluded(child_rel, is_dir, user, rules):
            continue
        if is_dir:
            yield from _walk(child.path, prefix, user, use_gitignore, budget, rules, child_rel, seen)
        elif child.is_file():
            yield _read(child.path, f"{prefix}/{child_rel}" if prefix else child_rel, budget)


def _excluded(rel: str, is_dir: bool, user: pathspec.PathSpec, rules: tuple[tuple[str, pathspec.PathSpec], ...]) -> bool:
    candidate = rel + "/" if is_dir else rel
    if user.match_file(candidate):
        return True
    for base, spec in rules:
        inner = candidate[len(base) + 1 :] if base else candidate
        if spec.match_file(inner):
            return True
    return False


def _read(path: str, name: str, budget: _Budget) -> _Entry:
    with open(path, "rb") as f:
        data = f.read()
    budget.add(len(data), path)
    mode = stat.S_IMODE(os.stat(path).st_mode) or 0o644
    return _Entry(name, mode, data)


def _zip(entries: Sequence[_Entry]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=_COMPRESS_LEVEL) as archive:
        for entry in entries:
            info = zipfile.ZipInfo(entry.name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (stat.S_IFREG | entry.mode) << 16
            archive.writestr(info, entry.data, compresslevel=_COMPRESS_LEVEL)
    return buffer.getvalue()


def _too_large(root: str, size: int, limit: int, entries: Sequence[_Entry]) -> str:
    largest = sorted(entries, key=lambda e: len(e.data), reverse=True)[:5]
    listing = ", ".join(f"{e.name} ({_mib(len(e.data))})" for e in largest)
    return (
        f"the bundle of {root} is {_mib(size)} compressed ({len(entries)} files), over the {_mib(limit)} limit of "
        f"an Iris bundle; largest files: {listing}. {_HOW_TO_EXCLUDE}"
    )


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"
