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


def test_descriptor_names_match_iris() -> None:
    from fray_ray.iris.rpc import controller_pb2, finelog_logging_pb2, job_pb2, logging_pb2

    Controller = controller_pb2.Controller
    assert Controller.EndpointAccess.DESCRIPTOR.full_name == "iris.cluster.Controller.EndpointAccess"
    assert Controller.Endpoint.DESCRIPTOR.fields_by_name["access"].enum_type.full_name == (
        "iris.cluster.Controller.EndpointAccess"
    )
    assert logging_pb2.LogLevel.Name(0) == "LOG_LEVEL_UNKNOWN"
    service = controller_pb2.DESCRIPTOR.services_by_name["ControllerService"]
    list_workers = service.methods_by_name["ListWorkers"]
    assert list_workers.input_type.full_name == "iris.cluster.Controller.ListWorkersRequest"
    assert list_workers.output_type.full_name == "iris.cluster.Controller.ListWorkersResponse"
    health = Controller.WorkerHealthStatus.DESCRIPTOR.fields_by_name
    assert {name: health[name].number for name in ("worker_id", "healthy", "running_job_ids", "address", "metadata")} == {
        "worker_id": 1,
        "healthy": 2,
        "running_job_ids": 5,
        "address": 6,
        "metadata": 7,
    }
    metadata = job_pb2.WorkerMetadata.DESCRIPTOR.fields_by_name
    assert {name: metadata[name].number for name in ("cpu_count", "memory_bytes", "device", "tpu_name", "gpu_count", "attributes")} == {
        "cpu_count": 3,
        "memory_bytes": 4,
        "device": 6,
        "tpu_name": 10,
        "gpu_count": 20,
        "attributes": 40,
    }
    log_service = finelog_logging_pb2.DESCRIPTOR.services_by_name["LogService"]
    assert log_service.full_name == "finelog.logging.LogService"
    fetch = finelog_logging_pb2.FetchLogsRequest.DESCRIPTOR.fields_by_name
    assert {name: fetch[name].number for name in ("source", "since_ms", "cursor", "max_lines", "tail", "min_level", "match_scope")} == {
        "source": 1,
        "since_ms": 2,
        "cursor": 3,
        "max_lines": 5,
        "tail": 6,
        "min_level": 7,
        "match_scope": 8,
    }
    assert finelog_logging_pb2.MatchScope.Value("MATCH_SCOPE_REGEX") == 3


def test_descriptors_stay_out_of_the_default_pool() -> None:
    """marin-iris registers the same `iris.*` names in protobuf's default pool."""
    from google.protobuf import descriptor_pool

    from fray_ray.iris.rpc import DESCRIPTOR_POOL, controller_pb2, finelog_logging_pb2

    assert controller_pb2.DESCRIPTOR.pool is DESCRIPTOR_POOL
    assert finelog_logging_pb2.DESCRIPTOR.pool is DESCRIPTOR_POOL
    default = descriptor_pool.Default()
    for name in ("iris.time.Timestamp", "iris.cluster.Controller", "finelog.logging.LogEntry"):
        try:
            default.FindMessageTypeByName(name)
        except KeyError:
            continue
        raise AssertionError(f"{name} is in protobuf's default pool")
