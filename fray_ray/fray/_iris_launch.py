"""What the Iris backend launches: the JobSpec of a Fray `JobRequest`, and an actor group's request.

`job_spec` puts one LaunchJob together from the per-field conversions of `_iris_conversions`,
the command wrappers of `_submit_wrappers` (`processes_per_task`, Nsight Systems) and the
workspace bundle the request's environment ships. `actor_group_request` is the job an actor
group is: one replica per actor, each hosting it (`_iris_actors`), with Fray's restart settings
turned into Iris retry budgets. Neither talks to a controller: `FrayIrisClient`
(`iris_backend.py`) names the job, launches it and keeps track of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fray_ray.fray._iris_actors import _host_actor
from fray_ray.fray._iris_conversions import (
    convert_constraints,
    convert_entrypoint,
    convert_environment,
    convert_priority,
    convert_resources,
    resolve_coscheduling,
    retry_budget,
)
from fray_ray.fray._submit_wrappers import NSYS_DIR_ENV, nsys_tasks, wrap_multiprocess, wrap_nsys
from fray_ray.fray._workspaces import WorkspaceBundles
from fray_ray.fray.types import ActorConfig, Entrypoint, EnvironmentConfig, JobRequest, ResourceConfig
from fray_ray.iris.bundles import WorkspaceBundle
from fray_ray.iris.names import JobName
from fray_ray.iris.types import ExistingJobPolicy, JobSpec

#: Iris retry budgets are int32; "without limit" (-1 in Fray) is the largest one.
UNLIMITED_RETRIES = 2**31 - 1
#: Preemption retries of an actor group whose ActorConfig leaves max_restarts unset.
DEFAULT_ACTOR_PREEMPTION_RETRIES = JobRequest.__dataclass_fields__["max_retries_preemption"].default


def job_spec(
    request: JobRequest,
    name: JobName,
    policy: ExistingJobPolicy,
    ports: tuple[str, ...] = (),
    *,
    workspace: str | None,
    workspaces: WorkspaceBundles,
) -> JobSpec:
    """The JobSpec launching `request` as the job `name`; `workspace` is the client's default for
    a request without an environment. ValueError when the workspace cannot be shipped."""
    resources = request.resources
    replicas = request.replicas or resources.replicas
    environment = request.environment
    if environment is None and workspace is not None:
        environment = EnvironmentConfig(workspace=workspace)
    env = convert_environment(environment, resources.device, image=resources.image)
    bundle = _workspace_bundle(workspaces, environment)
    entrypoint = wrap_multiprocess(
        convert_entrypoint(request.entrypoint), request.processes_per_task, resources.device
    )
    selection = nsys_tasks(env.env_vars)
    if selection is not None:
        entrypoint = wrap_nsys(entrypoint, selection, env.env_vars.get(NSYS_DIR_ENV))
    return JobSpec(
        name=name,
        entrypoint=entrypoint,
        resources=convert_resources(resources),
        env_vars=env.env_vars,
        setup_scripts=env.setup_scripts,
        ports=ports,
        replicas=replicas,
        max_retries_failure=request.max_retries_failure,
        max_retries_preemption=request.max_retries_preemption,
        max_task_failures=request.max_task_failures,
        constraints=tuple(convert_constraints(resources)),
        coscheduling_group_by=resolve_coscheduling(resources, replicas),
        timeout_s=request.timeout,
        existing_job_policy=policy,
        priority_band=convert_priority(request.priority),
        task_image=env.task_image,
        bundle=bundle,
    )


def _workspace_bundle(workspaces: WorkspaceBundles, environment: EnvironmentConfig | None) -> WorkspaceBundle | None:
    try:
        return workspaces.bundle(environment)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot ship the workspace of this job: {exc}") from exc


def actor_group_request(
    actor_class: type,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    name: str,
    count: int,
    resources: ResourceConfig,
    environment: EnvironmentConfig | None,
    actor_config: ActorConfig,
    alias_jobs: tuple[str, ...],
) -> JobRequest:
    """The job of an actor group of `count` replicas of `actor_class(*args, **kwargs)`; each
    replica also registers under the jobs in `alias_jobs` (see `findable_at_root`)."""
    restarts_setting = actor_config.max_restarts
    if restarts_setting is None:
        restarts_setting = actor_config.max_task_retries
    restarts = retry_budget(restarts_setting, unlimited=UNLIMITED_RETRIES)
    preemptions = restarts if actor_config.max_restarts is not None else DEFAULT_ACTOR_PREEMPTION_RETRIES
    return JobRequest(
        name=name,
        entrypoint=Entrypoint.from_callable(
            _host_actor, args=(actor_class, args, kwargs, name, actor_config.max_concurrency, alias_jobs)
        ),
        resources=resources,
        environment=environment,
        replicas=count,
        max_retries_failure=restarts,
        max_retries_preemption=preemptions,
        max_task_failures=count - 1,
        priority=actor_config.priority,
    )
