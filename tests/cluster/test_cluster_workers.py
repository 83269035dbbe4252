"""ListWorkers on the embedded controller: every local worker with its capacity, devices and
attributes, as Iris reports its hosts; and the client's typed `list_workers()`."""

from __future__ import annotations

from cluster_helpers import job_name, sh, wait_for, wait_state

from fray_ray.cluster import cpu_worker, gpu_host, tpu_slice
from fray_ray.iris.rpc import controller_pb2
from fray_ray.iris.rpc.controller_connect import ControllerServiceClientSync
from fray_ray.iris.transport import bearer_headers
from fray_ray.iris.types import GpuDevice, JobState, ResourceSpec, TpuDevice

Controller = controller_pb2.Controller


def test_list_workers_reports_every_host(make_cluster) -> None:
    cluster = make_cluster(
        cpu_worker("cpu-0", cpu=4, memory="8g", disk="10g", attributes={"pool": "small"}),
        *tpu_slice("v5p-16", "tpu-a"),
        gpu_host("A100", 4, worker_id="gpu-0"),
    )
    with cluster.client() as client:
        workers = {w.worker_id: w for w in client.list_workers()}
        assert sorted(workers) == ["cpu-0", "gpu-0", "tpu-a-w0", "tpu-a-w1"]
        cpu = workers["cpu-0"]
        assert (cpu.cpu_count, cpu.cpu_millicores, cpu.memory_bytes, cpu.disk_bytes) == (4, 4000, 8 << 30, 10 << 30)
        assert cpu.healthy and cpu.device is None and cpu.running_job_ids == ()
        assert cpu.attributes["pool"] == "small" and cpu.attributes["device-type"] == "cpu"
        assert cpu.hostname == "cpu-0"
        # every simulated host has a loopback address of its own (the controller keeps 127.0.0.1)
        addresses = [w.address for w in workers.values()]
        assert len(set(addresses)) == 4 and all(a.startswith("127.") and a != "127.0.0.1" for a in addresses)
        tpu = workers["tpu-a-w1"]
        assert isinstance(tpu.device, TpuDevice) and tpu.device.variant == "v5p-16" and tpu.device.count == 4
        assert tpu.attributes["tpu-name"] == "tpu-a" and tpu.attributes["tpu-worker-id"] == 1
        assert tpu.attributes["tpu-vm-count"] == 2
        assert workers["gpu-0"].device == GpuDevice("A100", 4)
        assert [w.worker_id for w in client.list_workers(contains="TPU-A")] == ["tpu-a-w0", "tpu-a-w1"]

        job_id = client.launch_job(sh("sleep 60", name=job_name("busy"), resources=ResourceSpec(cpu_millicores=3500)))
        wait_state(client, job_id, JobState.RUNNING)
        busy = wait_for(lambda: [w for w in client.list_workers() if w.running_job_ids], what="a busy worker")
        (task,) = client.list_tasks(job_id)
        assert [(w.worker_id, w.running_job_ids) for w in busy] == [(task.worker_id, (job_id,))]
        client.terminate_job(job_id)

        cluster.kill_worker("gpu-0")
        assert not next(w for w in client.list_workers() if w.worker_id == "gpu-0").healthy


def test_list_workers_query_sorts_and_pages(make_cluster) -> None:
    cluster = make_cluster(*(cpu_worker(f"cpu-{i}", cpu=1, memory="1g", disk="1g") for i in (2, 0, 1)))
    stub = ControllerServiceClientSync(cluster.address)
    try:

        def ids(**query: object) -> tuple[list[str], int, bool]:
            response = stub.list_workers(
                Controller.ListWorkersRequest(query=Controller.WorkerQuery(**query)), headers=bearer_headers(cluster.token)
            )
            return [w.worker_id for w in response.workers], response.total_count, response.has_more

        assert ids() == (["cpu-2", "cpu-0", "cpu-1"], 3, False)  # configuration order
        assert ids(sort_field=Controller.WORKER_SORT_FIELD_WORKER_ID) == (["cpu-0", "cpu-1", "cpu-2"], 3, False)
        desc = Controller.SORT_DIRECTION_DESC
        assert ids(sort_field=Controller.WORKER_SORT_FIELD_WORKER_ID, sort_direction=desc, limit=2) == (
            ["cpu-2", "cpu-1"],
            3,
            True,
        )
        assert ids(sort_field=Controller.WORKER_SORT_FIELD_WORKER_ID, offset=2, limit=2) == (["cpu-2"], 3, False)
        assert ids(backend_id="elsewhere") == ([], 0, False)
    finally:
        stub.close()
