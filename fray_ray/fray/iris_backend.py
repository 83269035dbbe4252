"""FrayIrisClient: the Fray `Client` on an Iris controller (real Iris or the embedded cluster).

Jobs are Iris jobs: every `JobRequest` goes through the conversions in `_iris_conversions`
(resources, constraints, entrypoint, environment, gang scheduling, priority) and the command
wrappers in `_submit_wrappers` (`processes_per_task`, Nsight Systems), put together in
`_iris_launch`, then one LaunchJob. Actor groups are one job each (`_iris_launch` again) whose
replicas serve ActorService (`_iris_actors`); handles call them (`_iris_calls`); jobs are
watched through `IrisJobHandle` (`_iris_jobs`).

Naming. Outside an Iris task a job is a root job `/<user>/<name>`, the user taken from
`user=`, else IRIS_USER, else the OS user. With `parent_job=` (or, by default, inside a task
whose controller this client talks to) it is a child `<parent>/<name>`, so it ends with its
parent. Each launch and lookup may name its own parent (`parent_job=`, None for a root job)
instead of the client's. `from_job_info` builds the ambient client of the current task
(cached per task attempt).

Errors: `IrisBackendError` and its subclasses `ControllerUnavailableError` (nothing answers),
`CredentialsRejected` (the token was refused) and `JobRejected` (LaunchJob refused the
request; `JobUnschedulable` when no live worker could place it), defined and translated in `_iris_jobs`.
`JobAlreadyExists` and `JobFailed` come from the client protocol; actor calls raise
`ActorUnavailableError` when the actor cannot be reached.

    >>> from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
    >>> from fray_ray.fray import Entrypoint, JobRequest, ResourceConfig
    >>> with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),))) as cluster:
    ...     with FrayIrisClient(cluster.address, token=cluster.token) as client:
    ...         job = client.submit(JobRequest(name="hello", entrypoint=Entrypoint.from_callable(print, args=("hi",)),
    ...                                        resources=ResourceConfig(cpu=0.5, ram="256m", disk="0")))
    ...         str(job.wait(timeout=60))
    'succeeded'
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from fray_ray.fray._iris_actors import DEFAULT_READY_TIMEOUT, IrisActorGroup, serve_hosted_actor
from fray_ray.fray._iris_calls import CallThreads, IrisActorHandle, IrisActorMethod, IrisOperationFuture
from fray_ray.fray._iris_conversions import (
    GPU_GANG_LEVEL,
    IRIS_TO_FRAY_STATUS,
    IrisEnvironment,
    convert_constraints,
    convert_entrypoint,
    convert_environment,
    convert_priority,
    convert_resources,
    fray_status,
    host_info,
    job_summary,
    resolve_coscheduling,
)
from fray_ray.fray._iris_jobs import (
    TERMINATE_WAIT,
    ControllerUnavailableError,
    CredentialsRejected,
    IrisBackendError,
    IrisJobHandle,
    JobRejected,
    JobUnschedulable,
    translate_iris_error,
)
from fray_ray.fray._iris_launch import actor_group_request, job_spec
from fray_ray.fray._iris_registry import ambient_client, forget_client, register_open_client, task_client
from fray_ray.fray._job_endpoints import register_for_job
from fray_ray.fray._single_actor import create_single_actor
from fray_ray.fray._submit_wrappers import NSYS_DIR_ENV, NSYS_TASKS_ENV, wrap_multiprocess, wrap_nsys
from fray_ray.fray._workspaces import WorkspaceBundles
from fray_ray.fray.actor import ActorUnavailableError, HostedActor
from fray_ray.fray.client import FrayError, JobAlreadyExists
from fray_ray.fray.hosts import HostInfo
from fray_ray.fray.job_listing import JobSummary
from fray_ray.fray.types import ActorConfig, CapturedWorkspace, EnvironmentConfig, JobRequest, ResourceConfig
from fray_ray.iris.actor_client import ActorClient
from fray_ray.iris.addresses import normalize_address
from fray_ray.iris.controller_client import Backoff, ControllerClient
from fray_ray.iris.errors import AlreadyExists, IrisError, NotFound
from fray_ray.iris.job_info import JobInfo, default_user, get_job_info
from fray_ray.iris.names import JobName, validate_segment
from fray_ray.iris.resolver import ControllerResolver
from fray_ray.iris.types import ExistingJobPolicy, JobSpec

__all__ = [
    "CLIENT_PARENT",
    "GPU_GANG_LEVEL",
    "IRIS_TO_FRAY_STATUS",
    "NSYS_DIR_ENV",
    "NSYS_TASKS_ENV",
    "ControllerUnavailableError",
    "CredentialsRejected",
    "FrayIrisClient",
    "IrisActorGroup",
    "IrisActorHandle",
    "IrisActorMethod",
    "IrisBackendError",
    "IrisEnvironment",
    "IrisJobHandle",
    "IrisOperationFuture",
    "JobRejected",
    "JobUnschedulable",
    "ambient_client",
    "convert_constraints",
    "convert_entrypoint",
    "convert_environment",
    "convert_priority",
    "convert_resources",
    "fray_status",
    "resolve_coscheduling",
    "wrap_multiprocess",
    "wrap_nsys",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Calls to an actor that cannot be reached are retried this often (with re-resolution and
# backoff from 50 ms, about 0.75 s in all) before ActorUnavailableError.
_ACTOR_CALL_ATTEMPTS = 5


# ---------------------------------------------------------------------------------------------
# The client


class ClientState(enum.Enum):
    OPEN = "open"  # accepts work
    CLOSED = "closed"  # shut down: what it started is terminated, its RPC clients closed


class _Placement(enum.Enum):
    CLIENT_PARENT = "client parent"  # the client's own parent_job (a root job when it has none)


#: `parent_job=CLIENT_PARENT` (the default of every launch and lookup): under the client's own
#: `parent_job`. Pass None for a root job, or a job name for a child of that job.
CLIENT_PARENT = _Placement.CLIENT_PARENT
ParentJob = str | JobName | None | _Placement


class FrayIrisClient:
    """The Fray `Client` on an Iris controller at `controller_address`.

    - `token`: bearer token sent with every RPC (the embedded cluster's `cluster.token`).
    - `parent_job`: submit jobs as children of this job (`/user/job`); default: the current
      task's job when running inside an Iris task of the same controller, else root jobs.
    - `user`: the user segment of root job names (default IRIS_USER, else the OS user).
    - `workspace`: the default `EnvironmentConfig.workspace` of requests without an environment.
    - `verify`: check at once that a controller answers (ControllerUnavailableError naming
      the address otherwise).

    Thread-safe. `shutdown()` (or leaving a `with` block) terminates every job and actor group
    this client launched and closes its connections.
    """

    def __init__(
        self,
        controller_address: str,
        *,
        token: str | None = None,
        parent_job: str | JobName | None = None,
        user: str | None = None,
        workspace: str | None = None,
        verify: bool = True,
    ) -> None:
        self._address = normalize_address(controller_address)
        self._token = token
        self._controller = ControllerClient(self._address, token=token)
        self._user = validate_segment(user) if user is not None else default_user()
        self._parent = self._resolve_parent(parent_job)
        self._workspace = workspace
        self._workspaces = WorkspaceBundles(self._address)
        self._lock = threading.Lock()  # guards the fields below
        self._state = ClientState.OPEN
        self._jobs: dict[str, None] = {}  # ids of jobs and actor groups launched, oldest first
        self._hosted: list[HostedActor] = []
        self._actor_clients: dict[str, ActorClient] = {}
        self._calls = CallThreads("fray-iris-call")
        if verify:
            try:
                self._call_controller("connect", lambda c: c.job_states([]))
            except BaseException:
                self._calls.close()
                self._controller.close()
                raise
        register_open_client(self)

    @classmethod
    def from_job_info(cls, info: JobInfo | None = None) -> FrayIrisClient:
        """The ambient client of the current Iris task: the controller address and token from
        the task's environment, jobs submitted as children of the task's job.

        One client per task attempt is kept and returned again (a new one once that one is
        shut down). RuntimeError outside a task or without a controller address.
        """
        info = info or get_job_info()
        if info is None or not info.controller_address:
            raise RuntimeError(
                "not inside an Iris task: IRIS_TASK_ID and IRIS_CONTROLLER_ADDRESS must be set; "
                "outside a task use FrayIrisClient(address, token=...)"
            )
        key = (info.task_attempt.wire, normalize_address(info.controller_address), info.token)
        address = info.controller_address
        return task_client(
            key, lambda: cls(address, token=info.token, parent_job=info.job_id, user=info.user, verify=False)
        )

    def _resolve_parent(self, parent_job: str | JobName | None) -> JobName | None:
        if isinstance(parent_job, JobName):
            return parent_job
        if parent_job is not None:
            return JobName.from_wire(parent_job)
        info = get_job_info()
        if info is not None and info.controller_address and normalize_address(info.controller_address) == self._address:
            return info.job_id
        return None

    # ---- properties ------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The controller URL, `http://host:port`."""
        return self._address

    @property
    def parent_job(self) -> str | None:
        """The job new jobs are children of, or None for root jobs."""
        return self._parent.wire if self._parent is not None else None

    @property
    def in_process(self) -> bool:
        """False: jobs and actors run as Iris tasks, processes of their own."""
        return False

    @property
    def user(self) -> str:
        return self._user

    @property
    def closed(self) -> bool:
        return self._state is ClientState.CLOSED

    def __repr__(self) -> str:
        return f"FrayIrisClient({self._address!r}, parent_job={self.parent_job!r}, state={self._state.value})"

    def __enter__(self) -> FrayIrisClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # ---- plumbing ----------------------------------------------------------------------------

    def _call_controller(self, action: str, call: Callable[[ControllerClient], T], *, not_found: bool = False) -> T:
        """Run one controller call; Iris errors become Fray errors (NotFound passes through
        unchanged when `not_found`, for callers that handle it)."""
        try:
            return call(self._controller)
        except NotFound:
            if not_found:
                raise
            raise IrisBackendError(
                f"cannot {action}: not found on the controller at {self._address}", self._address
            ) from None
        except IrisError as exc:
            raise translate_iris_error(exc, action, self._address) from exc

    def _check_open(self) -> None:
        if self._state is ClientState.CLOSED:
            raise FrayError(f"{self!r} is shut down; create a new client")

    def _actor_client(self, endpoint: str) -> ActorClient:
        """The cached ActorService client for an endpoint name (resolved through the controller)."""
        with self._lock:
            actor = self._actor_clients.get(endpoint)
            if actor is None:
                if self._state is ClientState.CLOSED:
                    raise ActorUnavailableError(f"cannot call actor {endpoint}: {self!r} is shut down")
                actor = ActorClient(
                    ControllerResolver(self._controller),
                    endpoint,
                    max_call_attempts=_ACTOR_CALL_ATTEMPTS,
                    token=self._token,
                    actor_name=endpoint,  # a server hosting another actor now answers NotFound
                )
                self._actor_clients[endpoint] = actor
            return actor

    def _wait_finished(self, job_ids: list[str], timeout: float) -> None:
        """Poll until the controller reports every job finished (or forgotten), or timeout."""
        deadline = time.monotonic() + timeout
        backoff = Backoff(0.005, 0.5, 2.0)
        pending = list(job_ids)
        while pending:
            try:
                states = self._controller.job_states(pending)
            except IrisError:
                return  # the controller is gone: nothing left to wait for
            pending = [job_id for job_id in pending if job_id in states and not states[job_id].finished]
            if not pending:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                logger.warning("jobs still running %.0f s after being terminated: %s", timeout, ", ".join(pending))
                return
            time.sleep(min(backoff.next_delay(), remaining))

    # ---- jobs ----------------------------------------------------------------------------------

    def _job_name(self, name: str, parent_job: ParentJob = CLIENT_PARENT) -> JobName:
        validate_segment(name)
        if parent_job is CLIENT_PARENT:
            parent = self._parent
        elif isinstance(parent_job, str):
            parent = JobName.from_wire(parent_job)
        else:
            parent = parent_job
        return parent.child(name) if parent is not None else JobName.root(self._user, name)

    def job_name(self, name: str, parent_job: ParentJob = CLIENT_PARENT) -> str:
        """The wire name a job called `name` gets from this client: `<parent>/<name>`, or
        `/<user>/<name>` for a root job (`parent_job=None`, or a client without a parent).
        ValueError for a name that cannot be a job name segment."""
        return self._job_name(name, parent_job).wire

    def _job_spec(
        self, request: JobRequest, name: JobName, policy: ExistingJobPolicy, ports: tuple[str, ...] = ()
    ) -> JobSpec:
        return job_spec(request, name, policy, ports, workspace=self._workspace, workspaces=self._workspaces)

    def prepare_environment(self, environment: EnvironmentConfig) -> CapturedWorkspace | None:
        """Capture `environment`'s workspace (and `py_modules`) now, as later jobs with this
        environment will see it, whatever happens to the directories afterwards. Jobs capture
        it themselves the first time; call this to fix the moment. Blocks while it reads the
        files; raises ValueError naming the size when they cannot be shipped as one bundle
        (`BundleTooLarge`), OSError when a directory cannot be read. Says how much was captured
        (None for no workspace, or one the controller already holds)."""
        return self._workspaces.prepare(environment)

    def _launch(
        self,
        request: JobRequest,
        *,
        adopt_existing: bool,
        ports: tuple[str, ...] = (),
        parent_job: ParentJob = CLIENT_PARENT,
    ) -> str:
        self._check_open()
        name = self._job_name(request.name, parent_job)
        policy = ExistingJobPolicy.KEEP if adopt_existing else ExistingJobPolicy.UNSPECIFIED
        spec = self._job_spec(request, name, policy, ports)
        try:
            job_id = self._controller.launch_job(spec)
        except AlreadyExists:
            raise JobAlreadyExists(request.name, IrisJobHandle(self, name.wire)) from None
        except IrisError as exc:
            raise translate_iris_error(exc, f"submit job {name}", self._address) from exc
        with self._lock:
            self._jobs[job_id] = None
        return job_id

    def submit(
        self, request: JobRequest, adopt_existing: bool = True, *, parent_job: ParentJob = CLIENT_PARENT
    ) -> IrisJobHandle:
        """Launch the job on the controller; returns its handle once the controller accepted it.

        While a job of the same name is still running, `adopt_existing=True` returns a handle
        to it (Iris's KEEP policy) and `False` raises `JobAlreadyExists` carrying one; a
        finished job's name is reused. `parent_job` places it (see `CLIENT_PARENT`): a child
        ends when its parent ends other than by succeeding. Raises `JobRejected` when the
        controller refuses the request (e.g. no worker could ever run it, or the parent has
        ended), ValueError for an invalid name or an unsplittable `processes_per_task`,
        `ControllerUnavailableError` when nothing answers.
        """
        return IrisJobHandle(self, self._launch(request, adopt_existing=adopt_existing, parent_job=parent_job))

    def detach_job(self, job_id: str) -> None:
        """Stop answering for a job this client launched: `shutdown()` leaves it running (an
        actor meant to outlive its creator). Unknown ids are ignored."""
        with self._lock:
            self._jobs.pop(job_id, None)

    # ---- actors --------------------------------------------------------------------------------

    def create_actor_group(
        self,
        actor_class: type,
        *args: Any,
        name: str,
        count: int,
        resources: ResourceConfig = ResourceConfig(),
        environment: EnvironmentConfig | None = None,
        actor_config: ActorConfig = ActorConfig(),
        parent_job: ParentJob = CLIENT_PARENT,
        findable_at_root: bool = False,
        **kwargs: Any,
    ) -> IrisActorGroup:
        """Launch one job whose `count` replicas each host `actor_class(*args, **kwargs)`;
        returns as soon as the controller accepted it (use `wait_ready` for handles).

        `parent_job` places the job (see `CLIENT_PARENT`). With `findable_at_root`, each
        replica is also registered under the endpoint name a root group of that name would
        have, so `find_actor(name, parent_job=None)` finds a child group from any client.

        `actor_config.max_concurrency` calls run at once on each actor. A replica whose actor
        fails (constructor raised, `ctx.fail()`, process died) is restarted with fresh state up
        to `max_restarts` times (-1: without limit; unset: `max_task_retries`, else never); a
        lost worker also costs a restart when `max_restarts` is set, else it is free (up to
        100). One replica failing for good does not stop its siblings. `priority` is the Iris
        priority band. Raises `JobAlreadyExists` while a group of that name runs, `JobRejected`
        when no worker could ever host it, TypeError/ValueError for bad arguments.

        >>> import collections
        >>> from fray_ray.cluster import ClusterConfig, EmbeddedCluster, cpu_worker
        >>> with EmbeddedCluster(ClusterConfig(workers=(cpu_worker(cpu=2),))) as cluster:
        ...     with FrayIrisClient(cluster.address, token=cluster.token) as client:
        ...         small = ResourceConfig(cpu=0, ram="64m", disk="0")
        ...         group = client.create_actor_group(collections.Counter, "aab", name="c", count=2, resources=small)
        ...         first, second = group.wait_ready(timeout=60)
        ...         first.update.remote("bb").result(), first.most_common(1), second.most_common(1)
        (None, [('b', 3)], [('a', 2)])
        """
        if not isinstance(actor_class, type):
            raise TypeError(f"actor_class must be a class, got {actor_class!r}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count must be a positive integer, got {count!r}")
        if not isinstance(actor_config, ActorConfig):
            raise TypeError(f"actor_config must be an ActorConfig, got {actor_config!r}")
        name_of_job = self._job_name(name, parent_job)
        root_name = JobName.root(self._user, name)
        alias_jobs = (root_name.wire,) if findable_at_root and root_name != name_of_job else ()
        request = actor_group_request(
            actor_class, args, kwargs, name=name, count=count, resources=resources, environment=environment,
            actor_config=actor_config, alias_jobs=alias_jobs,
        )
        job_id = self._launch(request, adopt_existing=False, ports=("actor",), parent_job=parent_job)
        return IrisActorGroup(name, count, job_id, self)

    def actor_handle(self, group_name: str, index: int = 0, *, parent_job: ParentJob = CLIENT_PARENT) -> IrisActorHandle:
        """A handle to replica `index` of the actor group `group_name` that this client's user
        (and parent job, or `parent_job`) would have created, wherever it was created from.
        Does not block; calls raise ActorUnavailableError while no such actor is registered."""
        return IrisActorHandle(f"{self._job_name(group_name, parent_job).wire}/{group_name}-{index}", self)

    def find_actor(
        self, group_name: str, index: int = 0, *, parent_job: ParentJob = CLIENT_PARENT
    ) -> IrisActorHandle | None:
        """`actor_handle(...)` if that actor is registered now, else None (one controller call)."""
        handle = self.actor_handle(group_name, index, parent_job=parent_job)
        endpoints = self._call_controller(
            "look up an actor", lambda c: c.list_endpoints(handle.endpoint, exact=True)
        )
        return handle if endpoints else None

    def list_hosts(self) -> list[HostInfo]:
        """The controller's workers (ListWorkers) as hosts, in its order. One controller call."""
        return [host_info(w) for w in self._call_controller("list workers", lambda c: c.list_workers())]

    def list_jobs(self) -> list[JobSummary]:
        """The controller's jobs (ListJobs), every user's. One controller call."""
        jobs = self._call_controller("list jobs", lambda c: c.list_jobs(""))
        return [job_summary(job) for job in jobs]

    def create_actor(
        self,
        actor_class: type,
        *args: Any,
        name: str,
        resources: ResourceConfig = ResourceConfig(),
        environment: EnvironmentConfig | None = None,
        actor_config: ActorConfig = ActorConfig(),
        **kwargs: Any,
    ) -> IrisActorHandle:
        """One actor: a group of one, waited for (up to 900 s). Blocks until it is ready.

        Raises the constructor's exception if it failed for good (the group is shut down),
        TimeoutError if it is not ready in time.
        """
        handle = create_single_actor(
            self,
            actor_class,
            args,
            kwargs,
            name=name,
            resources=resources,
            environment=environment,
            actor_config=actor_config,
            ready_timeout=DEFAULT_READY_TIMEOUT,
        )
        return cast(IrisActorHandle, handle)  # this client's groups hold IrisActorHandles

    def host_actor(
        self, actor_class: type, *args: Any, name: str, actor_config: ActorConfig = ActorConfig(), **kwargs: Any
    ) -> HostedActor:
        """Build `actor_class(*args, **kwargs)` in this process and serve it from the current
        Iris task: ActorService on a free port, registered as `<task's job>/<name>-0`.

        Blocks until it is registered; raises what the constructor raises, and RuntimeError
        outside an Iris task (only a task attempt may register endpoints). The caller owns the
        returned `HostedActor`; `shutdown()` unregisters it and stops serving, and so does
        setting its context's `shutdown_event`.
        """
        self._check_open()
        info = get_job_info()
        if info is None:
            raise RuntimeError(
                "host_actor serves from inside an Iris task (IRIS_TASK_ID is not set here); "
                "outside a task, start the actor as a job with create_actor"
            )
        validate_segment(name)
        hosted = serve_hosted_actor(self, info, actor_class, args, kwargs, name, actor_config.max_concurrency)
        with self._lock:
            self._hosted.append(hosted)
        return hosted

    def register_job_endpoint(self, name: str, address: str, *, job_id: str, timeout: float = 60.0) -> str:
        """Register `<job_id>/<name>` → `address` under that job's first task (a job this
        process owns, or the task it runs in); returns the endpoint id. Blocks until the task
        is placed (at most `timeout`: TimeoutError); Iris errors become Fray errors."""
        return self._call_controller(
            "register an endpoint", lambda c: register_for_job(c, job_id, name, address, timeout=timeout)
        )

    def unregister_endpoint(self, endpoint_id: str) -> None:
        """Remove an endpoint `register_job_endpoint` registered (one controller call)."""
        self._call_controller("unregister an endpoint", lambda c: c.unregister_endpoint(endpoint_id))

    # ---- lifecycle -------------------------------------------------------------------------------

    def shutdown(self, wait: bool = True, *, terminate: bool = True) -> None:
        """Stop what this client started: hosted actors stop serving, every job and actor group
        it launched that is still running is terminated (children go with them), and its RPC
        clients are closed. With `wait`, blocks until the controller reports those jobs ended
        (at most TERMINATE_WAIT seconds). `terminate=False` leaves the jobs running (a
        submitter that detaches). Idempotent; the client accepts no work afterwards.
        """
        with self._lock:
            if self._state is ClientState.CLOSED:
                return
            self._state = ClientState.CLOSED
            job_ids = list(self._jobs)
            hosted, self._hosted = self._hosted, []
            actor_clients, self._actor_clients = list(self._actor_clients.values()), {}
        for actor in hosted:
            actor.shutdown()
        if job_ids and terminate:
            self._terminate_unfinished(job_ids, wait)
        self._calls.close(timeout=1.0 if wait else 0.0)
        for actor_client in actor_clients:
            actor_client.close()
        self._controller.close()
        forget_client(self)

    def _terminate_unfinished(self, job_ids: list[str], wait: bool) -> None:
        try:
            states = self._controller.job_states(job_ids)
        except IrisError as exc:
            logger.warning("cannot reach the controller at %s to stop this client's jobs: %s", self._address, exc)
            return
        running = [job_id for job_id, state in states.items() if not state.finished]
        for job_id in running:
            try:
                self._controller.terminate_job(job_id)
            except NotFound:
                pass
            except IrisError as exc:
                logger.warning("cannot terminate %s: %s", job_id, exc)
        if wait and running:
            self._wait_finished(running, TERMINATE_WAIT)
