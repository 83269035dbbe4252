"""A local worker: one simulated host that runs task attempts as process groups.

It applies Iris's task runtime contract: a fresh per-attempt workdir holding the job's
`workdir_files` (and its workspace bundle, if one was uploaded), freshly allocated named
ports, and the `IRIS_*` environment (task id with attempt suffix, controller address, ports,
workdir, python, job env, worker id, the cluster token), plus the host's device environment
for tasks that asked for its device (TPU_*; CUDA_VISIBLE_DEVICES naming the task's GPUs).
Outcomes go back to the controller through the listener it passes in.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from google.protobuf import json_format

from fray_ray.cluster._bundle_store import BundleStore, HostBundles
from fray_ray.cluster._cgroups import MemoryCgroups
from fray_ray.cluster._config import WorkerSpec
from fray_ray.cluster._host_memory import SHARED_MEMORY_DIR_ENV, HostMemoryDirs
from fray_ray.cluster._logs import LogStore
from fray_ray.cluster._paths import path_inside
from fray_ray.cluster._process import ProcessSpec, ProcessSupervisor
from fray_ray.cluster._template import ForkCandidate
from fray_ray.cluster._uv import path_with_uv
from fray_ray.iris.job_info import TOKEN_ENV
from fray_ray.iris.transport import free_port
from fray_ray.iris.types import ResourceSpec

logger = logging.getLogger(__name__)

#: The newest Iris client reads an in-task bearer token from here.
IRIS_TASK_TOKEN_ENV = "IRIS_TASK_TOKEN"


@dataclass(frozen=True)
class AttemptLaunch:
    """Everything a worker needs to start one task attempt."""

    uid: int
    worker_id: str
    task_id: str
    attempt_id: int
    num_tasks: int
    argv: tuple[str, ...]
    workdir_files: Mapping[str, bytes]
    env_vars: Mapping[str, str]
    ports: tuple[str, ...]
    gpu_indices: tuple[int, ...]
    uses_gpu: bool
    uses_tpu: bool
    setup_scripts: tuple[str, ...]
    bundle_id: str
    resources: ResourceSpec

    @property
    def attempt_wire(self) -> str:
        return f"{self.task_id}:{self.attempt_id}"


@dataclass(frozen=True)
class TaskContract:
    """Cluster-wide settings every task environment is built from."""

    controller_url: str
    token: str | None
    python: str
    inherit_env: bool = True
    keep_workdirs: bool = False
    #: per-attempt memory limits (None: the machine does not allow them)
    memory_cgroups: MemoryCgroups | None = None
    run_setup_scripts: bool = True
    #: each simulated host's shared-memory directory (None: every task keeps the driver's)
    host_memory: HostMemoryDirs | None = None


#: The virtualenv setup scripts populate, as in Iris (`$IRIS_WORKDIR/.venv`); the command runs
#: with it activated when it exists.
VENV_DIR = ".venv"

# Runs `bash -c SETUP_RUNNER iris-setup N script_1 .. script_N argv...`: each setup script as a
# step of its own (as Iris's container runtime does), then the command from the workdir with
# `$IRIS_VENV` activated if a script left one there.
SETUP_RUNNER = """\
count="$1"; shift
step=1
while [ "$step" -le "$count" ]; do
  echo "[iris setup] step $step/$count"
  bash -c "$1" || { status=$?; echo "[iris setup] step $step/$count failed with exit code $status" >&2; exit "$status"; }
  shift
  step=$((step + 1))
done
cd "$IRIS_WORKDIR"
if [ -f "$IRIS_VENV/bin/activate" ]; then
  . "$IRIS_VENV/bin/activate"
  export IRIS_PYTHON="$IRIS_VENV/bin/python"
fi
exec "$@"
"""


class MissingBundle(ValueError):
    """A job names a workspace bundle the controller never received."""


class AttemptListener(Protocol):
    """Where a worker reports attempt outcomes (the controller)."""

    def attempt_started(self, uid: int, ports: dict[str, int]) -> None: ...

    def attempt_exited(self, uid: int, returncode: int, error: str) -> None: ...


class PortAllocator:
    """Hands out ports free on a host, never one still held by a live attempt of this cluster
    (ports are counted per port number, so one port is never given to two hosts at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[int] = set()

    def allocate(self, count: int, host: str) -> list[int]:
        ports: list[int] = []
        with self._lock:
            while len(ports) < count:
                port = free_port(host)
                if port not in self._held and port not in ports:
                    ports.append(port)
            self._held.update(ports)
        return ports

    def release(self, ports: list[int]) -> None:
        with self._lock:
            self._held.difference_update(ports)


class _AttemptOutput:
    """Per-attempt process listener: lines to the log store, start/exit to the controller."""

    __slots__ = ("_launch", "_ports", "_logs", "_listener", "_cleanup", "_exit_report")

    def __init__(
        self,
        launch: AttemptLaunch,
        ports: dict[str, int],
        logs: LogStore,
        listener: AttemptListener,
        cleanup: Callable[[], None],
        exit_report: Callable[[int], str] | None = None,
    ) -> None:
        self._launch = launch
        self._ports = ports
        self._logs = logs
        self._listener = listener
        self._cleanup = cleanup
        self._exit_report = exit_report  # says "OOM killed ..." for an attempt its cgroup saw OOM-killed

    def process_started(self, pid: int) -> None:
        self._listener.attempt_started(self._launch.uid, self._ports)

    def process_output(self, source: str, line: str, timestamp_ms: int) -> None:
        self._logs.append(self._launch.uid, self._launch.attempt_id, source, line, timestamp_ms)

    def process_exited(self, returncode: int, error: str) -> None:
        if returncode != 0 and not error and self._exit_report is not None:
            error = self._exit_report(returncode)  # read before the cleanup removes the cgroup
        self._cleanup()
        if error:
            self._logs.append(self._launch.uid, self._launch.attempt_id, "stderr", error, int(time.time() * 1000))
        self._listener.attempt_exited(self._launch.uid, returncode, error)


class LocalWorker:
    """One simulated host. `launch` is called by the controller's scheduler thread."""

    def __init__(
        self,
        spec: WorkerSpec,
        *,
        host: str,
        root_dir: str,
        contract: TaskContract,
        supervisor: ProcessSupervisor,
        logs: LogStore,
        ports: PortAllocator,
        bundles: BundleStore,
        listener: AttemptListener,
    ) -> None:
        self.spec = spec
        self.host = host  # this simulated host's address: advertised and bound by its tasks
        self._root = os.path.join(root_dir, spec.worker_id)
        self._contract = contract
        self._supervisor = supervisor
        self._logs = logs
        self._ports = ports
        self._bundles = HostBundles(bundles, f"{self._root}@bundles")  # '@' is in no worker id
        self._listener = listener

    @property
    def worker_id(self) -> str:
        return self.spec.worker_id

    def launch(self, launch: AttemptLaunch) -> None:
        """Prepare the workdir and environment, then hand the process to the supervisor."""
        ports: dict[str, int] = {}
        try:
            workdir = self._make_workdir(launch)
            numbers = self._ports.allocate(len(launch.ports), bind_host(self.host))
            ports = dict(zip(launch.ports, numbers))
            env = self.task_environment(launch, workdir, ports)
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            self._ports.release(list(ports.values()))
            message = f"worker {self.worker_id} could not prepare {launch.attempt_wire}: {exc}"
            self._logs.append(launch.uid, launch.attempt_id, "stderr", message, int(time.time() * 1000))
            self._listener.attempt_exited(launch.uid, 126, message)
            return
        cgroups = self._contract.memory_cgroups
        # Every attempt gets one: with no memory request it has no limit, and counts OOM kills only.
        cgroup = cgroups.attempt(launch.uid, max(0, launch.resources.memory_bytes)) if cgroups else None
        cleanup = functools.partial(self._attempt_done, list(ports.values()), workdir, launch.uid if cgroup else None)
        output = _AttemptOutput(launch, ports, self._logs, self._listener, cleanup, cgroup.exit_report if cgroup else None)
        argv = launch.argv
        runs_setup = bool(launch.setup_scripts) and self._contract.run_setup_scripts
        if runs_setup:
            argv = ("bash", "-c", SETUP_RUNNER, "iris-setup", str(len(launch.setup_scripts)), *launch.setup_scripts, *argv)
        # A task that holds a device never forks from a shared template; nor one with setup.
        fork = None
        if not (runs_setup or launch.uses_gpu or launch.uses_tpu or launch.gpu_indices):
            fork = ForkCandidate(argv, os.path.join(cgroup.path, "cgroup.procs") if cgroup is not None else None)
        if cgroup is not None:
            argv = cgroup.wrap(argv)
        try:
            self._supervisor.spawn(launch.uid, ProcessSpec(argv, env, workdir, fork), output)
        except RuntimeError:  # the cluster is stopping
            cleanup()

    def kill(self, uid: int) -> None:
        self._supervisor.kill(uid)

    def _make_workdir(self, launch: AttemptLaunch) -> str:
        # The task id was validated at LaunchJob; path_inside checks the result once more.
        segments = launch.task_id.strip("/").split("/")
        workdir = path_inside(self._root, *segments, f"attempt-{launch.attempt_id}-{launch.uid}")
        os.makedirs(workdir)
        try:
            if launch.bundle_id:
                if not self._bundles.unpack(launch.bundle_id, workdir):
                    raise MissingBundle(
                        f"bundle {launch.bundle_id} was never uploaded to this controller "
                        "(send it inline once as bundle_blob)"
                    )
            for name, content in launch.workdir_files.items():
                path = path_inside(workdir, name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(content)
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        return workdir

    def _attempt_done(self, ports: list[int], workdir: str, cgroup_uid: int | None = None) -> None:
        self._ports.release(ports)
        if cgroup_uid is not None and self._contract.memory_cgroups is not None:
            self._contract.memory_cgroups.release(cgroup_uid)
        if not self._contract.keep_workdirs:
            shutil.rmtree(workdir, ignore_errors=True)

    def task_environment(self, launch: AttemptLaunch, workdir: str, ports: Mapping[str, int]) -> dict[str, str]:
        """The environment of one attempt: inherited, then device, then job, then the contract."""
        contract = self._contract
        env = inherited_environment(contract.inherit_env)
        if self.spec.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in launch.gpu_indices)
        if launch.uses_tpu or launch.uses_gpu:
            env.update(self.spec.device_env)
        elif self.spec.tpu is not None:
            # Every process of a TPU host can tell which slice and host it runs on (Ray's TPU
            # tasks that hold chips, not the whole device, read it so); only processes holding
            # the device get the JAX/PJRT selection.
            env.update({key: value for key, value in self.spec.device_env.items() if key.startswith("TPU_")})
        shared = contract.host_memory.for_host(self.worker_id, self.host) if contract.host_memory else None
        if shared is not None and env.get(SHARED_MEMORY_DIR_ENV, "x"):  # "" (sharing off) stays off
            env[SHARED_MEMORY_DIR_ENV] = shared
        env.update(launch.env_vars)
        env.update(
            {
                "IRIS_TASK_ID": launch.attempt_wire,
                "IRIS_NUM_TASKS": str(launch.num_tasks),
                "IRIS_CONTROLLER_ADDRESS": contract.controller_url,
                "IRIS_CONTROLLER_URL": contract.controller_url,
                "IRIS_ADVERTISE_HOST": self.host,
                "IRIS_BIND_HOST": bind_host(self.host),
                "IRIS_WORKDIR": workdir,
                "IRIS_PYTHON": contract.python,
                "IRIS_VENV": os.path.join(workdir, VENV_DIR),
                # as Iris: `uv sync` / `uv pip install` in a setup script target the task's venv
                "UV_PROJECT_ENVIRONMENT": os.path.join(workdir, VENV_DIR),
                "IRIS_JOB_ENV": json.dumps(dict(launch.env_vars), sort_keys=True),
                "IRIS_WORKER_ID": self.worker_id,
                "IRIS_ATTEMPT_UID": str(launch.uid),
                "IRIS_TASK_RESOURCES": json_format.MessageToJson(launch.resources.to_proto(), indent=None),
            }
        )
        env["PATH"] = path_with_uv(env.get("PATH", os.defpath))
        if launch.setup_scripts:
            env["IRIS_JOB_SETUP_SCRIPTS"] = json.dumps(list(launch.setup_scripts))
        if launch.bundle_id:
            env["IRIS_BUNDLE_ID"] = launch.bundle_id
        for name, port in ports.items():
            env[f"IRIS_PORT_{name.upper()}"] = str(port)
        if contract.token:
            env[TOKEN_ENV] = contract.token
            env[IRIS_TASK_TOKEN_ENV] = contract.token
        return env


def inherited_environment(inherit_env: bool) -> dict[str, str]:
    """What every task's environment starts from (and the worker template's): this process's
    environment without Iris's task variables, or a minimal one (what says where the host keeps
    things: its paths, temp and cache directories, the cache of compiled shipped code)."""
    if inherit_env:
        return {k: v for k, v in os.environ.items() if not k.startswith("IRIS_") and k != TOKEN_ENV}
    kept = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "XDG_CACHE_HOME", "FRAY_RAY_BYTECODE_CACHE")
    return {k: os.environ[k] for k in kept if k in os.environ}


def bind_host(advertised: str) -> str:
    """What a task binds to serve at `advertised`: a loopback address itself (so simulated
    hosts stay apart), any other address through every interface."""
    return advertised if advertised.startswith("127.") or advertised in ("::1", "localhost") else "0.0.0.0"


def default_task_python() -> str:
    return sys.executable
