"""Setup scripts and workspace bundles on the embedded cluster, as an Iris worker handles them:
scripts run as steps before the command (a failing one fails the attempt, saying which step),
the command runs with `$IRIS_VENV` activated when a step left one, and a bundle is unpacked into
each attempt's own workdir by its content id."""

from __future__ import annotations

import hashlib

from cluster_helpers import job_name, log_json, sh, wait_finished

from fray_ray.cluster import cpu_worker
from fray_ray.iris.bundles import snapshot_workspace
from fray_ray.iris.types import JobState

PRINT = (
    "python3 -c 'import json, os; print(\"ENV \" + json.dumps("
    "{\"venv\": os.environ.get(\"VIRTUAL_ENV\"), \"files\": sorted(os.listdir(\".\"))}))'"
)


def test_setup_steps_run_in_order_then_the_command_in_the_venv(make_cluster) -> None:
    cluster = make_cluster()
    steps = (
        'echo one > "$IRIS_WORKDIR/step1.txt"',
        # a step that leaves a virtualenv at $IRIS_VENV: the command then runs with it active
        'cat step1.txt && mkdir -p "$IRIS_VENV/bin" && echo "export VIRTUAL_ENV=$IRIS_VENV" > "$IRIS_VENV/bin/activate"',
    )
    with cluster.client() as client:
        job_id = client.launch_job(sh(PRINT, name=job_name("setup"), setup_scripts=steps))
        status = wait_finished(client, job_id)
        assert status.state == JobState.SUCCEEDED, status.error
        lines = [line.data for line in client.task_logs(job_id)]
        assert lines[:3] == ["[iris setup] step 1/2", "[iris setup] step 2/2", "one"]
        (info,) = log_json(client, f"{job_id}/0")
        assert info["venv"].endswith("/.venv") and "step1.txt" in info["files"]


def test_a_failing_setup_step_fails_the_attempt_and_says_which(make_cluster) -> None:
    cluster = make_cluster()
    with cluster.client() as client:
        job_id = client.launch_job(
            sh("echo never runs", name=job_name("broken-setup"), setup_scripts=("true", "echo no such package >&2; exit 3"))
        )
        status = wait_finished(client, job_id)
        assert status.state == JobState.FAILED
        (task,) = client.list_tasks(job_id)
        assert "exit code 3" in task.error and "step 2/2 failed with exit code 3" in task.error
        assert "no such package" in task.error
        assert "never runs" not in [line.data for line in client.task_logs(job_id)]


def test_workers_that_skip_setup_run_the_command_alone(make_cluster) -> None:
    cluster = make_cluster(run_setup_scripts=False)
    with cluster.client() as client:
        job_id = client.launch_job(sh("echo ran", name=job_name("no-setup"), setup_scripts=("exit 1",)))
        assert wait_finished(client, job_id).state == JobState.SUCCEEDED
        assert [line.data for line in client.task_logs(job_id)] == ["ran"]


def test_a_bundle_is_unpacked_into_each_attempts_workdir_by_content_id(make_cluster, tmp_path) -> None:
    (tmp_path / "ws" / "pkg").mkdir(parents=True)
    (tmp_path / "ws" / "pkg" / "data.txt").write_text("from the bundle\n")
    bundle = snapshot_workspace(str(tmp_path / "ws")).bundle()
    assert bundle.bundle_id == hashlib.sha256(bundle.blob).hexdigest()
    cluster = make_cluster(cpu_worker("a", cpu=2, memory="4g", disk="10g"), cpu_worker("b", cpu=2, memory="4g", disk="10g"))
    with cluster.client() as client:
        first = client.launch_job(sh("cat pkg/data.txt; pwd", name=job_name("first"), bundle=bundle, replicas=2))
        assert wait_finished(client, first).state == JobState.SUCCEEDED
        # the second job names the bundle by id alone: the controller kept it
        second = client.launch_job(sh("cat pkg/data.txt", name=job_name("second"), bundle=bundle))
        assert wait_finished(client, second).state == JobState.SUCCEEDED
        first_lines = [line.data for line in client.task_logs(first)]
        assert first_lines.count("from the bundle") == 2
        workdirs = [line for line in first_lines if line.startswith("/")]
        assert len(set(workdirs)) == 2  # each attempt has a workdir of its own
        assert [line.data for line in client.task_logs(second)] == ["from the bundle"]


def test_a_job_naming_a_bundle_the_controller_never_got_fails(make_cluster) -> None:
    from fray_ray.iris.bundles import WorkspaceBundle

    cluster = make_cluster()
    with cluster.client() as client:
        job_id = client.launch_job(sh("true", name=job_name("no-bundle"), bundle=WorkspaceBundle.existing("ab" * 32)))
        status = wait_finished(client, job_id)
        assert status.state == JobState.FAILED
        (task,) = client.list_tasks(job_id)
        assert "was never uploaded" in task.error
