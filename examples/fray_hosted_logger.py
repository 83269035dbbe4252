"""A logger hosted with `host_actor` inside a job, found and called from a sibling task.

Runs on an embedded cluster it starts itself:

    python examples/fray_hosted_logger.py

The job has two tasks. Task 0 serves a `Logger` from its own process with the module-level
`host_actor`, which registers it as `<job_id>/logger-0`; task 1 looks that name up in the
controller's endpoint registry and logs to it.
"""

import os
import time

from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
from fray_ray.fray import ActorUnavailableError, FrayEntrypoint, FrayIrisClient, JobRequest, ResourceConfig, host_actor
from fray_ray.fray.iris_backend import IrisActorHandle


class Logger:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, line: str) -> int:
        self.lines.append(line)
        return len(self.lines)

    def lines_so_far(self) -> list[str]:
        return list(self.lines)


def task(expected_lines: int) -> None:
    task_id = os.environ["IRIS_TASK_ID"]  # /<user>/<job>/<index>:<attempt>
    job_id, index = task_id.split(":")[0].rsplit("/", 1)
    endpoint = f"{job_id}/logger-0"
    if index == "0":
        with host_actor(Logger, name="logger") as logger:
            print(f"serving {logger.endpoint}", flush=True)
            while len(logger.handle.lines_so_far()) < expected_lines:
                time.sleep(0.01)
            for line in logger.handle.lines_so_far():
                print(f"logged: {line}", flush=True)
    else:
        handle = IrisActorHandle(endpoint)
        for _ in range(600):  # the sibling may not be serving yet
            try:
                count = handle.log(f"hello from task {index}")
                break
            except ActorUnavailableError:  # not registered yet
                time.sleep(0.05)
        print(f"task {index} logged line {count}", flush=True)


def main() -> None:
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker("cpu-0", cpu=2, memory="4g", disk="10g"),))) as cluster:
        client = FrayIrisClient(cluster.address, token=cluster.token)
        job = client.submit(
            JobRequest(
                name="hosted-logger",
                entrypoint=FrayEntrypoint.from_callable(task, args=(1,)),
                resources=ResourceConfig(cpu=0.5, ram="256m", disk="0"),
                replicas=2,
            )
        )
        print(f"job finished: {job.wait(timeout=120)}")
        for line in job.logs():
            print(f"  {line}")
        client.shutdown()


if __name__ == "__main__":
    main()
