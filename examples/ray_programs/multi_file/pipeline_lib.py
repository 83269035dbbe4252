"""Library half of the multi-file example: remote functions, actor classes and a wait loop.

main.py imports this module; Ray ships the functions and classes to its workers by reference to
this module, so workers must be able to import it as well.
"""

import ray

REGISTRY_NAME = "result_registry"


@ray.remote
class ResultRegistry:
    """Collects per-item results; tasks find it by name instead of receiving a handle."""

    def __init__(self):
        self.results = {}

    def record(self, key, value):
        self.results[key] = value
        return len(self.results)

    def snapshot(self):
        return dict(sorted(self.results.items()))


@ray.remote
class WordStats:
    def __init__(self):
        self.lengths = []

    def observe(self, words):
        self.lengths.extend(len(w) for w in words)
        return len(self.lengths)

    def summary(self):
        lengths = sorted(self.lengths)
        return {
            "words": len(lengths),
            "shortest": lengths[0],
            "longest": lengths[-1],
            "median": lengths[len(lengths) // 2],
        }


@ray.remote
def tokenize(line):
    return [word.strip(".,!?").lower() for word in line.split() if word.strip(".,!?")]


@ray.remote
def checksum(key, words):
    # Look the registry up by name from inside the task and report to it.
    registry = ray.get_actor(REGISTRY_NAME)
    value = sum(sum(ord(c) for c in word) for word in words) % 9973
    ray.get(registry.record.remote(key, value))
    return key, value


def bounded_map(submit, items, max_in_flight):
    """Call submit(item) for every item, keeping at most max_in_flight refs pending.

    Returns the results in the order they finished and the largest number ever pending.
    """
    pending = []
    finished = []
    peak = 0
    for item in items:
        if len(pending) >= max_in_flight:
            ready, pending = ray.wait(pending, num_returns=1)
            finished.extend(ray.get(ready))
        pending.append(submit(item))
        peak = max(peak, len(pending))
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        finished.extend(ray.get(ready))
    return finished, peak
