"""The state API (``ray.util.state``) and ``ray.timeline()``: the shapes users rely on.

Ray 2.60 answers the state API from its dashboard's HTTP server, so this module's cluster is
started with the dashboard; a Ray installed without it (``pip install ray`` rather than
``ray[default]``) raises ``ServerUnavailable``, and the state tests are skipped there, except
in `.ci/run`'s own run of this module with ``ray[default]``, where they must pass.
``ray.timeline()`` needs no dashboard and runs on both. Values only one backend can give (ids,
pids, exact event lists) are not asserted.
"""

from __future__ import annotations

import json
import os

import pytest

from compat_tests._backend import DEFAULT_SHARED_CLUSTER, LazyModule, ray
from compat_tests.helpers import SignalActor, wait_for_condition

state = LazyModule("util.state")

SHARED_CLUSTER = {**DEFAULT_SHARED_CLUSTER, "include_dashboard": None}  # Ray: its dashboard when installed


@ray.remote
def _plus_one(x):
    return x + 1


@ray.remote
def _fails():
    raise ValueError("state api failure")


@ray.remote
def _wait_for(signal):
    ray.get(signal.wait.remote())
    return 1


@ray.remote
class _Counter:
    def ping(self):
        return "pong"


@ray.remote(enable_task_events=False)
def _unlisted_task():
    return "unlisted"


@ray.remote(enable_task_events=False)
class _QuietActor:
    def hidden(self):
        return "hidden"

    @ray.method(enable_task_events=True)
    def shown(self):
        return "shown"


@ray.remote
class _FailsOnce:
    def __init__(self):
        self.calls = 0

    def flaky(self):
        self.calls += 1
        if self.calls == 1:
            raise ValueError("the first call fails")
        return self.calls


def _state_api_or_skip():
    try:
        state.list_nodes()
    except (state.exception.ServerUnavailable, ConnectionError):
        # No dashboard to answer (plain `ray`); with none, Ray's state client also looks for a
        # cluster on its own and refuses when other test workers run theirs (ConnectionError).
        if os.environ.get("FRAY_RAY_COMPAT_REQUIRE_RAY_DASHBOARD") == "1":  # .ci/run's own run of this module
            raise
        pytest.skip("this Ray has no dashboard (ray[default] not installed): its state API cannot answer")


def test_state_api__tasks_states_filters_and_limit(ray_start_regular_shared):
    _state_api_or_skip()
    assert ray.get(_plus_one.remote(1)) == 2
    with pytest.raises(ValueError):
        ray.get(_fails.remote())
    signal = SignalActor.remote()
    running = _wait_for.remote(signal)

    def seen():
        names = {(t.name, t.state) for t in state.list_tasks(limit=10_000)}
        return {("_plus_one", "FINISHED"), ("_fails", "FAILED"), ("_wait_for", "RUNNING")} <= names

    wait_for_condition(seen, timeout=60)
    failed = state.list_tasks(filters=[("name", "=", "_fails")], detail=True)
    # a function of an imported module: named by itself, without its module, in both columns
    assert (failed[0].name, failed[0].func_or_class_name) == ("_fails", "_fails")
    assert failed and failed[0]["state"] == "FAILED" and failed[0].get("error_type") == "TASK_EXECUTION_EXCEPTION"
    assert "state api failure" in failed[0].error_message
    assert failed[0].end_time_ms >= failed[0].start_time_ms >= failed[0].creation_time_ms
    others = state.list_tasks(filters=[("name", "=", "_fails"), ("state", "!=", "FAILED")])
    assert others == []
    assert len(state.list_tasks(limit=1)) == 1
    by_ref = state.get_task(running)
    assert by_ref.state == "RUNNING" and by_ref.type == "NORMAL_TASK"
    with pytest.raises(ValueError):
        state.list_tasks(filters=[("state", ">", "RUNNING")])
    ray.get(signal.send.remote())
    assert ray.get(running) == 1


def test_state_api__actors_live_and_dead(ray_start_regular_shared):
    _state_api_or_skip()
    live = _Counter.options(name="state_api_live").remote()
    dead = _Counter.remote()
    assert ray.get([live.ping.remote(), dead.ping.remote()]) == ["pong", "pong"]
    ray.kill(dead)
    dead_id = dead._actor_id.hex()

    def dead_listed():
        return any(a.actor_id == dead_id and a.state == "DEAD" for a in state.list_actors(limit=10_000))

    wait_for_condition(dead_listed, timeout=60)
    row = state.get_actor(live._actor_id.hex())
    assert (row.state, row.class_name, row.name) == ("ALIVE", "_Counter", "state_api_live")
    assert row.pid > 0 and row.node_id
    dead_row = state.get_actor(dead_id)
    assert dead_row.death_cause is not None
    summary = state.summarize_actors()["cluster"]
    assert summary["summary"]["_Counter"]["state_counts"]["ALIVE"] >= 1
    assert summary["total_actors"] >= 2
    tasks = state.summarize_tasks()["cluster"]
    assert set(tasks) >= {"summary", "total_tasks", "total_actor_tasks", "total_actor_scheduled"}
    ray.kill(live)


def test_state_api__objects_nodes_and_jobs(ray_start_regular_shared):
    _state_api_or_skip()
    held = ray.put(b"x" * 200_000)
    held_id = held.hex()

    def listed():
        return [o for o in state.list_objects(limit=10_000) if o.object_id == held_id]

    wait_for_condition(listed, timeout=60)
    (row,) = listed()
    assert row.reference_type == "LOCAL_REFERENCE" and row.object_size >= 200_000
    assert row.type == "DRIVER" and row.pid > 0 and row.ip
    nodes = state.list_nodes()
    assert nodes and all(n.state in ("ALIVE", "DEAD") for n in nodes)
    assert any(n.is_head_node for n in nodes)
    jobs = state.list_jobs()
    assert any(j.type == "DRIVER" and j.status == "RUNNING" for j in jobs)
    del held


def test_timeline__chrome_trace_of_finished_tasks(ray_start_regular_shared, tmp_path):
    assert ray.get([_plus_one.remote(i) for i in range(3)]) == [1, 2, 3]

    def traced():
        return sum(1 for e in ray.timeline() if e.get("cat") == "task::_plus_one" and e.get("ph") == "X") >= 3

    wait_for_condition(traced, timeout=60)
    events = [e for e in ray.timeline() if e.get("cat") == "task::_plus_one"]
    for event in events:
        assert set(event) >= {"cat", "name", "pid", "tid", "ts", "dur", "ph", "args"}
        assert event["dur"] >= 0 and "task_id" in event["args"]
    target = tmp_path / "timeline.json"
    assert ray.timeline(filename=str(target)) is None
    written = json.loads(target.read_text())
    assert isinstance(written, list) and any(e.get("cat") == "task::_plus_one" for e in written)


def test_state_api__enable_task_events_and_call_names(ray_start_regular_shared):
    _state_api_or_skip()
    quiet = _QuietActor.remote()
    counter = _Counter.remote()
    refs = [_unlisted_task.remote(), quiet.hidden.remote(), counter.ping.options(enable_task_events=False).remote()]
    assert ray.get(refs) == ["unlisted", "hidden", "pong"]
    shown = quiet.shown.remote()
    named = counter.ping.options(name="compat_named_call").remote()
    assert ray.get([shown, named]) == ["shown", "pong"]

    def both_listed():
        finished = {t.task_id for t in state.list_tasks(filters=[("state", "=", "FINISHED")], limit=10_000)}
        return {shown.task_id().hex(), named.task_id().hex()} <= finished

    wait_for_condition(both_listed, timeout=60)
    listed = {t.task_id: t for t in state.list_tasks(limit=10_000, detail=True)}
    assert not {ref.task_id().hex() for ref in refs} & set(listed)
    assert listed[shown.task_id().hex()].name == "_QuietActor.shown"
    row = listed[named.task_id().hex()]
    assert (row.name, row.func_or_class_name, row.type) == ("compat_named_call", "_Counter.ping", "ACTOR_TASK")
    ray.kill(quiet)
    ray.kill(counter)


def test_state_api__a_retried_actor_call_is_a_new_attempt(ray_start_regular_shared):
    _state_api_or_skip()
    actor = _FailsOnce.options(max_task_retries=1).remote()
    ref = actor.flaky.options(retry_exceptions=True).remote()
    assert ray.get(ref) == 2
    task_id = ref.task_id().hex()

    def both_attempts():
        attempts = state.list_tasks(filters=[("task_id", "=", task_id)], detail=True)
        return sorted((a.attempt_number, a.state) for a in attempts) == [(0, "FAILED"), (1, "FINISHED")]

    wait_for_condition(both_attempts, timeout=60)
    (failed,) = [a for a in state.list_tasks(filters=[("task_id", "=", task_id)], detail=True) if a.attempt_number == 0]
    assert failed.error_type == "TASK_EXECUTION_EXCEPTION" and "the first call fails" in failed.error_message
    ray.kill(actor)
