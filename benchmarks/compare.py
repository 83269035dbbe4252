"""Run the benchmark shapes on fray_ray and on Ray in one invocation and print the ratios.

    python benchmarks/compare.py [--shapes a,b,group] [--reps 5] [--quick]
                                 [--json out.json] [--markdown out.md]
                                 [--ray-python .ci/venvs/ray/bin/python] [--fray-mode auto|default|local]

fray_ray runs under this interpreter (sys.executable), Ray under --ray-python. Shapes are run
in batches (the floor, the lifecycle shapes, the rate shapes, the queued-tasks curve, each
actors point, the cross-driver shape); every repetition of a batch is a fresh `run_one.py`
process per backend, the two backends one right after the other, alternating which goes first
(fray_ray, Ray | Ray, fray_ray | ...), and repetition i of every batch runs before repetition
i+1 of any, so a slow spell of the machine is spread over shapes and pairs instead of biasing
one of them. Each shape reports the median of its repetitions and their spread; ratios to Ray
are taken pair by pair (see stats.py).

A shape that outlives its timeout is killed (the watchdog reads the progress `run_one.py`
writes) and reported as a timeout; a curve point that would leave the machine short of memory
stops itself and is reported as such; either is not tried again for that backend. Every process
a run starts carries a marker in its environment, and any survivor is reported and killed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import report  # noqa: E402
import stats  # noqa: E402
from procs import MARK_ENV, loadavg, marked_pids, process_name, wait_for_idle_cpu  # noqa: E402
from shapes import Catalog, Curves, EnvelopeSizes, catalog  # noqa: E402

RUN_ONE = os.path.join(HERE, "run_one.py")
DEFAULT_RAY_PYTHON = os.path.join(os.path.dirname(HERE), ".ci", "venvs", "ray", "bin", "python")  # built by .ci/run
GRACE_S = 60.0  # beyond a shape's own timeout, before the watchdog kills its process
SHUTDOWN_LIMIT_S = 120.0
STARTUP_LIMIT_S = 300.0  # import + init before the first shape starts
QUIET_LIMIT_S = 60.0  # how long a process waits for the CPUs to be 90% idle before it starts (--idle-wait-s)


class Runner:
    """Starts run_one.py processes, watches their per-shape deadlines, keeps logs, cleans up."""

    def __init__(self, args: argparse.Namespace, cat: Catalog, logdir: str, log: Any) -> None:
        self.args = args
        self.cat = cat
        self.logdir = logdir
        self.log = log
        self.notes: list[str] = []
        self.count = 0
        self.versions: dict[str, str] = {}

    def python_for(self, backend: str) -> str:
        return sys.executable if backend == "fray_ray" else self.args.ray_python

    def run_batch(self, backend: str, shapes: list[str], local_mode: bool) -> dict[str, dict[str, Any]]:
        """Run `shapes` in as few processes as possible: a killed process's remaining shapes get a new one."""
        results: dict[str, dict[str, Any]] = {}
        todo = list(shapes)
        while todo:
            got = self._run_process(backend, todo, local_mode)
            results.update(got)
            todo = [s for s in todo if s not in results]
        return results

    def _command(self, backend: str, shapes: list[str], out_json: str, local_mode: bool) -> list[str]:
        a = self.args
        cmd = [self.python_for(backend), RUN_ONE, "--backend", backend, "--only", ",".join(shapes), "--json", out_json,
               "--tasks-curve", ",".join(map(str, self.cat.curves.tasks)),
               "--actors-curve", ",".join(map(str, self.cat.curves.actors)),
               "--envelope", self.cat.envelope.text(),
               "--timeout-scale", str(a.timeout_scale)]
        if local_mode:
            cmd.append("--local-mode")
        if a.quick:
            cmd.append("--quick")
        for flag, value in (("--round-s", a.round_s), ("--warmup-s", a.warmup_s), ("--memory-guard-gib", a.memory_guard_gib)):
            if value is not None:
                cmd += [flag, str(value)]
        return cmd

    def _limit(self, running: dict[str, Any]) -> float:
        names = [n for n in running["shapes"] if n in self.cat.shapes]
        if not names:
            return SHUTDOWN_LIMIT_S
        return sum(self.cat.shapes[n].timeout_s for n in names) + GRACE_S

    def _run_process(self, backend: str, shapes: list[str], local_mode: bool) -> dict[str, dict[str, Any]]:
        self.count += 1
        tag = f"{self.count:03d}-{backend}"
        if self.args.idle_wait_s > 0:
            waited, idle = wait_for_idle_cpu(limit_s=self.args.idle_wait_s)
            if idle < 0.9:
                self.notes.append(f"{tag}: started on a busy machine (CPUs {idle:.0%} idle after waiting {waited:.0f} s)")
        out_json = os.path.join(self.logdir, f"{tag}.json")
        mark = uuid.uuid4().hex
        env = dict(os.environ, **{MARK_ENV: mark, "RAY_USAGE_STATS_ENABLED": "0"})
        env.pop("FRAY_BENCH_QUICK", None)
        killed: dict[str, dict[str, Any]] = {}
        t0 = time.monotonic()
        with open(os.path.join(self.logdir, f"{tag}.stdout"), "w") as so, open(os.path.join(self.logdir, f"{tag}.stderr"), "w") as se:
            proc = subprocess.Popen(self._command(backend, shapes, out_json, local_mode), stdout=so, stderr=se,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)
            while True:
                try:
                    proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
                progress = _read_json(out_json)
                running = progress.get("running") if progress else None
                if running:
                    over = time.time() - running["started"] > self._limit(running)
                else:
                    over = progress is None and time.monotonic() - t0 > STARTUP_LIMIT_S
                if not over:
                    continue
                what = running["shapes"] if running else ["startup"]
                limit = self._limit(running) if running else STARTUP_LIMIT_S
                self.notes.append(f"{tag}: {', '.join(what)} still running after {limit:.0f} s; process killed")
                _kill_group(proc)
                for name in (running["shapes"] if running else shapes):
                    if name in self.cat.shapes:
                        killed[name] = {"status": "timeout", "error": f"killed after {limit:.0f} s"}
                break
        self.cleanup(tag, mark)
        progress = _read_json(out_json) or {}
        if progress.get("version"):
            self.versions[backend] = progress["version"]
        results = dict(progress.get("results", {}))
        results.update(killed)
        if not killed and progress.get("error"):
            for name in shapes:
                results.setdefault(name, {"status": "error", "error": progress["error"]})
        if not killed:  # the process ended on its own: whatever it did not record, it will not record
            for name in shapes:
                results.setdefault(name, {"status": "error", "error": f"run_one.py ended (exit {proc.returncode}) without this shape"})
        bad = {n: r for n, r in results.items() if r.get("status") != "ok"}
        for name, r in bad.items():
            self.notes.append(f"{tag}: {name}: {r.get('status')}: {str(r.get('error', ''))[:300]}")
        self.log(f"  [{tag}] {','.join(shapes) if len(shapes) < 4 else f'{len(shapes)} shapes'}: "
                 f"{time.monotonic() - t0:.1f} s (exit {proc.returncode}){' ' + str(sorted(bad)) if bad else ''}")
        return results

    def cleanup(self, tag: str, mark: str) -> None:
        """Wait briefly for the run's processes to exit on their own; kill and report survivors."""
        deadline = time.monotonic() + 10.0
        left = marked_pids(mark)
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = marked_pids(mark)
        if not left:
            return
        names = sorted(process_name(p) for p in left)
        self.notes.append(f"{tag}: {len(left)} process(es) still alive 10 s after the run ended, killed: {', '.join(names[:8])}")
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in left:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(1.0)
            left = marked_pids(mark)
            if not left:
                return


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def ray_available(ray_python: str) -> tuple[bool, str]:
    if not ray_python or not os.path.exists(ray_python):
        return False, f"Ray skipped: no interpreter at {ray_python!r}"
    try:
        out = subprocess.run([ray_python, "-c", "import ray, numpy; print(ray.__version__)"],
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"Ray skipped: {ray_python} failed to import ray ({exc})"
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return False, f"Ray skipped: `import ray` fails under {ray_python}: {last}"
    return True, out.stdout.strip()


def fray_default_mode_works(timeout: float) -> tuple[bool, str]:
    """Can fray_ray start its default (embedded cluster, worker processes) session and run a task?"""
    code = "import fray_ray as ray\nray.init(num_cpus=2)\nassert ray.get(ray.remote(lambda: 1).remote()) == 1\nray.shutdown()\n"
    mark = uuid.uuid4().hex
    env = dict(os.environ, **{MARK_ENV: mark})
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env,
                             stdin=subprocess.DEVNULL, check=False)
        ok, why = out.returncode == 0, (out.stderr.strip().splitlines() or [""])[-1]
    except subprocess.TimeoutExpired:
        ok, why = False, f"no result within {timeout:.0f} s"
    for pid in marked_pids(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return ok, why


# ---- collecting ------------------------------------------------------------------------------


def collect(cat: Catalog, backends: list[str], results: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, dict[str, Any]]:
    """Per metric: each backend's per-repetition values and summary, paired ratios, target and verdict."""
    values: dict[str, dict[str, stats.PerRep]] = {b: {} for b in backends}
    status: dict[str, dict[str, dict[str, Any]]] = {b: {} for b in backends}
    for b in backends:
        for shape_name, runs in results[b].items():
            shape = cat.shapes[shape_name]
            failures = [{"rep": r["rep"], "status": r["status"], "error": r.get("error", "")} for r in runs if r["status"] != "ok"]
            for metric in shape.metrics:
                status[b][metric] = {"runs": len(runs), "failures": list(failures)}
            for r in runs:
                for metric, value in (r.get("metrics") or {}).items():
                    values[b].setdefault(metric, {})[r["rep"]] = value
                for metric, error in r.get("metric_errors", {}).items():
                    status[b][metric]["failures"].append({"rep": r["rep"], "status": "error", "error": error})
        for name, per_rep in stats.derive(cat, values[b]).items():
            values[b][name] = per_rep
    rows: dict[str, dict[str, Any]] = {}
    for name, metric in cat.metrics.items():
        if not any(name in values[b] or name in status[b] for b in backends):
            continue
        if metric.fray_only and name not in values["fray_ray"] and name not in status["fray_ray"]:
            continue
        row: dict[str, Any] = {"unit": metric.unit, "better": metric.better, "description": metric.description,
                               "status": {b: status[b].get(name) for b in backends}}
        for b in ("fray_ray", "ray"):
            per_rep = values.get(b, {}).get(name, {})
            row[b] = stats.summary(list(per_rep.values()))
            row[f"{b}_values"] = {str(k): v for k, v in sorted(per_rep.items())}
        ratios = {}
        if metric.ratio_to_ray and "ray" in backends:
            ratios = stats.paired_ratios(values["fray_ray"].get(name, {}), values["ray"].get(name, {}), metric.better)
        row["ratio"] = stats.summary(list(ratios.values()))
        row["ratio_values"] = {str(k): v for k, v in sorted(ratios.items())}
        target = cat.targets.get(name)
        fray_status = status["fray_ray"].get(name)
        completed = None if fray_status is None else (fray_status["runs"] > 0 and not fray_status["failures"])
        row["target"] = target.text if target else "—"
        row["met"] = stats.verdict(target, row["fray_ray"], row["ratio"], completed)
        rows[name] = row
    return rows


def header_lines(args: argparse.Namespace, cat: Catalog, versions: dict[str, str], have_ray: bool, ray_info: str,
                 mode_note: str, load_before: str, total: float, rep_loads: list[str]) -> list[str]:
    """What was compared, when, on how loaded a machine, and how the cells are to be read."""
    ray = f"Ray {versions.get('ray', ray_info)}" if have_ray else "Ray: skipped"
    round_s = args.round_s or (0.2 if args.quick else 1)
    warmup_s = args.warmup_s or (0.1 if args.quick else 0.5)
    curves = f"tasks {'/'.join(map(str, cat.curves.tasks))}, actors {'/'.join(map(str, cat.curves.actors))}"
    return [
        f"fray_ray {versions.get('fray_ray', '?')}, mode {mode_note}, vs {ray}",
        (f"{datetime.datetime.now().isoformat(timespec='seconds')}, {os.cpu_count()} CPUs, load average {load_before} → {loadavg()}, "
         f"total {total:.0f} s; {args.reps} repetition(s), each a fresh process per backend and batch started "
         f"{'once the CPUs are 90% idle' if args.idle_wait_s > 0 else 'at once (no wait for idle CPUs)'}, "
         f"alternating which backend goes first; rate shapes: one ~{round_s} s round after a ~{warmup_s} s warm-up; "
         f"curves: {curves}; envelope: {cat.envelope.text()}"
         f"{' (quick)' if args.quick else ''}; cells: median ±IQR/median, {report.FLAG} spread > {stats.SPREAD_FLAG:.0%}"),
        f"load average (1/5/15 min) at the start of each repetition: {'; '.join(rep_loads)}",
    ]


# ---- main --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", "--only", dest="shapes", default="",
                        help="comma-separated shape or group names (default: all but the broadcasts); "
                             "groups: lifecycle, rates, task_args, queued_tasks, actors, curves, envelope, "
                             "multi_node, broadcast")
    parser.add_argument("--reps", type=int, help="repetitions of every shape (default 5; 3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="3 repetitions, short rounds, small curves: for iterating, not for the README")
    parser.add_argument("--json", dest="json_path", help="write every value, summary, ratio and verdict to this file")
    parser.add_argument("--markdown", help="also write the printed text to this file")
    parser.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON, help="interpreter with Ray installed ('' to skip Ray)")
    parser.add_argument("--fray-mode", choices=["auto", "default", "local"], default="auto",
                        help="fray_ray session: default (embedded cluster), local (local_mode=True), auto: default if it works, else local")
    parser.add_argument("--tasks-curve", help="sizes of the queued-tasks curve (default 1000,10000,100000; quick 100,1000,3000)")
    parser.add_argument("--actors-curve", help="sizes of the actors curve (default 10,100,500; quick 2,5,10)")
    parser.add_argument("--envelope", help="envelope sizes, any of args=10000,returns=3000,get=10000,queued=100000,"
                                           "large_gib=4,list_ints=10000 (quick: 1000,300,1000,3000,0.25,1000)")
    parser.add_argument("--round-s", type=float, help="seconds of a rate shape's timed round (default 1; quick 0.2)")
    parser.add_argument("--warmup-s", type=float, help="warm-up seconds of a rate shape (default 0.5; quick 0.1)")
    parser.add_argument("--idle-wait-s", type=float, default=QUIET_LIMIT_S,
                        help="how long each benchmark process waits for the CPUs to be 90%% idle before it starts "
                             "(default %(default)s; 0 starts at once: for smoke runs, not for numbers)")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every shape's timeout (see shapes.py)")
    parser.add_argument("--memory-guard-gib", type=float,
                        help="stop an actors point when MemAvailable falls below this (default max(3, 15%% of RAM))")
    parser.add_argument("--keep-logs", action="store_true", help="keep the per-run logs and JSON (path printed)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.reps is None:
        args.reps = 3 if args.quick else 5
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    return args


def _curves(args: argparse.Namespace) -> Curves:
    base = Curves.quick() if args.quick else Curves()

    def sizes(text: str | None, default: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted(int(x) for x in text.split(",") if x.strip())) if text else default

    return Curves(tasks=sizes(args.tasks_curve, base.tasks), actors=sizes(args.actors_curve, base.actors))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        sizes = EnvelopeSizes.parse(args.envelope, EnvelopeSizes.quick() if args.quick else EnvelopeSizes())
    except ValueError as exc:
        print(f"compare.py: {exc}", file=sys.stderr)
        return 2
    cat = catalog(_curves(args), args.timeout_scale, sizes)
    try:
        # The broadcasts start ten Ray nodes per repetition: run when asked for (`--shapes broadcast`).
        everything = [name for name in cat.shapes if name not in cat.groups["broadcast"]]
        wanted = cat.select([s.strip() for s in args.shapes.split(",") if s.strip()] or everything)
    except ValueError as exc:
        print(f"compare.py: {exc}", file=sys.stderr)
        return 2
    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
    started = time.perf_counter()
    load_before = loadavg()
    logdir = tempfile.mkdtemp(prefix="fray-bench-")
    runner = Runner(args, cat, logdir, log)

    have_ray, ray_info = ray_available(args.ray_python)
    if not have_ray:
        runner.notes.append(ray_info)
    log(ray_info if not have_ray else f"Ray {ray_info} under {args.ray_python}")
    local_mode = args.fray_mode == "local"
    mode_note = "local_mode=True (threads in the driver process)" if local_mode else "default (embedded cluster, worker processes)"
    if args.fray_mode == "auto":
        ok, why = fray_default_mode_works(timeout=120.0)
        if not ok:
            local_mode = True
            mode_note = "local_mode=True (threads in the driver process): the default mode failed"
            runner.notes.append(f"fray_ray default mode unavailable ({why}); measured with local_mode=True")
    log(f"fray_ray mode: {mode_note}")

    backends = ["fray_ray"] + (["ray"] if have_ray else [])
    batches: dict[str, list[str]] = {}
    for name in wanted:
        batches.setdefault(cat.shapes[name].batch, []).append(name)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {b: {} for b in backends}
    given_up: dict[str, set[str]] = {b: set() for b in backends}
    rep_loads: list[str] = []
    for rep in range(args.reps):
        rep_loads.append(loadavg())
        log(f"repetition {rep + 1}/{args.reps} (load average {rep_loads[-1]})")
        for shapes in batches.values():
            for b in (backends if rep % 2 == 0 else list(reversed(backends))):
                todo = [s for s in shapes if s not in given_up[b]]
                if not todo:
                    continue
                for name, res in runner.run_batch(b, todo, local_mode and b == "fray_ray").items():
                    res["rep"] = rep
                    results[b].setdefault(name, []).append(res)
                    if res.get("status") in ("timeout", "memory"):
                        given_up[b].add(name)
                        runner.notes.append(f"{b}: {name} stopped ({res['status']}) in repetition {rep + 1}; not tried again")

    rows = collect(cat, backends, results)
    total = time.perf_counter() - started
    header = header_lines(args, cat, runner.versions, have_ray, ray_info, mode_note, load_before, total, rep_loads)
    text = "\n\n".join(header) + "\n\n" + report.tables(cat, rows, have_ray) + "\n"
    extra_lines = report.extras(results)
    if extra_lines:
        text += "\n" + "\n".join(f"- {e}" for e in extra_lines) + "\n"
    if runner.notes:
        text += "\nNotes:\n\n" + "\n".join(f"- {n}" for n in runner.notes) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"header": header, "mode": mode_note, "versions": runner.versions, "total_s": total,
                       "load": [load_before, loadavg()], "reps": args.reps, "quick": args.quick,
                       "curves": {"tasks": list(cat.curves.tasks), "actors": list(cat.curves.actors)},
                       "envelope": vars(cat.envelope),
                       "spread_flag": stats.SPREAD_FLAG, "metrics": rows, "runs": results, "notes": runner.notes}, f, indent=1)
    if args.keep_logs:
        print(f"logs: {logdir}", file=sys.stderr)
    else:
        for name in os.listdir(logdir):
            os.unlink(os.path.join(logdir, name))
        os.rmdir(logdir)
    fray_runs = results["fray_ray"]
    incomplete = [s for s in wanted if not fray_runs.get(s) or any(r["status"] != "ok" for r in fray_runs[s])]
    return 1 if incomplete else 0


if __name__ == "__main__":
    sys.exit(main())
