"""A first fray_ray program: tasks, an actor and a wait loop, as Ray code would write them.

Run it with `python examples/hello.py`. `fray_ray.init()` starts an embedded Iris-compatible
cluster in this process; the tasks and the actor run in worker processes it launches.
"""

import fray_ray as ray


@ray.remote
def square(x: int) -> int:
    return x * x


@ray.remote
class Accumulator:
    def __init__(self) -> None:
        self.total = 0

    def add(self, value: int) -> int:
        self.total += value
        return self.total


def main() -> None:
    ray.init()
    refs = [square.remote(i) for i in range(10)]
    accumulator = Accumulator.remote()
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        accumulator.add.remote(ray.get(ready[0]))
    print("sum of squares:", ray.get(accumulator.add.remote(0)))
    print("cluster resources:", {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")})
    ray.shutdown()


if __name__ == "__main__":
    main()
