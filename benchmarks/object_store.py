#!/usr/bin/env python3
"""put/get of a 100 MB numpy array in memory and spilled to disk, on fray_ray (or Ray).

    python benchmarks/object_store.py                 # fray_ray
    .ci/venvs/ray/bin/python benchmarks/object_store.py --backend ray

In memory: put, get (zero-copy: call overhead, not bandwidth) and as a task argument, with the
default object_store_memory. Spilled: a 150 MB store holding two 100 MB arrays, so the first
is on disk; get of it (a mapping of its file), get plus a full read, and puts that each push an
older array out. This machine is shared: compare runs made one after the other only.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from collections.abc import Callable

import numpy as np

SIZE = 100_000_000


def rate(action: Callable[[], object], rounds: int) -> str:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return f"median {SIZE / 1e9 / statistics.median(times):9.2f} GB/s, best {SIZE / 1e9 / min(times):9.2f} GB/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["fray_ray", "ray"], default="fray_ray")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    ray = importlib.import_module(args.backend)
    array = np.random.default_rng(0).integers(0, 255, SIZE, dtype=np.uint8)

    ray.init(num_cpus=2)

    @ray.remote
    def nbytes(value: np.ndarray) -> int:
        return value.nbytes

    for _ in range(3):
        ray.put(array)
    print(f"in memory  put           {rate(lambda: ray.put(array), args.rounds)}")
    ref = ray.put(array)
    print(f"in memory  get           {rate(lambda: ray.get(ref), args.rounds)}")
    ray.get(nbytes.remote(array))
    print(f"in memory  task argument {rate(lambda: ray.get(nbytes.remote(array)), max(4, args.rounds // 2))}")
    ray.shutdown()

    ray.init(num_cpus=2, object_store_memory=150_000_000)
    spilled = ray.put(array)
    ray.put(array)  # the first one no longer fits in memory
    print(f"spilled    get           {rate(lambda: ray.get(spilled), args.rounds)}")
    print(f"spilled    get + read    {rate(lambda: int(ray.get(spilled).sum()), max(4, args.rounds // 2))}")
    print(f"spilled    put           {rate(lambda: ray.put(array), max(4, args.rounds // 2))}")
    ray.shutdown()


if __name__ == "__main__":
    main()
