"""Submission wrappers: pure rewrites of a job's command before it goes to Iris.

Each takes an Iris entrypoint (argv plus workdir files) and returns a new one whose argv runs
the old argv under something: several processes per task (`wrap_multiprocess`) or Nsight
Systems (`wrap_nsys`). Nothing is decided on the submitting machine that only the task can
know (its index, its GPUs): the wrapper's shell or launcher reads that from the task's
environment when it starts.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from fray_ray.fray.types import CpuConfig, DeviceConfig, GpuConfig
from fray_ray.iris.types import Entrypoint

__all__ = ["NSYS_DIR_ENV", "NSYS_TASKS_ENV", "nsys_tasks", "wrap_multiprocess", "wrap_nsys"]

#: Which task indices run under `nsys profile`: "0,2", or "all" (or "*").
NSYS_TASKS_ENV = "FRAY_RAY_NSYS_TASKS"
#: Where reports go; default: an `nsys` directory in the task's workdir.
NSYS_DIR_ENV = "FRAY_RAY_NSYS_DIR"

MULTIPROCESS_MODULE = "fray_ray.fray._multiprocess_main"

# `bash -c SCRIPT NAME ARGS...` runs SCRIPT with $0=NAME and "$@"=ARGS, so argv travels through
# the shell without being re-parsed. $IRIS_PYTHON is the task's interpreter (Iris's contract).
_MULTIPROCESS_SCRIPT = f'exec "${{IRIS_PYTHON:-python3}}" -m {MULTIPROCESS_MODULE} "$@"'

_NSYS_SCRIPT = r"""tasks="$1"; out="$2"; shift 3
task="${IRIS_TASK_ID##*/}"; index="${task%%:*}"; attempt="${task#*:}"
[ "$attempt" = "$task" ] && attempt=0
case ",$tasks," in
  *",all,"*|*",*,"*|*",$index,"*) ;;
  *) exec "$@" ;;
esac
out="${out:-$IRIS_WORKDIR/nsys}"
if ! command -v nsys >/dev/null 2>&1; then
  echo "fray: task $index should run under Nsight Systems, but nsys is not on PATH" >&2
  exit 127
fi
mkdir -p "$out" || exit 1
echo "fray: profiling task $index with nsys; report: $out/task-$index-attempt-$attempt.nsys-rep" >&2
exec nsys profile --force-overwrite=true -o "$out/task-$index-attempt-$attempt" "$@"
"""


def wrap_multiprocess(entrypoint: Entrypoint, nproc: int, device: DeviceConfig = CpuConfig()) -> Entrypoint:
    """Run `nproc` copies of the command in each task, each with its share of the task's GPUs.

    The launcher (`python -m fray_ray.fray._multiprocess_main`) gives process `r` the
    environment `LOCAL_RANK=r`, `LOCAL_WORLD_SIZE=nproc`, `RANK`, `WORLD_SIZE` and `NODE_RANK`,
    and for a GPU task `CUDA_VISIBLE_DEVICES` naming its `count // nproc` GPUs. The task fails
    as soon as one process fails. `nproc == 1` returns the entrypoint unchanged.

    Raises ValueError when the GPU count is not divisible by `nproc`, or for TPU tasks (a TPU
    VM's chips belong to one process).
    """
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise ValueError(f"processes_per_task must be a positive integer, got {nproc!r}")
    if nproc == 1:
        return entrypoint
    if isinstance(device, GpuConfig):
        if device.count % nproc:
            raise ValueError(
                f"processes_per_task={nproc} cannot split {device.count} GPU(s) per task evenly; "
                f"use a processes_per_task that divides {device.count}"
            )
        devices_per_proc = device.count // nproc
    elif isinstance(device, CpuConfig):
        devices_per_proc = 0
    else:
        raise ValueError(
            f"processes_per_task={nproc} is for GPU or CPU tasks; a TPU VM's chips ({device.variant}) "
            "are driven by one process per task"
        )
    argv = (
        "bash",
        "-c",
        _MULTIPROCESS_SCRIPT,
        "fray-multiprocess",
        "--nproc",
        str(nproc),
        "--devices-per-proc",
        str(devices_per_proc),
        "--",
        *entrypoint.argv,
    )
    return dataclasses.replace(entrypoint, argv=argv)


def nsys_tasks(env_vars: Mapping[str, str] | None = None) -> str | None:
    """The task selection for Nsight Systems: the job's own `FRAY_RAY_NSYS_TASKS` if set,
    else this process's; None (no profiling) when neither is set or it is empty."""
    value = (env_vars or {}).get(NSYS_TASKS_ENV)
    if value is None:
        value = os.environ.get(NSYS_TASKS_ENV)
    value = (value or "").replace(" ", "")
    return value or None


def wrap_nsys(entrypoint: Entrypoint, tasks: str, output_dir: str | None = None) -> Entrypoint:
    """Run the command under `nsys profile` in the selected tasks, unchanged in the others.

    `tasks` is "all" (or "*") or comma-separated task indices ("0,3"). Each selected attempt
    writes `<output_dir>/task-<index>-attempt-<attempt>.nsys-rep`, `output_dir` defaulting to
    `$IRIS_WORKDIR/nsys`, next to the task's other files. A selected task fails with exit code
    127 and a clear message when `nsys` is not installed. Raises ValueError for a malformed
    selection.
    """
    selection = tasks.replace(" ", "")
    for part in selection.split(","):
        if part not in ("all", "*") and not part.isdigit():
            raise ValueError(f"{NSYS_TASKS_ENV} must be 'all' or task indices like '0,2', got {tasks!r}")
    argv = ("bash", "-c", _NSYS_SCRIPT, "fray-nsys", selection, output_dir or "", "--", *entrypoint.argv)
    return dataclasses.replace(entrypoint, argv=argv)
