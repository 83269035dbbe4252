"""Ray takes any actor name; the Iris job behind a named actor still gets a valid name."""

from __future__ import annotations

import pytest

import fray_ray as ray
from fray_ray._private.driver.launcher import WorkerLauncher
from fray_ray.iris.names import validate_segment

pytestmark = pytest.mark.usefixtures("cluster_session")


@ray.remote
class Echo:
    def name(self, text: str) -> str:
        return text


@pytest.mark.parametrize(
    "name",
    ["x" * 400, "été/..\u0000 \u202e" * 60, "..", "a/b c"],
    ids=["long", "unicode-and-controls", "dots", "slash"],
)
def test_long_and_odd_actor_names_work_and_stay_distinct(name: str) -> None:
    actor = Echo.options(name=name).remote()
    assert ray.get(actor.name.remote("hi")) == "hi"
    assert ray.get_actor(name) is not None
    group = WorkerLauncher.named_group("tests", name)
    assert validate_segment(group) == group and len(group.encode()) <= 200
    assert WorkerLauncher.named_group("tests", name + "!") != group  # cut names keep a digest of the whole
    ray.kill(actor)
