#!/usr/bin/env python3
"""`ray.util.multiprocessing.Pool`: map and imap_unordered of a trivial function, fray_ray vs Ray.

    python benchmarks/pool_map.py --ray-python .ci/venvs/ray/bin/python   # both, and the ratio
    python benchmarks/pool_map.py --backend fray_ray                     # one backend, JSON out

Each backend runs in a fresh process: a 2-process pool (started before timing), then `map` of
10,000 items (Ray's default chunk size: four chunks per process) and `imap_unordered` of the
same items (its default chunk size of 1: one call per item, one in flight per process). The
median of `--rounds` rounds is reported. This machine is shared: only ratios from one run mean
anything.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ITEMS = 10_000


def increment(value: int) -> int:
    return value + 1


def median_seconds(action: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def measure(backend: str, rounds: int, items: int) -> dict[str, float]:
    """Seconds per round of each shape, in this process, on `backend`."""
    ray = importlib.import_module(backend)
    pool_module = importlib.import_module(f"{backend}.util.multiprocessing")
    ray.init(num_cpus=2)
    try:
        with pool_module.Pool(processes=2) as pool:
            expected = list(range(1, items + 1))
            assert pool.map(increment, range(items)) == expected  # warm: code shipped, processes up
            return {
                "map_s": median_seconds(lambda: pool.map(increment, range(items)), rounds),
                "imap_unordered_s": median_seconds(lambda: sum(pool.imap_unordered(increment, range(items))), rounds),
            }
    finally:
        ray.shutdown()


def run_in(python: str, backend: str, rounds: int, items: int) -> dict[str, float]:
    command = [python, str(Path(__file__).resolve()), "--backend", backend, "--rounds", str(rounds), "--items", str(items)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=1800)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=["fray_ray", "ray"], help="measure one backend here, print JSON")
    parser.add_argument("--ray-python", default=".ci/venvs/ray/bin/python", help="the interpreter with Ray 2.60")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--items", type=int, default=ITEMS)
    args = parser.parse_args()
    if args.backend:
        print(json.dumps(measure(args.backend, args.rounds, args.items)))
        return
    fray = run_in(sys.executable, "fray_ray", args.rounds, args.items)
    ray = run_in(args.ray_python, "ray", args.rounds, args.items) if Path(args.ray_python).exists() else None
    print(f"{args.items} items, 2 processes, median of {args.rounds} rounds")
    print(f"{'shape':<18}{'fray_ray':>12}{'ray':>12}{'fray/ray':>10}")
    for shape in ("map_s", "imap_unordered_s"):
        theirs = f"{ray[shape]:11.3f}s" if ray else f"{'-':>12}"
        ratio = f"{fray[shape] / ray[shape]:10.2f}" if ray else f"{'-':>10}"
        print(f"{shape[:-2]:<18}{fray[shape]:11.3f}s{theirs}{ratio}")


if __name__ == "__main__":
    main()
