"""A gang-scheduled TPU job on a simulated v5p-16 slice (2 hosts of 4 chips).

Runs on an embedded cluster it starts itself, no TPU needed:

    python examples/fray_tpu_gang.py

`ResourceConfig.with_tpu("v5p-16")` asks for one replica per VM of the slice (2), gang-
scheduled on `tpu-name`, so both hosts of one slice start the job together.
"""

import os

from fray_ray.cluster import ClusterConfig, EmbeddedCluster, tpu_slice
from fray_ray.fray import FrayEntrypoint, FrayIrisClient, JobRequest, ResourceConfig


def host_main() -> None:
    print(
        f"TPU host {os.environ['TPU_WORKER_ID']} of slice {os.environ['TPU_NAME']} "
        f"({os.environ['TPU_ACCELERATOR_TYPE']}, hosts {os.environ['TPU_WORKER_HOSTNAMES']})",
        flush=True,
    )


def main() -> None:
    with EmbeddedCluster(ClusterConfig(workers=tpu_slice("v5p-16", "slice-a"))) as cluster:
        client = FrayIrisClient(cluster.address, token=cluster.token)
        resources = ResourceConfig.with_tpu("v5p-16", cpu=1, ram="1g", disk="1g")
        job = client.submit(
            JobRequest(name="tpu-gang", entrypoint=FrayEntrypoint.from_callable(host_main), resources=resources)
        )
        print(f"submitted {job.job_id} with {resources.replicas} replicas")
        print(f"job finished: {job.wait(timeout=120)}")
        for line in sorted(job.logs()):
            print(f"  {line}")
        client.shutdown()


if __name__ == "__main__":
    main()
