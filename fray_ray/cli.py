"""The `fray-ray` command: run Ray scripts on fray_ray, run a cluster, look at jobs.

    fray-ray run script.py [args...]        run an unmodified Ray script (`import ray` → fray_ray); its
                                            init() and init(address="auto") start the run's cluster
    fray-ray start [--tpu v5p-16 ...]       start a cluster in the background (recorded for later
                                            commands and init(address="auto")); --block: foreground
    fray-ray down                           stop the recorded cluster (also: fray-ray stop --cluster)
    fray-ray status [--json]                nodes, resources used/free, pending demand
    fray-ray submit script.py               ship this directory, run the script from it as a job
    fray-ray jobs [--json]                  list jobs (full ids)
    fray-ray list actors|tasks|objects|nodes|jobs|placement-groups [--filter k=v] [--json]
                                            Ray's state of every session, as `ray list`
    fray-ray summary tasks|actors [--json]  counts by function (class) and state, as `ray summary`
    fray-ray logs [-f] JOB                  show (or follow) a job's output
    fray-ray stop JOB                       terminate a job (and its children)

`--address` defaults to $FRAY_RAY_ADDRESS (or $RAY_ADDRESS), else the cluster `fray-ray start`
recorded; `--token` to $FRAY_RAY_TOKEN, else the recorded cluster's token.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Sequence


def _address(options: argparse.Namespace) -> str:
    """--address, else $FRAY_RAY_ADDRESS/$RAY_ADDRESS, else the cluster `fray-ray start` recorded."""
    from fray_ray._private.driver import cluster_address

    address = options.address or os.environ.get("FRAY_RAY_ADDRESS") or os.environ.get("RAY_ADDRESS")
    if address and address != "auto":
        return address
    try:
        record = cluster_address.read()
    except OSError as exc:
        sys.exit(f"fray-ray: cannot read the recorded cluster: {exc}")
    if record is None:
        sys.exit(
            "fray-ray: no cluster address; pass --address, set FRAY_RAY_ADDRESS, or start one with `fray-ray start` "
            f"(nothing running is recorded in {cluster_address.record_dir()})"
        )
    return record.address


def _token(options: argparse.Namespace) -> str | None:
    """--token, else $FRAY_RAY_TOKEN/$IRIS_AUTH_TOKEN, else the recorded cluster's when it is that one."""
    from fray_ray._private.driver import cluster_address

    token = options.token or os.environ.get("FRAY_RAY_TOKEN") or os.environ.get("IRIS_AUTH_TOKEN")
    return token or cluster_address.token_for(_address(options))


def _controller(options: argparse.Namespace):  # noqa: ANN202 - ControllerClient, imported lazily
    from fray_ray.iris.controller_client import ControllerClient

    return ControllerClient(_address(options), token=_token(options))


def run_script(script: str, args: Sequence[str]) -> int:
    """Run `script` as __main__ with `import ray` resolving to fray_ray."""
    import fray_ray
    from fray_ray._alias import alias_path
    from fray_ray._private.core import excepthook
    from fray_ray._private.driver import cluster_address

    fray_ray.install()
    excepthook.install_excepthook()  # the script's errors, even before its init(), without the launcher's frames
    cluster_address.mark_run()  # the script's init(address="auto") reaches the run's cluster
    # Interpreters the script starts find the alias too: through PYTHONPATH, and through
    # sys.path, which multiprocessing's spawn start method hands to its children.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (alias_path(), os.environ.get("PYTHONPATH")) if p)
    if alias_path() not in sys.path:
        sys.path.insert(0, alias_path())
    sys.argv = [script, *args]
    script_dir = os.path.dirname(os.path.abspath(script))
    if script_dir not in sys.path:
        sys.path.insert(0, script_dir)
    interrupted = False
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        # As `python script.py` ends: what started tasks print is printed, unless Ctrl-C ended it.
        from fray_ray._api import _shutdown_at_exit

        _shutdown_at_exit(interrupted)
    return 0


def _layout(tpus: Sequence[str], gpus: Sequence[str]) -> dict:
    """An embedded-cluster layout with simulated accelerator hosts, from --tpu/--gpu flags."""
    workers: list[dict] = [{"kind": "cpu"}]
    for index, spec in enumerate(tpus):
        variant, _, name = spec.partition(":")
        workers.append({"kind": "tpu", "variant": variant, "name": name or f"tpu-{index}"})
    for index, spec in enumerate(gpus):
        variant, count, hosts, *rest = (spec.split(":") + ["", "", ""])[:4]
        workers.append({"kind": "gpu", "variant": variant, "count": int(count or 8), "hosts": int(hosts or 1),
                        "pool": rest[0] or f"gpu-{index}"})
    return {"workers": workers}


def _cmd_run(options: argparse.Namespace) -> int:
    import json

    if options.address:
        # "auto": the cluster `fray-ray start` recorded (init() alone would start its own)
        os.environ["FRAY_RAY_ADDRESS"] = _address(options) if options.address == "auto" else options.address
    if options.token:
        os.environ["FRAY_RAY_TOKEN"] = options.token
    if options.local_mode:
        os.environ["FRAY_RAY_LOCAL_MODE"] = "1"
    if options.tpu or options.gpu:
        os.environ["FRAY_RAY_CLUSTER_CONFIG"] = json.dumps(_layout(options.tpu, options.gpu))
    return run_script(options.script, options.args)


START_DESCRIPTION = (
    "Start a cluster (an Iris-compatible controller with local workers): in the background by default "
    "(returns once it serves; `fray-ray down` stops it), or with --block in the foreground until Ctrl-C. "
    "While it runs it is recorded (address and token) for later fray-ray commands and init(address='auto')."
)


def build_start_parser() -> argparse.ArgumentParser:
    """`fray-ray start`'s options: the cluster's own, plus where it is recorded and --block."""
    from fray_ray.cluster._cli import build_parser as cluster_parser

    parser = cluster_parser(prog="fray-ray start", description=START_DESCRIPTION)
    parser.add_argument("--block", action="store_true", help="run in the foreground until Ctrl-C (default: background)")
    parser.add_argument("--temp-dir", metavar="DIR", help="directory of the address file (default: $FRAY_RAY_TEMP_DIR, "
                        "else a per-user directory in the system temp dir)")
    return parser


def _cmd_start(rest: Sequence[str]) -> int:
    """Start a cluster, recorded (address and token) in the per-user address file while it
    runs, so later commands and `init(address="auto")` on this machine find it: in the
    background by default (returns once it serves), in the foreground with --block."""
    from fray_ray._cli.background import start_background
    from fray_ray._private.driver import cluster_address
    from fray_ray.cluster._cli import main as cluster_main

    build_start_parser().parse_args(list(rest))  # --help, and bad options refused here, by this name
    record = argparse.ArgumentParser(add_help=False)
    record.add_argument("--temp-dir")
    record.add_argument("--block", action="store_true")
    own, rest = record.parse_known_args(list(rest))
    if not own.block:
        return start_background(
            [arg for arg in rest if arg != "--json"], temp_dir=own.temp_dir, as_json="--json" in rest
        )

    def record_cluster(cluster):  # noqa: ANN001, ANN202 - an EmbeddedCluster; returns its undo
        try:
            cluster_address.write(cluster.address, cluster.token, temp_dir=own.temp_dir)
        except OSError as exc:  # PermissionError included: a directory others may write to
            print(f"fray-ray start: not recorded for init(address='auto'): {exc}", file=sys.stderr)
            return None
        return lambda: cluster_address.remove(cluster.address, temp_dir=own.temp_dir)

    return cluster_main(rest, on_ready=record_cluster, prog="fray-ray start")


def _cmd_jobs(options: argparse.Namespace) -> int:
    import json

    from fray_ray._cli.jobs import job_record, render_table

    with _controller(options) as controller:
        jobs = controller.list_jobs(options.prefix or "")
    if options.json:
        print(json.dumps([job_record(job) for job in jobs], indent=2))
    else:
        print(render_table(jobs))
    return 0


def _cmd_down(options: argparse.Namespace) -> int:
    from fray_ray._cli.background import stop_recorded

    return stop_recorded(temp_dir=options.temp_dir)


def _cmd_logs(options: argparse.Namespace) -> int:
    from fray_ray.iris.logs import LogSelection

    try:
        selection = LogSelection.of(options.job)
    except ValueError as exc:
        print(f"fray-ray logs: {exc}", file=sys.stderr)
        return 2
    with _controller(options) as controller:
        if options.follow:
            job_id = selection.task_id.rpartition("/")[0] if selection.task_id else options.job
            try:
                return follow_job(controller, job_id, logs_of=options.job, include_children=options.children)
            except KeyboardInterrupt:
                print(f"\nstopped following {options.job}; the job keeps running", file=sys.stderr, flush=True)
                return 130
        lines = controller.task_logs(options.job, max_lines=options.tail, include_children=options.children)
        if not lines:  # no output yet, or no such job: say which (NotFound is reported by main)
            if selection.task_id:
                controller.task_status(selection.task_id)
            else:
                controller.job_state(options.job)
            print(f"{options.job} has printed nothing", file=sys.stderr)
        for line in lines:
            _print_line(line)
    return 0


def _print_line(line) -> None:  # noqa: ANN001 - a fray_ray.iris.types.LogLine
    stream = sys.stderr if line.source == "stderr" else sys.stdout
    print(f"[{line.task_id}:{line.attempt_id}] {line.data}", file=stream, flush=True)


#: How often a followed job's output and state are read.
FOLLOW_INTERVAL_S = 0.5


def follow_job(controller, job_id: str, *, logs_of: str | None = None, include_children: bool = False) -> int:  # noqa: ANN001
    """Print a job's output as it is written until the job ends; 0 if it succeeded, else 1.
    Blocks; KeyboardInterrupt passes through (the caller says how to follow again)."""
    import time

    from fray_ray.iris.types import JobState

    cursor = 0
    while True:
        state = controller.job_state(job_id)
        lines, cursor = controller.task_logs_after(logs_of or job_id, cursor, include_children=include_children)
        for line in lines:
            _print_line(line)
        if state.finished:
            # Output written just before the end may reach the log store a moment later.
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                time.sleep(FOLLOW_INTERVAL_S)
                lines, cursor = controller.task_logs_after(logs_of or job_id, cursor, include_children=include_children)
                for line in lines:
                    _print_line(line)
            status = controller.job_status(job_id)
            print(f"{job_id}: {state.name.lower()}" + (f": {status.error}" if status.error else ""), file=sys.stderr)
            return 0 if state == JobState.SUCCEEDED else 1
        time.sleep(FOLLOW_INTERVAL_S)


def _cmd_stop(options: argparse.Namespace) -> int:
    if options.cluster:
        if options.job:
            print("fray-ray stop: give a job or --cluster, not both", file=sys.stderr)
            return 2
        return _cmd_down(options)
    if not options.job:
        print("fray-ray stop: which job? (or --cluster to stop the recorded cluster)", file=sys.stderr)
        return 2
    with _controller(options) as controller:
        controller.terminate_job(options.job)
    print(f"terminated {options.job}")
    return 0


def _cmd_status(options: argparse.Namespace) -> int:
    import json

    from fray_ray._cli.status import read_status, render_text

    with _controller(options) as controller:
        if not controller.healthy():
            print(f"no controller answers at {controller.address}", file=sys.stderr)
            return 1
        status = read_status(controller)
    print(json.dumps(status.to_json(), indent=2) if options.json else render_text(status))
    return 0


def _cmd_list(options: argparse.Namespace) -> int:
    import json

    from fray_ray._cli import state_list

    kind = state_list.KINDS[options.kind]
    try:
        filters = state_list.parse_filters(options.kind, options.filter or [])
    except state_list.UsageError as exc:
        print(f"fray-ray list: {exc}", file=sys.stderr)
        return 2
    if options.limit < 0:
        print(f"fray-ray list: --limit must be 0 or more, got {options.limit}", file=sys.stderr)
        return 2
    with _controller(options) as controller:
        rows = _state_rows(options, controller, kind)
    shown, matched = state_list.select(rows, kind, filters, options.limit)
    if matched > len(shown):
        print(f"fray-ray list: showing {len(shown)} of {matched} {options.kind}; raise --limit to see more",
              file=sys.stderr)
    if options.json:
        print(json.dumps(shown, indent=2, default=str))
    elif shown:
        print(state_list.render_rows(kind, shown))
    else:
        print(f"no {options.kind}" + (" match the filters" if filters else ""))
    return 0


def _state_rows(options: argparse.Namespace, controller, kind) -> list[dict]:  # noqa: ANN001 - lazily imported types
    """Rows of `kind`: from the controller (nodes, jobs) or every session's feed (the rest),
    saying on stderr which sessions did not answer."""
    from fray_ray._cli import state_list

    if kind.feed_kind is None:
        return state_list.node_rows(controller) if kind.key == "node_id" else state_list.job_rows(controller)
    gathered = state_list.gather(controller, kind.feed_kind, _token(options), timeout=options.timeout)
    for problem in gathered.problems:
        print(f"fray-ray {options.command}: {problem}", file=sys.stderr)
    if kind.feed_kind == "actors":  # detached actors live on after their sessions end
        from fray_ray._cli.outliving_actors import outliving_actor_rows

        listed = {str(row.get("actor_id")) for row in gathered.rows}
        gathered.rows.extend(outliving_actor_rows(controller, _token(options), listed, options.timeout))
    if not gathered.sessions and not gathered.rows:
        print(f"fray-ray {options.command}: no Ray session serves its state on this cluster (a session shows while "
              "its driver runs; see fray-ray list --help)", file=sys.stderr)
    return gathered.rows


def _cmd_summary(options: argparse.Namespace) -> int:
    import json

    from fray_ray._cli import state_list

    with _controller(options) as controller:
        rows = _state_rows(options, controller, state_list.KINDS[options.what])
    summary = state_list.summary_of(options.what, rows)
    print(json.dumps(summary, indent=2) if options.json else state_list.render_summary(options.what, summary))
    return 0


#: A submitted driver runs this: the worker's own Python, from the unpacked bundle.
SUBMIT_COMMAND = 'cd "$IRIS_WORKDIR" && exec "$IRIS_PYTHON" -u -m fray_ray run "$@"'


def _cmd_submit(options: argparse.Namespace) -> int:
    """Ship the working directory as the job's bundle and run the script from it, as a job."""
    import uuid

    from fray_ray._cli.entrypoint_resources import entrypoint_resources
    from fray_ray._private.driver.shipped_code import NEVER_SHIPPED
    from fray_ray.fray import Entrypoint, EnvironmentConfig, FrayIrisClient, JobRequest

    workspace = os.path.abspath(options.working_dir or os.getcwd())
    script = os.path.relpath(os.path.abspath(options.script), workspace)
    if script.startswith(".." + os.sep) or script == ".." or not os.path.isfile(os.path.join(workspace, script)):
        print(
            f"fray-ray submit: {options.script} is not a file inside the directory that is shipped ({workspace}); "
            "run from the project's root or pass --working-dir",
            file=sys.stderr,
        )
        return 2
    excludes = [*(options.exclude or []), *NEVER_SHIPPED]
    try:
        resources = entrypoint_resources(options)
    except ValueError as exc:
        print(f"fray-ray submit: {exc}", file=sys.stderr)
        return 2
    address = _address(options)
    client = FrayIrisClient(address, token=_token(options))
    detach = True
    try:
        stem = os.path.splitext(os.path.basename(script))[0]
        name = options.name or f"driver-{''.join(c if c.isalnum() or c in '-_' else '-' for c in stem)}-{uuid.uuid4().hex[:6]}"
        request = JobRequest(
            name=name,
            entrypoint=Entrypoint.from_binary("bash", ["-c", SUBMIT_COMMAND, "fray-ray-submit", script, *options.args]),
            resources=resources,
            environment=EnvironmentConfig(
                workspace=workspace, workspace_excludes=excludes, env_vars={"PYTHONUNBUFFERED": "1"}
            ),
        )
        try:
            handle = client.submit(request, adopt_existing=False)
        except ValueError as exc:
            print(f"fray-ray submit: {exc}", file=sys.stderr)
            return 2
        job_id = handle.job_id
        follow = f"fray-ray logs -f {job_id} --address {address}"
        stop = f"fray-ray stop {job_id} --address {address}"
        print(f"submitted {job_id}", flush=True)
        if options.no_wait:
            print(f"follow its output: {follow}\nits output so far: fray-ray logs {job_id} --address {address}\n"
                  f"stop it: {stop}", flush=True)
            return 0
        try:
            with client_controller(address, _token(options)) as controller:
                code = follow_job(controller, job_id)
            detach = False
            return code
        except KeyboardInterrupt:
            print(f"\ndetached: {job_id} keeps running.\nfollow it again: {follow}\nstop it: {stop}",
                  file=sys.stderr, flush=True)
            return 130
    finally:
        client.shutdown(wait=False, terminate=not detach)


def client_controller(address: str, token: str | None):  # noqa: ANN201 - ControllerClient, imported lazily
    from fray_ray.iris.controller_client import ControllerClient

    return ControllerClient(address, token=token)


def build_parser() -> argparse.ArgumentParser:
    from fray_ray._cli.entrypoint_resources import add_entrypoint_options

    parser = argparse.ArgumentParser(prog="fray-ray", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    def with_address(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument("--address", help="controller address (iris://host:port or http://host:port)")
        sub.add_argument("--token", help="bearer token of the cluster")
        return sub

    run = commands.add_parser(
        "run", help="run an unmodified Ray script on fray_ray",
        description="Run an unmodified Ray script with `import ray` resolving to fray_ray. Its ray.init() and "
                    "ray.init(address='auto') start the run's own embedded cluster unless --address is given.",
    )
    run.add_argument("--address", help="use this cluster (iris://host:port, or auto: the one fray-ray start "
                     "recorded) instead of starting an embedded one")
    run.add_argument("--token", help="bearer token of the --address cluster (default: $FRAY_RAY_TOKEN)")
    run.add_argument("--local-mode", action="store_true", help="run everything in this process (for debuggers)")
    run.add_argument("--tpu", action="append", default=[], metavar="VARIANT[:NAME]",
                     help="give the embedded cluster a simulated TPU slice, e.g. v5p-16 (repeatable)")
    run.add_argument("--gpu", action="append", default=[], metavar="VARIANT:COUNT[:HOSTS[:POOL]]",
                     help="give the embedded cluster simulated GPU hosts, e.g. H100:8:2 (repeatable)")
    run.add_argument("script", help="the Python script to run as __main__")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script as sys.argv[1:]")

    # Listed here for the overview; main() hands `start` to build_start_parser(), which has its options.
    commands.add_parser(
        "start", help="start a cluster in the background (--block: in the foreground; see fray-ray start --help)",
        add_help=False,
    )
    down = commands.add_parser("down", help="stop the cluster `fray-ray start` recorded (its workers and temp dirs)")
    down.add_argument("--temp-dir", metavar="DIR", help="directory of the address file (as given to fray-ray start)")

    submit = with_address(commands.add_parser(
        "submit", help="run a driver script as a job: the working directory is shipped, the script runs from it"
    ))
    submit.add_argument("--name", help="job name (default: driver-<script>-<random>)")
    add_entrypoint_options(submit)
    submit.add_argument("--working-dir", help="directory to ship (default: the current one); holds the script")
    submit.add_argument("--exclude", action="append", metavar="PATTERN",
                        help="leave matching files out of the shipped directory (.gitignore syntax; repeatable)")
    submit.add_argument("--no-wait", action="store_true", help="return once submitted; the job keeps running")
    submit.add_argument("script", help="the driver script, inside the shipped directory")
    submit.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")

    jobs = with_address(commands.add_parser("jobs", help="list jobs"))
    jobs.add_argument("--prefix", help="only jobs whose id starts with this, e.g. /alice/")
    jobs.add_argument("--json", action="store_true", help="print the jobs as a JSON list")

    logs = with_address(commands.add_parser("logs", help="show a job's (or task's) output"))
    logs.add_argument("job", help="a job id (/user/name) or a task id (/user/name/0)")
    logs.add_argument("--tail", type=int, default=0, help="only the last N lines")
    logs.add_argument("--children", action="store_true", help="include child jobs")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing output until the job ends")

    stop = with_address(commands.add_parser("stop", help="terminate a job and its children (--cluster: the cluster)"))
    stop.add_argument("job", nargs="?", help="the id of the job to terminate")
    stop.add_argument("--cluster", action="store_true", help="stop the recorded cluster instead, as fray-ray down")
    stop.add_argument("--temp-dir", metavar="DIR", help="with --cluster: directory of the address file")

    from fray_ray._cli.state_list import DEFAULT_LIMIT, FETCH_TIMEOUT_S, KINDS, SESSIONS_NOTE

    listing = with_address(commands.add_parser(
        "list", help="Ray's state of every session: actors, tasks, objects, nodes, jobs, placement groups",
        description="List Ray's state as `ray list` does, full ids whatever the terminal's width. " + SESSIONS_NOTE,
    ))
    listing.add_argument("kind", choices=list(KINDS), metavar="KIND", help="what to list: " + ", ".join(KINDS))
    listing.add_argument("--filter", action="append", metavar="KEY=VALUE",
                         help="keep rows whose column KEY equals VALUE (KEY!=VALUE: differs); strings compare "
                              "case-insensitively; repeatable, all must hold; e.g. --filter state=ALIVE")
    listing.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help=f"at most this many rows (default {DEFAULT_LIMIT})")
    listing.add_argument("--json", action="store_true", help="print the rows as a JSON list, every column")
    listing.add_argument("--timeout", type=float, default=FETCH_TIMEOUT_S,
                         help=f"seconds to wait for each session (default {FETCH_TIMEOUT_S:g})")

    summary = with_address(commands.add_parser(
        "summary", help="tasks by function and state, or actors by class and state, over every session",
        description="Summarize as `ray summary` does. " + SESSIONS_NOTE,
    ))
    summary.add_argument("what", choices=["tasks", "actors"], metavar="WHAT", help="tasks (by function) or actors (by class)")
    summary.add_argument("--json", action="store_true", help="print the summary as JSON (Ray's shape)")
    summary.add_argument("--timeout", type=float, default=FETCH_TIMEOUT_S,
                         help=f"seconds to wait for each session (default {FETCH_TIMEOUT_S:g})")

    status = with_address(commands.add_parser("status", help="nodes, resources used and free, pending demand"))
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "start":
        return _cmd_start(argv[1:])
    options = build_parser().parse_args(argv)
    handlers = {"run": _cmd_run, "submit": _cmd_submit, "jobs": _cmd_jobs, "logs": _cmd_logs, "stop": _cmd_stop,
                "status": _cmd_status, "down": _cmd_down, "list": _cmd_list, "summary": _cmd_summary}
    from fray_ray.iris.errors import IrisError

    try:
        return handlers[options.command](options)
    except IrisError as exc:
        print(f"fray-ray {options.command}: {exc}", file=sys.stderr)
        return 1
