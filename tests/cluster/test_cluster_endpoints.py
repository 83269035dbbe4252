"""The endpoint registry over the wire: attempt checks, listing, leases, visibility."""

from __future__ import annotations

import time

import pytest
from cluster_helpers import job_name, sh, wait_finished, wait_for, wait_state, wait_tasks

from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.entrypoint import callable_entrypoint
from fray_ray.iris.errors import FailedPrecondition, NotFound
from fray_ray.iris.rpc import controller_pb2
from fray_ray.iris.rpc.controller_connect import EndpointServiceClientSync
from fray_ray.iris.transport import bearer_headers
from fray_ray.iris.types import JobSpec, JobState, ResourceSpec, TaskState

Controller = controller_pb2.Controller


def register_from_inside_the_task(name: str) -> None:
    """Runs in a task: register an endpoint for this very attempt, then serve until killed."""
    from fray_ray.iris.job_info import get_job_info

    info = get_job_info()
    assert info is not None
    with ControllerClient(info.controller_address, token=info.token) as client:
        client.register_endpoint(
            f"{info.job_id}/{name}",
            f"http://{info.advertise_host}:{info.get_port('actor')}",
            task_id=info.task_attempt.task.wire,
            attempt_id=info.attempt_id,
            metadata={"index": str(info.task_index)},
        )
    print("registered", flush=True)
    time.sleep(60)


def test_task_registers_and_endpoint_disappears_with_the_job(client: ControllerClient) -> None:
    job_id = client.launch_job(
        JobSpec(
            name=job_name("actors"),
            entrypoint=callable_entrypoint(register_from_inside_the_task, ("actor",)),
            replicas=2,
            ports=["actor"],
            resources=ResourceSpec(cpu_millicores=100),
        )
    )
    found = wait_for(lambda: len(eps := client.list_endpoints(f"{job_id}/")) == 2 and eps, what="two endpoints")
    tasks = client.list_tasks(job_id)
    ports = {t.task_id: t.ports["actor"] for t in tasks}
    hosts = {t.task_id: t.worker_address for t in tasks}
    assert sorted(e.task_id for e in found) == sorted(ports)
    for endpoint in found:
        assert endpoint.name == f"{job_id}/actor"
        # each task registers the address of its own host
        assert endpoint.address == f"http://{hosts[endpoint.task_id]}:{ports[endpoint.task_id]}"
    assert len(client.list_endpoints(f"{job_id}/actor", exact=True)) == 2
    assert client.list_endpoints(f"{job_id}/act", exact=True) == []
    only_first = client.list_endpoints(f"{job_id}/", task_ids=[tasks[0].task_id])
    assert [e.metadata["index"] for e in only_first] == ["0"]
    client.terminate_job(job_id)
    assert client.list_endpoints(f"{job_id}/") == []


def test_registration_is_tied_to_a_live_attempt(client: ControllerClient, tmp_path) -> None:
    with pytest.raises(NotFound):
        client.register_endpoint("/tester/x/svc", "127.0.0.1:1", task_id="/tester/x/0", attempt_id=0)
    gate = tmp_path / "go"
    flaky = f'case "$IRIS_TASK_ID" in *:0) exit 1;; esac; while [ ! -e {gate} ]; do sleep 0.02; done'
    job_id = client.launch_job(sh(flaky, name=job_name("svc"), max_retries_failure=1))
    (task,) = wait_tasks(client, job_id, lambda ts: ts[0].current_attempt_id == 1 and ts[0].state == TaskState.RUNNING)
    with pytest.raises(FailedPrecondition, match="stale attempt"):
        client.register_endpoint(f"{job_id}/svc", "127.0.0.1:1", task_id=task.task_id, attempt_id=0)
    endpoint_id = client.register_endpoint(f"{job_id}/svc", "127.0.0.1:1", task_id=task.task_id, attempt_id=1)
    # Re-registering with the same id replaces the entry (lease renewal).
    again = client.register_endpoint(
        f"{job_id}/svc", "127.0.0.1:2", task_id=task.task_id, attempt_id=1, endpoint_id=endpoint_id
    )
    assert again == endpoint_id
    (endpoint,) = client.list_endpoints(f"{job_id}/svc", exact=True)
    assert (endpoint.endpoint_id, endpoint.address) == (endpoint_id, "127.0.0.1:2")
    client.unregister_endpoint(endpoint_id)
    client.unregister_endpoint(endpoint_id)  # idempotent
    assert client.list_endpoints(f"{job_id}/svc", exact=True) == []
    client.register_endpoint(f"{job_id}/svc", "127.0.0.1:3", task_id=task.task_id, attempt_id=1)
    gate.touch()
    assert wait_finished(client, job_id).state == JobState.SUCCEEDED
    assert client.list_endpoints(f"{job_id}/") == []  # hidden once the job is finished
    with pytest.raises(FailedPrecondition, match="finished"):
        client.register_endpoint(f"{job_id}/svc", "127.0.0.1:1", task_id=task.task_id, attempt_id=1)


def test_endpoint_service_is_the_leased_registry(cluster, client: ControllerClient) -> None:
    job_id = client.launch_job(sh("sleep 60", name=job_name("leased")))
    wait_state(client, job_id, JobState.RUNNING)
    stub = EndpointServiceClientSync(cluster.address)
    headers = bearer_headers(cluster.token)
    try:
        request = Controller.RegisterEndpointRequest(
            name=f"{job_id}/svc", address="127.0.0.1:9", task_id=f"{job_id}/0", attempt_id=0, endpoint_id="fixed-id"
        )
        response = stub.register_endpoint(request, headers=headers)
        assert response.endpoint_id == "fixed-id" and response.lease_duration.milliseconds == 600_000
        request.lease_duration.milliseconds = 30_000
        assert stub.register_endpoint(request, headers=headers).lease_duration.milliseconds == 30_000
        listed = stub.list_endpoints(
            Controller.ListEndpointsRequest(prefix=f"{job_id}/svc", exact=True), headers=headers
        )
        assert [e.endpoint_id for e in listed.endpoints] == ["fixed-id"]
        assert [e.endpoint_id for e in client.list_endpoints(f"{job_id}/")] == ["fixed-id"]  # one registry
        stub.unregister_endpoint(Controller.UnregisterEndpointRequest(endpoint_id="fixed-id"), headers=headers)
        assert client.list_endpoints(f"{job_id}/") == []
    finally:
        stub.close()
    client.terminate_job(job_id)
