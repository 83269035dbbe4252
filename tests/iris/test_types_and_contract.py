"""Iris value types, the task environment contract and the callable entrypoint layout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest

from fray_ray.iris.controller_client import ControllerClient, normalize_address
from fray_ray.iris.entrypoint import (
    BYTECODE_CACHE_FILE,
    CALLABLE_COMMAND,
    CALLABLE_FILE,
    RUNNER_FILE,
    callable_entrypoint,
    command_entrypoint,
)
from fray_ray.iris.errors import Unavailable
from fray_ray.iris.job_info import job_info_from_env
from fray_ray.iris.names import JobName
from fray_ray.iris.resolver import qualify_name
from fray_ray.iris.rpc import controller_pb2
from fray_ray.iris.tpu import get_tpu_topology
from fray_ray.iris.types import (
    Constraint,
    ConstraintMode,
    ConstraintOp,
    ExistingJobPolicy,
    GpuDevice,
    JobSpec,
    ResourceSpec,
    TpuDevice,
)


def test_resource_spec_round_trips_through_proto() -> None:
    for spec in (
        ResourceSpec(),
        ResourceSpec(2500, 8 << 30, 1 << 30, GpuDevice("H100", 4)),
        ResourceSpec(4000, 1, 2, TpuDevice("v5p-16", "2x2x2", 4)),
    ):
        assert ResourceSpec.from_proto(spec.to_proto()) == spec


def test_constraint_round_trips_through_proto() -> None:
    for constraint in (
        Constraint("region", ConstraintOp.IN, values=("us-east1", "us-west4")),
        Constraint("tpu-vm-count", ConstraintOp.GE, 2, mode=ConstraintMode.PREFERRED),
        Constraint("preemptible", ConstraintOp.EQ, "false"),
        Constraint("zone", ConstraintOp.EXISTS),
        Constraint("score", ConstraintOp.LT, 0.5),
    ):
        assert Constraint.from_proto(constraint.to_proto()) == constraint


def test_job_spec_sets_the_fields_real_controllers_require() -> None:
    spec = JobSpec(
        name=JobName.root("alice", "train"),
        entrypoint=command_entrypoint(["echo", "hi"]),
        replicas=2,
        max_retries_preemption=7,
        existing_job_policy=ExistingJobPolicy.KEEP,
        coscheduling_group_by="tpu-name",
        timeout_s=1.5,
        ports=["actor"],
    )
    request = controller_pb2.Controller.LaunchJobRequest.FromString(
        spec.to_proto(client_revision_date="2026-11-29").SerializeToString()
    )
    assert request.name == "/alice/train" and request.replicas == 2 and request.max_retries_preemption == 7
    assert request.client_revision_date == "2026-11-29" and request.existing_job_policy == 2
    assert request.coscheduling.group_by == "tpu-name" and request.timeout.milliseconds == 1500
    assert list(request.ports) == ["actor"] and list(request.entrypoint.run_command.argv) == ["echo", "hi"]


def test_job_spec_rejects_bad_budgets() -> None:
    with pytest.raises(ValueError, match="replicas"):
        JobSpec(JobName.root("a", "b"), command_entrypoint(["true"]), replicas=0)
    with pytest.raises(ValueError, match="max_retries_failure"):
        JobSpec(JobName.root("a", "b"), command_entrypoint(["true"]), max_retries_failure=-1)


def test_job_info_parses_the_task_environment() -> None:
    info = job_info_from_env(
        {
            "IRIS_TASK_ID": "/alice/train/1:3",
            "IRIS_NUM_TASKS": "4",
            "IRIS_CONTROLLER_ADDRESS": "http://127.0.0.1:9",
            "IRIS_ADVERTISE_HOST": "10.0.0.7",
            "IRIS_PORT_ACTOR": "4321",
            "IRIS_JOB_ENV": '{"A": "1"}',
        }
    )
    assert info is not None
    assert (info.job_id.wire, info.task_index, info.attempt_id, info.num_tasks) == ("/alice/train", 1, 3, 4)
    assert info.get_port("actor") == 4321 and info.get_port("ACTOR") == 4321
    assert info.advertise_host == "10.0.0.7" and info.job_env == {"A": "1"}
    with pytest.raises(KeyError, match="ports=\\['metrics'\\]"):
        info.get_port("metrics")
    assert job_info_from_env({}) is None


def _write_workdir(tmp_path: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)


def _run_entrypoint(tmp_path: Path, argv: tuple[str, ...]) -> subprocess.CompletedProcess:
    env = {**os.environ, "IRIS_PYTHON": sys.executable, "IRIS_WORKDIR": str(tmp_path)}
    return subprocess.run(list(argv), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)


def _write_marker(path: str, text: str) -> None:
    Path(path).write_text(text)


def test_callable_entrypoint_runs_in_a_task_process(tmp_path: Path) -> None:
    marker = tmp_path / "marker.txt"
    entrypoint = callable_entrypoint(_write_marker, (str(marker),), {"text": "ran"})
    assert entrypoint.argv == CALLABLE_COMMAND and set(entrypoint.workdir_files) == {
        CALLABLE_FILE, RUNNER_FILE, BYTECODE_CACHE_FILE}
    _write_workdir(tmp_path, dict(entrypoint.workdir_files))
    result = _run_entrypoint(tmp_path, entrypoint.argv)
    assert result.returncode == 0, result.stderr
    assert marker.read_text() == "ran"


def _raise_value_error() -> None:
    raise ValueError("boom in task")


def test_callable_that_raises_exits_1_with_traceback(tmp_path: Path) -> None:
    entrypoint = callable_entrypoint(_raise_value_error)
    _write_workdir(tmp_path, dict(entrypoint.workdir_files))
    result = _run_entrypoint(tmp_path, entrypoint.argv)
    assert result.returncode == 1
    assert "ValueError: boom in task" in result.stderr


def test_callable_that_cannot_be_unpickled_says_so(tmp_path: Path) -> None:
    entrypoint = callable_entrypoint(print)
    files = dict(entrypoint.workdir_files)
    files[CALLABLE_FILE] = cloudpickle.dumps(1)[:-3]  # truncated pickle
    _write_workdir(tmp_path, files)
    result = _run_entrypoint(tmp_path, entrypoint.argv)
    assert result.returncode == 1
    assert "cannot load the callable" in result.stderr


def test_command_entrypoint_needs_argv() -> None:
    with pytest.raises(ValueError):
        command_entrypoint([])


def test_addresses_and_names() -> None:
    assert normalize_address("iris://host:1") == "http://host:1"
    assert normalize_address("host:1/") == "http://host:1"
    assert normalize_address("https://h") == "https://h"
    assert qualify_name("worker-0", "/alice/train") == "/alice/train/worker-0"
    assert qualify_name("/bob/x/a-0", "/alice/train") == "/bob/x/a-0"
    with pytest.raises(ValueError):
        qualify_name("worker-0", None)


def test_unreachable_controller_is_a_clear_error() -> None:
    with ControllerClient("127.0.0.1:1") as client:
        with pytest.raises(Unavailable, match="no Iris controller answers at http://127.0.0.1:1"):
            client.check_reachable()
        assert client.healthy(timeout=1) is False


def test_tpu_topology_table() -> None:
    v5p16 = get_tpu_topology("v5p-16")
    assert (v5p16.chip_count, v5p16.host_count, v5p16.vm_count, v5p16.chips_per_vm) == (8, 2, 2, 4)
    v5e16 = get_tpu_topology("v5litepod-16")
    assert (v5e16.host_count, v5e16.vm_count) == (2, 4)
    with pytest.raises(ValueError, match="valid TPU types are: .*v5p-16"):
        get_tpu_topology("v5p-17")
