"""Compiled code for shipped sources, kept per host and found by each file's content.

Every task attempt unpacks its bundle into a workdir of its own, so the `__pycache__` Python
writes beside the sources is empty for every new worker process, and each one compiled again
every module it imported from the bundle (half a second for a project the size of fray_ray's
own, on every worker start). Ray's workers share one unpacked `working_dir` per node and reuse
its bytecode. Here a module imported from the workdir is looked up by the hash of its source
bytes in a directory of this host's (`FRAY_RAY_BYTECODE_CACHE`, default
`~/.cache/fray_ray/bytecode`, `off` to turn it off): another attempt, another job or another
session with the same file loads it without compiling, whatever the workdir's path.

The cache is trusted as `__pycache__` is: only a directory this user owns and no one else may
write is used, else imports compile as before. It is kept below `MAX_BYTES`, dropping the
entries used longest ago. Any trouble with it (a full disk, a damaged entry) costs a compile,
never an import.

This module is shipped beside the callable runner and imported from the workdir before
anything else, so it uses the standard library only.
"""

from __future__ import annotations

import _imp
import hashlib
import importlib.machinery
import importlib.util
import marshal
import os
import stat
import sys
import tempfile
from types import CodeType

ENV = "FRAY_RAY_BYTECODE_CACHE"
#: The cache's size past which its oldest entries go, down to half of it.
MAX_BYTES = 256 << 20
_OFF = ("", "0", "off", "false", "no")
_SUFFIX = ".code"


def configured_directory() -> str | None:
    """`FRAY_RAY_BYTECODE_CACHE`, else `$XDG_CACHE_HOME/fray_ray/bytecode` (or `~/.cache/...`);
    None when it is turned off."""
    configured = os.environ.get(ENV)
    if configured is not None:
        return None if configured.strip().lower() in _OFF else configured
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fray_ray", "bytecode")


class BytecodeStore:
    """Code objects on disk, one file per (interpreter, source content)."""

    def __init__(self, directory: str, max_bytes: int = MAX_BYTES) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._pruned = False

    @classmethod
    def open(cls, directory: str, max_bytes: int = MAX_BYTES) -> BytecodeStore | None:
        """The store in `directory` (made if missing), or None when it is not safely ours."""
        # Code compiled by another interpreter version is another file: its own subdirectory.
        here = os.path.join(directory, importlib.util.MAGIC_NUMBER.hex() + f"-O{sys.flags.optimize}")
        try:
            for path in (directory, here):
                os.makedirs(path, mode=0o700, exist_ok=True)
                if not _private(path):
                    return None
        except OSError:
            return None
        return cls(here, max_bytes)

    def load(self, key: str) -> CodeType | None:
        path = os.path.join(self.directory, key + _SUFFIX)
        try:
            with open(path, "rb") as file:
                code = marshal.loads(file.read())
        except FileNotFoundError:
            return None
        except (OSError, EOFError, ValueError, TypeError):  # damaged: compile, and write it again
            return None
        if not isinstance(code, CodeType):
            return None
        try:
            os.utime(path)  # pruning drops the entries used longest ago
        except OSError:
            pass
        return code

    def save(self, key: str, code: CodeType) -> None:
        if sys.dont_write_bytecode:
            return
        try:
            descriptor, temporary = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
            try:
                with os.fdopen(descriptor, "wb") as file:
                    file.write(marshal.dumps(code))
                os.replace(temporary, os.path.join(self.directory, key + _SUFFIX))
            except BaseException:
                os.unlink(temporary)
                raise
        except (OSError, ValueError):
            return
        if not self._pruned:  # once per process: enough to keep a host's cache bounded
            self._pruned = True
            self.prune()

    def prune(self) -> None:
        """Past `max_bytes`, remove the least recently used entries down to half of it."""
        entries: list[tuple[float, int, str]] = []
        try:
            with os.scandir(self.directory) as scan:
                for entry in scan:
                    if entry.name.endswith(_SUFFIX):
                        info = entry.stat(follow_symlinks=False)
                        entries.append((info.st_mtime, info.st_size, entry.path))
        except OSError:
            return
        total = sum(size for _, size, _ in entries)
        if total <= self.max_bytes:
            return
        for _, size, path in sorted(entries):
            if total <= self.max_bytes // 2:
                break
            try:
                os.unlink(path)
            except OSError:
                continue
            total -= size


class CachedSourceLoader(importlib.machinery.SourceFileLoader):
    """A source loader that compiles each distinct file once per host."""

    store: BytecodeStore

    def get_code(self, fullname: str) -> CodeType:
        source_path = self.get_filename(fullname)
        source = self.get_data(source_path)
        key = hashlib.blake2b(source, digest_size=20).hexdigest()
        code = self.store.load(key)
        if code is not None:
            _imp._fix_co_filename(code, source_path)  # tracebacks name this workdir's file
            return code
        code = self.source_to_code(source, source_path)
        self.store.save(key, code)
        return code


class _WorkdirHook:
    """A `sys.path_hooks` entry that claims the directories under `root` and no others."""

    def __init__(self, root: str, loader: type[CachedSourceLoader]) -> None:
        self.root = root
        self.loader = loader

    def __call__(self, path: str) -> importlib.machinery.FileFinder:
        directory = path or os.getcwd()
        if not os.path.isdir(directory) or not _under(directory, self.root):  # a zip stays zipimport's
            raise ImportError("not a shipped directory")  # the next hook takes it
        return importlib.machinery.FileFinder(
            path,
            (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES),
            (self.loader, importlib.machinery.SOURCE_SUFFIXES),
            (importlib.machinery.SourcelessFileLoader, importlib.machinery.BYTECODE_SUFFIXES),
        )


def install(root: str, directory: str | None = None, max_bytes: int = MAX_BYTES) -> bool:
    """Load the modules found under `root` through the cache in `directory` (default:
    `configured_directory()`). False, changing nothing, when the cache is off or not safe."""
    directory = configured_directory() if directory is None else directory
    if directory is None:
        return False
    store = BytecodeStore.open(directory, max_bytes)
    if store is None:
        return False
    loader = type("CachedSourceLoader", (CachedSourceLoader,), {"store": store})
    root = os.path.realpath(root)
    sys.path_hooks.insert(0, _WorkdirHook(root, loader))
    for path in list(sys.path_importer_cache):  # finders made before the hook was in place
        if _under(path or os.getcwd(), root):
            del sys.path_importer_cache[path]
    return True


def _under(path: str, root: str) -> bool:
    real = os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _private(path: str) -> bool:
    """A directory of this user's that no one else can write to."""
    info = os.stat(path)
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022
