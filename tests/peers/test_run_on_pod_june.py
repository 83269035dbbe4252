"""examples/run_on_pod.py (levanter's TPU scheduling: a head task on `TPU-<pod type>-head`, one
task per host through the slice's name, one actor per slice for multislice) on the real Iris
controller (marin-iris June release) with two simulated v5p-16 slices of two hosts each. That
controller gives `TPU_*` variables only to tasks holding the TPU device; the driver's processes
on a TPU host hold none, so what they know of their host comes from the driver (the host's
worker attributes), and is checked here against the controller's own record of its workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from june_controller import start_controller, stop_controller

from fray_ray.iris.controller_client import ControllerClient

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "run_on_pod.py"
PROBE = Path(__file__).resolve().parent / "tpu_identity_probe.py"
POD_TYPE = "v5p-16"
DEADLINE = 300.0


@pytest.fixture(scope="module")
def june_tpu(peer_controller_python: str, fray_ray_pythonpath, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A June controller with one CPU worker and two simulated v5p-16 slices (four TPU hosts)."""
    process, address = start_controller(
        peer_controller_python, tmp_path_factory.mktemp("june-tpu-home"), fray_ray_pythonpath(peer_controller_python),
        workers=1, tpu=(POD_TYPE, 2),
    )
    try:
        yield address
    finally:
        stop_controller(process)


def tpu_hosts(address: str) -> dict[str, tuple[str, int]]:
    """The controller's TPU workers: worker id -> (its slice's name, its index in the slice)."""
    with ControllerClient(address) as controller:
        return {
            w.worker_id: (str(w.attributes["tpu-name"]), int(w.attributes["tpu-worker-id"]))
            for w in controller.list_workers() if w.healthy and "tpu-name" in w.attributes
        }


def fray_ray_run(address: str, script: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FRAY_RAY_ADDRESS", "RAY_ADDRESS", "FRAY_RAY_TOKEN")}
    result = subprocess.run([sys.executable, "-m", "fray_ray", "run", "--address", address, str(script), *args],
                            cwd=script.parent, env=env, capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    return result.stdout


def test_the_controller_simulates_two_slices_of_two_hosts(june_tpu: str) -> None:
    slices: dict[str, set[int]] = {}
    for name, index in tpu_hosts(june_tpu).values():
        slices.setdefault(name, set()).add(index)
    assert list(slices.values()) == [{0, 1}, {0, 1}]


def test_run_on_pod_runs_the_head_task_on_host_0_and_one_task_per_host(june_tpu: str) -> None:
    lines = [line for line in fray_ray_run(june_tpu, EXAMPLE).splitlines() if line.startswith("host ")]
    names = {name for name, _ in tpu_hosts(june_tpu).values()}
    assert [line.split(" of ")[0] for line in lines] == ["host 0", "host 1"]
    pods = {line.split(" of ", 1)[1].split(":")[0] for line in lines}
    assert len(pods) == 1 and pods <= names  # both hosts of one of the controller's slices
    assert all("on 4 chips" in line for line in lines)


def test_run_on_pod_multislice_has_one_actor_per_slice(june_tpu: str) -> None:
    lines = [line for line in fray_ray_run(june_tpu, EXAMPLE, "--multislice").splitlines() if line.startswith("slice ")]
    assert [line.split(" of ")[0] for line in lines] == ["slice 0 host 0", "slice 0 host 1", "slice 1 host 0", "slice 1 host 1"]
    pod_of = {line.split(" of ")[0]: line.split(" of ", 1)[1].split(":")[0] for line in lines}
    assert pod_of["slice 0 host 0"] == pod_of["slice 0 host 1"] != pod_of["slice 1 host 0"] == pod_of["slice 1 host 1"]
    assert {pod_of["slice 0 host 0"], pod_of["slice 1 host 0"]} == {name for name, _ in tpu_hosts(june_tpu).values()}
    coordinators = {line.rsplit("coordinator ", 1)[1] for line in lines}
    assert coordinators == {lines[0].split(" at ", 1)[1].split(",")[0] + ":8081"}  # slice 0's host 0


def test_each_process_knows_the_tpu_host_the_controller_ran_it_on(june_tpu: str) -> None:
    seen = json.loads(fray_ray_run(june_tpu, PROBE, POD_TYPE).strip().splitlines()[-1])
    hosts = tpu_hosts(june_tpu)
    for view in (seen["head"], seen["actor"], *seen["hosts"]):
        assert (view["pod"], view["worker"]) == hosts[view["iris_worker"]]  # the Iris worker it really ran on
        assert view["hosts"] == 2 and view["chips"] == 4
        assert view["pod_type"] == POD_TYPE and view["topology"] == "2x2x2"
    assert seen["head"]["worker"] == 0 and seen["actor"]["worker"] == 0
    assert seen["head"]["extra"] == {seen["head"]["pod"]: 1.0, f"TPU-{POD_TYPE}-head": 1.0}
    assert sorted(view["worker"] for view in seen["hosts"]) == [0, 1]
    assert {view["pod"] for view in seen["hosts"]} == {seen["head"]["pod"]}
    assert len({view["node"] for view in seen["hosts"]}) == 2
