"""Multi-host training, Ray style: a gang-scheduled TPU step on a 2-host v5p-16 slice.

Written as plain Ray code (`import ray`). Run it on fray_ray with a simulated slice:

    fray-ray run --tpu v5p-16 examples/multihost_training.py

Each training step runs on every host of the slice at once (fray_ray gang-schedules a call that
asks for the slice's head resource); hosts report their shard's loss to a named coordinator
actor, which averages them, as a parameter server or a metrics aggregator would.
"""

import os

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

    def summary(self, step: int) -> tuple[list[int], float]:
        hosts = sorted(h for h, _, _ in self.reports[step])
        return hosts, round(float(np.mean([loss for _, loss, _ in self.reports[step]])), 6)


@ray.remote(resources={"TPU": 4, "TPU-v5p-16-head": 1})
def train_step(step: int) -> str:
    """Runs on every host of the slice; each host trains on its own shard."""
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
    return f"{os.environ.get('TPU_NAME', 'no-tpu')}/{host}"


def main() -> None:
    ray.init()
    coordinator = Coordinator.options(name="coordinator").remote(4)
    for step in range(STEPS):
        hosts_ran = ray.get(train_step.remote(step))
        hosts_ran = hosts_ran if isinstance(hosts_ran, list) else [hosts_ran]
        reporters, loss = ray.get(coordinator.summary.remote(step))
        print(f"step {step}: {len(hosts_ran)} hosts ran, reports from hosts {reporters}, mean loss {loss}")
    ray.kill(coordinator)
    ray.shutdown()


if __name__ == "__main__":
    main()
