"""Drive the real marin-fray `FrayIrisClient` (from PyPI) against a controller; print one JSON report.

Run by the peer client venv's Python (3.12), never imported by fray_ray:

    <peer python> fray_peer_driver.py '{"address": ..., "token": ..., "prefix": ...}'

It uses only the peer's public API: `FrayIrisClient.from_iris_client(IrisClient.remote(...))`,
`submit`/`wait`/`status`, `create_actor_group`/`wait_ready`, `.remote().result()`, direct calls,
`shutdown`. The job and the actors run the peer's own code inside tasks of our cluster.
"""

import json
import sys
import traceback


def write_marker(path, text):
    """Job body: prove the task ran by writing a file the test reads, and say so."""
    with open(path, "w") as f:
        f.write(text)
    print(f"marker written: {text}", flush=True)


class Accumulator:
    """Actor body: a per-replica running total."""

    def __init__(self, start):
        self.total = start

    def add(self, amount):
        self.total += amount
        return self.total

    def whoami(self):
        import os

        return os.environ["IRIS_TASK_ID"]


def main() -> None:
    args = json.loads(sys.argv[1])
    import rigging.auth
    import rigging.credentials
    from fray.iris_backend import FrayIrisClient
    from fray.types import ActorConfig, Entrypoint, JobRequest, ResourceConfig
    from iris.client.client import IrisClient

    credentials = rigging.credentials.ClientCredentials(token_provider=rigging.auth.StaticTokenProvider(args["token"]))
    client = FrayIrisClient.from_iris_client(IrisClient.remote(args["address"], credentials=credentials))
    small = ResourceConfig(cpu=0.25, ram="256m", disk="1g")
    prefix = args["prefix"]
    out: dict = {}
    try:
        job = client.submit(
            JobRequest(
                name=f"{prefix}-job",
                entrypoint=Entrypoint.from_callable(write_marker, args=(args["marker"], "peer job ran")),
                resources=small,
            )
        )
        out["job_id"] = str(job.job_id)
        out["job_status"] = str(job.wait(timeout=120))
        out["job_logs"] = list(job.logs())  # marin-fray's handle.logs(): FetchLogs, zstd both ways

        group = client.create_actor_group(
            Accumulator, 10, name=f"{prefix}-acc", count=2, resources=small, actor_config=ActorConfig()
        )
        handles = group.wait_ready(timeout=120)
        out["ready"] = len(handles)
        out["remote"] = [h.add.remote(1).result(timeout=60) for h in handles]
        out["direct"] = handles[0].add(5)
        out["tasks"] = sorted(h.whoami() for h in handles)
        if args.get("hold"):
            # Let the test call these actors with fray_ray's client; go on when stdin closes.
            print("HOLD " + json.dumps(out), flush=True)
            sys.stdin.read()
        group.shutdown()
    except Exception:  # noqa: BLE001 - the test reads the traceback from the report
        out["error"] = traceback.format_exc()
    finally:
        print("REPORT " + json.dumps(out), flush=True)
        client.shutdown(wait=False)


if __name__ == "__main__":
    main()
