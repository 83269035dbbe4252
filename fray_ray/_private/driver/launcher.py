"""Starting worker processes through the Fray client: executors as jobs, actors as actor groups.

Everything the Ray layer starts on the cluster goes through here, so the rest of the driver
never touches Fray or Iris. Fray calls can block on the controller, so they run on one
launcher thread, in order, and report back through callbacks.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fray_ray._private.core import host_identity, user_tracebacks
from fray_ray._private.core.runtime_env import RuntimeEnv
from fray_ray._private.core.task_spec import PoolKey, ResourceShape
from fray_ray._private.driver.lease import SessionLease, fate_mode
from fray_ray._private.driver.shipped_code import NEVER_SHIPPED, default_code
from fray_ray._private.stream import spin_wait
from fray_ray._version import __version__
from fray_ray.fray import (
    ActorConfig,
    Client,
    Entrypoint,
    EnvironmentConfig,
    GpuConfig,
    JobHandle,
    JobRequest,
    JobStatus,
    ResourceConfig,
    wait_all,
)
from fray_ray.fray._setup_scripts import pip_setup_script

logger = logging.getLogger(__name__)

LaunchCallback = Callable[[Any, BaseException | None], None]
#: Named-actor group names stay well inside a job name segment (255 bytes), leaving room for
#: the `-<index>` Fray appends to endpoint names.
_MAX_GROUP_BYTES = 200
#: Seconds a clean shutdown waits for executors and actors told to exit to end by themselves.
EXIT_WAIT_S = 3.0


#: What a worker process (interpreter, fray_ray, its connections) needs besides the memory
#: its task asked for: added to every memory request, since a cluster may enforce it.
WORKER_MEMORY_OVERHEAD = 256 * 1024 * 1024


@dataclass(frozen=True)
class WorkerEntryPoints:
    """What a launched worker runs: the worker package's entry points, handed to the launcher
    by whoever builds the driver (`bootstrap`), so the driver never imports the worker's code.

    `executor` and `actor_host` run in local mode, where workers are threads of the driver;
    `checked_executor` and `checked_actor_host` check the host first (fray_ray's version, the
    runtime env's packages) and take the driver's version and runtime env as their first two
    arguments."""

    executor: Callable[..., None]
    checked_executor: Callable[..., None]
    actor_host: type
    checked_actor_host: type


def _ram(memory_bytes: int) -> str:
    """Fray size string for a memory request: `memory=` plus the worker's own overhead, or
    none when `memory=` was not given.

    A cluster may enforce the request as a hard limit (the embedded one does, with a memory
    cgroup per attempt; Iris's workers with container limits), so a worker asks only when the
    user did, as Ray reserves memory only when asked, and asks for room for itself too: Ray's
    `memory=` is what the task needs, not the worker process it runs in.
    """
    if memory_bytes <= 0:
        return "0"
    return f"{(memory_bytes + WORKER_MEMORY_OVERHEAD + (1 << 20) - 1) // (1 << 20)}m"


def resource_config(
    shape: ResourceShape, accelerator: str | None = None, cpu: float | None = None, slices: Collection[str] = (),
    pins: tuple[tuple[str, str | int], ...] = (),
) -> ResourceConfig:
    """What a worker process asks the cluster for: the CPU it holds while it works (`cpu`,
    default the shape's), so the cluster spreads processes over hosts as their CPUs allow;
    the memory it was given (plus its own overhead); GPUs as devices; and, for custom
    resources, the host attributes that declare them (so it runs on a host that has them):
    for a TPU slice's resources (`slices` names the cluster's slices), the slice or host 0 of
    one, and `pins` (worker attribute values) for one host. TPU chips are the driver's to
    account: the process asks for no TPU device, which on Iris would make it a job on every
    host of the slice.

    The driver's ledger still decides what runs (Ray's logical accounting); `cpu` is less than
    the shape's when the driver's own idle or blocked processes already hold that CPU at the
    cluster (see `ClusterLedger.ask`), so the new one is not kept waiting behind them.
    """
    from fray_ray._private.driver.nodes import required_attribute_values, required_attributes

    cores = shape.cpu if cpu is None else cpu
    needs = required_attributes(shape.custom, slices)  # custom resources: only hosts that have them
    pins = tuple(dict.fromkeys((*required_attribute_values(shape.custom, slices), *pins)))
    if shape.gpu >= 1:
        device = GpuConfig(accelerator or "auto", int(shape.gpu))
        return ResourceConfig(cpu=cores, ram=_ram(shape.memory), disk="0", device=device, required_attributes=needs,
                              required_attribute_values=pins)
    return ResourceConfig(cpu=cores, ram=_ram(shape.memory), disk="0", required_attributes=needs,
                          required_attribute_values=pins)


#: Environment variables that set fray_ray's behaviour in the driver and, passed on, in its workers.
_WORKER_SETTINGS = (user_tracebacks.INTERNALS_ENV, spin_wait.SPIN_ENV)


def _driver_settings() -> dict[str, str]:
    """The driver's values of `_WORKER_SETTINGS` (those it has), for a worker's environment."""
    return {name: os.environ[name] for name in _WORKER_SETTINGS if name in os.environ}


class WorkerLauncher:
    """Launches executors and actor hosts for one session."""

    def __init__(
        self, client: Client, session_address: str, token: str, entry_points: WorkerEntryPoints, *, job_prefix: str,
        owns_cluster: bool = False, session_job: bool = False, slices: Callable[[], Collection[str]] = frozenset,
    ) -> None:
        """`session_job`: launch the session's lease job even on an owned cluster, where fate
        sharing does not need it, so the session has a job of its own (for its dashboard feed).
        `slices`: the names of the cluster's TPU slices now (their resources pin a process)."""
        self._slices = slices
        self._client = client
        self._session_address = session_address
        self._token = token
        self._prefix = job_prefix
        self._entry_points = entry_points
        self.in_process = client.in_process
        #: where the session's jobs go in Iris's job tree, so they end with it
        self.lease = SessionLease(
            client, fate_mode(client, in_process=self.in_process, owns_cluster=owns_cluster),
            session_name=job_prefix, session_address=session_address, token=token, session_job=session_job,
        )
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="launcher")
        # Shipped as the job's workspace unless a runtime env names a working_dir.
        self._default_code = default_code()
        self._announce = not owns_cluster  # say what goes to a cluster the driver did not start
        self._prepared: set[RuntimeEnv] = set()  # runtime envs whose code was captured
        self._prepared_lock = threading.Lock()
        self.startup = StartupWatch(self.group_failure)

    def start(self) -> None:
        """Launch the session's lease job first, so every job launched after it (on the same
        thread) can be its child. Does not wait for it."""
        self._submit(self.lease.launch, lambda _result, _error: None)

    def prepare(self, runtime_env: RuntimeEnv) -> None:
        """Capture the code a runtime env ships (working_dir, py_modules) now, once per session,
        so later edits or moves of those directories do not reach its workers. Blocks while
        the files are read; raises ValueError when they cannot be shipped (too large, missing)
        or when the env cannot be honoured in this mode."""
        with self._prepared_lock:
            if runtime_env in self._prepared:
                return
        packages = runtime_env.packages_to_install
        if self.in_process:
            if packages is not None:
                raise ValueError(
                    f"runtime_env['{packages.tool}'] cannot be honoured in local mode: tasks run in the "
                    "driver's own process; install the packages here, or run without local_mode"
                )
        else:
            captured = self._client.prepare_environment(self._environment(runtime_env))
            if captured is not None and self._announce:
                what = f"the working_dir {runtime_env.working_dir}" if runtime_env.working_dir else self._default_code.what
                print(f"fray_ray: shipping {what} to the cluster's workers: {captured.files} files, "
                      f"{captured.size_bytes / (1 << 20):.1f} MiB", file=sys.stderr, flush=True)
        with self._prepared_lock:
            self._prepared.add(runtime_env)

    def _environment(self, runtime_env: RuntimeEnv, identity: Mapping[str, str] | None = None) -> EnvironmentConfig:
        """The Fray environment of a worker: its runtime env's code (by default the driver's
        project, or only what it imported: `shipped_code`), packages (a setup script) and env
        vars, and the `identity` of the host it is placed on (variables the worker sets where its
        host does not)."""
        setup = None
        pip = runtime_env.packages_to_install
        if pip is not None and not self.in_process:
            setup = [pip_setup_script(pip.packages, install_options=pip.install_options, check=pip.check,
                                      timeout_s=runtime_env.setup_timeout_s)]
        default = self._default_code  # the driver's project, or what it imported (see shipped_code)
        return EnvironmentConfig(
            workspace=runtime_env.working_dir or default.root,
            workspace_only=None if runtime_env.working_dir else default.only,
            env_vars={**_driver_settings(), **host_identity.encode(identity or {}), **runtime_env.env_vars_dict},
            workspace_excludes=(*runtime_env.excludes, *NEVER_SHIPPED),
            py_modules=runtime_env.py_modules,
            setup_scripts=setup,
        )

    def launch_executor(self, executor_id: bytes, pool: PoolKey, callback: LaunchCallback, *,
                        cpu: float | None = None, pins: tuple[tuple[str, str | int], ...] = (),
                        identity: Mapping[str, str] | None = None) -> None:
        """An executor for `pool`'s tasks, asking the cluster for `cpu` (default: the pool's),
        on a host with the worker attribute values `pins` (one TPU host, say), whose
        `identity` (its `TPU_*` variables) it adopts where the host does not set them."""
        args = (self._session_address, self._token, executor_id, pool.max_calls, self.in_process)
        request = JobRequest(
            name=f"{self._prefix}-exec-{executor_id.hex()[:12]}",
            entrypoint=self._executor_entrypoint(pool.runtime_env, args),
            resources=resource_config(pool.shape, pool.accelerator, cpu, self._slices(), pins),
            environment=self._environment(pool.runtime_env, identity),
            max_retries_failure=0,
            max_retries_preemption=0,
        )
        self._submit(lambda: self._client.submit(request, adopt_existing=False, **self.lease.children()), callback)

    def _executor_entrypoint(self, runtime_env: RuntimeEnv, args: tuple[Any, ...], **kwargs: Any) -> Entrypoint:
        if self.in_process:
            return Entrypoint.from_callable(self._entry_points.executor, args=args, kwargs=kwargs)
        return Entrypoint.from_callable(
            self._entry_points.checked_executor, args=(fray_ray_version(), runtime_env, *args), kwargs=kwargs
        )

    def launch_actor(
        self,
        actor_id: bytes,
        group_name: str,
        shape: ResourceShape,
        *,
        env_vars: Mapping[str, str],
        max_restarts: int,
        accelerator: str | None,
        callback: LaunchCallback,
        gang: Any = None,
        runtime_env: RuntimeEnv | None = None,
        started: Callable[[], bool] | None = None,
        start_failed: Callable[[str], None] | None = None,
        cpu: float | None = None,
        detached: bool = False,
        named: bool = False,
        pins: tuple[tuple[str, str | int], ...] = (),
        identity: Mapping[str, str] | None = None,
    ) -> None:
        """One actor (a Fray group of one), or a gang's members on one TPU slice (`gang`),
        asking the cluster for `cpu` (default: what the actor holds).

        A `detached` actor is a root job that outlives the session; any other is one of the
        session's jobs (see `lease`), and a `named` one is also registered where other drivers
        look names up (`lookup_named`). With `started`/`start_failed`, the actor's job is
        watched until `started()` is true; if the job ends first, `start_failed(reason)` is
        called (the worker's own error text). `pins`: worker attribute values of the one host
        it must start on; `identity`: that host's `TPU_*` variables, adopted where the host
        does not set them."""
        if runtime_env is None:
            runtime_env = RuntimeEnv(env_vars=tuple(sorted(env_vars.items())))
        host_args: tuple[Any, ...] = ()
        host_class = self._entry_points.actor_host
        if not self.in_process:
            host_class, host_args = self._entry_points.checked_actor_host, (fray_ray_version(), runtime_env)

        if gang is not None:
            resources = ResourceConfig.with_tpu(gang.tpu, cpu=0, ram="256m", disk="0")
            count = gang.hosts
        else:
            resources = resource_config(shape, accelerator, cpu, self._slices(), pins)
            count = 1

        def create() -> Any:
            placement: dict[str, Any] = self.lease.detached() if detached else self.lease.children()
            if named and not detached and not self.in_process:
                placement["findable_at_root"] = True
            group = self._client.create_actor_group(
                host_class,
                *host_args,
                self._session_address,
                self._token,
                actor_id,
                self.in_process,
                gang is not None,
                name=group_name,
                count=count,
                resources=resources,
                environment=self._environment(runtime_env, identity),
                actor_config=ActorConfig(
                    max_concurrency=1_000_000,
                    max_restarts=max_restarts,
                ),
                **placement,
            )
            if detached and not self.in_process:
                self._client.detach_job(group.job_id)  # the client's shutdown must leave it running
            if started is not None and start_failed is not None:
                self.startup.watch(group, started, start_failed)
            return group

        self._submit(create, callback)

    @staticmethod
    def named_group(namespace: str, name: str) -> str:
        """The group (job) name of a named actor: the same from every driver of the cluster.
        Ray takes any actor name; a job name segment is at most 255 bytes, so a long one is
        cut and made unique again with a digest of the whole."""
        raw = f"rayactor.{namespace}.{name}"
        group = "".join(c if c.isalnum() or c in "-_." else "-" for c in raw)
        if len(group.encode()) <= _MAX_GROUP_BYTES:
            return group
        digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        head = group.encode()[: _MAX_GROUP_BYTES - len(digest) - 1].decode(errors="ignore")
        return f"{head}-{digest}"

    def lookup_named(self, namespace: str, name: str, timeout: float = 10.0) -> tuple[Any, dict[str, Any]] | None:
        """A live named actor started by another driver of this cluster: (Fray handle, its
        description), or None. Blocks for at most one lookup."""
        if self.in_process:  # in-process clients have no other drivers
            return None
        try:
            handle = self._client.find_actor(self.named_group(namespace, name), **self.lease.detached())
        except Exception:  # noqa: BLE001 - a controller hiccup: treat as not found
            return None
        if handle is None:
            return None
        try:
            description = handle.describe.remote().result(timeout=timeout)
        except Exception:  # noqa: BLE001 - not registered, gone, or unreachable: not found
            return None
        return handle, description

    def launch_gang(self, gang_id: bytes, shape: Any, max_calls: int, callback: LaunchCallback) -> None:
        """One coscheduled job per slice (or per GPU host group); callback gets the job list.

        Each replica's executor finds its member index from its Iris task index; in-process
        (LocalClient), each member is a job of its own with an explicit index.
        """
        base_name = f"{self._prefix}-gang-{gang_id.hex()[:10]}"
        environment = self._environment(shape.runtime_env)
        if shape.tpu:
            resources = ResourceConfig.with_tpu(shape.tpu, cpu=0, ram="256m", disk="0")
        else:
            resources = ResourceConfig(
                cpu=0, ram="256m", disk="0", device=GpuConfig(shape.gpu or "auto", count=max(1, shape.gpus_per_host)),
                replicas=shape.hosts,
            )

        def requests() -> list[JobRequest]:
            made = []
            if self.in_process:
                for index in range(shape.size):
                    made.append(JobRequest(
                        name=f"{base_name}-{index}",
                        entrypoint=self._executor_entrypoint(
                            shape.runtime_env, (self._session_address, self._token, gang_id, max_calls, True),
                            gang_index=index,
                        ),
                        resources=ResourceConfig(cpu=0, ram="64m", disk="0"),
                        environment=environment,
                    ))
                return made
            for slice_index in range(shape.slices):
                made.append(JobRequest(
                    name=f"{base_name}-{slice_index}",
                    entrypoint=self._executor_entrypoint(
                        shape.runtime_env, (self._session_address, self._token, gang_id, max_calls, False),
                        gang_base=slice_index * shape.hosts,
                    ),
                    resources=resources,
                    environment=environment,
                    replicas=shape.hosts,
                    max_retries_failure=0,
                    max_retries_preemption=0,
                ))
            return made

        def launch_all() -> list[Any]:
            jobs = []
            try:
                for request in requests():
                    jobs.append(self._client.submit(request, adopt_existing=False, **self.lease.children()))
            except BaseException:
                for job in jobs:
                    self.terminate(job)
                raise
            return jobs

        self._submit(launch_all, callback)

    def _submit(self, action: Callable[[], Any], callback: LaunchCallback) -> None:
        def run() -> None:
            try:
                result = action()
            except BaseException as exc:  # noqa: BLE001 - reported to the caller's callback
                callback(None, exc)
                return
            callback(result, None)

        try:
            self._pool.submit(run)
        except RuntimeError as exc:  # shut down
            callback(None, exc)

    def job_failure(self, job: Any) -> str | None:
        """If the job has ended, why: the controller's error text (the worker's own last words)
        and the tail of its output; None while it runs."""
        try:
            status = job.status()
        except Exception as exc:  # noqa: BLE001 - a lost controller is a failure too
            return f"its job could not be queried: {exc}"
        if not JobStatus.finished(status):
            return None
        error = ""
        if not self.in_process:
            try:
                error = job.error()
            except Exception as exc:  # noqa: BLE001 - the reason is a courtesy; the failure is not
                error = f"(the controller's error could not be read: {exc})"
        try:
            tail = "\n".join(job.logs(max_lines=20))
        except Exception:  # noqa: BLE001 - logs are a courtesy
            tail = ""
        text = f"its job {getattr(job, 'job_id', '?')} ended {status}"
        if error:
            text += f": {error}"
        if tail and tail.strip() not in error:
            text += f"\nlast output of the job:\n{tail}"
        if status == JobStatus.STOPPED:  # maybe cancelled with the session's lease job: say why that ended
            text += self.lease.failure() or ""
        return text

    def group_failure(self, group: Any) -> str | None:
        """If an actor's job has ended, why; None while it runs (or if it cannot tell). `group`
        is the actor's Fray group, or the job of the executor it was lent (`idle_workers`)."""
        job = getattr(group, "job", None)
        if job is None and isinstance(group, JobHandle):
            job = group
        return None if job is None else self.job_failure(job)

    def terminate(self, job: Any) -> None:
        try:
            self._pool.submit(_stop_job, job)
        except RuntimeError:
            _stop_job(job)

    def shutdown(
        self,
        jobs: list[Any],
        wait: bool = True,
        *,
        exiting: Callable[[], bool] = lambda: False,
        busy: Sequence[Any] = (),
    ) -> None:
        """End the given jobs/groups and stop the launcher thread.

        Jobs in `busy` are running a task (Ray kills a session's running tasks): they are
        terminated at once. Executors and actors that were told to exit end by themselves
        (status 0: their jobs succeed, as Ray reports a finished session's workers): while
        `exiting()` says some are still going, wait for them (at most `EXIT_WAIT_S`), then
        terminate whatever still runs, and release the lease last, so it ends as succeeded too.
        In local mode the workers are threads of this process: they are stopped at once."""
        self.startup.stop()
        busy = list(busy)
        if not self.in_process:
            for job in busy:
                _stop_job(job)
        self._submit(lambda: self._end_jobs(jobs + busy, exiting), lambda _result, _error: None)
        self._submit(self.lease.release, lambda _result, _error: None)
        self._pool.shutdown(wait=wait)

    def _end_jobs(self, jobs: list[Any], exiting: Callable[[], bool]) -> None:
        if self.in_process:  # threads, which do not exit: nothing to wait for, no job state to keep
            for job in jobs:
                _stop_job(job)
            return
        handles = [getattr(job, "job", job) for job in jobs]  # an actor group's job
        deadline = time.monotonic() + EXIT_WAIT_S
        delay = 0.01
        while exiting() and time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
        try:
            wait_all(handles, timeout=max(0.5, deadline - time.monotonic()) if handles else 0, raise_on_failure=False)
        except Exception:  # noqa: BLE001 - some did not end (or cannot tell): terminated below
            pass
        for job in jobs:
            _stop_job(job)  # does nothing for a finished job


def _stop_job(job: Any) -> None:
    try:
        if hasattr(job, "terminate"):
            job.terminate()
        elif hasattr(job, "shutdown"):
            job.shutdown()
    except Exception:  # noqa: BLE001 - best effort; the job may be gone already
        logger.debug("terminating %r failed", job, exc_info=True)


def fray_ray_version() -> str:
    return __version__


class StartupWatch:
    """Watches jobs whose workers have not connected yet: when one ends first, says why.

    One thread polls every watched job each `interval` seconds until its `started()` turns
    true (then forgets it) or `failure(job)` reports an end (then calls `failed(reason)`).
    """

    def __init__(self, failure: Callable[[Any], str | None], interval: float = 0.5) -> None:
        self._failure = failure
        self._interval = interval
        self._lock = threading.Lock()  # guards _watched and _thread
        self._watched: list[tuple[Any, Callable[[], bool], Callable[[str], None]]] = []
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, job: Any, started: Callable[[], bool], failed: Callable[[str], None]) -> None:
        with self._lock:
            if self._stopped.is_set():
                return
            self._watched.append((job, started, failed))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="startup-watch", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            with self._lock:
                watched = list(self._watched)
            done = []
            for item in watched:
                job, started, failed = item
                if started():
                    done.append(item)
                    continue
                problem = self._failure(job)
                if problem is not None and not started():
                    done.append(item)
                    try:
                        failed(problem)
                    except Exception:  # noqa: BLE001 - one bad callback must not stop the watch
                        logger.exception("reporting a failed start raised")
            with self._lock:
                self._watched = [item for item in self._watched if item not in done]

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            thread, self._thread = self._thread, None
            self._watched.clear()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
