"""The one-call cluster: controller and local workers in this process, on loopback.

`EmbeddedCluster(config).start()` returns once the controller answers; `stop()` (or leaving the
`with` block) kills every task process group, closes the port and deletes the temp dir.
This is what `fray_ray.init()` starts when no cluster address is given.

If this process dies without stopping the cluster (SIGKILL, SIGTERM's default action,
`os._exit`), its `ProcessGuard`'s reaper kills every task process and their descendants and
deletes the temp dir within moments (see `_guard.py`).
"""

from __future__ import annotations

import atexit
import enum
import functools
import logging
import os
import shutil
import tempfile
import threading
import time
import weakref

from fray_ray.cluster._cgroups import MemoryCgroups
from fray_ray.cluster._config import ClusterConfig, WorkerSpec, simulated_host
from fray_ray.cluster._controller import EmbeddedController, WorkerStatus
from fray_ray.cluster._dashboard import DashboardApp
from fray_ray.cluster._guard import ProcessGuard
from fray_ray.cluster._host_memory import HostMemoryDirs
from fray_ray.cluster._http import build_app
from fray_ray.cluster._logs import LogStore
from fray_ray.cluster._process import ProcessSupervisor
from fray_ray.cluster._reaper import OWNER_FILE, TEMP_PREFIX, remove_orphaned_dirs
from fray_ray.cluster._service import ControllerService, EndpointService, LogService
from fray_ray.cluster._template import TemplateSettings, template_enabled
from fray_ray.cluster._worker import default_task_python, inherited_environment
from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.transport import RpcServer, new_token

logger = logging.getLogger(__name__)


def _stop_at_exit(ref: weakref.ref[EmbeddedCluster]) -> None:
    cluster = ref()
    if cluster is not None:
        cluster.stop()


class ClusterLifecycle(enum.Enum):
    NEW = "new"  # configured; nothing started
    RUNNING = "running"  # serving; workers accept tasks
    STOPPED = "stopped"  # everything it started is gone


class EmbeddedCluster:
    """An Iris-compatible controller plus local workers, owned by this object.

    >>> from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
    >>> with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),))) as cluster:
    ...     cluster.address.startswith("http://127.0.0.1:")
    True
    """

    def __init__(self, config: ClusterConfig | None = None) -> None:
        self.config = config or ClusterConfig()
        self._lock = threading.Lock()  # guards _state across start/stop
        self._state = ClusterLifecycle.NEW
        self._token: str | None = None
        self._temp_dir: str | None = None
        self._owner_pid: int | None = None  # the process that started it; only it may stop it
        self._guard: ProcessGuard | None = None
        self._supervisor: ProcessSupervisor | None = None
        self._memory_cgroups: MemoryCgroups | None = None  # per-attempt memory limits, if allowed
        self._host_memory: HostMemoryDirs | None = None  # simulated hosts' shared-memory dirs
        self._controller: EmbeddedController | None = None
        self._server: RpcServer | None = None
        self._logs: LogStore | None = None
        # Stops the cluster at interpreter exit if its owner forgot to (weak: no leak).
        self._exit_hook = functools.partial(_stop_at_exit, weakref.ref(self))
        self.started_in_s: float | None = None

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> EmbeddedCluster:
        """Start the controller and workers; returns self once the controller answers.

        Raises RuntimeError if already started or stopped; on any failure everything started
        so far is stopped again.
        """
        with self._lock:
            if self._state != ClusterLifecycle.NEW:
                raise RuntimeError(f"cluster is {self._state.value}; build a new EmbeddedCluster")
            began = time.perf_counter()
            config = self.config
            self._owner_pid = os.getpid()
            try:
                self._token = (config.token or new_token()) if config.auth else None
                if config.work_dir is not None:
                    os.makedirs(config.work_dir, exist_ok=True)
                # Dirs whose reaper was killed along with their owner.
                remove_orphaned_dirs(config.work_dir or tempfile.gettempdir())
                self._temp_dir = tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=config.work_dir)
                with open(os.path.join(self._temp_dir, OWNER_FILE), "w") as owner:
                    owner.write(str(os.getpid()))
                self._host_memory = HostMemoryDirs(config.advertise_host)
                also_remove = (self._host_memory.root,) if self._host_memory.root else ()
                self._guard = ProcessGuard(self._temp_dir, also_remove=also_remove).start()
                self._logs = LogStore(config.max_log_lines_per_attempt)
                self._supervisor = ProcessSupervisor(guard=self._guard, template=self._template_settings()).start()
                self._memory_cgroups = MemoryCgroups.open()
                self._controller = EmbeddedController(
                    config.effective_workers(),
                    root_dir=os.path.join(self._temp_dir, "workers"),
                    supervisor=self._supervisor,
                    logs=self._logs,
                    task_python=config.task_python or default_task_python(),
                    token=self._token,
                    worker_hosts=config.worker_hosts(),
                    client_freshness_days=config.client_freshness_days,
                    inherit_env=config.inherit_env,
                    keep_workdirs=config.keep_workdirs,
                    max_finished_jobs=config.max_finished_jobs,
                    memory_cgroups=self._memory_cgroups,
                    run_setup_scripts=config.run_setup_scripts,
                    host_memory=self._host_memory,
                )
                app = build_app(
                    ControllerService(self._controller),
                    EndpointService(self._controller),
                    token=self._token,
                    read_max_bytes=config.read_max_bytes,
                    log_service=LogService(self._controller),
                    dashboard=DashboardApp(self._controller, token=self._token) if config.dashboard else None,
                )
                self._server = RpcServer(app, host=config.host, port=config.port, name="fray-ray-controller").start()
                self._controller.start(self._advertised_url())
            except BaseException:
                self._release()
                self._state = ClusterLifecycle.STOPPED
                raise
            self._state = ClusterLifecycle.RUNNING
            atexit.register(self._exit_hook)
            self.started_in_s = time.perf_counter() - began
        return self

    def stop(self) -> None:
        """Stop serving, kill every task process group, delete the temp dir. Idempotent.

        In a forked child (say, one that runs atexit hooks) it does nothing: the cluster, its
        processes and its temp dir belong to the parent."""
        if self._owner_pid is not None and os.getpid() != self._owner_pid:
            return
        with self._lock:
            if self._state == ClusterLifecycle.STOPPED:
                return
            self._state = ClusterLifecycle.STOPPED
            self._release()
        atexit.unregister(self._exit_hook)

    def _template_settings(self) -> TemplateSettings | None:
        config = self.config
        if not template_enabled(config.worker_template):
            return None
        assert self._temp_dir is not None
        return TemplateSettings(
            python=config.task_python or default_task_python(),
            preload=config.worker_template_preload,
            environment=inherited_environment(config.inherit_env),
            cwd=self._temp_dir,
            start_after=config.worker_template_after,
        )

    def _release(self) -> None:
        if self._server is not None:
            self._server.stop()
        if self._controller is not None:
            self._controller.stop()
        if self._supervisor is not None:
            self._supervisor.stop()
        if self._guard is not None:
            self._guard.stop()  # after the supervisor: sweeps what escaped the process groups
        if self._memory_cgroups is not None:
            self._memory_cgroups.close()
            self._memory_cgroups = None
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
        if self._host_memory is not None:
            self._host_memory.remove()
        self._server = None
        self._supervisor = None
        self._guard = None
        self._temp_dir = None

    def __enter__(self) -> EmbeddedCluster:
        return self.start() if self._state == ClusterLifecycle.NEW else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---- what callers need ----------------------------------------------------------------

    def _advertised_url(self) -> str:
        assert self._server is not None
        host = self.config.host
        if host in ("", "0.0.0.0", "::"):
            host = self.config.advertise_host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self._server.port}"

    @property
    def state(self) -> ClusterLifecycle:
        return self._state

    @property
    def address(self) -> str:
        """`http://127.0.0.1:<port>`: what Iris clients and `IRIS_CONTROLLER_ADDRESS` use."""
        if self._server is None:
            raise RuntimeError("cluster is not running")
        return self._advertised_url()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("cluster is not running")
        return self._server.port

    @property
    def dashboard_url(self) -> str | None:
        """The dashboard's token link: opening it logs a browser in (None without a dashboard).
        It carries the token: show it only to whoever may use the cluster."""
        if not self.config.dashboard:
            return None
        return f"{self.address}/?token={self._token}" if self._token else f"{self.address}/"

    @property
    def token(self) -> str | None:
        """The bearer token every RPC must carry (None when auth is disabled)."""
        return self._token

    @property
    def temp_dir(self) -> str | None:
        return self._temp_dir

    @property
    def controller(self) -> EmbeddedController:
        if self._controller is None:
            raise RuntimeError("cluster is not running")
        return self._controller

    def client(self, timeout: float = 30.0) -> ControllerClient:
        """A new `ControllerClient` for this cluster (close it when done)."""
        return ControllerClient(self.address, token=self._token, timeout=timeout)

    def workers(self) -> list[WorkerStatus]:
        return self.controller.workers()

    def worker_specs(self) -> list[WorkerSpec]:
        return [w.spec for w in self.workers()]

    def kill_worker(self, worker_id: str) -> None:
        """Simulate losing a host: SIGKILL its tasks (they become WORKER_FAILED and retry
        elsewhere under the preemption budget) and schedule nothing more on it."""
        self.controller.kill_worker(worker_id)

    def revive_worker(self, worker_id: str) -> None:
        """Bring a killed worker back (a replacement host)."""
        self.controller.revive_worker(worker_id)

    def add_worker(self, spec: WorkerSpec) -> WorkerStatus:
        """A new worker joins the running cluster, a simulated host of its own: its `host`, or the
        next loopback address no worker has (127.0.0.2, 127.0.0.3, ...). Returns its status.

        Raises ValueError when its worker id is taken, RuntimeError when the cluster is not running."""
        taken = {w.address for w in self.workers()}
        address = spec.host
        index = 0
        while not address:
            candidate = simulated_host(index)
            address = candidate if candidate not in taken else ""
            index += 1
        self.controller.add_worker(spec, address)
        return next(w for w in self.workers() if w.spec.worker_id == spec.worker_id)

    @property
    def worker_template_pid(self) -> int | None:
        """The worker template's pid while it forks task processes (None: off, starting or down)."""
        return self._supervisor.template_pid if self._supervisor is not None else None

    def task_pids(self) -> list[int]:
        """Process-group leaders of the task attempts running now."""
        return self._supervisor.pids() if self._supervisor is not None else []

    @property
    def guard(self) -> ProcessGuard | None:
        """What keeps this cluster's processes from outliving it (None unless running)."""
        return self._guard


def start_cluster(config: ClusterConfig | None = None) -> EmbeddedCluster:
    """Start an embedded cluster (see `EmbeddedCluster`); the caller must `stop()` it."""
    return EmbeddedCluster(config).start()
