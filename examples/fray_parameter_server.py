"""A 4-replica parameter-server actor group with Fray.

Runs on an embedded cluster it starts itself:

    python examples/fray_parameter_server.py

`create_actor_group` returns at once; `wait_ready(count=1)` hands out the first replica as
soon as it serves, and the rest are picked up with `discover_new()` when they are ready.
"""

import time

from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
from fray_ray.fray import ActorConfig, FrayIrisClient, ResourceConfig, current_actor


class ParameterServer:
    """Holds one shard of the parameters and applies gradient updates to it."""

    def __init__(self, size: int, learning_rate: float) -> None:
        self.shard = current_actor().index
        self.weights = [0.0] * size
        self.learning_rate = learning_rate

    def update(self, gradient: list[float]) -> list[float]:
        self.weights = [w - self.learning_rate * g for w, g in zip(self.weights, gradient, strict=True)]
        return self.weights

    def get(self) -> tuple[int, list[float]]:
        return self.shard, self.weights


def main() -> None:
    with EmbeddedCluster(ClusterConfig(workers=(cpu_worker("cpu-0", cpu=4, memory="8g", disk="10g"),))) as cluster:
        client = FrayIrisClient(cluster.address, token=cluster.token)
        servers = client.create_actor_group(
            ParameterServer,
            3,
            learning_rate=0.5,
            name="parameter-server",
            count=4,
            resources=ResourceConfig(cpu=0.5, ram="256m", disk="0"),
            actor_config=ActorConfig(max_concurrency=1),
        )
        (first,) = servers.wait_ready(count=1, timeout=120)
        print("first update:", first.update.remote([1.0, 2.0, 4.0]).result())
        handles = [first]
        deadline = time.monotonic() + 120
        while len(handles) < 4 and time.monotonic() < deadline:
            handles += servers.discover_new()
            time.sleep(0.05)
        futures = [h.update.remote([2.0, 2.0, 2.0]) for h in handles]
        for future in futures:
            future.result()
        first_shard = first.get()[0]
        for shard, weights in sorted(h.get() for h in handles):
            print(f"shard {shard}{' (first ready)' if shard == first_shard else ''}: {weights}")
        print("final weights:", sorted(weights for _, weights in (h.get() for h in handles)))
        servers.shutdown()
        client.shutdown()


if __name__ == "__main__":
    main()
