"""Fray value types: defaults, checks, TPU sizing, scaling, environments, entrypoints, requests."""

from __future__ import annotations

import dataclasses

import pytest

import fray_ray.fray as fray
from fray_ray.fray import (
    ANY_REGION,
    TPU_HBM_BYTES_PER_CHIP,
    ActorConfig,
    BinaryEntrypoint,
    CpuConfig,
    Entrypoint,
    EnvironmentConfig,
    GpuConfig,
    JobRequest,
    JobStatus,
    ResourceConfig,
    TpuConfig,
    create_environment,
    format_bytes,
    parse_bytes,
)
from fray_ray.iris import tpu as iris_tpu


def _noop() -> None:
    pass


# -- the TPU table is shared with the Iris layer ----------------------------------------------


def test_tpu_table_is_reexported_from_iris_not_copied() -> None:
    assert fray.get_tpu_topology is iris_tpu.get_tpu_topology
    assert fray.TPU_TOPOLOGIES is iris_tpu.TPU_TOPOLOGIES
    assert fray.TpuTopologyInfo is iris_tpu.TpuTopologyInfo
    assert fray.tpu_family is iris_tpu.tpu_family


def test_tpu_family_and_hbm() -> None:
    assert fray.tpu_family("v5litepod-16") == "v5e"
    assert fray.tpu_family("v5p-8") == "v5p"
    assert TPU_HBM_BYTES_PER_CHIP["v5p"] == 95 * 1024**3
    assert fray.tpu_hbm_capacity_bytes("v4-8") == 4 * 32 * 1024**3


# -- devices ----------------------------------------------------------------------------------


def test_cpu_config() -> None:
    cpu = CpuConfig()
    assert (cpu.kind, cpu.variant, cpu.chip_count()) == ("cpu", "cpu", 0)
    assert cpu.default_env_vars() == {"JAX_PLATFORMS": "cpu"}
    with pytest.raises(NotImplementedError):
        cpu.device_flops()


def test_gpu_config() -> None:
    gpu = GpuConfig("H100", 8)
    assert (gpu.kind, gpu.count, gpu.chip_count()) == ("gpu", 8, 8)
    assert gpu.default_env_vars() == {"JAX_PLATFORMS": ""}
    assert gpu.total_flops() == gpu.device_flops() * 8
    with pytest.raises(ValueError, match="count"):
        GpuConfig("H100", count=0)


@pytest.mark.parametrize(
    ("variant", "chips_per_vm", "vms"),
    [("v4-8", 4, 1), ("v5p-16", 4, 2), ("v5litepod-8", 8, 1), ("v5litepod-16", 4, 4), ("v6e-16", 4, 4)],
)
def test_tpu_config_counts_per_vm(variant: str, chips_per_vm: int, vms: int) -> None:
    tpu = TpuConfig(variant)
    assert tpu.chip_count() == chips_per_vm
    assert tpu.vm_count() == vms


@pytest.mark.parametrize(
    ("variant", "libtpu"),
    [
        ("v4-8", None),
        ("v5litepod-4", "--xla_tpu_scoped_vmem_limit_kib=50000"),
        ("v5p-8", "--xla_tpu_scoped_vmem_limit_kib=50000"),
        ("v6e-8", "--xla_tpu_scoped_vmem_limit_kib=98304"),
    ],
)
def test_tpu_default_env_vars(variant: str, libtpu: str | None) -> None:
    env = TpuConfig(variant).default_env_vars()
    assert env["JAX_PLATFORMS"] == ""
    assert env.get("LIBTPU_INIT_ARGS") == libtpu


def test_unknown_tpu_variant_lists_valid_ones() -> None:
    with pytest.raises(ValueError) as info:
        TpuConfig("v5p-384")
    assert "v5p-384" in str(info.value)
    assert "v5p-256" in str(info.value) and "v6e-8" in str(info.value)


def test_devices_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TpuConfig("v4-8").variant = "v4-16"  # type: ignore[misc]


# -- ResourceConfig ---------------------------------------------------------------------------


def test_resource_defaults() -> None:
    r = ResourceConfig()
    assert (r.cpu, r.ram, r.disk, r.device, r.preemptible) == (1, "4g", "16g", CpuConfig(), True)
    assert (r.regions, r.zone, r.target_cluster, r.replicas, r.device_alternatives, r.image) == (
        None,
        None,
        None,
        1,
        None,
        None,
    )
    assert r.chip_count() == 0
    assert r.total_flops() == 100e9


def test_resource_checks() -> None:
    with pytest.raises(ValueError, match="ram"):
        ResourceConfig(ram="lots")
    with pytest.raises(ValueError, match="replicas"):
        ResourceConfig(replicas=0)
    with pytest.raises(ValueError, match="regions"):
        ResourceConfig(regions="us-central1")  # a bare string, not a list
    with pytest.raises(ValueError, match="ANY_REGION"):
        ResourceConfig(regions=[ANY_REGION, "us-central1"])
    assert ResourceConfig(regions=[ANY_REGION]).regions == [ANY_REGION]


def test_with_tpu_defaults_from_host_fraction() -> None:
    r = ResourceConfig.with_tpu("v5p-8")
    assert (r.cpu, r.ram, r.disk, r.replicas) == (104, "224g", "50g", 1)
    assert r.device == TpuConfig("v5p-8")
    assert r.device_alternatives is None
    assert r.chip_count() == 4


def test_with_tpu_replicas_count_vms_times_slices() -> None:
    assert ResourceConfig.with_tpu("v5p-16").replicas == 2
    assert ResourceConfig.with_tpu("v5p-16", slice_count=2).replicas == 4
    assert ResourceConfig.with_tpu("v5litepod-16", slice_count=3).replicas == 12
    with pytest.raises(ValueError, match="slice_count"):
        ResourceConfig.with_tpu("v5p-8", slice_count=0)


def test_with_tpu_kwargs_override_fields() -> None:
    r = ResourceConfig.with_tpu("v4-8", regions=["us-central2"], preemptible=False, ram="100g")
    assert (r.regions, r.preemptible, r.ram) == (["us-central2"], False, "100g")


def test_with_tpu_alternatives() -> None:
    r = ResourceConfig.with_tpu(["v5p-8", "v4-8"])
    assert r.device == TpuConfig("v5p-8")
    assert list(r.device_alternatives or []) == ["v4-8"]
    assert r.replicas == 1


def test_with_tpu_alternatives_must_share_shape() -> None:
    with pytest.raises(ValueError, match="vm_count and chips_per_vm"):
        ResourceConfig.with_tpu(["v5p-8", "v5p-16"])  # 1 VM vs 2 VMs
    with pytest.raises(ValueError, match="vm_count and chips_per_vm"):
        ResourceConfig.with_tpu(["v5litepod-8", "v5litepod-4"])  # 8 vs 4 chips per VM


def test_with_tpu_rejects_empty_and_unknown() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        ResourceConfig.with_tpu([])
    with pytest.raises(ValueError, match="valid TPU types"):
        ResourceConfig.with_tpu("v9-8")


def test_with_gpu_and_cpu() -> None:
    r = ResourceConfig.with_gpu("A100-80G", count=4, cpu=16)
    assert r.device == GpuConfig("A100-80G", count=4)
    assert (r.cpu, r.chip_count()) == (16, 4)
    assert ResourceConfig.with_cpu(cpu=2).device == CpuConfig()


def test_scale_by_one_factor_keeps_compact_suffixes() -> None:
    r = ResourceConfig(cpu=2, ram="4g", disk="512m")
    doubled = r.scale(2)
    assert (doubled.cpu, doubled.ram, doubled.disk) == (4, "8g", "1g")
    assert r.ram == "4g"  # a copy; the original is unchanged
    assert r.scale(1.5).ram == "6g"
    assert r.scale(3).disk == "1536m"


def test_scale_per_field() -> None:
    r = ResourceConfig(cpu=2, ram="4g", disk="16g").scale(ram=0.5)
    assert (r.cpu, r.ram, r.disk) == (2, "2g", "16g")
    r = ResourceConfig().scale(cpu=3, disk=2)
    assert (r.cpu, r.ram, r.disk) == (3, "4g", "32g")


def test_scale_rejects_mixed_and_nonpositive() -> None:
    with pytest.raises(ValueError, match="Pass either a single factor"):
        ResourceConfig().scale(2, cpu=2)
    with pytest.raises(ValueError, match="positive"):
        ResourceConfig().scale(0)


def test_byte_sizes_round_trip() -> None:
    assert parse_bytes("4g") == 4 * 1024**3
    assert parse_bytes("1.5GiB") == 3 * 1024**3 // 2
    assert parse_bytes(123) == 123
    assert format_bytes(8 * 1024**3) == "8g"
    assert format_bytes(1536 * 1024**2) == "1536m"
    assert format_bytes(parse_bytes("1.2g")) == "1.2g"
    with pytest.raises(ValueError):
        parse_bytes("four gigs")


# -- environments -----------------------------------------------------------------------------


def test_environment_needs_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        EnvironmentConfig()
    with pytest.raises(ValueError, match="exactly one"):
        EnvironmentConfig(workspace="/w", docker_image="img")
    env = EnvironmentConfig(docker_image="img")
    assert (env.pip_packages, env.env_vars, env.setup_scripts) == ([], {}, None)


def test_create_environment_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_TOKEN", "secret")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    env = create_environment(env_vars={"A": "1", "TOKENIZERS_PARALLELISM": None})
    assert env.workspace == str(tmp_path)
    assert env.env_vars == {"HF_DATASETS_TRUST_REMOTE_CODE": "1", "HF_TOKEN": "secret", "A": "1"}
    docker = create_environment(docker_image="img", pip_packages=["numpy"])
    assert (docker.workspace, docker.docker_image, docker.pip_packages) == (None, "img", ["numpy"])


# -- entrypoints, requests, statuses, actor config --------------------------------------------


def test_entrypoints() -> None:
    call = Entrypoint.from_callable(_noop, args=[1], kwargs={"k": 2})
    assert call.callable_entrypoint is not None and call.binary_entrypoint is None
    assert (call.callable_entrypoint.args, call.callable_entrypoint.kwargs) == ((1,), {"k": 2})
    binary = Entrypoint.from_binary("echo", ["hi"])
    assert binary.binary_entrypoint == BinaryEntrypoint("echo", ("hi",))
    assert binary.binary_entrypoint.argv == ("echo", "hi")
    with pytest.raises(ValueError, match="exactly one"):
        Entrypoint()
    with pytest.raises(ValueError, match="callable"):
        Entrypoint.from_callable("not a function")  # type: ignore[arg-type]
    assert fray.FrayEntrypoint is Entrypoint


def test_job_request_defaults_and_replicas() -> None:
    req = JobRequest(name="train", entrypoint=Entrypoint.from_callable(_noop))
    assert (req.replicas, req.processes_per_task, req.max_retries_failure) == (1, 1, 0)
    assert (req.max_retries_preemption, req.max_task_failures, req.priority, req.timeout) == (100, 0, 0, None)
    tpu = JobRequest(name="t", entrypoint=Entrypoint.from_callable(_noop), resources=ResourceConfig.with_tpu("v5p-16"))
    assert tpu.replicas == 2
    explicit = JobRequest(name="t", entrypoint=Entrypoint.from_callable(_noop), replicas=3)
    assert explicit.replicas == 3


def test_job_request_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="spaces"):
        JobRequest(name="my job", entrypoint=Entrypoint.from_callable(_noop))
    with pytest.raises(ValueError, match="timeout"):
        JobRequest(name="j", entrypoint=Entrypoint.from_callable(_noop), timeout=0)
    with pytest.raises(ValueError, match="max_retries_failure"):
        JobRequest(name="j", entrypoint=Entrypoint.from_callable(_noop), max_retries_failure=-1)


def test_job_status_finished() -> None:
    assert JobStatus.RUNNING == "running"
    assert [s for s in JobStatus if s.finished()] == [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED]
    assert JobStatus.finished(JobStatus.STOPPED)
    assert not JobStatus.finished(JobStatus.PENDING)


def test_actor_config() -> None:
    config = ActorConfig()
    assert (config.max_concurrency, config.max_restarts, config.max_task_retries, config.priority) == (1, None, None, 0)
    with pytest.raises(ValueError, match="max_concurrency"):
        ActorConfig(max_concurrency=0)
    assert ActorConfig(max_restarts=-1).max_restarts == -1
