"""Cross-driver named-actor calls: a second driver process calls an actor the first one named.

`run_one.py` is the first driver: it starts a session another driver can join (Ray: `init()`,
joined through its GCS address; fray_ray: an `EmbeddedCluster` in this process and
`init(address)`, joined with the cluster's address and bearer token), creates a named
num_cpus=0 actor, and starts this file as the second driver, which joins, looks the actor up
with `get_actor`, and times synchronous calls (call + get, one at a time). It prints one JSON
line: calls/s, and how long joining and the lookup took.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workloads import ShapeStopped, Timing, make_remotes, ok, timed_round  # noqa: E402

NAMESPACE = "fray-bench"
ACTOR_NAME = "bench-named-actor"


def second_driver(backend: str, address: str, timing: Timing) -> dict[str, Any]:
    ray = importlib.import_module(backend)
    t0 = time.perf_counter()
    if backend == "ray":
        ray.init(address=address, namespace=NAMESPACE)
    else:
        ray.init(address, namespace=NAMESPACE)
    t_init = time.perf_counter()
    try:
        actor = ray.get_actor(ACTOR_NAME)
        ray.get(actor.ping.remote())
        t_lookup = time.perf_counter()
        rate = timed_round(lambda: ray.get(actor.ping.remote()), timing)
    finally:
        ray.shutdown()
    return {"calls_per_s": rate, "join_s": t_init - t0, "lookup_s": t_lookup - t_init}


def run(backend_name: str, ray: Any, timing: Timing, timeout_s: float) -> dict[str, Any]:
    """The first driver's side: session, named actor, second driver; one value of calls/s."""
    cluster = None
    try:
        if backend_name == "ray":
            ray.init(num_cpus=2, include_dashboard=False, namespace=NAMESPACE)
            address = ray.get_runtime_context().gcs_address
        else:
            from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker

            # What init(num_cpus=2) starts, made here so its token is known; a driver joining a
            # running cluster gives no num_cpus (ValueError, as in Ray).
            cluster = EmbeddedCluster(ClusterConfig(workers=(cpu_worker("cpu-0", cpu=2),)))
            cluster.start()
            if cluster.token:  # both drivers authenticate to the cluster with its token
                os.environ["FRAY_RAY_TOKEN"] = cluster.token
            address = cluster.address
            ray.init(address, namespace=NAMESPACE)
        # Taken after init: Ray's init turns on token authentication through the environment
        # (RAY_AUTH_MODE), which the second driver needs as well.
        env = dict(os.environ)
        remotes = make_remotes(ray)
        actor = remotes.SyncActor.options(name=ACTOR_NAME).remote()
        ray.get(actor.ping.remote())
        cmd = [sys.executable, os.path.abspath(__file__), "--backend", backend_name, "--address", address,
               "--warmup-s", str(timing.warmup_s), "--round-s", str(timing.round_s)]
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                                  check=False)
        except subprocess.TimeoutExpired as exc:
            raise ShapeStopped("timeout", f"the second driver did not finish within {timeout_s:.0f} s") from exc
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or ["(no output)"]
            raise RuntimeError(f"the second driver failed (exit {done.returncode}): {lines[-1]}")
        second = json.loads(done.stdout.strip().splitlines()[-1])
        ray.kill(actor)
        return ok({"cross_driver_calls": second["calls_per_s"]}, join_s=second["join_s"], lookup_s=second["lookup_s"])
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", required=True, choices=["fray_ray", "ray"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--warmup-s", type=float, default=0.5)
    parser.add_argument("--round-s", type=float, default=1.0)
    args = parser.parse_args()
    result = second_driver(args.backend, args.address, Timing(args.warmup_s, args.round_s))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
