"""The committed protobuf and Connect code matches protos/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_up_to_date() -> None:
    pytest.importorskip("grpc_tools")
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate_protos.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_wire_names_match_iris() -> None:
    from fray_ray.iris.rpc import actor_pb2, controller_pb2, job_pb2

    assert controller_pb2.DESCRIPTOR.services_by_name["ControllerService"].full_name == "iris.cluster.ControllerService"
    assert controller_pb2.Controller.LaunchJobRequest.DESCRIPTOR.full_name == "iris.cluster.Controller.LaunchJobRequest"
    assert actor_pb2.DESCRIPTOR.services_by_name["ActorService"].full_name == "iris.actor.ActorService"
    fields = controller_pb2.Controller.LaunchJobRequest.DESCRIPTOR.fields_by_name
    assert {name: fields[name].number for name in ("name", "replicas", "max_retries_preemption", "client_revision_date")} == {
        "name": 1,
        "replicas": 20,
        "max_retries_preemption": 13,
        "client_revision_date": 36,
    }
    assert job_pb2.JobState.Value("JOB_STATE_UNSCHEDULABLE") == 8
    assert job_pb2.TaskState.Value("TASK_STATE_COSCHED_FAILED") == 11
