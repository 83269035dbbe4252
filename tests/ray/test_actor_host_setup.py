"""An actor host's message handlers may run as soon as its session opens (the driver can send
`create` and the first calls at once), so everything they read must be set before it opens."""

from __future__ import annotations

import ast
import inspect
import textwrap

from fray_ray._private.workers.actor_host import RayActorHost


def _assigned_attributes(statement: ast.stmt) -> set[str]:
    return {
        node.attr
        for node in ast.walk(statement)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name) and node.value.id == "self"
    }


def _opens_the_session(statement: ast.stmt) -> bool:
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open_session"
        for node in ast.walk(statement)
    )


def test_the_actor_host_sets_its_state_before_its_session_opens() -> None:
    source = textwrap.dedent(inspect.getsource(RayActorHost.__init__))
    body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
    opening = [i for i, statement in enumerate(body) if _opens_the_session(statement)]
    assert len(opening) == 1, "RayActorHost.__init__ should open its session exactly once"
    late = set().union(*(_assigned_attributes(s) for s in body[opening[0] + 1:]))
    assert not late, f"set after the session opens, where a handler may already read them: {sorted(late)}"
