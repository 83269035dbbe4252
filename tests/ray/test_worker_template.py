"""Workers forked from the embedded cluster's template run Ray code as fresh ones do, and the
switch gives fresh interpreters back."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pytest

import fray_ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import pid_alive, wait_for  # noqa: E402

# This module's functions travel by value: the workers' bundle is a temp dir, not this checkout.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""



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
    (home / "pyproject.toml").write_text("")  # a project: all of it ships, data files included
    monkeypatch.chdir(home)
    yield home


@fray_ray.remote
class Where:
    def where(self) -> dict[str, object]:
        return where_am_i()

    def fail(self) -> None:
        raise ValueError("raised in a forked actor")


def test_tasks_and_actors_run_in_workers_forked_from_the_template(driver_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fray_ray.cluster import ClusterConfig

    monkeypatch.setenv("FRAY_RAY_ACTORS_IN_IDLE_WORKERS", "0")  # the actor's own job, not the idle executor
    fray_ray.init(num_cpus=2, runtime_env={"env_vars": {"TEMPLATE_VAR": "from-runtime-env"}},
                  cluster_config=ClusterConfig(worker_template_after=0))  # a template from the start
    task = fray_ray.get(fray_ray.remote(where_am_i).remote(), timeout=120)
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
    wait_for(lambda: not pid_alive(hosted["pid"]), what="the killed actor's process to end")
    template = task["ppid"]
    fray_ray.shutdown()
    wait_for(lambda: not pid_alive(template) and not pid_alive(task["pid"]), what="the template and its workers to end")


def test_a_session_gets_a_template_with_its_second_worker(driver_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRAY_RAY_ACTORS_IN_IDLE_WORKERS", "0")  # each actor a worker of its own
    fray_ray.init(num_cpus=2)
    task = fray_ray.get(fray_ray.remote(where_am_i).remote(), timeout=120)
    assert task["ppid"] == os.getpid() and templates() == []  # one worker: no template to pay for
    second = fray_ray.get(Where.remote().where.remote(), timeout=120)
    third = fray_ray.get(Where.remote().where.remote(), timeout=120)
    assert second["ppid"] == os.getpid()  # started fresh; the template starts along with it
    assert "_template_main.py" in third["parent"] and templates() == [third["ppid"]]


def templates() -> list[int]:
    """This process's children that are worker templates."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and "_template_main.py" in _cmdline(int(entry)):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == os.getpid():
                found.append(int(entry))
    return found


def test_with_the_switch_off_workers_are_fresh_interpreters(driver_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRAY_RAY_WORKER_TEMPLATE", "0")
    fray_ray.init(num_cpus=2)
    seen = fray_ray.get(fray_ray.remote(where_am_i).remote(), timeout=120)
    assert seen["ppid"] == os.getpid() and "_template_main.py" not in seen["parent"]
