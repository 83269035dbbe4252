"""Run benchmark shapes for one backend in this interpreter: one repetition each, JSON out.

    python benchmarks/run_one.py --backend fray_ray [--local-mode] [--only tasks_sync,actors,...]
    python benchmarks/run_one.py --backend ray --json out.json      # needs Ray installed here

Order: the lifecycle shapes on the first (cold) session of this interpreter, the session
shapes together in a second session, the cross-driver shape in a session of its own, and the
floor (no session) last, so that its echo processes are never counted as the session's. The
JSON is rewritten before and after every shape (`running` names the
shape in progress and when it started), so `compare.py` can enforce per-shape timeouts and a
run cut short still leaves what it measured. `--quick` (or FRAY_BENCH_QUICK=1) shortens the
rounds and uses the small curves.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
import uuid
from functools import partial
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import envelope  # noqa: E402
import floor  # noqa: E402
import procs  # noqa: E402
import workloads  # noqa: E402
from shapes import Catalog, Curves, EnvelopeSizes, Kind, catalog  # noqa: E402
from workloads import Backend, ShapeStopped, Timing  # noqa: E402


def load_backend(name: str, local_mode: bool) -> Backend:
    if name == "fray_ray":
        import fray_ray

        kwargs: dict[str, Any] = {"num_cpus": 2}
        if local_mode:
            kwargs["local_mode"] = True
        return Backend("fray_ray", fray_ray, kwargs)
    if name == "ray":
        if local_mode:
            raise SystemExit("--local-mode applies to fray_ray only")
        import ray

        return Backend("ray", ray, {"num_cpus": 2, "include_dashboard": False})
    raise SystemExit(f"unknown backend {name!r}")


def _error(exc: BaseException) -> dict[str, Any]:
    return {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)}


def _sizes(text: str | None, default: tuple[int, ...]) -> tuple[int, ...]:
    if not text:
        return default
    sizes = tuple(int(x) for x in text.split(",") if x.strip())
    if not sizes or any(n <= 0 for n in sizes):
        raise SystemExit(f"curve sizes must be positive integers, got {text!r}")
    return tuple(sorted(sizes))


class Runner:
    """Runs shapes one at a time, recording each result (or why it stopped) in the report."""

    def __init__(self, report: dict[str, Any], json_path: str | None) -> None:
        self.report = report
        self.json_path = json_path

    def flush(self) -> None:
        if self.json_path:
            tmp = self.json_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.report, f, indent=1)
            os.replace(tmp, self.json_path)

    def start(self, names: list[str]) -> None:
        self.report["running"] = {"shapes": names, "started": time.time()}
        self.flush()

    def record(self, name: str, result: dict[str, Any], wall_s: float) -> None:
        result["wall_s"] = wall_s
        self.report["results"][name] = result
        self.report["running"] = None
        self.flush()

    def shape(self, name: str, fn: Any) -> dict[str, Any]:
        self.start([name])
        t0 = time.perf_counter()
        try:
            out = fn()
        except ShapeStopped as stop:
            out = {"status": stop.status, "error": str(stop), "extra": stop.extra}
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            out = _error(exc)
        self.record(name, out, time.perf_counter() - t0)
        return out


def run_floor(backend: Backend, timing: Timing) -> dict[str, Any]:
    metrics = floor.measure(timing.warmup_s, timing.round_s)
    out = workloads.ok(metrics)
    if backend.name == "fray_ray":
        try:
            import stream_roundtrip

            metrics["floor_protocol_rtt_us"] = stream_roundtrip.protocol_rtt_us(timing.warmup_s, timing.round_s)
        except Exception as exc:  # noqa: BLE001 - the other floor metrics still count
            out["metric_errors"] = {"floor_protocol_rtt_us": f"{type(exc).__name__}: {exc}"}
    return out


def run_session(backend: Backend, cat: Catalog, names: list[str], timing: Timing, runner: Runner, guard: int) -> None:
    ray = backend.ray
    runner.start(names)  # init counts against the batch's time, so a hung init is caught too
    try:
        backend.init()
        remotes = workloads.make_remotes(ray)
        ray.get(remotes.noop.remote())
    except Exception as exc:  # noqa: BLE001
        for name in names:
            runner.record(name, _error(exc), 0.0)
        _safe_shutdown(backend)
        return
    try:
        rates = workloads.rate_shapes(ray, remotes)
        sizes = cat.envelope
        envelope_remotes = envelope.make_remotes(ray, sizes) if any(n.startswith("envelope_") for n in names) else None
        envelope_shapes = {
            "envelope_args": lambda: envelope.many_args(ray, envelope_remotes, sizes),
            "envelope_returns": lambda: envelope.many_returns(ray, envelope_remotes, sizes),
            "envelope_get": lambda: envelope.many_gets(ray, sizes),
            "envelope_queued": lambda: envelope.queued(ray, envelope_remotes, sizes, cat.shapes["envelope_queued"].timeout_s),
            "envelope_large": lambda: envelope.large_object(ray, sizes),
        }
        stopped_curve: set[str] = set()
        for name in names:
            shape = cat.shapes[name]
            if name in rates:
                runner.shape(name, partial(rates[name], timing))
            elif name in envelope_shapes:
                runner.shape(name, envelope_shapes[name])
            elif shape.batch == "queued_tasks":
                if "queued_tasks" in stopped_curve:
                    runner.record(name, {"status": "skipped", "error": "a smaller point of this curve did not finish"}, 0.0)
                    continue
                out = runner.shape(name, partial(workloads.queued_tasks, ray, remotes, name, shape.size, shape.timeout_s))
                if out["status"] != "ok":
                    stopped_curve.add("queued_tasks")
            elif name.startswith("actors_"):
                runner.shape(name, partial(workloads.actors, ray, remotes, name, shape.size, shape.timeout_s, guard))
            else:
                runner.record(name, {"status": "error", "error": f"{name} is not a session shape"}, 0.0)
    finally:
        runner.start(["shutdown of the session"])
        _safe_shutdown(backend)
        runner.report["running"] = None
        runner.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", required=True, choices=["fray_ray", "ray"])
    parser.add_argument("--only", default="", help="comma-separated shape or group names (default: all)")
    parser.add_argument("--json", dest="json_path", help="also write the results to this file")
    parser.add_argument("--local-mode", action="store_true", help="fray_ray: init(local_mode=True), threads in process")
    parser.add_argument("--quick", action="store_true", default=os.environ.get("FRAY_BENCH_QUICK", "") not in ("", "0"))
    parser.add_argument("--round-s", type=float, help="seconds of the timed round of a rate shape")
    parser.add_argument("--warmup-s", type=float, help="warm-up seconds per rate shape")
    parser.add_argument("--tasks-curve", help="sizes of the queued-tasks curve, e.g. 1000,10000,100000")
    parser.add_argument("--actors-curve", help="sizes of the actors curve, e.g. 10,100,500")
    parser.add_argument("--envelope", help="envelope sizes, e.g. args=10000,returns=3000,get=10000,queued=100000,"
                                           "large_gib=4,list_ints=10000 (any subset)")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every shape's timeout")
    parser.add_argument("--memory-guard-gib", type=float, help="stop a curve point when MemAvailable falls below this")
    args = parser.parse_args(argv)

    base = Curves.quick() if args.quick else Curves()
    curves = Curves(tasks=_sizes(args.tasks_curve, base.tasks), actors=_sizes(args.actors_curve, base.actors))
    try:
        sizes = EnvelopeSizes.parse(args.envelope, EnvelopeSizes.quick() if args.quick else EnvelopeSizes())
    except ValueError as exc:
        parser.error(str(exc))
    cat = catalog(curves, args.timeout_scale, sizes)
    try:
        wanted = cat.select([s.strip() for s in args.only.split(",") if s.strip()] or list(cat.shapes))
    except ValueError as exc:
        parser.error(str(exc))

    timing = Timing.quick() if args.quick else Timing()
    if args.round_s is not None:
        timing.round_s = args.round_s
    if args.warmup_s is not None:
        timing.warmup_s = args.warmup_s
    guard = workloads.memory_guard_bytes(procs.mem_total_bytes(), args.memory_guard_gib)

    # Mark this process and everything it starts (inherited environment) so that memory and
    # clean-up checks find re-parented children too.
    os.environ.setdefault(procs.MARK_ENV, uuid.uuid4().hex)

    report: dict[str, Any] = {
        "backend": args.backend,
        "mode": "local_mode" if args.local_mode else "default",
        "python": platform.python_version(),
        "quick": args.quick,
        "timing": vars(timing),
        "curves": {"tasks": list(curves.tasks), "actors": list(curves.actors)},
        "envelope": vars(sizes),
        "memory_guard_gib": guard / workloads.GIB,
        "running": None,
        "results": {},
    }
    runner = Runner(report, args.json_path)
    t_import = time.perf_counter()
    try:
        backend = load_backend(args.backend, args.local_mode)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        report["error"] = _error(exc)["error"]
        runner.flush()
        print(json.dumps(report, indent=1))
        return 2
    report["import_s"] = time.perf_counter() - t_import
    report["version"] = getattr(backend.ray, "__version__", "?")
    runner.flush()
    started = time.perf_counter()

    by_kind = {kind: [n for n in wanted if cat.shapes[n].kind is kind] for kind in Kind}
    lifecycle = by_kind[Kind.LIFECYCLE]
    if lifecycle:
        runner.start(lifecycle)
        t0 = time.perf_counter()
        try:
            results = workloads.run_lifecycle(backend, lifecycle)
        except Exception as exc:  # noqa: BLE001
            results = {name: _error(exc) for name in lifecycle}
            _safe_shutdown(backend)
        for name in lifecycle:
            runner.record(name, results.get(name, {"status": "error", "error": "not measured"}), time.perf_counter() - t0)
    if by_kind[Kind.SESSION]:
        run_session(backend, cat, by_kind[Kind.SESSION], timing, runner, guard)
    if by_kind[Kind.CROSS_DRIVER]:
        if args.local_mode:
            runner.record("cross_driver_calls", {"status": "error", "error": "no second driver can join a local_mode session"}, 0.0)
        else:
            import cross_driver

            shape = cat.shapes["cross_driver_calls"]
            runner.shape("cross_driver_calls", lambda: cross_driver.run(args.backend, backend.ray, timing, shape.timeout_s))

    if by_kind[Kind.NODES]:
        if args.local_mode:
            runner.record("node_calls", {"status": "error", "error": "a local_mode session has no nodes"}, 0.0)
        else:
            import node_calls

            runner.shape("node_calls", lambda: node_calls.run(args.backend, backend.ray, timing))
    if by_kind[Kind.MULTI_NODE]:
        if args.local_mode:
            for name in by_kind[Kind.MULTI_NODE]:
                runner.record(name, {"status": "error", "error": "a local_mode session has no nodes"}, 0.0)
        else:
            import multi_node

            for name in by_kind[Kind.MULTI_NODE]:
                runner.shape(name, lambda name=name: multi_node.run(name, args.backend, backend.ray))

    if by_kind[Kind.FLOOR]:  # last: its echo children (and multiprocessing's helper) are not the session's
        runner.shape("floor", lambda: run_floor(backend, timing))

    report["elapsed_s"] = time.perf_counter() - started
    runner.flush()
    print(json.dumps(report, indent=1))
    return 1 if any(r.get("status") != "ok" for r in report["results"].values()) else 0


def _safe_shutdown(backend: Backend) -> None:
    try:
        backend.ray.shutdown()
    except Exception:  # noqa: BLE001
        traceback.print_exc()


if __name__ == "__main__":
    sys.exit(main())
