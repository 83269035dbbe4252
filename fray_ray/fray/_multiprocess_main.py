"""Launcher that runs several copies of a command in one Iris task, splitting its GPUs.

    python -m fray_ray.fray._multiprocess_main --nproc N --devices-per-proc D -- CMD [ARGS...]

Process `r` (0 <= r < N) gets `LOCAL_RANK=r`, `LOCAL_WORLD_SIZE=N`, `NODE_RANK` (the task
index), `RANK = NODE_RANK * N + r`, `WORLD_SIZE = IRIS_NUM_TASKS * N` and, when D > 0,
`CUDA_VISIBLE_DEVICES` holding its D devices from the task's own list (or 0..N*D-1 if the
task has none). The processes share the task's process group, so killing the task kills them.
The launcher exits 0 once all exited 0; when one fails it stops the others and exits with that
process's code. SIGTERM and SIGINT are passed on to every process.

`fray_ray.fray._submit_wrappers.wrap_multiprocess` writes this command line. The module uses
only the standard library, so it starts fast.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

# Seconds the other processes get between SIGTERM and SIGKILL after one of them failed.
STOP_GRACE = 5.0
_POLL = 0.05


def process_environments(nproc: int, devices_per_proc: int, environ: Mapping[str, str]) -> list[dict[str, str]]:
    """The environment of each local process; ValueError when the task has too few devices."""
    task = environ.get("IRIS_TASK_ID", "")
    index_text = task.rsplit("/", 1)[-1].split(":", 1)[0] if task else "0"
    node_rank = int(index_text) if index_text.isdigit() else 0
    num_tasks = int(environ.get("IRIS_NUM_TASKS", "1") or 1)
    devices: list[str] = []
    if devices_per_proc > 0:
        visible = environ.get("CUDA_VISIBLE_DEVICES", "")
        devices = [d for d in visible.split(",") if d] if visible else [str(i) for i in range(nproc * devices_per_proc)]
        if len(devices) < nproc * devices_per_proc:
            raise ValueError(
                f"{nproc} processes x {devices_per_proc} device(s) need {nproc * devices_per_proc} devices, "
                f"but CUDA_VISIBLE_DEVICES={visible!r} lists {len(devices)}"
            )
    environments = []
    for rank in range(nproc):
        env = dict(environ)
        env.update(
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(nproc),
            NODE_RANK=str(node_rank),
            RANK=str(node_rank * nproc + rank),
            WORLD_SIZE=str(num_tasks * nproc),
        )
        if devices_per_proc > 0:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(devices[rank * devices_per_proc : (rank + 1) * devices_per_proc])
        environments.append(env)
    return environments


def _stop(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    alive = [p for p in processes if p.poll() is None]
    for process in alive:
        process.terminate()
    deadline = time.monotonic() + STOP_GRACE
    for process in alive:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run(command: Sequence[str], environments: Sequence[Mapping[str, str]]) -> int:
    """Start one process per environment and supervise them; returns the exit code."""
    processes: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, frame: object) -> None:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        for env in environments:
            processes.append(subprocess.Popen(list(command), env=dict(env)))
    except OSError as exc:
        print(f"fray multiprocess: cannot start {command[0]!r}: {exc}", file=sys.stderr, flush=True)
        _stop(processes)
        return 127
    while True:
        codes = [p.poll() for p in processes]
        failed = next((code for code in codes if code not in (None, 0)), None)
        if failed is not None:
            rank = codes.index(failed)
            print(f"fray multiprocess: local rank {rank} exited with {failed}; stopping the others", file=sys.stderr)
            _stop(processes)
            return failed if failed > 0 else 128 - failed
        if all(code == 0 for code in codes):
            return 0
        time.sleep(_POLL)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fray_ray.fray._multiprocess_main", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--nproc", type=int, required=True, help="processes to start")
    parser.add_argument("--devices-per-proc", type=int, default=0, help="GPUs given to each process")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- followed by the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given after --")
    if args.nproc < 1 or args.devices_per_proc < 0:
        parser.error("--nproc must be >= 1 and --devices-per-proc >= 0")
    try:
        environments = process_environments(args.nproc, args.devices_per_proc, os.environ)
    except ValueError as exc:
        print(f"fray multiprocess: {exc}", file=sys.stderr, flush=True)
        return 2
    return run(command, environments)


if __name__ == "__main__":
    sys.exit(main())
