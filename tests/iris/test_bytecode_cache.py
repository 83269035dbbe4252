"""The host's cache of compiled shipped code: a module compiled in one workdir loads in another
without compiling, tracebacks name the file actually imported, a changed file is compiled
again, an unsafe or damaged cache costs a compile and never an import, and the cache stays
bounded. Each import runs in a fresh interpreter that loads the module by path, as the
callable runner does, without site-packages (`-S`): the shipped file needs nothing else."""

from __future__ import annotations

import hashlib
import marshal
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from fray_ray.iris import bytecode_cache
from fray_ray.iris.bytecode_cache import BytecodeStore

MODULE = "VALUE = 1\n\n\ndef fail():\n    raise ValueError('from the shipped module')\n"


def workdir(path: Path, text: str = MODULE) -> Path:
    (path / "pkg").mkdir(parents=True)
    (path / "pkg" / "__init__.py").write_text("")
    (path / "pkg" / "shipped.py").write_text(text)
    return path


def import_in(root: Path, cache: Path, *, env: dict[str, str] | None = None) -> list[str]:
    """Install the cache for `root` in a fresh interpreter, import pkg.shipped, and report."""
    script = textwrap.dedent(f"""
        import importlib.util, sys, traceback
        spec = importlib.util.spec_from_file_location("_bytecode_cache", {bytecode_cache.__file__!r})
        cache = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cache)
        sys.path.insert(0, {str(root)!r})
        print("installed", cache.install({str(root)!r}, {str(cache)!r}))
        import pkg.shipped
        print("value", pkg.shipped.VALUE)
        print("loader", type(pkg.shipped.__spec__.loader).__name__)
        try:
            pkg.shipped.fail()
        except ValueError as exc:
            print("raised in", traceback.extract_tb(exc.__traceback__)[-1].filename)
    """)
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    environment.update(env or {})
    done = subprocess.run([sys.executable, "-S", "-c", script], env=environment, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*/*.code"))


def key_of(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=20).hexdigest()


def test_a_module_compiled_in_one_workdir_loads_from_the_cache_in_another(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, second = workdir(tmp_path / "attempt-1"), workdir(tmp_path / "attempt-2")
    out = import_in(first, cache)
    assert out[:3] == ["installed True", "value 1", "loader CachedSourceLoader"]
    (entry,) = [e for e in entries(cache) if e.stem == key_of(MODULE)]
    # Put other code under the same key: if the second import reads it, it did not compile.
    entry.write_bytes(marshal.dumps(compile(MODULE.replace("VALUE = 1", "VALUE = 2"), "elsewhere.py", "exec")))
    out = import_in(second, cache)
    assert "value 2" in out
    assert f"raised in {second / 'pkg' / 'shipped.py'}" in out  # not elsewhere.py, nor attempt-1's file


def test_a_changed_file_is_compiled_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    import_in(workdir(tmp_path / "old"), cache)
    out = import_in(workdir(tmp_path / "new", MODULE.replace("VALUE = 1", "VALUE = 3")), cache)
    assert "value 3" in out
    assert {e.stem for e in entries(cache)} >= {key_of(MODULE), key_of(MODULE.replace("VALUE = 1", "VALUE = 3"))}


def test_a_damaged_entry_costs_a_compile_and_is_written_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    import_in(workdir(tmp_path / "a"), cache)
    (entry,) = [e for e in entries(cache) if e.stem == key_of(MODULE)]
    entry.write_bytes(b"\x00not marshal")
    assert "value 1" in import_in(workdir(tmp_path / "b"), cache)
    assert isinstance(marshal.loads(entry.read_bytes()), type(compile("", "", "exec")))


def test_a_cache_others_can_write_to_is_not_used(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    cache.chmod(0o777)
    out = import_in(workdir(tmp_path / "a"), cache)
    assert out[:3] == ["installed False", "value 1", "loader SourceFileLoader"]
    assert entries(cache) == []


def test_without_writing_bytecode_the_cache_is_read_but_not_written(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    out = import_in(workdir(tmp_path / "a"), cache, env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert "loader CachedSourceLoader" in out and entries(cache) == []
    import_in(workdir(tmp_path / "b"), cache)
    (entry,) = [e for e in entries(cache) if e.stem == key_of(MODULE)]
    entry.write_bytes(marshal.dumps(compile(MODULE.replace("VALUE = 1", "VALUE = 4"), "x.py", "exec")))
    assert "value 4" in import_in(workdir(tmp_path / "c"), cache, env={"PYTHONDONTWRITEBYTECODE": "1"})


def test_modules_outside_the_workdir_and_zips_inside_it_load_as_usual(tmp_path: Path) -> None:
    elsewhere, the_workdir = workdir(tmp_path / "elsewhere"), tmp_path / "the-workdir"
    the_workdir.mkdir()
    with zipfile.ZipFile(the_workdir / "lib.zip", "w") as archive:
        archive.writestr("zipped.py", "WHERE = 'zip'\n")
    script = textwrap.dedent(f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("_bytecode_cache", {bytecode_cache.__file__!r})
        cache = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cache)
        print(cache.install({str(the_workdir)!r}, {str(tmp_path / 'cache')!r}))
        sys.path.insert(0, {str(elsewhere)!r})
        sys.path.insert(0, {str(the_workdir / 'lib.zip')!r})
        import pkg.shipped, zipped
        print(type(pkg.shipped.__spec__.loader).__name__, zipped.WHERE)
    """)
    done = subprocess.run([sys.executable, "-S", "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "SourceFileLoader", "zip"], done.stderr


def test_the_cache_is_turned_off_by_its_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(bytecode_cache.ENV, "off")
    assert bytecode_cache.configured_directory() is None
    assert bytecode_cache.install(str(tmp_path)) is False
    monkeypatch.delenv(bytecode_cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert bytecode_cache.configured_directory() == str(tmp_path / "xdg" / "fray_ray" / "bytecode")


def test_pruning_drops_the_least_recently_used_down_to_half(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    store = BytecodeStore.open(str(tmp_path / "cache"), max_bytes=10_000)
    assert store is not None
    code = compile("X = 1", "m.py", "exec")
    size = len(marshal.dumps(code))
    count = 10_000 // size + 5
    for number in range(count):
        key = f"{number:040x}"
        store.save(key, code)
        os.utime(os.path.join(store.directory, key + ".code"), (1000 + number, 1000 + number))
    assert store.load(f"{0:040x}") is not None  # used now: the newest of all
    store.prune()
    kept = {p.stem for p in Path(store.directory).glob("*.code")}
    assert sum(os.path.getsize(os.path.join(store.directory, k + ".code")) for k in kept) <= 5_000
    assert f"{0:040x}" in kept and f"{1:040x}" not in kept and f"{count - 1:040x}" in kept
