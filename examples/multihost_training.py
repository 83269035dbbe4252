"""Multi-host training, Ray style: a gang-scheduled TPU step on a 2-host v5p-16 slice.

Written as plain Ray code (`import ray`). Run it on fray_ray with a simulated slice:

    fray-ray run --tpu v5p-16 examples/multihost_training.py

A task on the slice's head resource (`TPU-v5p-16-head`, host 0 only) reads the slice's name;
each training step then runs one task per host through that name, which every host of the
slice has once as a resource. Hosts report their shard's loss to a named coordinator actor,
which averages them, as a parameter server or a metrics aggregator would.
"""

import os
import time

import numpy as np
import ray

STEPS = 3
HOSTS = 2  # a v5p-16 slice has 2 hosts of 4 chips


@ray.remote(num_cpus=0)
class Coordinator:
    """Collects each host's report per step and keeps the averaged weights."""

    def __init__(self, dim: int) -> None:
        self.weights = np.zeros(dim)
        self.reports: dict[int, list[tuple[int, float, np.ndarray]]] = {}

    def weights_for(self, step: int) -> np.ndarray:
        return self.weights

    def report(self, step: int, host: int, loss: float, gradient: np.ndarray) -> int:
        self.reports.setdefault(step, []).append((host, loss, gradient))
        if len(self.reports[step]) == HOSTS:
            self.weights = self.weights - 0.5 * np.mean([g for _, _, g in self.reports[step]], axis=0)
        return len(self.reports[step])

    def reported(self, step: int) -> int:
        return len(self.reports.get(step, []))

    def summary(self, step: int) -> tuple[list[int], float]:
        hosts = sorted(h for h, _, _ in self.reports[step])
        return hosts, round(float(np.mean([loss for _, loss, _ in self.reports[step]])), 6)


@ray.remote(resources={"TPU-v5p-16-head": 1})
def slice_name() -> str:
    """Runs on host 0 of a v5p-16 slice: the slice's name."""
    return ray.util.accelerators.tpu.get_current_pod_name()


@ray.remote(resources={"TPU": 4})
def train_step(step: int) -> str:
    """Runs on one host of the slice; each host trains on its own shard."""
    host = int(os.environ.get("TPU_WORKER_ID", "0"))
    coordinator = ray.get_actor("coordinator")
    weights = ray.get(coordinator.weights_for.remote(step))
    rng = np.random.default_rng(100 * step + host)
    x = rng.normal(size=(64, weights.size))
    y = x @ np.arange(1.0, weights.size + 1.0)
    error = x @ weights - y
    loss = float(np.mean(error**2))
    gradient = 2 * x.T @ error / len(y)
    ray.get(coordinator.report.remote(step, host, loss, gradient))
    while ray.get(coordinator.reported.remote(step)) < HOSTS:  # the hosts step together, as SPMD programs do
        time.sleep(0.01)
    return f"{os.environ.get('TPU_NAME', 'no-tpu')}/{host}"


def main() -> None:
    ray.init()
    coordinator = Coordinator.options(name="coordinator").remote(4)
    pod = ray.get(slice_name.remote())
    for step in range(STEPS):
        hosts_ran = ray.get([train_step.options(resources={pod: 1, "TPU": 4}).remote(step) for _ in range(HOSTS)])
        reporters, loss = ray.get(coordinator.summary.remote(step))
        print(f"step {step}: {len(hosts_ran)} hosts ran, reports from hosts {reporters}, mean loss {loss}")
    ray.kill(coordinator)
    ray.shutdown()


if __name__ == "__main__":
    main()
