"""Workers forked from the warm template against fresh interpreters, in one run.

Each repetition is a fresh driver process (so nothing is warm from the one before), run once
with the worker template on and once with `FRAY_RAY_WORKER_TEMPLATE=0`, alternating, and
measures: `init()` to the first task result, and creating 20 actors (until each answered a
call) with the session's total PSS and RSS while they are alive (from /proc/<pid>/smaps_rollup,
see `procs.py`). Prints each repetition and the medians; the machine is shared, so the medians
are what to quote.

    python benchmarks/worker_template.py [--repeat 5] [--actors 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid

_DRIVER = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import procs

began = time.perf_counter()
import fray_ray
fray_ray.init(num_cpus=2)

@fray_ray.remote
def one():
    return 1

assert fray_ray.get(one.remote()) == 1
first = time.perf_counter() - began

@fray_ray.remote(num_cpus=0)
class Counter:
    def ping(self):
        return os.getpid()

before = procs.memory_snapshot(procs.session_pids())
began = time.perf_counter()
actors = [Counter.remote() for _ in range(int(sys.argv[2]))]
pids = fray_ray.get([a.ping.remote() for a in actors])
created = time.perf_counter() - began
after = procs.memory_snapshot(procs.session_pids())
assert len(set(pids)) == len(actors)
fray_ray.shutdown()
print(json.dumps({"first_result_s": first, "actors_s": created, "pss_mib": after["pss_mib"],
                  "rss_mib": after["rss_mib"], "pss_mib_before": before["pss_mib"]}))
"""


def run_once(template: bool, actors: int) -> dict[str, float]:
    env = dict(os.environ)
    env["FRAY_RAY_WORKER_TEMPLATE"] = "1" if template else "0"
    env["FRAY_BENCH_MARK"] = uuid.uuid4().hex
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, here, str(actors)], env=env, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"driver failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--actors", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    for index in range(args.repeat):
        for label in ("on", "off") if index % 2 == 0 else ("off", "on"):
            result = run_once(label == "on", args.actors)
            results[label].append(result)
            print(label, {k: round(v, 3) for k, v in result.items()}, flush=True)
    print(f"\nmedians of {args.repeat} repetitions ({args.actors} actors):")
    for key in ("first_result_s", "actors_s", "pss_mib", "rss_mib"):
        on = statistics.median(r[key] for r in results["on"])
        off = statistics.median(r[key] for r in results["off"])
        spread_on = (max(r[key] for r in results["on"]) - min(r[key] for r in results["on"])) / on
        spread_off = (max(r[key] for r in results["off"]) - min(r[key] for r in results["off"])) / off
        print(f"  {key:16} template on {on:9.3f} (spread {spread_on:4.0%})   off {off:9.3f} (spread {spread_off:4.0%})   "
              f"off/on {off / on:5.2f}x")


if __name__ == "__main__":
    main()
