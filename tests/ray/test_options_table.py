"""Tests of the options table: its rendering is current, and the typed values follow it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import fray_ray
from fray_ray._private.options import ActorOptions, Kind, MethodOptions, TaskOptions, Where, table
from fray_ray._private.options.model import UNSET, Context
from fray_ray._private.options.rendering import markdown
from fray_ray.actor import actor_shapes
from fray_ray.remote_function import pool_key

ROOT = Path(__file__).resolve().parents[2]

_VALUES = {Kind.TASK: TaskOptions, Kind.ACTOR: ActorOptions, Kind.METHOD: MethodOptions}


def test_committed_page_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "options_table.py"), "--check"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (ROOT / "docs" / "ray_options.md").read_text(encoding="utf-8") == markdown()


def test_page_lists_every_option_once_per_kind() -> None:
    page = markdown()
    for kind in Kind:
        for name in table.rows_for(kind, in_options=True):
            assert f"| `{name}` |" in page, name
    assert "| `max_retries` | task | `3` | driver retry loop |" in page


def test_help_of_remote_lists_options_with_defaults() -> None:
    doc = fray_ray.remote.__doc__ or ""
    for kind in Kind:
        for name, row in table.rows_for(kind, in_options=True).items():
            if not name.startswith("_"):
                assert f"    {name} = {row.default.describe()}  [" in doc, (kind, name)
    assert "max_retries = 3  [driver retry loop]" in doc
    assert "max_concurrency = 1 (1000 for async actors)  [actor host]" in doc


@pytest.mark.parametrize("kind", list(Kind))
def test_rows_serve_the_kind_they_are_listed_for(kind: Kind) -> None:
    for row in table.rows_for(kind, in_options=True).values():
        assert kind in row.kinds, row.name
        assert row.where_for(kind), row.name
        if Where.VALIDATED_ONLY in row.where_for(kind):
            assert row.note, f"{row.name} is only validated and must say why"


@pytest.mark.parametrize("kind", list(Kind))
def test_every_option_has_a_typed_field_with_the_tables_default(kind: Kind) -> None:
    cls = _VALUES[kind]
    fields = {f.name for f in dataclasses.fields(cls)}
    value = cls()
    for name in table.rows_for(kind, in_options=True):
        field = name.lstrip("_")
        if kind is Kind.TASK and name == "object_store_memory":
            continue  # refused for tasks unless None, so there is no value to keep
        assert field in fields, f"{cls.__name__} has no field for {name}"
        expected = table.default(kind, name, Context())
        if expected is UNSET:  # resolved against the target (the actor's own, for methods)
            continue
        assert getattr(value, field) == expected, name


def test_target_dependent_defaults_come_from_the_table() -> None:
    assert TaskOptions(is_generator=True).num_returns == table.default(Kind.TASK, "num_returns", Context(True))
    assert TaskOptions(is_generator=True).num_returns == "streaming"
    assert ActorOptions(is_async=True).max_concurrency == 1000
    assert MethodOptions(is_generator=True).num_returns == "streaming"


def test_runtime_reads_typed_values() -> None:
    gpu_task = pool_key(TaskOptions.from_options({"num_gpus": 1, "num_cpus": 2, "resources": {"a": 1}}))
    assert (gpu_task.shape.cpu, gpu_task.shape.gpu, gpu_task.shape.custom) == (2.0, 1.0, (("a", 1.0),))
    assert gpu_task.max_calls == 1  # a task holding a GPU gets its own process
    assert pool_key(TaskOptions()).max_calls == 0
    held, to_place = actor_shapes(ActorOptions.from_options({"memory": 10}))
    assert (held.cpu, held.memory, to_place is not None and to_place.cpu) == (0.0, 10, 1.0)
    held, to_place = actor_shapes(ActorOptions.from_options({"num_cpus": 3}))
    assert (held.cpu, to_place) == (3.0, None)
