"""`create_actor` written once for every backend: a group of one, waited for.

Both backends' `create_actor` methods call `create_single_actor`; only how long each waits
for the constructor differs (`ready_timeout`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fray_ray.fray.types import ActorConfig, EnvironmentConfig, ResourceConfig

if TYPE_CHECKING:
    from fray_ray.fray.actor import ActorHandle
    from fray_ray.fray.client import Client

__all__ = ["create_single_actor"]


def create_single_actor(
    client: Client,
    actor_class: type,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    name: str,
    resources: ResourceConfig,
    environment: EnvironmentConfig | None,
    actor_config: ActorConfig,
    ready_timeout: float | None,
) -> ActorHandle:
    """Start a group of one `actor_class(*args, **kwargs)` on `client` and wait for it.

    Blocks until the actor is ready (at most `ready_timeout` seconds; None: no limit) and
    returns its handle. Raises what the constructor raised, or TimeoutError; either way the
    group is shut down first. The constructor's arguments travel as `args`/`kwargs` so that
    none of their names can collide with this function's.
    """
    group = client.create_actor_group(
        actor_class,
        *args,
        name=name,
        count=1,
        resources=resources,
        environment=environment,
        actor_config=actor_config,
        **kwargs,
    )
    try:
        # None (no limit) comes only from LocalClient, whose groups accept it.
        return group.wait_ready(timeout=ready_timeout)[0]  # type: ignore[arg-type]
    except BaseException:
        group.shutdown()
        raise
