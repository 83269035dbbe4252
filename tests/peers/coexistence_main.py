"""Import fray_ray and marin-iris into one process, in the order given, then do a real round trip
with each on one embedded cluster; print one `REPORT <json>` line.

Run by a peer venv's Python with fray_ray on PYTHONPATH, never imported by fray_ray:

    <peer python> coexistence_main.py fray_ray-first|iris-first
"""

import json
import sys
import traceback


def import_fray_ray() -> None:
    import fray_ray  # noqa: F401
    import fray_ray.cluster  # noqa: F401
    import fray_ray.fray  # noqa: F401


def import_iris() -> None:
    import finelog.rpc.logging_pb2  # noqa: F401
    import iris.client.client  # noqa: F401
    import iris.rpc.controller_pb2  # noqa: F401


def main() -> None:
    order = sys.argv[1]
    out: dict = {"order": order}
    try:
        for step in (import_fray_ray, import_iris) if order == "fray_ray-first" else (import_iris, import_fray_ray):
            step()
        out["imported"] = True
        out.update(round_trips())
    except BaseException:  # noqa: BLE001 - the test reads the traceback from the report
        out["error"] = traceback.format_exc()
    print("REPORT " + json.dumps(out), flush=True)


def round_trips() -> dict:
    from connectrpc.compression.zstd import ZstdCompression
    from finelog.rpc import logging_pb2
    from finelog.rpc.logging_connect import LogServiceClientSync
    from google.protobuf import descriptor_pool
    from iris.rpc import controller_pb2
    from iris.rpc.controller_connect import ControllerServiceClientSync

    from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
    from fray_ray.iris.entrypoint import command_entrypoint
    from fray_ray.iris.names import JobName
    from fray_ray.iris.rpc import controller_pb2 as our_controller_pb2
    from fray_ray.iris.types import JobSpec, ResourceSpec

    out: dict = {
        "pools": {
            "iris_in_default": controller_pb2.DESCRIPTOR.pool is descriptor_pool.Default(),
            "ours_in_default": our_controller_pb2.DESCRIPTOR.pool is descriptor_pool.Default(),
        }
    }
    config = ClusterConfig(workers=(cpu_worker("both-0", cpu=2, memory="2g", disk="1g"),))
    with EmbeddedCluster(config) as cluster:
        # fray_ray's side: its client submits a job, waits, reads its logs and the workers
        with cluster.client() as ours:
            job = ours.launch_job(
                JobSpec(
                    JobName.root("both", "hello"),
                    command_entrypoint(["bash", "-c", "echo side by side"]),
                    resources=ResourceSpec(cpu_millicores=100),
                )
            )
            out["ours_state"] = ours.wait_for_job(job, timeout=120).state.name
            out["ours_logs"] = [line.data for line in ours.task_logs(job)]
            out["ours_workers"] = [w.worker_id for w in ours.list_workers()]
        # marin-iris's side: its generated stubs and messages, in this same process
        headers = {"authorization": f"Bearer {cluster.token}"}
        stub = ControllerServiceClientSync(cluster.address)
        try:
            workers = stub.list_workers(controller_pb2.Controller.ListWorkersRequest(), headers=headers).workers
            out["iris_workers"] = [w.worker_id for w in workers]
            states = stub.get_job_state(controller_pb2.Controller.GetJobStateRequest(job_ids=[job]), headers=headers)
            out["iris_state"] = int(states.states[job])
        finally:
            stub.close()
        logs = LogServiceClientSync(
            cluster.address, send_compression=ZstdCompression(), accept_compression=[ZstdCompression()]
        )
        try:
            request = logging_pb2.FetchLogsRequest(source=f"{job}/", match_scope=logging_pb2.MATCH_SCOPE_PREFIX)
            out["iris_logs"] = [[e.key, e.data] for e in logs.fetch_logs(request, headers=headers).entries]
        finally:
            logs.close()
    return out


if __name__ == "__main__":
    main()
