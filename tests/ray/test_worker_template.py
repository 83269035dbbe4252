"""Workers forked from the embedded cluster's template run Ray code as fresh ones do, and the
switch gives fresh interpreters back."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pytest

import fray_ray

# This module's functions travel by value: the workers' bundle is a temp dir, not this checkout.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def where_am_i() -> dict[str, object]:
    with open("data.txt") as f:
        data = f.read()
    return {"pid": os.getpid(), "parent": _cmdline(os.getppid()), "ppid": os.getppid(),
            "var": os.environ.get("TEMPLATE_VAR"), "data": data}


@pytest.fixture
def driver_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_shutdown: None) -> Iterator[Path]:
    home = tmp_path / "driver"
    home.mkdir()
    (home / "data.txt").write_text("shipped")
    monkeypatch.chdir(home)
    yield home


def test_tasks_and_actors_run_in_workers_forked_from_the_template(driver_dir: Path) -> None:
    fray_ray.init(num_cpus=2, runtime_env={"env_vars": {"TEMPLATE_VAR": "from-runtime-env"}})
    task = fray_ray.get(fray_ray.remote(where_am_i).remote(), timeout=120)

    @fray_ray.remote
    class Where:
        def where(self) -> dict[str, object]:
            return where_am_i()

        def fail(self) -> None:
            raise ValueError("raised in a forked actor")

    actor = Where.remote()
    hosted = fray_ray.get(actor.where.remote(), timeout=120)
    for seen in (task, hosted):
        assert "_template_main.py" in seen["parent"], seen  # forked, not a fresh interpreter
        assert seen["var"] == "from-runtime-env" and seen["data"] == "shipped"
    assert task["ppid"] == hosted["ppid"] and task["pid"] != hosted["pid"]
    with pytest.raises(ValueError, match="raised in a forked actor"):
        fray_ray.get(actor.fail.remote(), timeout=120)
    fray_ray.kill(actor)
    with pytest.raises(fray_ray.exceptions.RayActorError):
        fray_ray.get(actor.where.remote(), timeout=120)
    deadline = time.monotonic() + 60
    while _alive(hosted["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(hosted["pid"])
    template = task["ppid"]
    fray_ray.shutdown()
    deadline = time.monotonic() + 60
    while (_alive(template) or _alive(task["pid"])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(template) and not _alive(task["pid"])


def test_with_the_switch_off_workers_are_fresh_interpreters(driver_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRAY_RAY_WORKER_TEMPLATE", "0")
    fray_ray.init(num_cpus=2)
    seen = fray_ray.get(fray_ray.remote(where_am_i).remote(), timeout=120)
    assert seen["ppid"] == os.getpid() and "_template_main.py" not in seen["parent"]
