"""Ray's private names that launchers import, as fray_ray serves them: which `ray._private`
modules an `import ray` reaches, what the accelerator managers read, `ray.util` shipped inside
a driver script's classes, and `runtime_env={"pip": []}`. (Ray's own answers are checked in
compat_tests/test_ray_private_names.py.)"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fray_ray
from fray_ray._private import RAY_PRIVATE_MODULES
from fray_ray._private.accelerators import TPUAcceleratorManager
from fray_ray._private.core.runtime_env import parse_runtime_env

ALIAS_PROBE = """
import importlib, json, sys
import fray_ray
fray_ray.install()
answers = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        answers[name] = "ok"
    except ImportError as exc:
        answers[name] = str(exc)
print(json.dumps(answers))
"""


def test_ray_private_reaches_rays_names_and_not_the_runtime() -> None:
    import json

    names = ["ray._private.services", "ray._private.state", "ray._private.accelerators.tpu",
             "ray._private.driver", "ray._private.core.object_ref", "ray._private.worker"]
    probe = subprocess.run([sys.executable, "-c", ALIAS_PROBE, *names], capture_output=True, text=True, timeout=120,
                           check=True)
    answers = json.loads(probe.stdout.splitlines()[-1])
    assert [answers[n] for n in names[:3]] == ["ok"] * 3
    for internal in names[3:]:  # fray_ray's own runtime is not Ray's `_private`
        assert "fray_ray provides ray._private (provided in part) but not" in answers[internal]
        assert "services" in answers[internal]
    assert RAY_PRIVATE_MODULES == {"services", "state", "accelerators"}


def test_tpu_chip_count_comes_from_the_hosts_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TPU_VISIBLE_CHIPS", "TPU_CHIPS_PER_HOST_BOUNDS"):
        monkeypatch.delenv(name, raising=False)
    assert TPUAcceleratorManager.get_current_node_num_accelerators() == 0
    monkeypatch.setenv("TPU_CHIPS_PER_HOST_BOUNDS", "2,2,1")
    assert TPUAcceleratorManager.get_current_node_num_accelerators() == 4
    monkeypatch.setenv("TPU_VISIBLE_CHIPS", "0,1")  # a process limited to two of them
    assert TPUAcceleratorManager.get_current_node_num_accelerators() == 2
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5p-16")
    monkeypatch.delenv("TPU_WORKER_HOSTNAMES", raising=False)
    assert TPUAcceleratorManager.get_num_workers_in_current_tpu_pod() == 2  # from the pod type's topology
    monkeypatch.setenv("TPU_WORKER_ID", "zero")
    assert TPUAcceleratorManager.get_current_node_tpu_worker_id() is None


def test_empty_pip_asks_for_nothing_to_install() -> None:
    env = parse_runtime_env({"pip": []}, check_paths=False)
    assert env.pip is not None and env.packages_to_install is None
    assert env.as_dict()["pip"]["packages"] == []
    assert parse_runtime_env({"uv": {"packages": []}}, check_paths=False).packages_to_install is None
    assert parse_runtime_env({"pip": ["six"]}, check_paths=False).packages_to_install is not None


def test_empty_pip_runs_in_local_mode() -> None:
    # Packages cannot be installed into the driver's own process, but no packages is no problem.
    if fray_ray.is_initialized():
        fray_ray.shutdown()
    fray_ray.init(local_mode=True)
    try:
        @fray_ray.remote(runtime_env={"pip": []})
        def ran() -> str:
            return "ran"

        assert fray_ray.get(ran.remote()) == "ran"
        with pytest.raises(ValueError, match="cannot be honoured in local mode"):
            fray_ray.get(ran.options(runtime_env={"pip": ["six"]}).remote())
    finally:
        fray_ray.shutdown()


DRIVER_SCRIPT = """
import fray_ray as ray
from fray_ray import util
from fray_ray.util.queue import Queue

ray.init(num_cpus=1)


@ray.remote
class Consumer:
    # A class of the driver's script travels by value, with the globals its methods name:
    # here `util`, the `ray.util` package itself.
    def drain(self, queue):
        items = []
        while True:
            try:
                items.append(queue.get(block=False))
            except util.queue.Empty:
                return items


queue = Queue()
for item in (1, 2, 3):
    queue.put(item)
print("drained", ray.get(Consumer.remote().drain.remote(queue)))
ray.shutdown()
"""


def test_an_actor_class_of_the_script_naming_ray_util_ships(tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DRIVER_SCRIPT))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "drained [1, 2, 3]" in run.stdout
