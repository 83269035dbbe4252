"""Run the benchmark shapes for one backend in this interpreter and print JSON results.

    python benchmarks/run_one.py --backend fray_ray [--local-mode] [--only tasks_sync,...]
    python benchmarks/run_one.py --backend ray --json out.json      # needs Ray installed here

Order: the lifecycle shapes on a fresh session first (cold: the first session of this
interpreter), then the rate shapes and the scale shapes together in a second session. Results
are written to --json after every shape, so a run cut short still leaves what it measured.
`--quick` (or FRAY_BENCH_QUICK=1) shrinks warm-up, rounds and scale counts for smoke tests.
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
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workloads  # noqa: E402
from workloads import LIFECYCLE, RATE, SCALE, SHAPES, Backend, Timing  # noqa: E402


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
    return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", required=True, choices=["fray_ray", "ray"])
    parser.add_argument("--only", default="", help="comma-separated shape names (default: all)")
    parser.add_argument("--json", dest="json_path", help="also write the results to this file")
    parser.add_argument("--local-mode", action="store_true", help="fray_ray: init(local_mode=True), threads in process")
    parser.add_argument("--quick", action="store_true", default=os.environ.get("FRAY_BENCH_QUICK", "") not in ("", "0"))
    parser.add_argument("--rounds", type=int, help="timed rounds per rate shape")
    parser.add_argument("--round-s", type=float, help="seconds per round")
    parser.add_argument("--warmup-s", type=float, help="warm-up seconds per rate shape")
    args = parser.parse_args(argv)

    wanted = [s.strip() for s in args.only.split(",") if s.strip()] or list(SHAPES)
    unknown = [s for s in wanted if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shape(s): {', '.join(unknown)}; known: {', '.join(SHAPES)}")

    timing = Timing.quick() if args.quick else Timing()
    if args.rounds is not None:
        timing.rounds = max(1, args.rounds)
    if args.round_s is not None:
        timing.round_s = args.round_s
    if args.warmup_s is not None:
        timing.warmup_s = args.warmup_s

    # Mark this process and everything it starts (inherited environment) so that memory and
    # clean-up checks find re-parented children too.
    os.environ.setdefault(workloads.MARK_ENV, uuid.uuid4().hex)

    report: dict[str, Any] = {
        "backend": args.backend,
        "mode": "local_mode" if args.local_mode else "default",
        "python": platform.python_version(),
        "quick": args.quick,
        "timing": vars(timing),
        "results": {},
    }

    def flush() -> None:
        if args.json_path:
            tmp = args.json_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(report, f, indent=1)
            os.replace(tmp, args.json_path)

    t_import = time.perf_counter()
    try:
        backend = load_backend(args.backend, args.local_mode)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        report["error"] = _error(exc)["error"]
        flush()
        print(json.dumps(report, indent=1))
        return 2
    report["import_s"] = time.perf_counter() - t_import
    report["version"] = getattr(backend.ray, "__version__", "?")
    flush()
    results = report["results"]
    started = time.perf_counter()

    lifecycle = [s for s in wanted if s in LIFECYCLE]
    if lifecycle:
        try:
            results.update(workloads.run_lifecycle(backend, lifecycle))
        except Exception as exc:  # noqa: BLE001
            for name in lifecycle:
                results[name] = _error(exc)
            _safe_shutdown(backend)
        flush()

    rate = [s for s in wanted if s in RATE]
    scale = [s for s in wanted if s in SCALE]
    if rate or scale:
        try:
            backend.init()
        except Exception as exc:  # noqa: BLE001
            for name in rate + scale:
                results[name] = _error(exc)
            flush()
        else:
            try:
                remotes = workloads.make_remotes(backend.ray)
                backend.ray.get(remotes.noop.remote())
                rate_fns = workloads.rate_shapes(backend.ray, remotes)
                scale_fns = workloads.scale_shapes(backend.ray, remotes)
                for name in rate:
                    results[name] = _run_shape(lambda: rate_fns[name](timing))
                    flush()
                for name in scale:
                    results[name] = _run_shape(lambda: scale_fns[name](args.quick))
                    flush()
            finally:
                _safe_shutdown(backend)

    report["elapsed_s"] = time.perf_counter() - started
    flush()
    print(json.dumps(report, indent=1))
    return 1 if any("error" in r for r in results.values()) else 0


def _run_shape(fn: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001
        out = _error(exc)
    out["wall_s"] = time.perf_counter() - t0
    return out


def _safe_shutdown(backend: Backend) -> None:
    try:
        backend.ray.shutdown()
    except Exception:  # noqa: BLE001
        traceback.print_exc()


if __name__ == "__main__":
    sys.exit(main())
