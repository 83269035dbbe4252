"""A session under attack: a real `fray_ray.init()` driver in this process (with its embedded
controller), attackers without the token in processes of their own (`attacker.py`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import fray_ray

# The suite runs with --import-mode=importlib, which leaves sys.path alone; the test modules
# here import their shared helpers by this directory's (unique) module name.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from security_helpers import Attacker, Target  # noqa: E402


@pytest.fixture(scope="module")
def driver() -> Iterator[Target]:
    if fray_ray.is_initialized():
        fray_ray.shutdown()
    fray_ray.init(num_cpus=2, namespace="security")
    from fray_ray._private.core import runtime_state

    runtime: Any = runtime_state.current()
    cluster = runtime._owned[0]  # the embedded cluster this driver started
    host, _, port = runtime.session.address.rpartition(":")
    try:
        yield Target(host, int(port), cluster.address, cluster.port, cluster.token)
    finally:
        fray_ray.shutdown()


@pytest.fixture
def attackers(tmp_path: Path) -> Iterator[Callable[..., Attacker]]:
    """`attackers(mode, *args)` starts an attacker process; all are reaped at teardown."""
    started: list[Attacker] = []

    def start(*args: object) -> Attacker:
        attacker = Attacker([str(a) for a in args], tmp_path / f"attacker-{len(started)}.stderr")
        started.append(attacker)
        return attacker

    yield start
    for attacker in started:
        attacker.close()


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[Path]:
    """A path that exists only if an attacker's payload was unpickled (or run) somewhere."""
    path = tmp_path / "canary"
    yield path
    assert not path.exists(), "an attacker's payload was deserialized: the canary exists"
