"""The address file: `fray-ray start` records its cluster, `init(address="auto")` finds it.

Every test keeps the file in a private directory of its own (`FRAY_RAY_TEMP_DIR` or
`--temp-dir`), so clusters others start on this machine are never seen.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import fray_ray
from fray_ray._private.driver import cluster_address
from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from standalone_cluster import standalone_cluster  # noqa: E402

MARKER = "address_file_marker"


@pytest.fixture
def private_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty directory of mode 0700, named by FRAY_RAY_TEMP_DIR; no cluster address in the env."""
    directory = tmp_path / "records"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv(cluster_address.TEMP_DIR_ENV, str(directory))
    for name in ("RAY_ADDRESS", "FRAY_RAY_ADDRESS", "FRAY_RAY_TOKEN", "IRIS_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return directory


@pytest.fixture
def started(private_dir: Path) -> Iterator[tuple[subprocess.Popen, dict]]:
    """`fray-ray start` with one CPU host carrying MARKER, recording itself in private_dir."""
    with standalone_cluster(["--temp-dir", str(private_dir), "--cpu", "1", "--memory", "2g",
                             "--attribute", f"ray-resource:{MARKER}=1"]) as started_cluster:
        yield started_cluster


# ---- the record itself -------------------------------------------------------------------------


def test_record_is_private_and_read_back(private_dir: Path) -> None:
    path = cluster_address.write("http://127.0.0.1:1234", "secret")
    assert Path(path).parent == private_dir
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    record = cluster_address.read()
    assert record == cluster_address.ClusterRecord("http://127.0.0.1:1234", "secret", os.getpid())
    assert cluster_address.token_for("127.0.0.1:1234") == "secret"
    assert cluster_address.token_for("iris://127.0.0.1:1234") == "secret"
    assert cluster_address.token_for("127.0.0.1:9999") is None
    cluster_address.remove("http://127.0.0.1:1234")
    assert cluster_address.read() is None and not os.listdir(private_dir)


def test_remove_leaves_a_later_record_alone(private_dir: Path) -> None:
    cluster_address.write("http://127.0.0.1:1", "a")
    cluster_address.write("http://127.0.0.1:2", "b")  # a later start wins
    cluster_address.remove("http://127.0.0.1:1")
    record = cluster_address.read()
    assert record is not None and record.address == "http://127.0.0.1:2"


def test_record_of_a_dead_process_counts_as_none(private_dir: Path) -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
    dead_pid = int(finished.stdout)
    (private_dir / cluster_address.FILE_NAME).write_text(
        json.dumps({"address": "http://127.0.0.1:1", "token": "t", "pid": dead_pid}))
    os.chmod(private_dir / cluster_address.FILE_NAME, 0o600)
    assert cluster_address.read() is None


def test_a_directory_others_may_enter_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv(cluster_address.TEMP_DIR_ENV, str(shared))
    with pytest.raises(PermissionError, match="0700"):
        cluster_address.write("http://127.0.0.1:1", "t")
    with pytest.raises(PermissionError, match="0700"):
        cluster_address.read()
    assert os.listdir(shared) == []


def test_a_readable_record_is_refused(private_dir: Path) -> None:
    path = cluster_address.write("http://127.0.0.1:1", "t")
    os.chmod(path, 0o644)
    with pytest.raises(PermissionError, match="0600"):
        cluster_address.read()


def test_default_directory_is_per_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(cluster_address.TEMP_DIR_ENV, raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    assert cluster_address.record_dir() == str(tmp_path / f"fray-ray-{os.getuid()}")
    assert cluster_address.record_dir("/explicit") == "/explicit"


# ---- fray-ray start and init(address="auto") ------------------------------------------------------


def test_start_records_and_auto_connects(started: tuple[subprocess.Popen, dict], private_dir: Path,
                                         fresh_shutdown: None) -> None:
    process, info = started
    record = cluster_address.read()
    assert record is not None and (record.address, record.token) == (info["address"], info["token"])
    fray_ray.init(address="auto")  # no token in the environment: the record has it
    assert fray_ray.cluster_resources().get(MARKER) == 1
    fray_ray.shutdown()
    process.send_signal(signal.SIGINT)
    process.wait(60)
    assert cluster_address.read() is None and not (private_dir / cluster_address.FILE_NAME).exists()


def test_ray_address_comes_before_the_record(started: tuple[subprocess.Popen, dict], monkeypatch: pytest.MonkeyPatch,
                                             fresh_shutdown: None) -> None:
    other = EmbeddedCluster(ClusterConfig(workers=(cpu_worker("other", cpu=1, memory="2g", disk="1g",
                                                               attributes={"ray-resource:other_marker": 1.0}),)))
    with other:
        monkeypatch.setenv("RAY_ADDRESS", other.address)
        monkeypatch.setenv("FRAY_RAY_TOKEN", other.token or "")
        fray_ray.init(address="auto")
        resources = fray_ray.cluster_resources()
        assert resources.get("other_marker") == 1 and MARKER not in resources
        fray_ray.shutdown()


def test_auto_without_a_record_names_fray_ray_start(private_dir: Path, fresh_shutdown: None) -> None:
    with pytest.raises(ConnectionError, match="fray-ray start") as caught:
        fray_ray.init(address="auto")
    assert str(private_dir) in str(caught.value)
    assert not fray_ray.is_initialized()


def test_auto_reads_the_temp_dir_given_to_init(started: tuple[subprocess.Popen, dict], private_dir: Path,
                                               monkeypatch: pytest.MonkeyPatch, fresh_shutdown: None) -> None:
    monkeypatch.setenv(cluster_address.TEMP_DIR_ENV, str(private_dir.parent))  # elsewhere
    fray_ray.init(address="auto", _temp_dir=str(private_dir))
    assert fray_ray.cluster_resources().get(MARKER) == 1


def test_killed_start_is_not_found(started: tuple[subprocess.Popen, dict], fresh_shutdown: None) -> None:
    process, _ = started
    process.kill()  # no chance to remove its record
    process.wait(60)
    deadline = time.monotonic() + 30
    while cluster_address.read() is not None and time.monotonic() < deadline:
        time.sleep(0.1)  # the pid is gone once the process is reaped
    with pytest.raises(ConnectionError):
        fray_ray.init(address="auto")
