"""Map a dataset over a pool of stateful actors with ray.util.ActorPool.

Each FeatureExtractor actor loads a (small) model once in its constructor and then scores many
records. ActorPool.map returns results in input order; map_unordered returns them as they
finish, so the driver sorts them before printing. submit with get_next / get_next_unordered
run two more passes by hand.
"""

import numpy as np
import ray
from ray.util import ActorPool


@ray.remote
class FeatureExtractor:
    def __init__(self, seed, dim):
        # Every actor builds the same model from the same seed, so it does not matter which
        # actor of the pool handles which record.
        self.projection = np.random.default_rng(seed).normal(size=(dim, 2))
        self.processed = 0

    def extract(self, record):
        self.processed += 1
        features = np.asarray(record["values"]) @ self.projection
        return record["id"], [round(float(v), 3) for v in features]

    def label(self, record):
        self.processed += 1
        return record["id"], "positive" if sum(record["values"]) > 0 else "negative"

    def processed_count(self):
        return self.processed


def make_dataset(n, dim, seed):
    rng = np.random.default_rng(seed)
    return [{"id": i, "values": [round(float(v), 2) for v in rng.normal(size=dim)]} for i in range(n)]


def main():
    ray.init(num_cpus=2)
    dim = 4
    dataset = make_dataset(10, dim, seed=11)
    actors = [FeatureExtractor.remote(seed=3, dim=dim) for _ in range(2)]
    pool = ActorPool(actors)

    print("map (input order):")
    for record_id, features in pool.map(lambda actor, record: actor.extract.remote(record), dataset):
        print(f"  {record_id}: {features}")

    unordered = list(pool.map_unordered(lambda actor, record: actor.label.remote(record), dataset))
    print("map_unordered (sorted by id):")
    for record_id, label in sorted(unordered):
        print(f"  {record_id}: {label}")

    for record in dataset[:4]:
        pool.submit(lambda actor, r: actor.label.remote(r), record)
    in_order = []
    while pool.has_next():
        in_order.append(pool.get_next())
    print("submit/get_next:", in_order)

    for record in dataset[4:8]:
        pool.submit(lambda actor, r: actor.extract.remote(r), record)
    as_finished = []
    while pool.has_next():
        as_finished.append(pool.get_next_unordered())
    print("submit/get_next_unordered (sorted):", sorted(as_finished))
    print("pool idle:", pool.has_free(), "| pending:", pool.has_next())

    counts = ray.get([actor.processed_count.remote() for actor in actors])
    print("records processed by the pool:", sum(counts))
    ray.shutdown()


if __name__ == "__main__":
    main()
