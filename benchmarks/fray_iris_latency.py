"""Latency of FrayIrisClient on the embedded cluster: job launch, actor start, actor calls.

    python benchmarks/fray_iris_latency.py [--repeat N]

Prints medians (and min/max) of:
- submit -> task running: from just before `submit()` to the first line of the task's callable;
- submit -> SUCCEEDED seen by `wait()` for a trivial callable;
- create_actor_group -> first call answered (one replica, `wait_ready` then a direct call);
- actor round trips over ActorService: direct call, `.remote().result()`, `.submit().result()`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
from fray_ray.fray import Entrypoint, FrayIrisClient, JobRequest, ResourceConfig

SMALL = ResourceConfig(cpu=0, ram="64m", disk="0")


def stamp(path: str) -> None:
    started = time.time()
    with open(path, "w") as f:
        f.write(repr(started))


class Echo:
    def echo(self, x: object) -> object:
        return x


def summary(name: str, seconds: list[float], unit: str = "ms") -> None:
    scale = 1e3 if unit == "ms" else 1e6
    print(
        f"{name:<44} median {statistics.median(seconds) * scale:8.2f} {unit}"
        f"   min {min(seconds) * scale:8.2f}   max {max(seconds) * scale:8.2f}   (n={len(seconds)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    workers = (cpu_worker("cpu-0", cpu=4, memory="8g", disk="10g"),)
    with EmbeddedCluster(ClusterConfig(workers=workers)) as cluster, tempfile.TemporaryDirectory() as tmp:
        with FrayIrisClient(cluster.address, token=cluster.token) as client:
            running, succeeded = [], []
            for i in range(args.repeat):
                path = os.path.join(tmp, f"stamp-{i}")
                began = time.time()
                job = client.submit(
                    JobRequest(
                        name=f"lat-{i}", entrypoint=Entrypoint.from_callable(stamp, args=(path,)), resources=SMALL
                    )
                )
                job.wait(timeout=120)
                succeeded.append(time.time() - began)
                with open(path) as f:
                    running.append(float(f.read()) - began)
            summary("submit -> task running (callable starts)", running)
            summary("submit -> SUCCEEDED seen by wait()", succeeded)

            first_call = []
            for i in range(args.repeat):
                began = time.perf_counter()
                group = client.create_actor_group(Echo, name=f"echo-{i}", count=1, resources=SMALL)
                (handle,) = group.wait_ready(timeout=120)
                handle.echo(1)
                first_call.append(time.perf_counter() - began)
                if i < args.repeat - 1:
                    group.shutdown()
            summary("create_actor_group -> first call answered", first_call)

            calls = 20 * args.repeat
            for name, call in (
                ("actor call, direct", lambda: handle.echo(1)),
                ("actor call, .remote().result()", lambda: handle.echo.remote(1).result()),
                ("actor call, .submit().result() (operation)", lambda: handle.echo.submit(1).result()),
            ):
                call()
                times = []
                for _ in range(calls):
                    began = time.perf_counter()
                    call()
                    times.append(time.perf_counter() - began)
                summary(name, times, unit="us")


if __name__ == "__main__":
    main()
