"""Submit a distributed 2-replica GPU job with Fray and wait for it.

Runs on an embedded cluster it starts itself, with two simulated V100 hosts:

    python examples/fray_distributed_job.py

The job asks for 2 V100s per replica and 2 replicas, so the two tasks are gang-scheduled:
both start together, one per host, or neither starts.
"""

import os

from fray_ray.cluster import ClusterConfig, EmbeddedCluster, gpu_hosts
from fray_ray.fray import FrayEntrypoint, FrayIrisClient, GpuConfig, JobRequest, ResourceConfig


def train(steps: int) -> None:
    rank = os.environ["IRIS_TASK_ID"].rsplit("/", 1)[1].split(":")[0]
    world = os.environ["IRIS_NUM_TASKS"]
    gpus = os.environ["CUDA_VISIBLE_DEVICES"]
    for step in range(steps):
        print(f"replica {rank}/{world} on GPUs {gpus}: step {step}", flush=True)


def main() -> None:
    with EmbeddedCluster(ClusterConfig(workers=gpu_hosts("V100", 2, hosts=2))) as cluster:
        client = FrayIrisClient(cluster.address, token=cluster.token)
        job = client.submit(
            JobRequest(
                name="distributed-train",
                entrypoint=FrayEntrypoint.from_callable(train, args=(3,)),
                resources=ResourceConfig(cpu=1, ram="1g", disk="1g", device=GpuConfig(variant="v100", count=2)),
                replicas=2,
            )
        )
        print(f"submitted {job.job_id}")
        status = job.wait(timeout=120)
        print(f"job finished: {status}")
        for line in job.logs():
            print(f"  {line}")
        client.shutdown()


if __name__ == "__main__":
    main()
