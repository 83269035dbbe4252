"""Run a real Iris controller (marin-iris 2026-06 `LocalCluster`) until stdin closes.

Run by the peer controller venv's Python (3.11), never imported by fray_ray:

    <peer python> iris_controller_main.py WORKERS [LOG]

Starts all WORKERS workers at once (not on demand). With LOG, the controller's and workers'
log (INFO and up: what they scheduled, killed and why) goes to that file. Prints
`ADDRESS http://127.0.0.1:<port>` once the controller answers, then `STOPPED` after stdin reached
EOF and the cluster was closed. Its workers run tasks with this same Python.
"""

import logging
import sys


def main() -> None:
    if len(sys.argv) > 2:
        logging.basicConfig(filename=sys.argv[2], level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from iris.cluster.backends.local.cluster import LocalCluster, make_local_cluster_config

    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    config = make_local_cluster_config(workers)
    # The local autoscaler keeps `buffer_slices` idle workers beyond demand: buffer them all, so
    # every worker is up before tests start (one that appears mid-test makes placement a race).
    config.scale_groups["local-cpu"].buffer_slices = workers
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
