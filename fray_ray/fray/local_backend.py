"""LocalClient: a Fray backend that runs jobs and actors inside this process.

It is the test double of the `Client` protocol and the engine of local mode. Compared with a
bare thread pool it keeps the promises the cluster backend keeps:

- Jobs. A callable job runs on one of `max_threads` pool threads, inside a copy of the
  submitter's `contextvars` context (so `set_current_client` and other context reach it; if no
  client was set, the job sees this client as `current_client()`, as a task on a cluster sees
  its cluster). A binary job runs as a subprocess in its own process group, with stdout and
  stderr going to a log file in a temp dir the client owns. Names are unique among unfinished
  jobs. `terminate()` kills a binary job's process group; a running callable cannot be killed
  and is only marked STOPPED. `JobRequest.timeout` stops a job the same way.
- Logs. Binary output is read back from its log file. For callable jobs, while any runs,
  `sys.stdout`/`sys.stderr` are wrapped by a proxy that copies text written from a job's
  context into that job's log (and still writes it to the real stream); threads the job
  starts itself do not inherit the context and are not captured.
- Actors. Each actor has its own `ThreadPoolExecutor` with `max_concurrency` workers: with
  the default of 1, calls run one at a time in submission order. Construction runs on that
  executor too, so `create_actor_group` returns at once and calls queue behind `__init__`.
- Registry. Live actors are registered on their LocalClient instance by endpoint name. A
  handle pickles to `(client_id, endpoint)`; unpickling in this process finds the client
  through the module-level `WeakValueDictionary` `_local_registry._CLIENTS` (which never keeps a client alive)
  and the actor through that client's registry. In another process such a handle resolves to
  nothing, and its calls raise `ActorUnavailableError`.

The modules mirror the Iris backend's: this one holds the client, `_local_jobs` the jobs and
their logs, `_local_actors` the actors and groups, `_local_calls` the handles that call them,
and `_local_registry` what they share.

Lock order: client lock, then a group's condition, then a job's or actor's condition. Code
holding a job or actor condition never takes another lock, and callbacks to the group and the
client run after it is released.
"""

from __future__ import annotations

import contextvars
import enum
import os
import shutil
import tempfile
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from fray_ray.fray._client_context import current_client_var as _current_client
from fray_ray.fray._local_actors import LocalActorGroup, _LocalActor
from fray_ray.fray._local_calls import LocalActorHandle, LocalActorMethod
from fray_ray.fray._local_jobs import LocalJobHandle, _LocalJob
from fray_ray.fray._local_registry import _CLIENTS, _CLIENTS_LOCK, _mark_thread, _runs_on_thread_of
from fray_ray.fray._single_actor import create_single_actor
from fray_ray.fray.actor import HostedActor
from fray_ray.fray.client import FrayError, JobAlreadyExists
from fray_ray.fray.hosts import HostInfo, this_machine
from fray_ray.fray.job_listing import JobSummary
from fray_ray.fray.types import ActorConfig, CapturedWorkspace, EnvironmentConfig, JobRequest, ResourceConfig

__all__ = ["LocalActorGroup", "LocalActorHandle", "LocalActorMethod", "LocalClient", "LocalJobHandle"]


def _context_for(client: LocalClient) -> contextvars.Context:
    """A copy of the caller's context in which `current_client()` is `client` unless one was set."""

    def adopt() -> None:
        if _current_client.get() is None:
            _current_client.set(client)

    context = contextvars.copy_context()
    context.run(adopt)
    return context


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not name or any(ch.isspace() for ch in name):
        raise ValueError(f"{what} must be a non-empty string without spaces, got {name!r}")
    return name


# ---------------------------------------------------------------------------------------------
# The client


class _ClientState(enum.Enum):
    OPEN = "open"  # accepting jobs and actors
    CLOSED = "closed"  # shutdown() was called


class LocalClient:
    """A `Client` that runs everything in this process. A context manager; `shutdown()` stops
    what it started.

    >>> from fray_ray.fray.types import Entrypoint, JobRequest
    >>> with LocalClient(max_threads=2) as client:
    ...     job = client.submit(JobRequest(name="hello", entrypoint=Entrypoint.from_callable(print, args=("hi",))))
    ...     job.wait()
    hi
    <JobStatus.SUCCEEDED: 'succeeded'>
    """

    def __init__(self, max_threads: int = 8, *, host: HostInfo | None = None) -> None:
        if not isinstance(max_threads, int) or isinstance(max_threads, bool) or max_threads < 1:
            raise ValueError(f"max_threads must be a positive integer, got {max_threads!r}")
        self.client_id, self.max_threads = uuid.uuid4().hex, max_threads
        self._host = host or this_machine()  # what list_hosts() reports: this machine by default
        self._lock = threading.RLock()  # guards every field below
        self._state = _ClientState.OPEN
        self._jobs: dict[str, _LocalJob] = {}  # unfinished jobs by job_id
        self._names: dict[str, _LocalJob] = {}  # unfinished jobs by name
        self._actors: dict[str, _LocalActor] = {}  # live actors by endpoint: the registry
        self._groups: set[LocalActorGroup] = set()  # groups not shut down
        self._retired: list[_LocalActor] = []  # stopped actors whose threads may still be running
        self._log_dir: str | None = None  # temp dir for binary job logs, made on first use
        # Pool threads are marked with a token, not the client: a thread's frame keeps its
        # initializer arguments alive, and a dropped client must stay collectable.
        self._thread_token = object()
        self._executor = ThreadPoolExecutor(
            max_workers=max_threads,
            thread_name_prefix="fray-local-job",
            initializer=_mark_thread,
            initargs=(self._thread_token,),
        )
        with _CLIENTS_LOCK:
            _CLIENTS[self.client_id] = self

    def __enter__(self) -> LocalClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"LocalClient(max_threads={self.max_threads}, id={self.client_id[:8]}, {self._state.value})"

    @property
    def in_process(self) -> bool:
        """True: jobs and actors run on threads of this process."""
        return True

    @property
    def parent_job(self) -> None:
        """None: local jobs form no tree."""
        return None

    def prepare_environment(self, environment: EnvironmentConfig) -> CapturedWorkspace | None:
        """Nothing to capture: local jobs read their directories in place. Returns None at once."""
        return None

    def detach_job(self, job_id: str) -> None:
        """Ignored: nothing outlives a LocalClient, whose `shutdown()` stops every job."""

    def list_hosts(self) -> list[HostInfo]:
        """The one host everything runs on: this machine, or the `host` given. Never blocks."""
        return [self._host]

    def list_jobs(self) -> list[JobSummary]:
        """This client's unfinished jobs (it has no others, and forgets finished ones). Never blocks."""
        with self._lock:
            jobs = list(self._jobs.values())
        return [JobSummary(job.job_id, job.status()) for job in jobs]

    def _check_open_locked(self) -> None:
        if self._state is not _ClientState.OPEN:
            raise FrayError("this LocalClient has been shut down; create a new one")

    # -- jobs ---------------------------------------------------------------------------------

    def submit(self, request: JobRequest, adopt_existing: bool = True) -> LocalJobHandle:
        """Queue a job on the pool and return its handle at once.

        If an unfinished job has the same name, `adopt_existing=True` returns its handle and
        `False` raises `JobAlreadyExists` with that handle. `resources` and `replicas` are not
        enforced locally (one run per job); binary jobs get `environment.env_vars`. Raises
        FrayError after `shutdown()`.
        """
        if not isinstance(request, JobRequest):
            raise TypeError(f"submit() takes a JobRequest, got {type(request).__name__}")
        with self._lock:
            self._check_open_locked()
            existing = self._names.get(request.name)
            if existing is not None and not existing.status().finished():
                if adopt_existing:
                    return existing.handle
                raise JobAlreadyExists(request.name, existing.handle)
            job = _LocalJob(self, request, _context_for(self))
            self._jobs[job.job_id] = job
            self._names[request.name] = job
            job.attach(self._executor.submit(job.run))
        return job.handle

    def _job_finished(self, job: _LocalJob) -> None:
        with self._lock:
            self._jobs.pop(job.job_id, None)
            if self._names.get(job.request.name) is job:
                del self._names[job.request.name]

    def _log_path(self) -> str:
        """A new log file path in the client's temp dir; FrayError once the client is shut down."""
        with self._lock:
            self._check_open_locked()
            if self._log_dir is None:
                self._log_dir = tempfile.mkdtemp(prefix="fray-local-logs-")
            return os.path.join(self._log_dir, f"{uuid.uuid4().hex}.log")

    # -- actors -------------------------------------------------------------------------------

    def create_actor_group(
        self,
        actor_class: type,
        *args: Any,
        name: str,
        count: int,
        resources: ResourceConfig = ResourceConfig(),
        environment: EnvironmentConfig | None = None,
        actor_config: ActorConfig = ActorConfig(),
        **kwargs: Any,
    ) -> LocalActorGroup:
        """Start `count` actors; returns at once while each constructs on its own thread.

        Endpoints are `local-<name>-<8 hex>/<name>-<index>`. `resources` and `environment` are
        accepted and not enforced locally. Raises ValueError/TypeError for bad arguments and
        FrayError after `shutdown()`.

        >>> class Counter:
        ...     def __init__(self, start=0):
        ...         self.n = start
        ...     def add(self, k):
        ...         self.n += k
        ...         return self.n
        >>> with LocalClient() as client:
        ...     group = client.create_actor_group(Counter, name="counters", count=2, start=10)
        ...     first, second = group.wait_ready()
        ...     first.add.remote(1).result(), second.add(5)
        (11, 15)
        """
        if not isinstance(actor_class, type):
            raise TypeError(f"actor_class must be a class, got {actor_class!r}")
        _check_name(name, "actor group name")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count must be a positive integer, got {count!r}")
        if not isinstance(actor_config, ActorConfig):
            raise TypeError(f"actor_config must be an ActorConfig, got {actor_config!r}")
        job_id = f"local-{name}-{uuid.uuid4().hex[:8]}"
        group = LocalActorGroup(self, name, job_id)
        with self._lock:
            self._check_open_locked()
            context = _context_for(self)
            for index in range(count):
                actor = _LocalActor(
                    client_id=self.client_id,
                    endpoint=f"{job_id}/{name}-{index}",
                    group_name=name,
                    index=index,
                    actor_class=actor_class,
                    args=args,
                    kwargs=kwargs,
                    config=actor_config,
                    context=context,
                    on_change=group._changed,
                )
                group._actors.append(actor)
                self._actors[actor.endpoint] = actor
            self._groups.add(group)
            for actor in group._actors:
                actor.start()
        return group

    def create_actor(
        self,
        actor_class: type,
        *args: Any,
        name: str,
        resources: ResourceConfig = ResourceConfig(),
        environment: EnvironmentConfig | None = None,
        actor_config: ActorConfig = ActorConfig(),
        **kwargs: Any,
    ) -> LocalActorHandle:
        """One actor, waited for: blocks until constructed and returns its handle.

        Raises whatever the constructor raised (the actor is then cleaned up).
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
            ready_timeout=None,
        )
        return cast(LocalActorHandle, handle)  # this client's groups hold LocalActorHandles

    def host_actor(
        self, actor_class: type, *args: Any, name: str, actor_config: ActorConfig = ActorConfig(), **kwargs: Any
    ) -> HostedActor:
        """Construct and serve an actor in this process; blocks until constructed.

        Returns a `HostedActor` whose `shutdown()` stops it; raises what the constructor raised.
        """
        group = self.create_actor_group(actor_class, *args, name=name, count=1, actor_config=actor_config, **kwargs)
        try:
            handle = group.wait_ready(timeout=None)[0]
        except BaseException:
            group.shutdown()
            raise
        return HostedActor(handle, handle.endpoint, stop=group.shutdown)

    def find_actor(self, group_name: str, index: int = 0, *, parent_job: str | None = None) -> LocalActorHandle | None:
        """Replica `index` of this client's live group `group_name` (the newest, if several
        have that name), or None. `parent_job` is ignored: local jobs form no tree. Never blocks."""
        prefix, suffix = f"local-{group_name}-", f"/{group_name}-{index}"  # endpoint: <job_id>/<name>-<index>
        with self._lock:
            live = list(self._actors.values())  # registration order, oldest first
        for actor in reversed(live):
            if actor.index == index and actor.endpoint.startswith(prefix) and actor.endpoint.endswith(suffix):
                return actor.handle
        return None

    def _find_actor(self, endpoint: str) -> _LocalActor | None:
        with self._lock:
            return self._actors.get(endpoint)

    def _forget_group(self, group: LocalActorGroup) -> None:
        with self._lock:
            self._groups.discard(group)
            for actor in group._actors:
                self._actors.pop(actor.endpoint, None)
            # Keep stopped actors only while their threads may still run, so shutdown can join them.
            self._retired = [actor for actor in self._retired if not actor.is_quiet()]
            self._retired.extend(group._actors)

    # -- lifecycle ----------------------------------------------------------------------------

    def shutdown(self, wait: bool = True) -> None:
        """Stop everything this client started. Safe to call again (e.g. with `wait=True` after
        `wait=False`).

        Actor groups are shut down (queued calls fail with ActorUnavailableError), queued jobs
        are stopped, binary jobs' process groups are killed, and running callable jobs are left
        to finish. With `wait`, blocks until every pool and actor thread has exited (except the
        calling thread if it is one of them). Then the log temp dir is removed.
        """
        with self._lock:
            first_call = self._state is _ClientState.OPEN
            self._state = _ClientState.CLOSED
            groups = list(self._groups)
            jobs = list(self._jobs.values()) if first_call else []
        for group in groups:
            group.shutdown()
        for job in jobs:
            job.stop_for_shutdown()
        # A later shutdown(wait=True) still joins what an earlier shutdown(wait=False) left running.
        self._executor.shutdown(wait=wait and not _runs_on_thread_of(self._thread_token), cancel_futures=True)
        if wait:
            with self._lock:
                retired = list(self._retired)
            for actor in retired:
                actor.join()
        with self._lock:
            log_dir, self._log_dir = self._log_dir, None
        if log_dir is not None:
            shutil.rmtree(log_dir, ignore_errors=True)
        with _CLIENTS_LOCK:
            if _CLIENTS.get(self.client_id) is self:
                del _CLIENTS[self.client_id]
