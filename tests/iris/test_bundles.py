"""Workspace bundles: what a snapshot leaves out, that it is taken at once and content-addressed,
the size limit's message, and that a controller gets each bundle's bytes once."""

from __future__ import annotations

import io
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from fray_ray.iris.bundles import PY_MODULES_DIR, BundleTooLarge, WorkspaceBundle, snapshot_workspace
from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.entrypoint import command_entrypoint
from fray_ray.iris.names import JobName
from fray_ray.iris.types import JobSpec


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def names(bundle: WorkspaceBundle) -> list[str]:
    with zipfile.ZipFile(io.BytesIO(bundle.blob)) as archive:
        return sorted(archive.namelist())


def test_defaults_gitignore_files_and_excludes_leave_files_out(tmp_path: Path) -> None:
    root = tree(tmp_path / "ws", {
        "main.py": "", "pkg/mod.py": "", "pkg/__pycache__/mod.cpython-311.pyc": "", ".git/HEAD": "",
        ".venv/bin/python": "", "env2/pyvenv.cfg": "", "env2/lib/x.py": "", "node_modules/a.js": "",
        ".gitignore": "*.log\n/build/\n", "run.log": "", "build/out.txt": "", "sub/build/kept.txt": "",
        "sub/.gitignore": "secret.txt\n", "sub/secret.txt": "", "sub/other/secret.txt": "", "data/big.bin": "",
    })
    bundle = snapshot_workspace(str(root), excludes=["data/"]).bundle()
    assert names(bundle) == [".gitignore", "main.py", "pkg/mod.py", "sub/.gitignore", "sub/build/kept.txt"]


def test_a_snapshot_is_taken_at_once_and_equal_content_has_one_id(tmp_path: Path) -> None:
    root = tree(tmp_path / "ws", {"a.py": "A = 1\n", "b/c.txt": "c\n"})
    (root / "a.py").chmod(0o755)
    snapshot = snapshot_workspace(str(root))
    shutil.move(root, tmp_path / "moved")  # gone before the zip is made
    bundle = snapshot.bundle()
    with zipfile.ZipFile(io.BytesIO(bundle.blob)) as archive:
        assert archive.read("a.py") == b"A = 1\n"
        assert (archive.getinfo("a.py").external_attr >> 16) & 0o777 == 0o755
    again = snapshot_workspace(str(tmp_path / "moved")).bundle()
    assert again.bundle_id == bundle.bundle_id and again.blob == bundle.blob


def test_py_modules_go_under_their_own_directory(tmp_path: Path) -> None:
    root = tree(tmp_path / "ws", {"main.py": ""})
    tree(tmp_path / "libs", {"helpers/__init__.py": "", "helpers/__pycache__/x.pyc": "", "single.py": ""})
    bundle = snapshot_workspace(
        str(root), py_modules=[str(tmp_path / "libs" / "helpers"), str(tmp_path / "libs" / "single.py")]
    ).bundle()
    assert names(bundle) == [f"{PY_MODULES_DIR}/helpers/__init__.py", f"{PY_MODULES_DIR}/single.py", "main.py"]
    with pytest.raises(ValueError, match="both be imported as 'helpers'"):
        tree(tmp_path / "other", {"helpers/x.py": ""})
        snapshot_workspace(str(root), py_modules=[str(tmp_path / "libs/helpers"), str(tmp_path / "other/helpers")])


def test_too_large_names_the_size_the_biggest_files_and_how_to_exclude(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "weights.bin").write_bytes(os.urandom(300_000))
    (root / "small.py").write_text("x = 1\n")
    with pytest.raises(BundleTooLarge) as info:
        snapshot_workspace(str(root), limit=100_000)
    message = str(info.value)
    assert "over the 0.1 MiB limit" in message and "weights.bin (0.3 MiB)" in message
    assert "'excludes': ['weights.bin', 'small.py']" in message and ".gitignore" in message
    assert snapshot_workspace(str(root), limit=100_000, excludes=["*.bin"]).bundle().files == 1


def test_content_far_over_the_limit_is_refused_from_sizes_before_a_file_is_read(tmp_path: Path) -> None:
    root = tree(tmp_path / "ws", {"main.py": "x = 1\n"})
    data = root / "data"
    data.mkdir()
    for index in range(3):
        with open(data / f"part{index}.bin", "wb") as f:
            f.truncate(400_000)  # sparse: sized, never written
    with pytest.raises(BundleTooLarge) as info:
        snapshot_workspace(str(root), limit=100_000)
    message = str(info.value)
    assert "1.1 MiB in 4 files" in message and "largest entries: data/ (1.1 MiB, 3 files)" in message
    assert "'excludes': ['data/', 'main.py']" in message
    assert snapshot_workspace(str(root), limit=100_000, excludes=["data/"]).files == 1


def test_a_symlink_loop_is_walked_once(tmp_path: Path) -> None:
    root = tree(tmp_path / "ws", {"a/file.txt": "x"})
    os.symlink(root / "a", root / "a" / "loop")
    assert names(snapshot_workspace(str(root)).bundle()) == ["a/file.txt"]


class _RecordingStub:
    """Stands in for the generated ControllerService stub: records what LaunchJob carried."""

    def __init__(self) -> None:
        self.requests: list = []

    def launch_job(self, request, headers=None, timeout_ms=None):  # noqa: ANN001, ANN201
        from fray_ray.iris.rpc import controller_pb2

        self.requests.append(request)
        return controller_pb2.Controller.LaunchJobResponse(job_id=request.name)

    def close(self) -> None:
        pass


def test_a_controller_gets_the_bytes_once_then_the_id(tmp_path: Path) -> None:
    bundle = snapshot_workspace(str(tree(tmp_path / "ws", {"a.py": "A = 1\n"}))).bundle()
    client = ControllerClient("http://127.0.0.1:1")
    stub = client._stub = _RecordingStub()  # type: ignore[assignment]
    try:
        for name in ("one", "two"):
            client.launch_job(JobSpec(name=JobName.root("u", name), entrypoint=command_entrypoint(["true"]), bundle=bundle))
    finally:
        client.close()
    first, second = stub.requests
    assert first.bundle_blob == bundle.blob and not first.bundle_id
    assert not second.bundle_blob and second.bundle_id == bundle.bundle_id


def test_only_ships_the_named_top_level_entries_and_walks_nothing_else(tmp_path: Path) -> None:
    root = tree(tmp_path / "ws", {"run.py": "", "mylib.py": "", "pkg/__init__.py": "", "pkg/__pycache__/x.pyc": "",
                                  "notes.txt": "", "old/a.py": ""})
    snapshot = snapshot_workspace(str(root), only=["run.py", "mylib.py", "pkg"], py_modules=[str(root / "old")])
    assert names(snapshot.bundle()) == [f"{PY_MODULES_DIR}/old/a.py", "mylib.py", "pkg/__init__.py", "run.py"]
    assert snapshot_workspace(str(root), only=[]).bundle().files == 0
