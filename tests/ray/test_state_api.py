"""The state API (`fray_ray.util.state`) and `timeline()` against a session with running,
finished and failed tasks, live and dead actors, and held objects."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import fray_ray
from fray_ray._private.objects.serialization import serialize_error
from fray_ray._private.observe.task_events import TaskEvent, TaskEvents, TaskStatus, TaskType
from fray_ray.util import state
from fray_ray.util.state import RayStateApiException

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared test helpers

from waiting import wait_for  # noqa: E402


@fray_ray.remote(num_cpus=0)
class Gate:
    def __init__(self) -> None:
        self._open = asyncio.Event()

    async def wait(self) -> bool:
        await self._open.wait()
        return True

    async def open(self) -> None:
        self._open.set()


@fray_ray.remote
def finish(x: int) -> int:
    return x + 1


@fray_ray.remote
def explode() -> None:
    raise ValueError("boom from explode")


@fray_ray.remote
def hold(gate: Any, payload: Any) -> int:
    fray_ray.get(gate.wait.remote())
    return len(payload)


@fray_ray.remote
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def incr(self) -> int:
        self.n += 1
        return self.n


@fray_ray.remote
class Turnstile:
    """A synchronous actor (one call at a time) whose `through` holds it until a gate opens."""

    def through(self, gate: Any) -> bool:
        return bool(fray_ray.get(gate.wait.remote()))

    def after(self) -> str:
        return "after"

    def refuse(self) -> None:
        raise KeyError("refused")


@fray_ray.remote(enable_task_events=False)
def unrecorded() -> int:
    return 1


@fray_ray.remote(enable_task_events=False)
class Quiet:
    def hidden(self) -> int:
        return 1

    @fray_ray.method(enable_task_events=True)
    def shown(self) -> int:
        return 2


@fray_ray.remote(max_restarts=1, max_task_retries=1)
class Flaky:
    def __init__(self) -> None:
        self.calls = 0

    def fail_once(self) -> int:
        self.calls += 1
        if self.calls == 1:
            raise ValueError("the first time")
        return self.calls

    def die_once(self) -> bool:
        if not fray_ray.get_runtime_context().was_current_actor_reconstructed:
            os._exit(1)
        return True


@fray_ray.remote
def ask_state() -> str:
    try:
        state.list_tasks()
    except RayStateApiException as exc:
        return str(exc)
    return "answered"


@pytest.fixture(scope="module")
def busy_session() -> Iterator[dict[str, Any]]:
    """A session with one finished, one failed and one running task, a live and a dead actor,
    and objects held by the driver, by a running task and inside another object."""
    if fray_ray.is_initialized():
        fray_ray.shutdown()
    fray_ray.init(num_cpus=2, namespace="state-tests")
    gate = Gate.remote()
    fray_ray.get(gate.__ray_ready__.remote())  # up: `hold` calls it directly, and the call runs at once
    done = finish.remote(1)
    assert fray_ray.get(done) == 2
    failed = explode.remote()
    with pytest.raises(ValueError):
        fray_ray.get(failed)
    argument = fray_ray.put(b"a" * 5000)
    running = hold.remote(gate, argument)
    held = fray_ray.put(b"h" * 100_000)
    inner = fray_ray.put("inner")
    outer = fray_ray.put([inner])
    inner_id = inner.hex()
    del inner
    live = Counter.options(name="live-counter").remote()
    assert fray_ray.get(live.incr.remote()) == 1
    dead = Counter.remote()
    assert fray_ray.get(dead.incr.remote()) == 1
    fray_ray.kill(dead)
    wait_for(lambda: state.list_tasks(filters=[("name", "=", "hold"), ("state", "=", "RUNNING")]))
    wait_for(lambda: state.list_tasks(filters=[("name", "=", "Gate.wait")]))  # `hold` has made its call
    session = {
        "gate": gate, "done": done, "failed": failed, "running": running, "argument": argument, "held": held,
        "outer": outer, "inner_id": inner_id, "live": live, "dead": dead,
    }
    yield session
    fray_ray.get(gate.open.remote())
    fray_ray.get(running)
    fray_ray.shutdown()


def by_name(tasks: list[Any], name: str) -> list[Any]:
    return [t for t in tasks if t.name == name]


def test_tasks_keep_state_timings_node_and_error(busy_session: dict[str, Any]) -> None:
    tasks = state.list_tasks(detail=True)
    (done,) = by_name(tasks, "finish")
    (failed,) = by_name(tasks, "explode")
    (running,) = by_name(tasks, "hold")
    assert (done.state, failed.state, running.state) == ("FINISHED", "FAILED", "RUNNING")
    assert done.task_id == busy_session["done"].task_id().hex()
    assert done.type == "NORMAL_TASK" and done.error_type is None
    assert failed.error_type == "TASK_EXECUTION_EXCEPTION"
    assert "boom from explode" in failed.error_message
    assert done.creation_time_ms <= done.start_time_ms <= done.end_time_ms
    assert running.start_time_ms is not None and running.end_time_ms is None
    assert [e["state"] for e in done.events] == ["PENDING_ARGS_AVAIL", "RUNNING", "FINISHED"]
    nodes = {n.node_id for n in state.list_nodes()}
    assert {done.node_id, failed.node_id, running.node_id} <= nodes
    assert running.worker_pid and running.required_resources == {"CPU": 1.0}
    calls = [t for t in tasks if t.type == "ACTOR_TASK" and t.name == "Counter.incr"]
    assert len(calls) == 2 and all(t.state == "FINISHED" for t in calls)
    (waiting,) = [t for t in tasks if t.name == "Gate.wait"]  # a call made from inside a task
    assert waiting.state == "RUNNING" and waiting.actor_id == busy_session["gate"]._actor_id.hex()
    creations = [t for t in tasks if t.type == "ACTOR_CREATION_TASK" and t.name == "Counter.__init__"]
    assert len(creations) == 2


def test_records_read_like_dicts_and_hide_detail_columns(busy_session: dict[str, Any]) -> None:
    (done,) = by_name(state.list_tasks(), "finish")
    assert done["state"] == "FINISHED" and done.get("name") == "finish" and done.get("missing", 7) == 7
    assert done.asdict()["task_id"] == done.task_id
    assert done.error_message is None and done.start_time_ms is None  # detail columns, not asked for
    assert "start_time_ms" in state.TaskState.detail_columns() - state.TaskState.base_columns()
    assert "state" in state.TaskState.filterable_columns()


def test_filters_and_limit_behave_as_rays(busy_session: dict[str, Any]) -> None:
    failed = state.list_tasks(filters=[("state", "=", "failed")])  # strings compare case-insensitively
    assert [t.name for t in failed] == ["explode"]
    others = state.list_tasks(filters=[("state", "!=", "FAILED"), ("type", "=", "NORMAL_TASK")])
    assert {t.name for t in others} == {"finish", "hold"}
    every = state.list_tasks()
    assert len(every) >= 7
    two = state.list_tasks(limit=2)
    assert [t.task_id for t in two] == sorted(t.task_id for t in every)[:2]
    assert state.list_actors(filters=[("pid", "=", str(state.list_actors()[0].pid))])  # ints from strings
    with pytest.raises(ValueError, match="Unsupported filter predicate"):
        state.list_tasks(filters=[("state", ">", "RUNNING")])
    with pytest.raises(RayStateApiException, match="not supported"):
        state.list_tasks(filters=[("error_message", "=", "x")])  # a detail column Ray does not filter on
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert state.list_tasks(filters=[("state", "=", "RUNNING"), ("state", "=", "FAILED")]) == []
    assert any("multiple '=' filters" in str(w.message) for w in caught)


def test_actors_live_and_dead(busy_session: dict[str, Any]) -> None:
    actors = {a.actor_id: a for a in state.list_actors(detail=True)}
    live = actors[busy_session["live"]._actor_id.hex()]
    dead = actors[busy_session["dead"]._actor_id.hex()]
    assert (live.state, live.name, live.class_name, live.ray_namespace) == ("ALIVE", "live-counter", "Counter",
                                                                             "state-tests")
    assert live.pid > 0 and live.node_id in {n.node_id for n in state.list_nodes()}
    assert live.death_cause is None and live.num_restarts == 0
    assert dead.state == "DEAD" and dead.name == ""
    assert "ray.kill" in dead.death_cause["actor_died_error_context"]["error_message"]
    assert state.get_actor(live.actor_id).state == "ALIVE"
    assert state.get_actor("00" * 16) is None
    assert {a.state for a in state.list_actors(filters=[("class_name", "=", "Counter")])} == {"ALIVE", "DEAD"}


def test_objects_keep_size_owner_and_reference_kind(busy_session: dict[str, Any]) -> None:
    def rows() -> dict[str, Any]:
        return {o.object_id: o for o in state.list_objects(limit=10_000)}

    held_id, argument_id = busy_session["held"].hex(), busy_session["argument"].hex()
    found = wait_for(lambda: (r := rows()).get(busy_session["inner_id"]) is not None
                       and r[busy_session["inner_id"]].reference_type == "CAPTURED_IN_OBJECT" and r)
    assert found[held_id].reference_type == "LOCAL_REFERENCE"
    assert found[held_id].object_size >= 100_000 and found[held_id].task_status == "NIL"
    assert found[argument_id].reference_type == "USED_BY_PENDING_TASK"
    running = found[busy_session["running"].hex()]
    assert running.object_size == -1 and running.task_status == "RUNNING"
    assert found[busy_session["done"].hex()].task_status == "FINISHED"
    assert {(o.type, o.ip) for o in found.values()} == {("DRIVER", "127.0.0.1")}
    assert all(o.pid > 0 for o in found.values())
    assert state.list_objects(filters=[("reference_type", "=", "USED_BY_PENDING_TASK")])[0].object_id == argument_id


def test_summaries(busy_session: dict[str, Any]) -> None:
    tasks = state.summarize_tasks()["cluster"]
    assert tasks["summary"]["explode"]["state_counts"] == {"FAILED": 1}
    assert tasks["summary"]["finish"] == {"func_or_class_name": "finish", "type": "NORMAL_TASK",
                                          "state_counts": {"FINISHED": 1}}
    # a function of an imported module is listed as Ray lists it: its own name, not its module's
    [finished] = state.list_tasks(filters=[("name", "=", "finish")])
    assert finished.func_or_class_name == "finish"
    assert tasks["total_actor_scheduled"] >= 3 and tasks["total_actor_tasks"] >= 2
    assert tasks["total_tasks"] >= 3 and tasks["summary_by"] == "func_name"
    actors = state.summarize_actors()["cluster"]
    assert actors["summary"]["Counter"] == {"class_name": "Counter", "state_counts": {"ALIVE": 1, "DEAD": 1}}
    assert actors["total_actors"] == 3 and actors["summary_by"] == "class"


def test_get_task_by_id_and_ref(busy_session: dict[str, Any]) -> None:
    by_ref = state.get_task(busy_session["running"])
    assert by_ref.state == "RUNNING" and by_ref.start_time_ms is not None  # get_task is detailed
    assert state.get_task(busy_session["done"].task_id().hex()).state == "FINISHED"
    assert state.get_task("ff" * 24) is None


def test_nodes_jobs_and_placement_groups(busy_session: dict[str, Any]) -> None:
    (node,) = state.list_nodes()
    assert (node.state, node.is_head_node) == ("ALIVE", True) and node.resources_total["CPU"] == 2.0
    jobs = state.list_jobs()
    (driver,) = [j for j in jobs if j.job_id == fray_ray.get_runtime_context().get_job_id()]
    assert driver.type == "DRIVER" and driver.status == "RUNNING"
    assert not [j for j in jobs if "rayactor" in (j.submission_id or "")]  # named actors are not jobs
    group = fray_ray.util.placement_group([{"CPU": 0.1}])
    fray_ray.get(group.ready())
    (row,) = state.list_placement_groups(filters=[("placement_group_id", "=", group.id.hex())], detail=True)
    assert row.state == "CREATED" and row.bundles[0]["unit_resources"] == {"CPU": 0.1}
    fray_ray.util.remove_placement_group(group)
    wait_for(lambda: state.list_placement_groups(filters=[("state", "=", "REMOVED")]))


def test_state_api_is_for_the_driver(busy_session: dict[str, Any]) -> None:
    assert "from the driver" in fray_ray.get(ask_state.remote())


def test_timeline_has_one_complete_event_per_ended_attempt(busy_session: dict[str, Any], tmp_path: Any) -> None:
    target = tmp_path / "trace.json"
    assert fray_ray.timeline(str(target)) is None
    trace = json.loads(target.read_text())
    ended = [t for t in state.list_tasks(limit=10_000) if t.state in ("FINISHED", "FAILED")]
    assert sorted(e["args"]["task_id"] for e in trace) == sorted(t.task_id for t in ended)
    for event in trace:
        assert event["ph"] == "X" and event["dur"] >= 0 and event["ts"] > 0
        assert set(event) >= {"cat", "name", "pid", "tid", "ts", "dur", "ph", "args"}
    names = {e["cat"] for e in trace}
    assert {"task::finish", "task::explode", "task::Counter.incr"} <= names
    assert fray_ray.timeline() == sorted(fray_ray.timeline(), key=lambda e: e["ts"])


def test_retried_attempts_are_separate_records(busy_session: dict[str, Any]) -> None:
    @fray_ray.remote(max_retries=1, retry_exceptions=True)
    def flaky() -> None:
        raise RuntimeError("always")

    ref = flaky.remote()
    with pytest.raises(RuntimeError):
        fray_ray.get(ref)
    attempts = state.get_task(ref)
    assert [(a.attempt_number, a.state) for a in attempts] == [(0, "FAILED"), (1, "FAILED")]


# These add failed tasks and actors: they run after the tests that count the fixture's.


def test_actor_calls_are_listed_running_waiting_and_ended(busy_session: dict[str, Any]) -> None:
    gate, turnstile = Gate.remote(), Turnstile.remote()
    first, second, third = turnstile.through.remote(gate), turnstile.after.remote(), turnstile.refuse.remote()
    unlisted = turnstile.after.options(enable_task_events=False).remote()
    wait_for(lambda: state.list_tasks(filters=[("name", "=", "Turnstile.through"), ("state", "=", "RUNNING")]))
    live = {t.name: t for t in state.list_tasks(filters=[("type", "=", "ACTOR_TASK")], detail=True)}
    assert live["Turnstile.after"].state == "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY"
    assert live["Turnstile.refuse"].state == "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY"
    assert live["Turnstile.through"].task_id == first.task_id().hex()
    assert live["Turnstile.through"].actor_id == turnstile._actor_id.hex()
    assert live["Turnstile.through"].node_id == live["Turnstile.after"].node_id is not None
    assert live["Turnstile.through"].start_time_ms is not None and live["Turnstile.after"].start_time_ms is None
    assert len(state.list_tasks(filters=[("name", "=", "Turnstile.after")])) == 1  # not the unlisted one
    fray_ray.get(gate.open.remote())
    assert fray_ray.get([first, second, unlisted]) == [True, "after", "after"]
    with pytest.raises(KeyError):
        fray_ray.get(third)
    ended = {t.name: t for t in state.list_tasks(filters=[("type", "=", "ACTOR_TASK")], detail=True)
             if t.name.startswith("Turnstile.")}
    assert {name: t.state for name, t in ended.items()} == {
        "Turnstile.through": "FINISHED", "Turnstile.after": "FINISHED", "Turnstile.refuse": "FAILED",
    }
    through, after = ended["Turnstile.through"], ended["Turnstile.after"]
    assert through.creation_time_ms <= through.start_time_ms <= after.start_time_ms <= after.end_time_ms
    assert ended["Turnstile.refuse"].error_type == "TASK_EXECUTION_EXCEPTION"
    assert "refused" in ended["Turnstile.refuse"].error_message
    assert len(state.list_tasks(filters=[("name", "=", "Turnstile.after")])) == 1  # listed once


def test_calls_to_an_actor_still_starting_wait_and_fail_with_it(busy_session: dict[str, Any]) -> None:
    stuck = Turnstile.options(num_cpus=2).remote()  # waits: the running `hold` task has one of the two CPUs
    call = stuck.after.remote()
    (waiting,) = state.list_tasks(filters=[("task_id", "=", call.task_id().hex())], detail=True)
    assert waiting.state == "PENDING_NODE_ASSIGNMENT" and waiting.type == "ACTOR_TASK" and waiting.node_id is None
    fray_ray.kill(stuck)
    with pytest.raises(fray_ray.exceptions.RayActorError):
        fray_ray.get(call)
    late = stuck.after.remote()  # to the dead actor: it fails at once, and is listed so
    with pytest.raises(fray_ray.exceptions.RayActorError):
        fray_ray.get(late)
    for ref in (call, late):
        (failed,) = state.list_tasks(filters=[("task_id", "=", ref.task_id().hex())], detail=True)
        assert failed.state == "FAILED" and failed.error_type == "ACTOR_DIED" and failed.name == "Turnstile.after"


def test_an_actor_call_sent_again_is_a_new_attempt(busy_session: dict[str, Any]) -> None:
    flaky = Flaky.remote()
    retried = flaky.fail_once.options(retry_exceptions=True).remote()
    assert fray_ray.get(retried) == 2
    first, second = state.get_task(retried)
    assert [(first.attempt_number, first.state), (second.attempt_number, second.state)] == [(0, "FAILED"), (1, "FINISHED")]
    assert first.error_type == "TASK_EXECUTION_EXCEPTION" and "the first time" in first.error_message
    assert first.end_time_ms <= second.start_time_ms <= second.end_time_ms
    survived = flaky.die_once.remote()  # its process dies; the restarted actor runs it again
    assert fray_ray.get(survived) is True
    died, ran = state.get_task(survived)
    assert [(died.attempt_number, died.state, died.error_type), (ran.attempt_number, ran.state)] == [
        (0, "FAILED", "ACTOR_DIED"), (1, "FINISHED")]
    assert died.worker_pid != ran.worker_pid


def test_enable_task_events_false_leaves_tasks_and_calls_out(busy_session: dict[str, Any]) -> None:
    quiet, counter = Quiet.remote(), busy_session["live"]
    refs = [unrecorded.remote(), quiet.hidden.remote(), quiet.shown.remote(),
            counter.incr.options(enable_task_events=False).remote(), counter.incr.options(name="counted").remote()]
    assert fray_ray.get(refs[:3]) == [1, 1, 2]
    fray_ray.get(refs[3:])
    listed = {t.task_id: t for t in state.list_tasks(detail=True)}
    assert not {ref.task_id().hex() for ref in refs[:2]} & set(listed)
    assert refs[3].task_id().hex() not in listed
    assert "Quiet.__init__" not in {t.name for t in listed.values()}  # the actor's creation is left out too
    assert listed[refs[2].task_id().hex()].name == "Quiet.shown"  # a method's own value wins over its actor's
    counted = listed[refs[4].task_id().hex()]
    assert (counted.name, counted.func_or_class_name, counted.state) == ("counted", "Counter.incr", "FINISHED")


# ---- the recorder alone --------------------------------------------------------------------


def test_history_is_bounded_and_live_attempts_stay() -> None:
    events = TaskEvents(history=3)
    live = events.submitted(TaskEvent(b"L" * 24, "live", "live", TaskType.NORMAL_TASK, TaskStatus.PENDING_ARGS_AVAIL))
    for index in range(5):
        event = events.submitted(TaskEvent(bytes([index]) * 24, f"t{index}", "t", TaskType.NORMAL_TASK,
                                           TaskStatus.PENDING_ARGS_AVAIL))
        events.placed(event, TaskStatus.RUNNING, None, None, 1)
        events.finished(event, serialize_error(ValueError("x")) if index == 4 else None)
    kept = events.snapshot()
    assert [e.name for e in kept] == ["t2", "t3", "t4", "live"] and events.dropped == 2
    assert kept[2].state is TaskStatus.FAILED and kept[1].state is TaskStatus.FINISHED
    assert live.state is TaskStatus.PENDING_ARGS_AVAIL


def test_history_limit_follows_rays_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from fray_ray._private.observe.task_events import DEFAULT_HISTORY, history_limit

    monkeypatch.setenv("RAY_task_events_max_num_task_in_gcs", "7")
    assert history_limit() == 7
    monkeypatch.setenv("RAY_task_events_max_num_task_in_gcs", "many")
    assert history_limit() == DEFAULT_HISTORY
