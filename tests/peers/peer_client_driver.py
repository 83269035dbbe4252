"""Drive the real Iris client (marin-iris from PyPI) against a controller; print one JSON report.

Run by the peer venv's Python, never imported by fray_ray:

    <peer python> peer_client_driver.py '{"address": ..., "token": ..., "prefix": ...}'

Everything here uses the peer's public client API (IrisClient.remote, submit, job_state,
list_tasks, cancel_job, list_endpoints, list_jobs, list_workers, Job.logs) and, inside tasks,
iris_ctx().
"""

import json
import sys
import time
import traceback


def report_hello(word):
    """Task body: print something and exit 0."""
    import os

    print(f"peer says {word} from {os.environ['IRIS_TASK_ID']}", flush=True)


def serve_forever():
    """Task body: register an endpoint for this attempt through the peer's registry, then wait."""
    import time

    from iris.client.client import iris_ctx

    ctx = iris_ctx()
    port = ctx.get_port("actor")
    ctx.registry.register("peer-actor", f"http://127.0.0.1:{port}", {"attempt": str(ctx.task_attempt)})
    print("registered", flush=True)
    time.sleep(300)


def sleep_forever():
    import time

    time.sleep(300)


def wait_until(predicate, timeout=60.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        time.sleep(interval)


def main() -> None:
    args = json.loads(sys.argv[1])
    from iris.client.client import IrisClient
    from iris.cluster.types import Entrypoint, ResourceSpec

    credentials = None
    if args.get("token"):
        import rigging.auth
        import rigging.credentials

        credentials = rigging.credentials.ClientCredentials(
            token_provider=rigging.auth.StaticTokenProvider(args["token"])
        )
    client = IrisClient.remote(args["address"], credentials=credentials)
    prefix = args["prefix"]
    small = ResourceSpec(cpu=0.25)
    out: dict = {}
    try:
        if args.get("expect_rejection"):
            try:
                client.list_jobs(prefix="/")
                out["rejected"] = False
            except Exception as exc:  # noqa: BLE001 - report what the peer raised
                out["rejected"] = True
                out["rejection"] = f"{type(exc).__name__}: {exc}"
                code = getattr(exc, "code", None)
                out["code"] = str(getattr(code, "value", code))
            return

        # 1. a callable job runs to success
        job = client.submit(
            Entrypoint.from_callable(report_hello, "hi"), name=f"{prefix}-hello", resources=small, replicas=2
        )
        out["hello_job"] = str(job.job_id)
        states = []
        wait_until(
            lambda: (
                states.append(str(client.job_state(job.job_id).value))
                or states[-1] in ("succeeded", "failed", "killed")
            )
        )
        out["hello_states"] = states
        out["hello_tasks"] = [
            {"task_id": str(t.task_id), "state": str(t.state.value), "worker_id": t.worker_id}
            for t in client.list_tasks(job.job_id)
        ]
        out["listed_jobs"] = [str(j.job_id) for j in client.list_jobs(prefix=out["hello_job"])]
        # the job's output, through the log service (FetchLogs via the controller's proxy path)
        hello_logs = wait_until(lambda: (entries := job.logs()) and len(entries) >= 2 and entries)
        out["hello_logs"] = sorted([str(e.task_id), e.data, e.attempt_id] for e in hello_logs)
        out["workers"] = [
            {
                "worker_id": w.worker_id,
                "healthy": w.healthy,
                "cpu_count": w.metadata.cpu_count,
                "memory_bytes": w.metadata.memory_bytes,
                "device": w.metadata.device.WhichOneof("device"),
                "attributes": {k: str(getattr(v, v.WhichOneof("value"))) for k, v in w.metadata.attributes.items()},
            }
            for w in client.list_workers()
        ]

        # 2. a running job is terminated
        sleeper = client.submit(Entrypoint.from_callable(sleep_forever), name=f"{prefix}-sleeper", resources=small)
        wait_until(lambda: str(client.job_state(sleeper.job_id).value) == "running")
        client.cancel_job(sleeper.job_id)
        out["sleeper_state"] = str(
            wait_until(lambda: (s := str(client.job_state(sleeper.job_id).value)) != "running" and s)
        )
        out["sleeper_tasks"] = [str(t.state.value) for t in client.list_tasks(sleeper.job_id)]

        # 3. a task registers an endpoint that the client then lists
        server = client.submit(
            Entrypoint.from_callable(serve_forever), name=f"{prefix}-server", resources=small, ports=["actor"]
        )
        endpoints = wait_until(lambda: client.list_endpoints(str(server.job_id)))
        out["endpoints"] = [
            {"name": e.name, "address": e.address, "task_id": e.task_id, "metadata": dict(e.metadata)}
            for e in endpoints
        ]
        out["server_ports"] = [dict(t.ports) for t in client.list_tasks(server.job_id)]
        client.cancel_job(server.job_id)
        out["endpoints_after_cancel"] = len(client.list_endpoints(str(server.job_id)))
    except Exception:  # noqa: BLE001 - the test reads the traceback from the report
        out["error"] = traceback.format_exc()
    finally:
        print("REPORT " + json.dumps(out), flush=True)
        client.shutdown(wait=False)


if __name__ == "__main__":
    main()
