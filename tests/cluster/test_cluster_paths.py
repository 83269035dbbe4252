"""Paths built from names stay inside their directory, even when a name got past validation."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from fray_ray.cluster._bundle_store import BundleStore
from fray_ray.cluster._config import cpu_worker
from fray_ray.cluster._logs import LogStore
from fray_ray.cluster._paths import PathEscape, path_inside
from fray_ray.cluster._worker import AttemptLaunch, LocalWorker, PortAllocator, TaskContract
from fray_ray.iris.types import ResourceSpec


def test_path_inside_accepts_descendants_and_refuses_everything_else(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    assert path_inside(str(root), "a", "b.txt") == str(root / "a" / "b.txt")
    assert path_inside(str(root), "a/./b") == str(root / "a" / "b")
    for parts in (("..",), ("a", "..", ".."), ("/etc/passwd",), ("a\0b",), ("",), (".",), ("a", "..")):
        with pytest.raises(PathEscape):
            path_inside(str(root), *parts)
    (root / "link").symlink_to(tmp_path)  # a symlink out is followed, then refused
    with pytest.raises(PathEscape):
        path_inside(str(root), "link", "x")


class _Outcomes:
    def __init__(self) -> None:
        self.exits: list[tuple[int, int, str]] = []

    def attempt_started(self, uid: int, ports: dict[str, int]) -> None:
        raise AssertionError("nothing may start")

    def attempt_exited(self, uid: int, returncode: int, error: str) -> None:
        self.exits.append((uid, returncode, error))


def _worker(root: Path, outcomes: _Outcomes, bundles: BundleStore) -> LocalWorker:
    contract = TaskContract(controller_url="http://127.0.0.1:1", token=None, python="python3")
    return LocalWorker(cpu_worker("cpu-0", cpu=1), host="127.0.0.2", root_dir=str(root), contract=contract,
                       supervisor=None,  # type: ignore[arg-type] - never reached: preparation fails first
                       logs=LogStore(), ports=PortAllocator(), bundles=bundles, listener=outcomes)


def _launch(task_id: str, files: dict[str, bytes] | None = None, bundle_id: str = "") -> AttemptLaunch:
    return AttemptLaunch(uid=7, worker_id="cpu-0", task_id=task_id, attempt_id=0, num_tasks=1, argv=("true",),
                         workdir_files=files or {}, env_vars={}, ports=(), gpu_indices=(), uses_gpu=False,
                         uses_tpu=False, setup_scripts=(), bundle_id=bundle_id, resources=ResourceSpec())


def _everything_under(path: Path) -> set[str]:
    return {str(Path(d, n)) for d, dirs, files in os.walk(path) for n in dirs + files}


def test_worker_refuses_a_workdir_outside_its_root_even_without_validation(tmp_path: Path) -> None:
    root = tmp_path / "cluster" / "workers"
    root.mkdir(parents=True)
    outcomes = _Outcomes()
    worker = _worker(root, outcomes, BundleStore())
    before = _everything_under(tmp_path)
    worker.launch(_launch("/../../../escaped/0"))
    worker.launch(_launch("/user/job/0", {"../../../../escaped.txt": b"x"}))
    assert [code for _, code, _ in outcomes.exits] == [126, 126]
    assert all("outside" in error for _, _, error in outcomes.exits)
    created = _everything_under(tmp_path) - before
    assert all(path.startswith(str(root / "cpu-0")) for path in created), created
    assert not any("attempt-" in path for path in created)  # a workdir that failed is removed


def test_bundle_members_cannot_climb_out(tmp_path: Path) -> None:
    root = tmp_path / "cluster" / "workers"
    root.mkdir(parents=True)
    blob = io.BytesIO()
    with zipfile.ZipFile(blob, "w") as archive:
        archive.writestr("ok.txt", b"fine")
        archive.writestr("../../../../zip-slip.txt", b"escaped")
    bundles = BundleStore()
    bundles.put("b1", blob.getvalue())
    outcomes = _Outcomes()
    _worker(root, outcomes, bundles).launch(_launch("/user/job/0", bundle_id="b1"))
    assert outcomes.exits and outcomes.exits[0][1] == 126 and "outside" in outcomes.exits[0][2]
    assert not any(Path(p).name == "zip-slip.txt" for p in _everything_under(tmp_path))
