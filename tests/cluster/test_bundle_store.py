"""Workspace bundles unpacked into attempt workdirs: every attempt gets the bundle's files as
the zip holds them, in a tree of its own, whether the host links them from its written-out copy
(written one file at a time or by several threads), writes them, or unpacks the zip."""

from __future__ import annotations

import io
import os
import stat
import zipfile
from pathlib import Path

import pytest

from fray_ray.cluster import _bundle_store
from fray_ray.cluster._bundle_store import BundleStore, HostBundles
from fray_ray.cluster._paths import PathEscape


def _zip(*members: tuple[str, bytes, int]) -> bytes:
    blob = io.BytesIO()
    with zipfile.ZipFile(blob, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFDIR if name.endswith("/") else stat.S_IFREG | mode) << 16
            archive.writestr(info, data)
    return blob.getvalue()


LINKED = "ab" * 32  # the controller's ids are SHA-256 digests in hex
PROJECT = _zip(
    ("./", b"", 0),
    ("run.sh", b"#!/bin/sh\necho hi\n", 0o755),
    ("pkg/__init__.py", b"", 0o644),
    ("pkg/deep/module.py", b"VALUE = 1\n", 0o644),
    ("empty/", b"", 0),
)


def _tree(root: Path) -> dict[str, tuple[bytes | None, int]]:
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            found[str(path.relative_to(root))] = (path.read_bytes() if path.is_file() else None,
                                                   stat.S_IMODE(path.stat().st_mode))
    return found


@pytest.fixture(params=["linked", "written out by threads", "written", "from the zip"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "written out by threads":  # the host's copy, as a large project's is written
        monkeypatch.setattr(_bundle_store, "PARALLEL_WRITES_FROM", 1)
    if request.param == "written":  # a disk without hard links: each file is written instead
        def no_links(source: str, target: str) -> None:
            raise OSError(f"cannot link {source}")

        monkeypatch.setattr(_bundle_store.os, "link", no_links)
    if request.param == "from the zip":
        monkeypatch.setattr(_bundle_store, "DECODED_LIMIT", 8)  # every bundle here is larger
    return LINKED


def _host(tmp_path: Path) -> tuple[BundleStore, HostBundles]:
    store = BundleStore()
    return store, HostBundles(store, str(tmp_path / "host@bundles"))


def _attempt(tmp_path: Path, name: str) -> Path:
    workdir = tmp_path / "root" / name
    workdir.mkdir(parents=True)
    return workdir


def test_every_attempt_gets_the_bundles_files_in_a_tree_of_its_own(tmp_path: Path, way: str) -> None:
    store, host = _host(tmp_path)
    store.put(way, PROJECT)
    first, second = _attempt(tmp_path, "a"), _attempt(tmp_path, "b")
    assert host.unpack(way, str(first))
    (first / "pkg" / "deep" / "module.py").unlink()  # one attempt's changes stay its own
    (first / "pkg" / "new.py").write_bytes(b"")
    assert host.unpack(way, str(second))
    tree = _tree(second)
    assert tree["run.sh"] == (b"#!/bin/sh\necho hi\n", 0o755)
    assert tree["pkg/deep/module.py"][0] == b"VALUE = 1\n"
    assert tree["empty"][0] is None and set(tree) == {"run.sh", "pkg", "pkg/__init__.py", "pkg/deep",
                                                       "pkg/deep/module.py", "empty"}


def test_a_file_written_in_place_is_written_out_again_for_the_next_attempt(tmp_path: Path) -> None:
    store, host = _host(tmp_path)
    store.put(LINKED, PROJECT)
    first = _attempt(tmp_path, "a")
    host.unpack(LINKED, str(first))
    (first / "pkg" / "deep" / "module.py").write_bytes(b"VALUE = 2 # edited in place\n")
    (first / "run.sh").chmod(0o600)
    second = _attempt(tmp_path, "b")
    host.unpack(LINKED, str(second))
    assert _tree(second)["pkg/deep/module.py"][0] == b"VALUE = 1\n"
    assert _tree(second)["run.sh"][1] == 0o755
    assert len(list((tmp_path / "host@bundles").iterdir())) == 1  # the changed copy is gone


def test_an_unknown_bundle_unpacks_nothing(tmp_path: Path) -> None:
    _, host = _host(tmp_path)
    workdir = _attempt(tmp_path, "a")
    assert not host.unpack(LINKED, str(workdir))
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize("name", ["../escaped.txt", "a/../../escaped.txt", "/abs.txt"])
def test_a_member_that_would_land_outside_is_refused(tmp_path: Path, way: str, name: str) -> None:
    store, host = _host(tmp_path)
    store.put(way, _zip(("fine.txt", b"x", 0o644), (name, b"escaped", 0o644)))
    with pytest.raises(PathEscape, match="outside"):
        host.unpack(way, str(_attempt(tmp_path, "a")))
    assert not any(p.name == "escaped.txt" for p in tmp_path.rglob("*"))


def test_of_two_members_with_one_name_the_later_wins(tmp_path: Path, way: str) -> None:
    blob = io.BytesIO()
    with zipfile.ZipFile(blob, "w") as archive, pytest.warns(UserWarning, match="Duplicate name"):
        archive.writestr("same.txt", b"first")
        archive.writestr("same.txt", b"second")
    store, host = _host(tmp_path)
    store.put(way, blob.getvalue())
    workdir = _attempt(tmp_path, "a")
    assert host.unpack(way, str(workdir))
    assert (workdir / "same.txt").read_bytes() == b"second"


def test_kept_bundles_are_bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_bundle_store, "DECODED_BUNDLES", 2)
    monkeypatch.setattr(_bundle_store, "HOST_BUNDLES", 2)
    store, host = _host(tmp_path)
    for index in range(4):
        bundle_id = f"{index:064x}"
        store.put(bundle_id, _zip((f"file{index}.txt", b"x" * 10, 0o644)))
        assert host.unpack(bundle_id, str(_attempt(tmp_path, str(index))))
    assert list(store._decoded) == [f"{2:064x}", f"{3:064x}"]
    assert sorted(p.name[:64] for p in (tmp_path / "host@bundles").iterdir()) == [f"{2:064x}", f"{3:064x}"]


@pytest.mark.parametrize("threads", [False, True])
def test_a_bundle_that_cannot_be_written_leaves_no_copy_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                threads: bool) -> None:
    if threads:
        monkeypatch.setattr(_bundle_store, "PARALLEL_WRITES_FROM", 1)
    store, host = _host(tmp_path)
    store.put(LINKED, _zip(("a", b"a file", 0o644), ("a/b", b"under a file", 0o644)))
    with pytest.raises(OSError):
        host.unpack(LINKED, str(_attempt(tmp_path, "a")))
    assert list((tmp_path / "host@bundles").iterdir()) == []
