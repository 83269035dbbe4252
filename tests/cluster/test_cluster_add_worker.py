"""Workers that join a running embedded cluster (what `ray.cluster_utils.Cluster.add_node` uses)."""

from __future__ import annotations

import pytest
from cluster_helpers import job_name, sh, wait_finished

from fray_ray.cluster import cpu_worker
from fray_ray.iris.types import Constraint, ConstraintOp, JobState


def test_added_worker_gets_its_own_address_and_runs_work(make_cluster) -> None:
    cluster = make_cluster(cpu_worker("head", cpu=1, memory="2g", disk="1g"))
    status = cluster.add_worker(cpu_worker("extra", cpu=2, memory="2g", disk="1g", attributes={"marker": "x"}))
    assert status.alive and status.address.startswith("127.") and status.address != "127.0.0.1"
    second = cluster.add_worker(cpu_worker("extra2", cpu=1, memory="2g", disk="1g"))
    assert len({w.address for w in cluster.workers()}) == 3 and second.address != status.address
    with cluster.client() as client:
        assert sorted(w.worker_id for w in client.list_workers()) == ["extra", "extra2", "head"]
        # only the new worker has the attribute, so the job can only run there
        job_id = client.launch_job(sh("echo ran", name=job_name("on-extra"),
                                      constraints=(Constraint("marker", ConstraintOp.EXISTS),)))
        assert wait_finished(client, job_id).state == JobState.SUCCEEDED
        (task,) = client.list_tasks(job_id)
        assert task.worker_id == "extra"


def test_added_worker_ids_must_be_new(make_cluster) -> None:
    cluster = make_cluster(cpu_worker("head", cpu=1, memory="2g", disk="1g"))
    with pytest.raises(ValueError, match="already exists"):
        cluster.add_worker(cpu_worker("head", cpu=1, memory="2g", disk="1g"))
    assert [w.spec.worker_id for w in cluster.workers()] == ["head"]


def test_no_worker_joins_a_stopped_cluster(make_cluster) -> None:
    cluster = make_cluster(cpu_worker("head", cpu=1, memory="2g", disk="1g"))
    cluster.stop()
    with pytest.raises(RuntimeError):
        cluster.add_worker(cpu_worker("late", cpu=1, memory="2g", disk="1g"))
