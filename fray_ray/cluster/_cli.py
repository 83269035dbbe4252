"""`python -m fray_ray.cluster`: run an embedded cluster in the foreground until SIGINT/SIGTERM.

It prints the controller address, token and dashboard link, then waits. Worker layout comes from flags
(`--cpu-workers 2 --tpu v5p-16:tpu-a --gpu H100:8:2`) or a JSON/TOML file (`--config`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence

from fray_ray.cluster._config import ClusterConfig, WorkerSpec, cpu_worker
from fray_ray.cluster._devices import gpu_hosts, tpu_slice
from fray_ray.cluster._embedded import EmbeddedCluster
from fray_ray.cluster._layout import load_config_file


def _attribute(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def build_parser(
    prog: str = "python -m fray_ray.cluster",
    description: str = "Run an Iris-compatible controller with local workers in the foreground.",
) -> argparse.ArgumentParser:
    """The cluster's options; `fray-ray start` builds it under its own name and adds its own."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", metavar="FILE", help="JSON or TOML cluster layout (flags below add to or override it)")
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind (default: a free one)")
    parser.add_argument(
        "--cpu-workers", type=int, metavar="N", help="plain CPU workers (default 1 unless only accelerator hosts are described)"
    )
    parser.add_argument("--cpu", type=float, metavar="CORES", help="cores per CPU worker (default: this machine's)")
    parser.add_argument("--memory", metavar="SIZE", help="memory per CPU worker, e.g. 8g (default: this machine's)")
    parser.add_argument("--disk", metavar="SIZE", help="disk per CPU worker, e.g. 50g (default: free space)")
    parser.add_argument(
        "--attribute",
        type=_attribute,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="attribute for every CPU worker (repeatable)",
    )
    parser.add_argument(
        "--tpu",
        action="append",
        default=[],
        metavar="VARIANT[:NAME]",
        help="a simulated TPU slice, one worker per host, e.g. v5p-16:tpu-a (repeatable)",
    )
    parser.add_argument(
        "--gpu",
        action="append",
        default=[],
        metavar="VARIANT[:COUNT[:HOSTS[:POOL]]]",
        help="simulated GPU hosts, e.g. H100:8:2:gpu-a (repeatable)",
    )
    parser.add_argument("--no-auth", action="store_true", help="accept RPCs without a bearer token")
    parser.add_argument("--no-dashboard", action="store_true", help="serve no web dashboard at the controller's address")
    parser.add_argument("--token", help="bearer token to require (default: a random one)")
    parser.add_argument("--task-python", metavar="PYTHON", help="IRIS_PYTHON for tasks (default: this interpreter)")
    parser.add_argument(
        "--client-freshness-days",
        type=int,
        metavar="DAYS",
        help="reject root jobs whose client_revision_date is older than this many days",
    )
    parser.add_argument("--work-dir", metavar="DIR", help="parent directory for the cluster's temp dir")
    parser.add_argument("--json", action="store_true", help="print one JSON line {address, token, workers}")
    parser.add_argument("--log-level", default="WARNING", metavar="LEVEL", help="Python logging level (default WARNING)")
    return parser


def _flag_workers(args: argparse.Namespace, have_file_workers: bool) -> list[WorkerSpec]:
    workers: list[WorkerSpec] = []
    for i, text in enumerate(args.tpu):
        variant, _, name = text.partition(":")
        workers.extend(tpu_slice(variant, name or f"tpu-{i}"))
    for i, text in enumerate(args.gpu):
        parts = text.split(":")
        variant = parts[0] or "H100"
        count = int(parts[1]) if len(parts) > 1 and parts[1] else 8
        hosts = int(parts[2]) if len(parts) > 2 and parts[2] else 1
        pool = parts[3] if len(parts) > 3 and parts[3] else f"gpu-pool-{i}"
        workers.extend(gpu_hosts(variant, count, hosts=hosts, prefix=f"gpu{i}" if i else "gpu", pool=pool))
    cpu_count = args.cpu_workers
    if cpu_count is None:
        sized = any(v is not None for v in (args.cpu, args.memory, args.disk)) or bool(args.attribute)
        cpu_count = 1 if sized or not (workers or have_file_workers) else 0
    attributes = dict(args.attribute)
    for i in range(cpu_count):
        workers.append(cpu_worker(f"cpu-{i}", cpu=args.cpu, memory=args.memory, disk=args.disk, attributes=attributes))
    return workers


def config_from_args(args: argparse.Namespace) -> ClusterConfig:
    overrides = {
        "host": args.host,
        "port": args.port,
        "token": args.token,
        "task_python": args.task_python,
        "client_freshness_days": args.client_freshness_days,
        "work_dir": args.work_dir,
    }
    if args.no_auth:
        overrides["auth"] = False
    if args.no_dashboard:
        overrides["dashboard"] = False
    if args.config:
        base = load_config_file(args.config)
        workers = list(base.workers) + _flag_workers(args, have_file_workers=bool(base.workers))
    else:
        base = ClusterConfig()
        workers = _flag_workers(args, have_file_workers=False)
    values = {k: v for k, v in overrides.items() if v is not None}

    return dataclasses.replace(base, workers=tuple(workers), **values)


def main(
    argv: Sequence[str] | None = None,
    *,
    on_ready: Callable[[EmbeddedCluster], Callable[[], None]] | None = None,
    prog: str | None = None,
) -> int:
    """Run the cluster until SIGINT/SIGTERM. `on_ready(cluster)` runs once it serves; the
    function it returns runs when the cluster stops (before the cluster is torn down). `prog`
    names the command in usage errors (`fray-ray start` passes its own)."""
    parser = build_parser() if prog is None else build_parser(prog)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    cluster = EmbeddedCluster(config)
    on_stop: Callable[[], None] | None = None
    try:
        cluster.start()
        if on_ready is not None:
            on_stop = on_ready(cluster)
        workers = [w.spec for w in cluster.workers()]
        if args.json:
            print(
                json.dumps(
                    {
                        "address": cluster.address,
                        "token": cluster.token,
                        "dashboard": cluster.dashboard_url,
                        "workers": [w.worker_id for w in workers],
                    }
                ),
                flush=True,
            )
        else:
            print(f"fray_ray cluster ready at {cluster.address} (started in {cluster.started_in_s * 1000:.0f} ms)")
            print(f"address: {cluster.address}")
            print(f"token: {cluster.token}" if cluster.token else "token: none (auth disabled)")
            if cluster.dashboard_url:
                print(f"dashboard: {cluster.dashboard_url}")
            for spec in workers:
                print(f"worker: {spec.worker_id} ({_describe(spec)})")
            # The iris command-line tool takes the bearer token from MARIN_CLUSTER_TOKEN.
            token_env = f"MARIN_CLUSTER_TOKEN={cluster.token} " if cluster.token else ""
            print(f"iris CLI: {token_env}iris --controller-url {cluster.address} cluster status")
            print("Press Ctrl-C to stop.", flush=True)
        # Short waits: a signal the kernel hands to another thread only sets a flag, which
        # this (main) thread acts on when it next wakes; a long wait would sleep through it.
        while not stop.wait(0.2):
            pass
    finally:
        if on_stop is not None:
            on_stop()
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not args.json:
        print("fray_ray cluster stopped", flush=True)
    return 0


def _describe(spec: WorkerSpec) -> str:
    parts = [f"{spec.cpu_millicores / 1000:g} CPU", f"{spec.memory_bytes / 1024**3:.3g} GiB"]
    if spec.tpu is not None:
        parts.append(f"TPU {spec.tpu.variant} host {spec.tpu.worker_index} of {spec.tpu.slice_name}")
    if spec.gpu is not None:
        parts.append(f"{spec.gpu.count}x {spec.gpu.variant}")
    return ", ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
