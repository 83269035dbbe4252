"""Run the benchmark shapes on fray_ray and on Ray in one invocation and print the ratios.

    python benchmarks/compare.py [--ray-python /work/venvs/ray/bin/python] [--only a,b]
                                 [--rounds N] [--markdown out.md] [--json out.json]
                                 [--fray-mode auto|default|local] [--samples K] [--quick]

fray_ray runs under this interpreter (sys.executable), Ray under --ray-python; each run is a
fresh `run_one.py` process. Order, so that drift of a noisy machine hits both sides alike:

1. lifecycle shapes (init, idle memory, shutdown): K fresh processes per backend, alternating
   Ray, fray_ray, fray_ray, Ray, ...;
2. rate shapes: two passes in A-B-B-A order (fray_ray, Ray, Ray, fray_ray), each with half the
   rounds; the rounds of both passes are pooled;
3. scale shapes: in the last pass of each backend, one run each.

The ratio is written so that >1 means fray_ray is better (rates: fray/ray; seconds and memory:
ray/fray) and checked against the DESIGN.md §4 target. Every process a run starts carries a
marker in its environment; after each run any survivor is reported and killed, so nothing of
Ray or fray_ray is left behind.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from workloads import LIFECYCLE, MARK_ENV, RATE, SCALE, SHAPES, process_name, marked_pids  # noqa: E402

RUN_ONE = os.path.join(HERE, "run_one.py")
DEFAULT_RAY_PYTHON = "/work/venvs/ray/bin/python"

# DESIGN.md §4: shape -> (minimum ratio, text). None: no target; "completes": scale smoke.
TARGETS: dict[str, tuple[float | str | None, str]] = {
    "init_to_first_result": (5.0, "≥ 5× faster"),
    "idle_memory_mib": (4.0, "≤ 1/4 of Ray's"),
    "shutdown": (5.0, "≥ 5× faster"),
    "tasks_sync": (1.5, "≥ 1.5× rate"),
    "tasks_batch_1000": (2.0, "≥ 2× rate"),
    "actor_calls_sync": (1.5, "≥ 1.5× rate"),
    "actor_calls_async": (1.5, "≥ 1.5× rate"),
    "async_actor_calls_sync": (1.5, "≥ 1.5× rate"),
    "async_actor_calls_async": (1.5, "≥ 1.5× rate"),
    "put_get_small": (None, "—"),
    "put_100mb_gbps": (1.0, "≥ Ray's GB/s"),
    "get_100mb_gbps": (1.0, "≥ Ray's GB/s"),
    "queued_tasks_10k": ("completes", "completes"),
    "actors_100": ("completes", "completes"),
}


class Runner:
    """Starts run_one.py processes, keeps their logs, and cleans up after each."""

    def __init__(self, args: argparse.Namespace, logdir: str) -> None:
        self.args = args
        self.logdir = logdir
        self.notes: list[str] = []
        self.count = 0

    def python_for(self, backend: str) -> str:
        return sys.executable if backend == "fray_ray" else self.args.ray_python

    def run(self, backend: str, shapes: list[str], extra: list[str] | None = None, local_mode: bool = False) -> dict[str, Any]:
        self.count += 1
        tag = f"{self.count:02d}-{backend}"
        out_json = os.path.join(self.logdir, f"{tag}.json")
        cmd = [self.python_for(backend), RUN_ONE, "--backend", backend, "--only", ",".join(shapes), "--json", out_json]
        if local_mode:
            cmd.append("--local-mode")
        if self.args.quick:
            cmd.append("--quick")
        cmd += extra or []
        mark = uuid.uuid4().hex
        env = dict(os.environ, **{MARK_ENV: mark, "RAY_USAGE_STATS_ENABLED": "0"})
        env.pop("FRAY_BENCH_QUICK", None)
        t0 = time.perf_counter()
        with open(os.path.join(self.logdir, f"{tag}.stdout"), "w") as so, open(os.path.join(self.logdir, f"{tag}.stderr"), "w") as se:
            proc = subprocess.Popen(cmd, stdout=so, stderr=se, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
            try:
                rc = proc.wait(timeout=self.args.timeout)
            except subprocess.TimeoutExpired:
                self.notes.append(f"{tag}: timed out after {self.args.timeout:.0f} s; killed (partial results kept)")
                _kill_group(proc)
                rc = None
        wall = time.perf_counter() - t0
        self.cleanup(tag, mark)
        try:
            with open(out_json) as f:
                report = json.load(f)
        except (OSError, ValueError):
            report = {"results": {}, "error": f"no JSON written (exit code {rc})"}
        report["wall_s"] = wall
        report["exit_code"] = rc
        if report.get("error") or any("error" in r for r in report.get("results", {}).values()):
            tail = _tail(os.path.join(self.logdir, f"{tag}.stderr"), 12)
            errs = {k: r["error"] for k, r in report.get("results", {}).items() if "error" in r}
            self.notes.append(f"{tag}: error {report.get('error') or errs}")
            if not self.args.quiet:
                print(f"  [{tag}] errors: {report.get('error') or errs}\n  stderr tail:\n{tail}", file=sys.stderr)
        if not self.args.quiet:
            print(f"  [{tag}] {','.join(shapes) if len(shapes) < 4 else f'{len(shapes)} shapes'}: {wall:.1f} s (exit {rc})", file=sys.stderr)
        return report

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
        self.notes.append(f"{tag}: {len(left)} process(es) still alive 10 s after the run ended, killed: {', '.join(names)}")
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


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: str, n: int) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def ray_available(ray_python: str) -> tuple[bool, str]:
    if not ray_python or not os.path.exists(ray_python):
        return False, f"Ray skipped: no interpreter at {ray_python!r}"
    try:
        out = subprocess.run(
            [ray_python, "-c", "import ray, numpy; print(ray.__version__)"],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"Ray skipped: {ray_python} failed to import ray ({exc})"
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return False, f"Ray skipped: `import ray` fails under {ray_python}: {last}"
    return True, out.stdout.strip()


def fray_default_mode_works(timeout: float) -> tuple[bool, str]:
    """Can fray_ray start its default (embedded cluster, worker processes) session and run a task?"""
    code = (
        "import fray_ray as ray\n"
        "ray.init(num_cpus=2)\n"
        "f = ray.remote(lambda: 1)\n"
        "assert ray.get(f.remote()) == 1\n"
        "ray.shutdown()\n"
    )
    mark = uuid.uuid4().hex
    env = dict(os.environ, **{MARK_ENV: mark})
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
        ok, why = out.returncode == 0, (out.stderr.strip().splitlines() or [""])[-1]
    except subprocess.TimeoutExpired:
        ok, why = False, f"no result within {timeout:.0f} s"
    for pid in marked_pids(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return ok, why


# ---- merging and the table -----------------------------------------------------------------------


def merge(samples: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Pool the values of several results of one shape (errors dropped unless all failed)."""
    good = [s for s in samples if "error" not in s]
    if not good:
        return samples[-1] if samples else None
    values = [v for s in good for v in s["values"]]
    out = dict(good[-1])
    out["values"] = values
    out["mean"] = statistics.fmean(values)
    out["stdev"] = statistics.stdev(values) if len(values) > 1 else 0.0
    return out


def fmt(res: dict[str, Any] | None) -> str:
    if res is None:
        return "—"
    if "error" in res:
        return "error"
    mean, sd, unit = res["mean"], res["stdev"], res["unit"]
    text = f"{_num(mean)} ± {_num(sd)}" if len(res["values"]) > 1 else _num(mean)
    return f"{text} {unit}"


def _num(x: float) -> str:
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    digits = max(2, 2 - int(math.floor(math.log10(abs(x)))))
    return f"{x:.{digits}f}"


def ratio(name: str, fray: dict[str, Any] | None, ray: dict[str, Any] | None) -> float | None:
    if not fray or not ray or "error" in fray or "error" in ray or not fray["mean"] or not ray["mean"]:
        return None
    if SHAPES[name].better == "higher":
        return fray["mean"] / ray["mean"]
    return ray["mean"] / fray["mean"]


def verdict(name: str, fray: dict[str, Any] | None, r: float | None) -> str:
    target = TARGETS[name][0]
    if target is None:
        return ""
    if target == "completes":
        return "pass" if fray and "error" not in fray else "miss"
    if r is None:
        return "n/a"
    return "pass" if r >= target else "miss"


def table(shapes: list[str], fray: dict[str, dict], ray: dict[str, dict]) -> list[list[str]]:
    rows = [["shape", "fray_ray", "Ray", "ratio (>1: fray_ray better)", "target", "met"]]
    for name in shapes:
        f, r = fray.get(name), ray.get(name)
        q = ratio(name, f, r)
        rows.append([name, fmt(f), fmt(r), f"{q:.2f}×" if q is not None else "—", TARGETS[name][1], verdict(name, f, q)])
    return rows


def render(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for i, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
        if i == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


# ---- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ray-python", default=DEFAULT_RAY_PYTHON, help="interpreter with Ray installed ('' to skip Ray)")
    parser.add_argument("--only", default="", help="comma-separated shape names (default: all)")
    parser.add_argument("--rounds", type=int, default=4, help="timed rounds per rate shape, pooled over both passes (default 4)")
    parser.add_argument("--samples", type=int, default=3, help="fresh processes per backend for the lifecycle shapes (default 3)")
    parser.add_argument("--fray-mode", choices=["auto", "default", "local"], default="auto",
                        help="fray_ray session: default (embedded cluster), local (local_mode=True), auto: default if it works, else local")
    parser.add_argument("--markdown", help="write the table (and notes) as markdown to this file")
    parser.add_argument("--json", dest="json_path", help="write all merged results to this file")
    parser.add_argument("--quick", action="store_true", help="tiny rounds and scale counts (a smoke run; numbers mean little)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per run_one.py process")
    parser.add_argument("--keep-logs", action="store_true", help="keep the per-run logs and JSON (path printed)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    wanted = [s.strip() for s in args.only.split(",") if s.strip()] or list(SHAPES)
    unknown = [s for s in wanted if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shape(s): {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    lifecycle = [s for s in wanted if s in LIFECYCLE]
    rate = [s for s in wanted if s in RATE]
    scale = [s for s in wanted if s in SCALE]

    started = time.perf_counter()
    load_before = _loadavg()
    logdir = tempfile.mkdtemp(prefix="fray-bench-")
    runner = Runner(args, logdir)
    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, file=sys.stderr))

    have_ray, ray_info = ray_available(args.ray_python)
    if not have_ray:
        runner.notes.append(ray_info)
        log(ray_info)
    else:
        log(f"Ray {ray_info} under {args.ray_python}")

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
    collected: dict[str, dict[str, list[dict]]] = {b: {} for b in backends}
    meta: dict[str, dict[str, Any]] = {b: {} for b in backends}

    def keep(backend: str, report: dict[str, Any]) -> None:
        for name, res in report.get("results", {}).items():
            collected[backend].setdefault(name, []).append(res)
        if report.get("version"):
            meta[backend]["version"] = report["version"]

    # 1. lifecycle: fresh processes, alternating order
    if lifecycle:
        for i in range(max(1, args.samples)):
            order = backends if i % 2 else list(reversed(backends))
            for b in order:
                keep(b, runner.run(b, lifecycle, local_mode=local_mode and b == "fray_ray"))

    # 2 + 3. rate shapes in A-B-B-A passes; scale shapes in each backend's last pass
    passes = 2 if len(backends) > 1 and args.rounds >= 2 else 1
    per_pass = max(1, math.ceil(args.rounds / passes))
    if rate or scale:
        schedule = [backends] if passes == 1 else [backends, list(reversed(backends))]
        for p, order in enumerate(schedule):
            for b in order:
                shapes = rate + (scale if p == len(schedule) - 1 else [])
                if not shapes:
                    continue
                keep(b, runner.run(b, shapes, ["--rounds", str(per_pass)], local_mode=local_mode and b == "fray_ray"))

    merged = {b: {name: merge(res) for name, res in collected[b].items()} for b in backends}
    fray_res = merged["fray_ray"]
    ray_res = merged.get("ray", {})
    rows = table(wanted, fray_res, ray_res)
    total = time.perf_counter() - started
    load_after = _loadavg()

    header = [
        f"fray_ray {meta['fray_ray'].get('version', '?')}, mode {mode_note}, vs "
        + (f"Ray {meta.get('ray', {}).get('version', ray_info)}" if have_ray else "Ray: skipped"),
        f"{datetime.datetime.now().isoformat(timespec='seconds')}, {os.cpu_count()} CPUs, load average {load_before} → {load_after}, "
        f"total {total:.0f} s; rate shapes: {passes} pass(es) × {per_pass} round(s) of "
        f"~{0.1 if args.quick else 1} s after a ~{0.05 if args.quick else 0.5} s warm-up{' (quick)' if args.quick else ''}; "
        f"lifecycle: {args.samples} fresh process(es) per backend; mean ± stdev",
    ]
    extras = _extras(wanted, merged)
    text = "\n".join(header) + "\n\n" + render(rows) + "\n"
    if extras:
        text += "\n" + "\n".join(f"- {e}" for e in extras) + "\n"
    if runner.notes:
        text += "\nNotes:\n" + "\n".join(f"- {n}" for n in runner.notes) + "\n"
    print(text)

    if args.markdown:
        md = "\n\n".join(header) + "\n\n" + render(rows) + "\n"
        if extras:
            md += "\n" + "\n".join(f"- {e}" for e in extras) + "\n"
        if runner.notes:
            md += "\nNotes:\n\n" + "\n".join(f"- {n}" for n in runner.notes) + "\n"
        with open(args.markdown, "w") as f:
            f.write(md)
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"mode": mode_note, "total_s": total, "load": [load_before, load_after], "results": merged,
                       "notes": runner.notes, "meta": meta}, f, indent=1)
    if args.keep_logs:
        print(f"logs: {logdir}", file=sys.stderr)
    else:
        for name in os.listdir(logdir):
            os.unlink(os.path.join(logdir, name))
        os.rmdir(logdir)
    failed = any(r is None or "error" in r for r in fray_res.values()) or len(fray_res) < len(wanted)
    return 1 if failed else 0


def _extras(wanted: list[str], merged: dict[str, dict[str, dict]]) -> list[str]:
    """Details worth a line under the table: init split, process counts, PSS."""
    out = []
    for b, res in merged.items():
        init = res.get("init_to_first_result")
        if init and "extra" in init:
            out.append(f"{b}: init {_num(init['extra']['init_s'])} s + first task {_num(init['extra']['first_task_s'])} s (last sample)")
        mem = res.get("idle_memory_mib")
        if mem and "extra" in mem:
            e = mem["extra"]
            top = ", ".join(f"{n} {m:.0f}" for n, m in e["by_process"][:6])
            out.append(f"{b}: idle {e['processes']} process(es), PSS {e['pss_mib']:.0f} MiB; largest RSS (MiB): {top}")
        down = res.get("shutdown")
        if down and "extra" in down and down["extra"].get("until_no_processes_s") is not None:
            out.append(f"{b}: shutdown() until no child process is left: {_num(down['extra']['until_no_processes_s'])} s")
        act = res.get("actors_100")
        if act and "extra" in act:
            out.append(f"{b}: with {act['extra']['actors']} actors alive: {act['extra']['processes']} processes, "
                       f"RSS {act['extra']['rss_mib_with_actors']:.0f} MiB")
    return out


if __name__ == "__main__":
    sys.exit(main())
