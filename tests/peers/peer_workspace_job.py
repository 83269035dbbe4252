"""Submit a command job with the newest Iris client's default environment; print one JSON report.

Run by the peer venv's Python, never imported by fray_ray:

    <peer python> peer_workspace_job.py '{"address": ..., "token": ..., "workspace": ..., "name": ...}'

The default `EnvironmentSpec` (no `setup_scripts`) makes the client send its standard setup: a
`uv sync` of the workspace project into `$IRIS_VENV`, with the client's own Python version.
"""

import json
import sys
import time
import traceback
from pathlib import Path


def main() -> None:
    args = json.loads(sys.argv[1])
    import rigging.auth
    import rigging.credentials
    from iris.client.client import IrisClient
    from iris.cluster.types import Entrypoint, ResourceSpec

    credentials = rigging.credentials.ClientCredentials(token_provider=rigging.auth.StaticTokenProvider(args["token"]))
    client = IrisClient.remote(args["address"], credentials=credentials, workspace=Path(args["workspace"]))
    out: dict = {}
    try:
        job = client.submit(Entrypoint.from_command("python", "main.py"), name=args["name"], resources=ResourceSpec(cpu=0.25))
        out["job"] = str(job.job_id)
        deadline = time.monotonic() + 180
        while (state := str(client.job_state(job.job_id).value)) not in ("succeeded", "failed", "killed"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"job still {state} after 180 s")
            time.sleep(0.1)
        out["state"] = state
        out["error"] = job.status().error_message
    except Exception:  # noqa: BLE001 - the test reads the traceback from the report
        out["traceback"] = traceback.format_exc()
    print("REPORT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
