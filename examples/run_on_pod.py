"""Run a function once on every host of a TPU pod slice, the way Ray's TPU users write it.

A plain Ray program (`import ray`), in the style of levanter's and Marin's `run_on_pod`:

1. a head task asks for `TPU-<pod type>-head`, which only host 0 of a slice has, and reads
   the slice's name and host count there;
2. one task per host asks for `{<slice name>: 1, "TPU": <chips per host>}`: each host has its
   slice's name as a resource once, so the tasks land one on each host of that slice.

With `--multislice`, one actor per slice holds that slice's head resource; slice 0's host 0
is the coordinator, and every host gets the `MEGASCALE_*` variables multislice JAX reads.

Without TPUs, on simulated slices (each with a name of its own):

    fray-ray run --tpu v5p-16 examples/run_on_pod.py
    fray-ray run --tpu v5p-16 --tpu v5p-16 examples/run_on_pod.py --multislice

On a cluster with TPU slices, `fray-ray run --address iris://HOST:PORT examples/run_on_pod.py`
(or Ray itself: `python examples/run_on_pod.py` on a Ray TPU cluster). docs/tpu.md says where
each host's TPU identity comes from.
"""

from __future__ import annotations

import argparse
import os

import ray
from ray.util.accelerators import tpu


@ray.remote(max_calls=1)
def train_step(step: int) -> dict:
    """Stands for one host's share of a training program (levanter's `max_calls=1` habit)."""
    return {
        "step": step,
        "pod": tpu.get_current_pod_name(),
        "worker": int(os.environ["TPU_WORKER_ID"]),
        "host": ray.util.get_node_ip_address(),
        "chips": tpu.get_num_tpu_chips_on_node(),
        "slice_id": os.environ.get("MEGASCALE_SLICE_ID"),
        "coordinator": os.environ.get("MEGASCALE_COORDINATOR_ADDRESS"),
    }


@ray.remote
def pod_info() -> tuple[str, int, int]:
    """Runs on host 0 of a slice: the slice's name, its host count and chips per host."""
    return tpu.get_current_pod_name(), tpu.get_current_pod_worker_count(), tpu.get_num_tpu_chips_on_node()


def run_on_pod(fn: ray.remote_function.RemoteFunction, tpu_type: str, *args: object) -> list[dict]:
    """Run `fn` once on each host of one slice of `tpu_type`; its results in host order."""
    name, hosts, chips = ray.get(pod_info.options(resources={f"TPU-{tpu_type}-head": 1}).remote())
    refs = [fn.options(resources={name: 1, "TPU": chips}).remote(*args) for _ in range(hosts)]
    return sorted(ray.get(refs), key=lambda result: result["worker"])


@ray.remote
class SliceActor:
    """Holds one slice (its head resource) for as long as it lives, and runs work on its hosts."""

    def info(self) -> tuple[str, int, int, str]:
        return (tpu.get_current_pod_name(), tpu.get_current_pod_worker_count(), tpu.get_num_tpu_chips_on_node(),
                ray.util.get_node_ip_address())

    def run(self, fn: ray.remote_function.RemoteFunction, env: dict[str, str], *args: object) -> list[ray.ObjectRef]:
        name, hosts, chips, _ = self.info()
        return [fn.options(resources={name: 1, "TPU": chips}, runtime_env={"env_vars": env}).remote(*args)
                for _ in range(hosts)]


def run_on_pod_multislice(fn: ray.remote_function.RemoteFunction, tpu_type: str, num_slices: int,
                          *args: object) -> list[dict]:
    """Run `fn` on every host of `num_slices` slices of `tpu_type`, with MEGASCALE_* set."""
    actors = [SliceActor.options(resources={f"TPU-{tpu_type}-head": 1}).remote() for _ in range(num_slices)]
    infos = ray.get([actor.info.remote() for actor in actors])
    coordinator = infos[0][3]  # slice 0's host 0
    per_slice = [actor.run.remote(fn, tpu.get_tpu_coordinator_env_vars(coordinator, num_slices, slice_id), *args)
                 for slice_id, actor in enumerate(actors)]
    results = ray.get([ref for refs in ray.get(per_slice) for ref in refs])
    for actor in actors:
        ray.kill(actor)
    return sorted(results, key=lambda result: (result["slice_id"], result["worker"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tpu-type", default="v5p-16")
    parser.add_argument("--multislice", action="store_true", help="two slices, one actor each")
    args = parser.parse_args()
    ray.init()
    if args.multislice:
        results = run_on_pod_multislice(train_step, args.tpu_type, 2, 1)
    else:
        results = run_on_pod(train_step, args.tpu_type, 1)
    for result in results:
        where = f"slice {result['slice_id']} " if args.multislice else ""
        print(f"{where}host {result['worker']} of {result['pod']}: step {result['step']} on {result['chips']} chips "
              f"at {result['host']}" + (f", coordinator {result['coordinator']}" if args.multislice else ""))
    ray.shutdown()


if __name__ == "__main__":
    main()
