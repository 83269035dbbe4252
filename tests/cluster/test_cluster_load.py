"""Load on loopback: 200 two-replica jobs submitted at once all finish while GetJobState stays fast.

Prints jobs/s sustained and GetJobState latency. Deselect with `-m "not load"`.
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from cluster_helpers import job_name, sh

from fray_ray.cluster import cpu_worker
from fray_ray.iris.types import JobState, ResourceSpec

JOBS = 200
REPLICAS = 2
SUBMITTERS = 8


@pytest.mark.load
@pytest.mark.timeout(120)
def test_200_jobs_at_once(make_cluster) -> None:
    cluster = make_cluster(cpu_worker("load", cpu=16, memory="16g"))
    specs = [
        sh("true", name=job_name(f"load-{i}"), replicas=REPLICAS, resources=ResourceSpec(cpu_millicores=250))
        for i in range(JOBS)
    ]
    job_ids = [spec.name.wire for spec in specs]
    latencies: list[float] = []
    done = threading.Event()
    finished_at: list[float] = []

    def poll() -> None:
        with cluster.client() as client:
            while not done.is_set():
                began = time.perf_counter()
                states = client.job_states(job_ids)
                latencies.append(time.perf_counter() - began)
                if len(states) == JOBS and all(s.finished for s in states.values()):
                    finished_at.append(time.perf_counter())
                    done.set()
                time.sleep(0.002)

    clients = [cluster.client() for _ in range(SUBMITTERS)]
    poller = threading.Thread(target=poll, name="load-poller")
    started = time.perf_counter()
    poller.start()
    try:
        with ThreadPoolExecutor(SUBMITTERS, thread_name_prefix="load-submit") as pool:
            submitted = list(pool.map(lambda i: clients[i % SUBMITTERS].launch_job(specs[i]), range(JOBS)))
        submit_s = time.perf_counter() - started
        assert submitted == job_ids
        assert done.wait(90), "jobs did not all finish within 90 s"
    finally:
        done.set()
        poller.join()
        for client in clients:
            client.close()
    elapsed = finished_at[0] - started
    with cluster.client() as client:
        states = client.job_states(job_ids)
    assert all(state == JobState.SUCCEEDED for state in states.values()), {
        s.name: list(states.values()).count(s) for s in set(states.values())
    }
    ordered = sorted(latencies)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    print(
        f"\nload: {JOBS} jobs x {REPLICAS} replicas submitted in {submit_s:.2f} s, all finished in {elapsed:.2f} s "
        f"= {JOBS / elapsed:.0f} jobs/s ({JOBS * REPLICAS / elapsed:.0f} tasks/s); GetJobState over {len(latencies)} "
        f"calls: median {statistics.median(latencies) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
        f"max {ordered[-1] * 1000:.1f} ms"
    )
    assert statistics.median(latencies) < 0.25
    assert ordered[-1] < 5.0
