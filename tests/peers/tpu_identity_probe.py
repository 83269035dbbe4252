"""A Ray program that reports, from every process it places on a TPU slice's hosts, which Iris
worker it runs on (`IRIS_WORKER_ID`, set by Iris) beside the TPU identity Ray's helpers read
there, so a test can hold the identity against the controller's own worker attributes.

    fray-ray run --address iris://HOST:PORT tpu_identity_probe.py POD_TYPE

Prints one JSON object: the head task's view, each per-host task's, a head actor's.
"""

from __future__ import annotations

import json
import os
import sys
import time

import ray
from ray._private.accelerators import TPUAcceleratorManager
from ray.util.accelerators import tpu


def view() -> dict:
    return {
        "iris_worker": os.environ.get("IRIS_WORKER_ID"),
        "pod": tpu.get_current_pod_name(),
        "worker": TPUAcceleratorManager.get_current_node_tpu_worker_id(),
        "hosts": tpu.get_current_pod_worker_count(),
        "chips": tpu.get_num_tpu_chips_on_node(),
        "pod_type": TPUAcceleratorManager.get_current_node_tpu_pod_type(),
        "topology": TPUAcceleratorManager.get_current_node_tpu_topology(),
        "extra": TPUAcceleratorManager.get_current_node_additional_resources(),
        "node": ray.get_runtime_context().get_node_id(),
    }


@ray.remote
def head_view() -> dict:
    return view()


@ray.remote
class Barrier:
    """Counts arrivals, so the per-host tasks provably run at once (one on each host)."""

    def __init__(self) -> None:
        self.arrived = 0

    def arrive(self) -> None:
        self.arrived += 1

    def count(self) -> int:
        return self.arrived


@ray.remote
def host_view(barrier: ray.actor.ActorHandle, expected: int) -> dict:
    barrier.arrive.remote()
    deadline = time.monotonic() + 120
    while ray.get(barrier.count.remote()) < expected:
        if time.monotonic() > deadline:
            raise TimeoutError("not every host's task started")
        time.sleep(0.05)
    return view()


@ray.remote
class HeadActor:
    def view(self) -> dict:
        return view()


def main() -> None:
    pod_type = sys.argv[1]
    ray.init()
    head = ray.get(head_view.options(resources={f"TPU-{pod_type}-head": 1}).remote())
    barrier = Barrier.remote()
    hosts = ray.get([host_view.options(resources={head["pod"]: 1, "TPU": head["chips"]}).remote(barrier, head["hosts"])
                     for _ in range(head["hosts"])])
    actor = HeadActor.options(resources={f"TPU-{pod_type}-head": 1}).remote()
    print(json.dumps({"head": head, "hosts": hosts, "actor": ray.get(actor.view.remote())}))
    ray.shutdown()


if __name__ == "__main__":
    main()
