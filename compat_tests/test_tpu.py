"""`ray.util.tpu` (also `ray.util.accelerators.tpu`) as TPU programs use it, where Ray 2.60 runs
it without TPUs: what a host's TPU environment answers, Ray's node helpers over `ray.nodes()`
entries, and the slice-resource idiom on a cluster whose node has a slice's name as a resource.

levanter's and Marin's `run_on_pod` read the slice's name in a task on host 0
(`get_current_pod_name`), then hold `{<slice name>: 1}` in one task per host."""

from __future__ import annotations

import pytest

from compat_tests._backend import ray
from compat_tests.helpers import SignalActor, wait_for_condition

SHARED_CLUSTER = {"num_cpus": 4, "resources": {"my-slice": 1}}

_TPU_ENV = ("TPU_NAME", "TPU_WORKER_ID", "TPU_ACCELERATOR_TYPE", "TPU_TOPOLOGY", "TPU_WORKER_HOSTNAMES",
            "TPU_VISIBLE_CHIPS", "TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS")


def _tpu():  # noqa: ANN202 - the backend's module
    from compat_tests._backend import util

    return util.accelerators.tpu


@pytest.fixture
def host_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Host 1 of a v5p-16 slice named `my-slice`, as a GKE TPU node tells its processes."""
    for name in _TPU_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TPU_NAME", "my-slice")
    monkeypatch.setenv("TPU_WORKER_ID", "1")
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5p-16")
    monkeypatch.setenv("TPU_TOPOLOGY", "2x2x2")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "10.0.0.2,10.0.0.3")
    monkeypatch.setenv("TPU_CHIPS_PER_HOST_BOUNDS", "2,2,1")
    return monkeypatch


def test_tpu__the_util_module_is_the_accelerators_tpu_module():
    from compat_tests._backend import util

    assert util.accelerators.tpu is util.tpu


def test_tpu__off_tpu_hosts_nothing_is_a_pod(monkeypatch):
    for name in _TPU_ENV:
        monkeypatch.delenv(name, raising=False)
    tpu = _tpu()
    assert tpu.get_current_pod_name() is None
    assert tpu.get_num_tpu_chips_on_node() == 0
    # (get_current_pod_worker_count() raises AttributeError here on Ray 2.60; fray_ray says None.)


def test_tpu__a_slice_hosts_environment_names_the_pod(host_env):
    manager = __import__(f"{ray.__name__}._private.accelerators", fromlist=["x"]).TPUAcceleratorManager
    assert _tpu().get_current_pod_name() == "my-slice" == manager.get_current_node_tpu_name()
    assert manager.get_current_node_accelerator_labels() == {
        "ray.io/tpu-slice-name": "my-slice", "ray.io/tpu-worker-id": "1", "ray.io/tpu-topology": "2x2x2",
        "ray.io/tpu-pod-type": "v5p-16",
    }
    assert manager.get_current_node_additional_resources() == {"my-slice": 1}
    host_env.setenv("TPU_WORKER_ID", "0")
    assert manager.get_current_node_additional_resources() == {"my-slice": 1, "TPU-v5p-16-head": 1}
    assert manager.get_current_node_accelerator_type() == "TPU-V5P"


@pytest.mark.known_difference(reason=(
    "Ray counts a host's chips from its /dev/accel* or /dev/vfio devices only, so a host without them "
    "(a simulated slice, or a container that hides them) reports 0 chips and no worker count; fray_ray "
    "also reads the chips the host's environment gives (TPU_VISIBLE_CHIPS, TPU_CHIPS_PER_HOST_BOUNDS) "
    "and the slice's hosts (TPU_WORKER_HOSTNAMES), so such a host answers as a real TPU VM does"))
def test_tpu__chips_and_hosts_of_a_slice_host_without_devices(host_env):
    tpu = _tpu()
    assert tpu.get_num_tpu_chips_on_node() == 0  # Ray: no devices, no chips (fray_ray: 4)
    assert tpu.get_current_pod_worker_count() is None  # Ray: unknown without chips (fray_ray: 2)


def _node(slice_name: str | None, alive: bool = True, worker: str = "0") -> dict:
    labels = {"ray.io/tpu-slice-name": slice_name, "ray.io/tpu-worker-id": worker} if slice_name else {}
    return {"NodeID": f"{slice_name}-{worker}", "Alive": alive, "Labels": labels, "Resources": {}}


def test_tpu__node_helpers_read_the_slice_label():
    tpu = _tpu()
    nodes = [_node("a"), _node("a", worker="1"), _node("b"), _node("a", alive=False, worker="2"), _node(None)]
    assert tpu.get_tpu_slice_name_from_node(nodes[0]) == "a"
    assert tpu.get_tpu_slice_name_from_node(nodes[-1]) is None
    assert [n["NodeID"] for n in tpu.get_tpu_nodes_for_slice("a", nodes)] == ["a-0", "a-1"]  # live ones only
    assert tpu.get_tpu_nodes_for_slice("c", nodes) == []


def test_tpu__a_cluster_without_tpu_hosts_has_no_slices(ray_start_regular_shared):
    tpu = _tpu()
    assert tpu.get_num_tpu_slices("2x2x2", "v5p") == 0
    assert tpu.get_num_ready_tpu_slices("2x2x2", "v5p") == 0
    assert tpu.get_tpu_nodes_for_slice("my-slice") == []  # a custom resource is not a slice label


@ray.remote(resources={"my-slice": 1})
def _holds_the_slice(signal) -> str:  # noqa: ANN001 - an actor handle
    ray.get(signal.wait.remote())  # blocked in get: Ray lends its CPU, never its slice
    return "holder"


@ray.remote(resources={"my-slice": 1})
def _needs_the_slice() -> str:
    return "second"


def test_tpu__a_task_blocked_in_get_keeps_its_slice_resource(ray_start_regular_shared):
    signal = SignalActor.remote()
    holder = _holds_the_slice.remote(signal)
    wait_for_condition(lambda: ray.get(signal.num_waiters.remote()) == 1)
    second = _needs_the_slice.remote()
    ready, _ = ray.wait([second], timeout=2)
    assert ready == []  # the one `my-slice` is the blocked task's still
    ray.get(signal.send.remote())
    assert ray.get([holder, second], timeout=60) == ["holder", "second"]


#: The identity of host 0 of a v5p-16 slice named `my-slice`, in the variables a GKE TPU node
#: gives its processes (on Iris, fray_ray's driver gives them to the processes it places on a
#: TPU host whose worker does not).
_HOST_0 = {"TPU_NAME": "my-slice", "TPU_WORKER_ID": "0", "TPU_ACCELERATOR_TYPE": "v5p-16", "TPU_TOPOLOGY": "2x2x2",
           "TPU_WORKER_HOSTNAMES": "10.0.0.2,10.0.0.3"}


@ray.remote
def _host_identity() -> tuple:
    manager = __import__(f"{ray.__name__}._private.accelerators", fromlist=["x"]).TPUAcceleratorManager
    return (_tpu().get_current_pod_name(), manager.get_current_node_tpu_worker_id(),
            manager.get_current_node_tpu_pod_type(), manager.get_current_node_additional_resources())


def test_tpu__a_task_reads_its_hosts_identity_from_the_tpu_variables(ray_start_regular_shared):
    task = _host_identity.options(runtime_env={"env_vars": _HOST_0})
    assert ray.get(task.remote(), timeout=60) == ("my-slice", 0, "v5p-16", {"my-slice": 1, "TPU-v5p-16-head": 1})
