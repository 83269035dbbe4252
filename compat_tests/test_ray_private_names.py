"""Ray's private and old names that public training code uses: `ray._private.services`,
`ray._private.state`, `ray._private.accelerators`, `ray.experimental.state`, the `_remote`
calling forms, `ray.util` pickled by reference, and `runtime_env={"pip": []}`.

Launchers (verl, OpenRLHF, NeMo-RL, SkyRL, vLLM, levanter, marin) reach for these although Ray
calls most of them private; each test states what Ray 2.60 answers."""

from __future__ import annotations

import importlib
import ipaddress
import warnings

import pytest

from compat_tests._backend import ray, util
from compat_tests.helpers import wait_for_condition

SHARED_CLUSTER = {"num_cpus": 4, "resources": {"custom": 3}}


def _private(name: str):  # noqa: ANN202 - a module of the backend under test
    return importlib.import_module(f"{ray.__name__}._private.{name}")


# ---- ray._private.services ------------------------------------------------------------------


@ray.remote
class _Rendezvous:
    def __init__(self) -> None:
        # Where RL launchers pick their torch.distributed / NCCL rendezvous address.
        self.address = _private("services").get_node_ip_address()

    def address_here(self) -> str:
        return self.address


def test_private_services__node_ip_address_in_driver_and_actor(ray_start_regular_shared):
    services = _private("services")
    in_driver = services.get_node_ip_address()
    assert isinstance(in_driver, str) and ipaddress.ip_address(in_driver)
    assert in_driver == util.get_node_ip_address()
    actor = _Rendezvous.remote()
    in_actor = ray.get(actor.address_here.remote())
    assert isinstance(in_actor, str) and ipaddress.ip_address(in_actor)


def test_private_services__importable_by_attribute_after_import_ray(ray_start_regular_shared):
    # `ray._private.services.get_node_ip_address()` works after a plain `import ray`.
    assert ray._private.services.get_node_ip_address() == util.get_node_ip_address()


# ---- ray._private.state --------------------------------------------------------------------


@ray.remote(num_cpus=1)
class _HoldsACpu:
    """Holds its CPU while it lives (a task would lend its CPU back while it waits in `get`)."""

    def ready(self) -> bool:
        return True


def test_private_state__resources_per_node(ray_start_regular_shared):
    state = _private("state")
    alive = {node["NodeID"]: node["Resources"] for node in ray.nodes() if node["Alive"]}
    totals = state.total_resources_per_node()
    assert set(totals) == set(alive)
    assert all(totals[node]["CPU"] == alive[node]["CPU"] for node in alive)
    free = state.available_resources_per_node()
    assert set(free) <= set(alive)
    assert sum(per_node.get("CPU", 0.0) for per_node in free.values()) == pytest.approx(4.0)

    holder = _HoldsACpu.remote()
    assert ray.get(holder.ready.remote())
    wait_for_condition(lambda: sum(n.get("CPU", 0.0) for n in state.available_resources_per_node().values()) == 3.0)
    wait_for_condition(lambda: state.available_resources().get("CPU") == 3.0)
    assert state.cluster_resources()["CPU"] == 4.0
    ray.kill(holder)
    wait_for_condition(lambda: sum(n.get("CPU", 0.0) for n in state.available_resources_per_node().values()) == 4.0)


@ray.remote(num_cpus=0)
def _free_cpus_seen_from_a_task() -> float:
    state = _private("state")
    return sum(per_node.get("CPU", 0.0) for per_node in state.available_resources_per_node().values())


def test_private_state__resources_per_node_from_a_task(ray_start_regular_shared):
    assert ray.get(_free_cpus_seen_from_a_task.remote()) == pytest.approx(4.0)


def test_private_state__placement_group_table(ray_start_regular_shared):
    state = _private("state")
    group = util.placement_group([{"CPU": 1}, {"CPU": 1}])
    try:
        assert group.wait(60)
        row = state.state.placement_group_table(group.id)
        assert row["placement_group_id"] == group.id.hex()
        assert row["state"] == "CREATED"
        alive = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        assert set(row["bundles_to_node_id"]) == {0, 1}
        assert set(row["bundles_to_node_id"].values()) <= alive
        assert row == util.placement_group_table(group)
        assert group.id.hex() in state.state.placement_group_table()
    finally:
        util.remove_placement_group(group)


def test_private_state__node_ids_and_current_node_id(ray_start_regular_shared):
    # Ray's "node ids" here are the `node:<address>` resources that place work on a node.
    state = _private("state")
    resources = {name for node in ray.nodes() if node["Alive"] for name in node["Resources"]}
    expected = {name for name in resources if name.startswith("node:") and name != "node:__internal_head__"}
    assert sorted(state.node_ids()) == sorted(expected)
    assert state.current_node_id() == "node:" + util.get_node_ip_address()
    assert state.current_node_id() in state.node_ids()


# ---- ray._private.accelerators -------------------------------------------------------------

_TPU_ENV = ("TPU_NAME", "TPU_WORKER_ID", "TPU_ACCELERATOR_TYPE", "TPU_TOPOLOGY", "TPU_WORKER_HOSTNAMES",
            "TPU_VISIBLE_CHIPS", "TPU_CHIPS_PER_HOST_BOUNDS")


def test_private_accelerators__tpu_manager_off_tpu_hosts(monkeypatch):
    for name in _TPU_ENV:
        monkeypatch.delenv(name, raising=False)
    tpu = _private("accelerators").TPUAcceleratorManager
    assert tpu.get_resource_name() == "TPU"
    assert tpu.get_visible_accelerator_ids_env_var() == "TPU_VISIBLE_CHIPS"
    assert tpu.get_current_node_num_accelerators() == 0
    assert tpu.get_current_node_tpu_pod_type() is None
    assert tpu.get_current_node_tpu_worker_id() is None
    assert tpu.get_current_node_accelerator_type() is None
    assert tpu.get_current_node_additional_resources() is None


def test_private_accelerators__tpu_manager_reads_the_hosts_environment(monkeypatch):
    # What a TPU VM on GKE (and an Iris TPU worker) tells its processes.
    for name in _TPU_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TPU_NAME", "my-slice")
    monkeypatch.setenv("TPU_WORKER_ID", "0")
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v4-16")
    monkeypatch.setenv("TPU_TOPOLOGY", "2x2x2")
    tpu = importlib.import_module(f"{ray.__name__}._private.accelerators.tpu").TPUAcceleratorManager
    assert tpu.get_current_node_tpu_name() == "my-slice"
    assert tpu.get_current_node_tpu_worker_id() == 0
    assert tpu.get_current_node_tpu_pod_type() == "v4-16"
    assert tpu.get_current_node_tpu_topology() == "2x2x2"
    assert tpu.get_current_node_accelerator_type() == "TPU-V4"
    assert tpu.get_current_node_additional_resources() == {"my-slice": 1, "TPU-v4-16-head": 1}
    labels = tpu.get_current_node_accelerator_labels()
    assert labels["ray.io/tpu-slice-name"] == "my-slice" and labels["ray.io/tpu-worker-id"] == "0"
    monkeypatch.setenv("TPU_WORKER_ID", "1")
    assert tpu.get_current_node_additional_resources() == {"my-slice": 1}  # the head resource is host 0's
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "tpu7x-16")
    assert tpu.get_current_node_tpu_pod_type() == "v7x-16"
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "not-a-tpu")
    assert tpu.get_current_node_tpu_pod_type() is None


def test_private_accelerators__tpu_checks():
    tpu = _private("accelerators").TPUAcceleratorManager
    assert tpu.is_valid_tpu_accelerator_type("v5litepod-16")
    assert tpu.is_valid_tpu_accelerator_type("tpu7x-16")
    assert not tpu.is_valid_tpu_accelerator_type("v4")
    assert tpu.validate_resource_request_quantity(4) == (True, None)
    valid, message = tpu.validate_resource_request_quantity(3)
    assert not valid and "3" in message


def test_private_accelerators__managers_by_resource_name():
    accelerators = _private("accelerators")
    assert accelerators.get_accelerator_manager_for_resource("TPU") is accelerators.TPUAcceleratorManager
    gpu = accelerators.NvidiaGPUAcceleratorManager
    assert gpu.get_resource_name() == "GPU"
    assert gpu.get_visible_accelerator_ids_env_var() == "CUDA_VISIBLE_DEVICES"
    assert isinstance(gpu.get_current_node_num_accelerators(), int)


# ---- ray.experimental.state ----------------------------------------------------------------


def test_experimental_state__old_path_of_the_state_api():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        api = importlib.import_module(f"{ray.__name__}.experimental.state.api")
    state_api = importlib.import_module(f"{ray.__name__}.util.state")
    assert api.list_actors is state_api.list_actors and api.get_actor is state_api.get_actor
    assert any(issubclass(w.category, DeprecationWarning) and "ray.util.state" in str(w.message) for w in caught)
    common = importlib.import_module(f"{ray.__name__}.experimental.state.common")
    assert common.ActorState is importlib.import_module(f"{ray.__name__}.util.state.common").ActorState


# ---- the _remote calling forms -------------------------------------------------------------


@ray.remote
def _add(x: int, y: int = 0) -> int:
    return x + y


@ray.remote
class _Counter:
    def __init__(self, start: int) -> None:
        self.value = start

    def add(self, amount: int) -> int:
        self.value += amount
        return self.value

    def pair(self) -> tuple[int, int]:
        return self.value, -self.value


def test_remote_forms__function_class_and_method(ray_start_regular_shared):
    assert ray.get(_add._remote(args=[1], kwargs={"y": 2})) == 3
    assert ray.get(_add._remote(args=(5,), num_cpus=0.5)) == 5
    counter = _Counter._remote(args=[10], kwargs={}, num_cpus=0)
    assert ray.get(counter.add._remote(args=[5], kwargs={})) == 15
    first, second = counter.pair._remote(args=[], kwargs={}, num_returns=2)
    assert ray.get([first, second]) == [15, -15]
    assert ray.get(counter.add._remote(args=[1], kwargs={}, num_returns=None)) == 16


def test_remote_forms__unknown_method_option_raises(ray_start_regular_shared):
    counter = _Counter._remote(args=[0], kwargs={}, num_cpus=0)
    with pytest.raises(TypeError):
        counter.add._remote(args=[1], kwargs={}, not_an_option=1)


@pytest.mark.known_difference(reason="fray_ray checks the options of RemoteFunction._remote as .options() does and "
                              "raises ValueError for an unknown one, never dropping an option; Ray 2.60's _remote "
                              "skips that check and ignores it")
def test_remote_forms__unknown_function_option_is_ignored(ray_start_regular_shared):
    assert ray.get(_add._remote(args=[1], kwargs={}, not_an_option=1)) == 1


# ---- ray.util pickles by reference ---------------------------------------------------------


def test_util_package__pickles_by_reference():
    cloudpickle = importlib.import_module(f"{ray.__name__}.cloudpickle")
    util_module = importlib.import_module(f"{ray.__name__}.util")
    assert cloudpickle.loads(cloudpickle.dumps(util_module)) is util_module
    queue_module = importlib.import_module(f"{ray.__name__}.util.queue")
    assert cloudpickle.loads(cloudpickle.dumps(queue_module)) is queue_module


# ---- runtime_env={"pip": []} ---------------------------------------------------------------


@ray.remote(runtime_env={"pip": []})
def _in_an_empty_pip_env() -> str:
    return "ran"


def test_runtime_env__empty_pip_installs_nothing(ray_start_regular_shared):
    assert ray.get(_in_an_empty_pip_env.remote(), timeout=300) == "ran"


# ---- attributes of remote functions, actor classes, handles and ids -------------------------------


class _LauncherBase:
    def base_method(self):
        return "base"


@ray.remote(num_returns=2, runtime_env={"env_vars": {"FROM_DECORATOR": "1"}})
def _two_results():
    return 1, 2


@ray.remote
def _plain():
    return "plain"


@ray.remote(max_restarts=1)
class _Launched(_LauncherBase):
    def ping(self):
        return "pong"


def test_private_attributes__remote_function(ray_start_regular_shared):
    remote_function = importlib.import_module(f"{ray.__name__}.remote_function")
    assert isinstance(_two_results, remote_function.RemoteFunction)
    assert _two_results._function() == (1, 2)  # the undecorated function
    assert _two_results._num_returns == 2 and _plain._num_returns is None
    assert _two_results._runtime_env == {"env_vars": {"FROM_DECORATOR": "1"}}
    assert type(_two_results._runtime_env).__name__ == "RuntimeEnv"
    assert _plain._runtime_env is None
    assert _two_results._default_options["num_returns"] == 2
    assert _plain._function.__name__ == "_plain"


def test_private_attributes__actor_class(ray_start_regular_shared):
    actor = importlib.import_module(f"{ray.__name__}.actor")
    assert isinstance(_Launched, actor.ActorClass)
    user_class = _Launched.__ray_actor_class__
    assert user_class.__name__ == "_Launched" and issubclass(user_class, _LauncherBase)
    assert user_class().ping() == "pong"  # the plain class, usable without Ray
    metadata = _Launched.__ray_metadata__
    assert metadata.class_name == "_Launched"
    assert issubclass(metadata.modified_class, user_class) and metadata.modified_class.__name__ == "_Launched"
    assert hasattr(metadata.modified_class, "base_method")
    assert _Launched._default_options["max_restarts"] == 1


def test_private_attributes__actor_handle_and_ids(ray_start_regular_shared):
    actor = importlib.import_module(f"{ray.__name__}.actor")
    raylet = importlib.import_module(f"{ray.__name__}._raylet")
    handle = _Launched.remote()
    assert isinstance(handle, actor.ActorHandle)
    actor_id = handle._actor_id
    assert isinstance(actor_id, raylet.ActorID) and len(actor_id.hex()) == 32
    assert raylet.ActorID.from_hex(actor_id.hex()) == actor_id and raylet.ActorID(actor_id.binary()) == actor_id
    assert hash(raylet.ActorID.from_hex(actor_id.hex())) == hash(actor_id)
    assert handle._actor_id == actor_id != _Launched.remote()._actor_id

    @ray.remote
    def id_inside(passed):
        return passed._actor_id.hex()

    assert ray.get(id_inside.remote(handle)) == actor_id.hex()  # the same id in a task
    assert ray.get(handle.ping.remote()) == "pong"


def test_private_attributes__object_ref_and_raylet_ids(ray_start_regular_shared):
    raylet = importlib.import_module(f"{ray.__name__}._raylet")
    ref = _plain.remote()
    assert ray.ObjectRef is raylet.ObjectRef and isinstance(ref, raylet.ObjectRef)
    task_id = ref.task_id()
    assert isinstance(task_id, raylet.TaskID) and len(task_id.hex()) == 48
    assert task_id != _plain.remote().task_id()
    for id_type, hex_length in ((raylet.ActorID, 32), (raylet.TaskID, 48), (raylet.NodeID, 56), (raylet.JobID, 8),
                                (raylet.PlacementGroupID, 36)):
        nil = id_type.nil()
        assert nil.is_nil() and nil.hex() == "f" * hex_length
        assert id_type.from_hex(nil.hex()) == nil and id_type.size() * 2 == hex_length
    node_id = raylet.NodeID.from_hex(ray.get_runtime_context().get_node_id())
    assert node_id.hex() == ray.get_runtime_context().get_node_id() and not node_id.is_nil()
    job_id = raylet.JobID.from_hex(ray.get_runtime_context().get_job_id())
    assert job_id.hex() == ray.get_runtime_context().get_job_id()
    assert ray.get(ref) == "plain"
