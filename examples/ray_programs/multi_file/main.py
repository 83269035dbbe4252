"""Multi-file Ray program: the remote functions and actors live in pipeline_lib.py.

Tokenizes a small corpus with tasks, feeds the tokens to a stats actor, and computes a checksum
per line with tasks that report to a *named* registry actor they look up with ray.get_actor.
Task submission goes through a ray.wait loop that keeps at most MAX_IN_FLIGHT tasks pending.
"""

import pipeline_lib
import ray
from pipeline_lib import REGISTRY_NAME, ResultRegistry, WordStats, bounded_map, checksum, tokenize

MAX_IN_FLIGHT = 2

CORPUS = [
    "It was the best of times, it was the worst of times.",
    "Call me Ishmael.",
    "All happy families are alike; each unhappy family is unhappy in its own way.",
    "In the beginning the Universe was created.",
    "It is a truth universally acknowledged!",
    "Happy families are all alike.",
    "The sky above the port was the color of television.",
]


def main():
    ray.init(num_cpus=2, namespace="multi_file_example")
    registry = ResultRegistry.options(name=REGISTRY_NAME).remote()
    stats = WordStats.remote()

    # Tokenize every line with at most MAX_IN_FLIGHT tasks pending at a time.
    token_lists, peak = bounded_map(tokenize.remote, CORPUS, MAX_IN_FLIGHT)
    print(f"tokenized {len(token_lists)} lines, at most {peak} tasks in flight")
    for words in token_lists:
        stats.observe.remote(words)
    print("word stats:", ray.get(stats.summary.remote()))

    # Checksums per line; the tasks find the registry by its name.
    tokens_by_line = dict(enumerate(ray.get([tokenize.remote(line) for line in CORPUS])))
    results, peak = bounded_map(
        lambda item: checksum.remote(f"line-{item[0]}", item[1]), sorted(tokens_by_line.items()), MAX_IN_FLIGHT
    )
    print(f"checksummed {len(results)} lines, at most {peak} tasks in flight")

    # The driver looks the same actor up by name, in this namespace.
    same_registry = ray.get_actor(REGISTRY_NAME)
    snapshot = ray.get(same_registry.snapshot.remote())
    print("registry agrees with task results:", snapshot == dict(sorted(results)))
    for key, value in snapshot.items():
        print(f"  {key}: {value}")
    # Both handles reach the same actor: a record through one is seen through the other.
    ray.get(registry.record.remote("line-count", len(CORPUS)))
    print("entries seen through get_actor handle:", len(ray.get(same_registry.snapshot.remote())))
    print("library module:", pipeline_lib.__name__)

    try:
        ray.get_actor(REGISTRY_NAME, namespace="some_other_namespace")
    except ValueError:
        print("not visible from another namespace: ValueError")
    ray.shutdown()


if __name__ == "__main__":
    main()
