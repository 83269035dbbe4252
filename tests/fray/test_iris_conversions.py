"""What a Fray request becomes on the Iris wire: the pure conversions of `fray_ray.fray.iris_backend`."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest

from fray_ray.fray import (
    ANY_REGION,
    CpuConfig,
    Entrypoint,
    EnvironmentConfig,
    GpuConfig,
    JobRequest,
    JobStatus,
    ResourceConfig,
    TpuConfig,
    _iris_conversions,
)
from fray_ray.fray._setup_scripts import pip_setup_script
from fray_ray.fray.iris_backend import (
    IRIS_TO_FRAY_STATUS,
    FrayIrisClient,
    IrisActorGroup,
    IrisActorHandle,
    IrisJobHandle,
    convert_constraints,
    convert_entrypoint,
    convert_environment,
    convert_priority,
    convert_resources,
    fray_status,
    resolve_coscheduling,
)
from fray_ray.iris.entrypoint import CALLABLE_COMMAND, CALLABLE_FILE, RUNNER_FILE
from fray_ray.iris.names import JobName
from fray_ray.iris.types import (
    Constraint,
    ConstraintOp,
    ExistingJobPolicy,
    GpuDevice,
    JobState,
    PriorityBand,
    TpuDevice,
)


def _double(x: int) -> int:
    return 2 * x


# -- resources -----------------------------------------------------------------------------------


def test_cpu_resources_have_no_device_and_sizes_in_bytes() -> None:
    spec = convert_resources(ResourceConfig(cpu=1.5, ram="512m", disk="2g"))
    assert (spec.cpu_millicores, spec.memory_bytes, spec.disk_bytes, spec.device) == (
        1500,
        512 * 1024**2,
        2 * 1024**3,
        None,
    )


def test_zero_cpu_and_zero_disk_are_accepted() -> None:
    spec = convert_resources(ResourceConfig(cpu=0, ram="64m", disk="0"))
    assert (spec.cpu_millicores, spec.memory_bytes, spec.disk_bytes) == (0, 64 * 1024**2, 0)


def test_gpu_resources_keep_variant_and_count() -> None:
    spec = convert_resources(ResourceConfig(device=GpuConfig(variant="H100", count=8)))
    assert spec.device == GpuDevice(variant="H100", count=8)


def test_tpu_resources_count_chips_per_vm_with_topology() -> None:
    spec = convert_resources(ResourceConfig.with_tpu("v5p-16"))
    assert spec.device == TpuDevice(variant="v5p-16", topology="2x2x2", count=4)
    explicit = convert_resources(ResourceConfig(device=TpuConfig("v6e-8", topology="2x4")))
    assert explicit.device == TpuDevice(variant="v6e-8", topology="2x4", count=8)


# -- constraints ---------------------------------------------------------------------------------


def test_default_resources_add_no_constraints() -> None:
    assert convert_constraints(ResourceConfig()) == []


def test_non_preemptible_requires_preemptible_false() -> None:
    assert convert_constraints(ResourceConfig(preemptible=False)) == [
        Constraint("preemptible", ConstraintOp.EQ, "false")
    ]


def test_single_region_is_eq_and_several_are_in() -> None:
    assert convert_constraints(ResourceConfig(regions=["us-central1"])) == [
        Constraint("region", ConstraintOp.EQ, "us-central1")
    ]
    assert convert_constraints(ResourceConfig(regions=["us-central1", "europe-west4"])) == [
        Constraint("region", ConstraintOp.IN, values=("us-central1", "europe-west4"))
    ]


def test_any_region_is_exists_and_none_inherits() -> None:
    assert convert_constraints(ResourceConfig(regions=[ANY_REGION])) == [Constraint("region", ConstraintOp.EXISTS)]
    assert convert_constraints(ResourceConfig(regions=None)) == []
    with pytest.raises(ValueError, match="ANY_REGION"):
        ResourceConfig(regions=[ANY_REGION, "us-east1"])


def test_zone_and_target_cluster() -> None:
    assert convert_constraints(ResourceConfig(zone="us-central1-a", target_cluster="west")) == [
        Constraint("zone", ConstraintOp.EQ, "us-central1-a"),
        Constraint("cluster", ConstraintOp.EQ, "west"),
    ]


def test_device_alternatives_become_a_variant_in_constraint() -> None:
    resources = ResourceConfig.with_tpu(["v5p-16", "v4-16"])
    assert convert_constraints(resources) == [Constraint("device-variant", ConstraintOp.IN, values=("v5p-16", "v4-16"))]


# -- coscheduling ----------------------------------------------------------------------------------


def test_single_replica_is_never_a_gang() -> None:
    assert resolve_coscheduling(ResourceConfig.with_tpu("v5p-16"), 1) is None
    assert resolve_coscheduling(ResourceConfig.with_gpu("H100", 8), 1) is None


def test_multi_vm_tpu_gangs_on_tpu_name_and_single_vm_slices_do_not() -> None:
    assert resolve_coscheduling(ResourceConfig.with_tpu("v5p-16"), 2) == "tpu-name"
    assert resolve_coscheduling(ResourceConfig.with_tpu("v5p-8", slice_count=2), 2) is None


def test_multi_replica_gpu_gangs_on_the_level_the_embedded_gpu_hosts_carry() -> None:
    from fray_ray.cluster import gpu_host

    level = resolve_coscheduling(ResourceConfig.with_gpu("V100", 2), 2)
    assert level == "pool"
    assert level in gpu_host("V100", 2).attributes


def test_gpu_alternatives_must_share_a_level(monkeypatch: pytest.MonkeyPatch) -> None:
    resources = ResourceConfig(device=GpuConfig("H100", 8), device_alternatives=["GB200"])
    assert resolve_coscheduling(resources, 2) == "pool"
    monkeypatch.setattr(_iris_conversions, "_GPU_GANG_LEVEL_BY_VARIANT", {"GB200": "nvlink.domain"})
    with pytest.raises(ValueError, match="share one topology level"):
        resolve_coscheduling(resources, 2)


def test_cpu_replicas_are_placed_independently() -> None:
    assert resolve_coscheduling(ResourceConfig(), 4) is None


def test_with_tpu_replicas_count_vms_and_reach_the_job() -> None:
    resources = ResourceConfig.with_tpu("v5p-16", slice_count=2)
    assert resources.replicas == 4
    request = JobRequest(name="tpu", entrypoint=Entrypoint.from_binary("true"), resources=resources)
    spec = _spec(request)
    assert spec.replicas == 4
    assert spec.coscheduling_group_by == "tpu-name"


# -- environment -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        (CpuConfig(), {"JAX_PLATFORMS": "cpu"}),
        (GpuConfig("H100"), {"JAX_PLATFORMS": ""}),
        (TpuConfig("v5p-8"), {"JAX_PLATFORMS": "", "LIBTPU_INIT_ARGS": "--xla_tpu_scoped_vmem_limit_kib=50000"}),
        (TpuConfig("v6e-8"), {"JAX_PLATFORMS": "", "LIBTPU_INIT_ARGS": "--xla_tpu_scoped_vmem_limit_kib=98304"}),
        (TpuConfig("v4-8"), {"JAX_PLATFORMS": ""}),
    ],
)
def test_device_defaults_fill_the_environment(device, expected) -> None:
    assert dict(convert_environment(None, device).env_vars) == expected


def test_user_env_vars_win_over_device_defaults() -> None:
    environment = EnvironmentConfig(docker_image="img", env_vars={"JAX_PLATFORMS": "tpu", "MINE": "1"})
    env = convert_environment(environment, TpuConfig("v5p-8"))
    assert env.env_vars["JAX_PLATFORMS"] == "tpu"
    assert env.env_vars["MINE"] == "1"
    assert env.env_vars["LIBTPU_INIT_ARGS"].startswith("--xla_tpu")
    assert env.task_image == "img"


def test_the_workspace_path_never_reaches_the_workers() -> None:
    # The workspace travels as a bundle; a path of the submitting machine is no use elsewhere.
    env = convert_environment(EnvironmentConfig(workspace="/ws", env_vars={"PYTHONPATH": "/a"}))
    assert env.env_vars["PYTHONPATH"] == "/a"
    assert "/ws" not in "".join(env.env_vars.values()) + "".join(env.setup_scripts)


def test_setup_steps_and_image_override() -> None:
    environment = EnvironmentConfig(
        workspace="/ws", pip_packages=["numpy<3"], setup_scripts=["echo hi"], extras=["gpu"]
    )
    env = convert_environment(environment, image="custom:1")
    assert env.setup_scripts[0] == "echo hi"
    assert "--extra gpu" in env.setup_scripts[1]
    assert env.setup_scripts[2] == pip_setup_script(["numpy<3"])
    assert "'numpy<3'" in env.setup_scripts[2] and '${IRIS_VENV:-' in env.setup_scripts[2]
    assert env.task_image == "custom:1"


# -- entrypoints, priorities, states ---------------------------------------------------------------


def test_callable_entrypoint_uses_iris_callable_layout() -> None:
    entrypoint = convert_entrypoint(Entrypoint.from_callable(_double, args=(21,)))
    assert entrypoint.argv == CALLABLE_COMMAND
    fn, args, kwargs = cloudpickle.loads(entrypoint.workdir_files[CALLABLE_FILE])
    assert fn(*args, **kwargs) == 42
    assert b"_callable.pkl" in entrypoint.workdir_files[RUNNER_FILE]


def test_binary_entrypoint_is_its_argv() -> None:
    entrypoint = convert_entrypoint(Entrypoint.from_binary("echo", ["a b", "c"]))
    assert entrypoint.argv == ("echo", "a b", "c")
    assert dict(entrypoint.workdir_files) == {}


def test_priority_is_the_iris_priority_band() -> None:
    assert [convert_priority(p) for p in range(4)] == [
        PriorityBand.UNSPECIFIED,
        PriorityBand.PRODUCTION,
        PriorityBand.INTERACTIVE,
        PriorityBand.BATCH,
    ]
    with pytest.raises(ValueError, match="priority band"):
        convert_priority(7)


def test_state_map() -> None:
    expected = {
        JobState.PENDING: JobStatus.PENDING,
        JobState.BUILDING: JobStatus.RUNNING,
        JobState.RUNNING: JobStatus.RUNNING,
        JobState.SUCCEEDED: JobStatus.SUCCEEDED,
        JobState.FAILED: JobStatus.FAILED,
        JobState.KILLED: JobStatus.STOPPED,
        JobState.WORKER_FAILED: JobStatus.FAILED,
        JobState.UNSCHEDULABLE: JobStatus.FAILED,
    }
    assert dict(IRIS_TO_FRAY_STATUS) == expected
    assert fray_status(JobState.UNSPECIFIED) is JobStatus.PENDING


def test_request_fields_reach_the_job_spec() -> None:
    request = JobRequest(
        name="full",
        entrypoint=Entrypoint.from_binary("true"),
        resources=ResourceConfig(cpu=0, ram="64m", disk="0", preemptible=False, image="img:2"),
        max_retries_failure=2,
        max_retries_preemption=7,
        max_task_failures=1,
        priority=3,
        timeout=12.5,
    )
    spec = _spec(request, adopt=False)
    assert spec.name.wire == "/tester/full"
    assert (spec.max_retries_failure, spec.max_retries_preemption, spec.max_task_failures) == (2, 7, 1)
    assert spec.priority_band is PriorityBand.BATCH
    assert spec.timeout_s == 12.5
    assert spec.task_image == "img:2"
    assert spec.existing_job_policy is ExistingJobPolicy.UNSPECIFIED
    assert spec.constraints == (Constraint("preemptible", ConstraintOp.EQ, "false"),)
    assert _spec(request, adopt=True).existing_job_policy is ExistingJobPolicy.KEEP


def _spec(request: JobRequest, adopt: bool = True):
    """The JobSpec a client would launch, built without any controller."""
    client = FrayIrisClient("http://127.0.0.1:9", user="tester", verify=False)
    try:
        policy = ExistingJobPolicy.KEEP if adopt else ExistingJobPolicy.UNSPECIFIED
        return client._job_spec(request, client._job_name(request.name), policy)
    finally:
        client.shutdown()


def test_job_names_are_root_or_children_of_the_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRIS_USER", "alice")
    root = FrayIrisClient("127.0.0.1:9", verify=False)
    child = FrayIrisClient("127.0.0.1:9", parent_job="/bob/train", verify=False)
    try:
        assert root._job_name("x") == JobName.root("alice", "x")
        assert child._job_name("eval").wire == "/bob/train/eval"
        with pytest.raises(ValueError, match="segment"):
            root._job_name("a/b")
    finally:
        root.shutdown()
        child.shutdown()


# -- pickling --------------------------------------------------------------------------------------


def test_actor_handle_pickles_to_its_endpoint_name_only() -> None:
    client = FrayIrisClient("127.0.0.1:9", verify=False)
    try:
        handle = IrisActorHandle("/alice/job/worker-3", client)
        payload = pickle.dumps(handle)
        assert b"FrayIrisClient" not in payload
        copy = pickle.loads(payload)
        assert copy == handle and copy.endpoint == "/alice/job/worker-3"
        assert copy._client is None  # resolved lazily, through the ambient client
    finally:
        client.shutdown()


def test_group_and_job_handles_pickle_to_their_identity() -> None:
    client = FrayIrisClient("127.0.0.1:9", verify=False)
    try:
        group = IrisActorGroup("workers", 4, "/alice/workers", client)
        copy = pickle.loads(pickle.dumps(group))
        assert (copy.name, copy.count, copy.job_id, copy._client) == ("workers", 4, "/alice/workers", None)
        job = pickle.loads(pickle.dumps(IrisJobHandle(client, "/alice/train")))
        assert job.job_id == "/alice/train"
    finally:
        client.shutdown()
