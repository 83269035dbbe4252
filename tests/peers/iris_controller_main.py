"""Run a real Iris controller (marin-iris 2026-06 `LocalCluster`) until stdin closes.

Run by the peer controller venv's Python (3.11), never imported by fray_ray:

    <peer python> iris_controller_main.py WORKERS [LOG] [--tpu VARIANT:SLICES]

Starts all WORKERS workers at once (not on demand). With LOG, the controller's and workers'
log (INFO and up: what they scheduled, killed and why) goes to that file. With `--tpu`, it
also starts SLICES simulated TPU slices of VARIANT (one worker per VM of the variant, each with
Iris's `tpu-name`/`tpu-worker-id` attributes): that controller simulates a slice only for a
scale group with a TPU slice template besides its TPU resources. Prints
`ADDRESS http://127.0.0.1:<port>` once the controller answers, then `STOPPED` after stdin reached
EOF and the cluster was closed. Its workers run tasks with this same Python.
"""

import argparse
import logging
import sys

#: Chips per VM of the TPU generations the tests simulate.
CHIPS_PER_VM = {"v4": 4, "v5p": 4, "v5litepod": 4, "v6e": 4}


def add_tpu_group(config, variant: str, slices: int) -> None:
    """A scale group of `slices` simulated TPU slices of `variant`, all kept up from the start."""
    from iris.cluster.tpu_topology import get_tpu_topology
    from iris.rpc import config_pb2

    vms = get_tpu_topology(variant).vm_count
    group = config.scale_groups[f"tpu-{variant}"]
    group.name = f"tpu-{variant}"
    group.buffer_slices = slices
    group.max_slices = slices
    group.num_vms = vms
    group.resources.cpu_millicores = 8000
    group.resources.memory_bytes = 16 * 1024**3
    group.resources.disk_bytes = 50 * 1024**3
    group.resources.device_type = config_pb2.ACCELERATOR_TYPE_TPU
    group.resources.device_variant = variant
    group.resources.device_count = CHIPS_PER_VM[variant.split("-")[0]]
    template = group.slice_template
    template.accelerator_type = config_pb2.ACCELERATOR_TYPE_TPU
    template.accelerator_variant = variant
    template.num_vms = vms
    template.local.SetInParent()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workers", type=int, nargs="?", default=1)
    parser.add_argument("log", nargs="?")
    parser.add_argument("--tpu", help="VARIANT:SLICES, e.g. v5p-16:2")
    args = parser.parse_args()
    if args.log:
        logging.basicConfig(filename=args.log, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from iris.cluster.backends.local.cluster import LocalCluster, make_local_cluster_config

    config = make_local_cluster_config(args.workers)
    # The local autoscaler keeps `buffer_slices` idle workers beyond demand: buffer them all, so
    # every worker is up before tests start (one that appears mid-test makes placement a race).
    config.scale_groups["local-cpu"].buffer_slices = args.workers
    if args.tpu:
        variant, slices = args.tpu.rsplit(":", 1)
        add_tpu_group(config, variant, int(slices))
    cluster = LocalCluster(config)
    address = cluster.start()
    print(f"ADDRESS {address}", flush=True)
    try:
        sys.stdin.read()
    finally:
        cluster.close()
        print("STOPPED", flush=True)


if __name__ == "__main__":
    main()
