"""The comparison as text: one markdown table per section, extras and notes under them.

A cell reads `median unit ±spread%`; `⚠` marks a spread above 20%; `(k/n)` says only k of n
repetitions produced a value; a shape that never produced one shows why (timeout, memory,
error, skipped). The ratio column is the median of the per-repetition ratios (>1: fray_ray
better) with its own spread.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from shapes import Catalog

FLAG = "⚠"


def num(x: float) -> str:
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    digits = max(2, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{digits}f}"


def spread_text(s: dict[str, Any]) -> str:
    if s["n"] < 2 or s["spread"] is None:
        return ""
    text = f" ±{s['spread'] * 100:.0f}%"
    return text + (f" {FLAG}" if s["flagged"] else "")


def value_cell(s: dict[str, Any] | None, unit: str, status: dict[str, Any] | None) -> str:
    """One backend's cell: its median and spread, or why there is none."""
    if s is None:
        if status and status["failures"]:
            first = status["failures"][0]
            kinds = sorted({f["status"] for f in status["failures"]})
            return f"{'/'.join(kinds)} (rep {first['rep'] + 1})"
        return "—"
    text = f"{num(s['median'])} {unit}{spread_text(s)}"
    if status and status["runs"] and s["n"] < status["runs"]:
        text += f" ({s['n']}/{status['runs']})"
    return text


def ratio_cell(s: dict[str, Any] | None) -> str:
    return "—" if s is None else f"{s['median']:.2f}×{spread_text(s)}"


SECTIONS = (
    ("Floor", lambda n: n.startswith("floor_") or n.endswith("_vs_floor")),
    ("Lifecycle", lambda n: n in ("init_to_first_result", "idle_memory_mib", "idle_pss_mib", "shutdown")),
    ("Queued tasks", lambda n: n.startswith("queued_tasks_")),
    ("Actors", lambda n: n.startswith("actors_")),
    ("Cross-driver", lambda n: n.startswith("cross_driver")),
    ("Envelope", lambda n: n.startswith("envelope_")),
    ("Several nodes", lambda n: n.startswith(("node_to_node_", "actor_to_actor_", "stream_to_node_", "parallel_puts", "wait_one_of_"))),
    ("Calls and objects", lambda n: True),
)
SECTION_ORDER = ("Floor", "Lifecycle", "Calls and objects", "Queued tasks", "Actors", "Cross-driver", "Envelope",
                 "Several nodes")


def sections(cat: Catalog, rows: dict[str, dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(title, metric names) in display order; only metrics that have a row."""
    found: dict[str, list[str]] = {title: [] for title in SECTION_ORDER}
    for name in cat.metrics:
        if name in rows:
            title = next(t for t, test in SECTIONS if test(name))
            found[title].append(name)
    return [(t, found[t]) for t in SECTION_ORDER if found[t]]


def render(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for i, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
        if i == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def tables(cat: Catalog, rows: dict[str, dict[str, Any]], with_ray: bool) -> str:
    out = []
    head = ["metric", "fray_ray"] + (["Ray", "ratio (>1: fray_ray better)"] if with_ray else []) + ["target", "met"]
    for title, names in sections(cat, rows):
        table = [head]
        for name in names:
            row = rows[name]
            unit = cat.metrics[name].unit
            line = [name, value_cell(row["fray_ray"], unit, row["status"].get("fray_ray"))]
            if with_ray:
                ray_cell = "—" if cat.metrics[name].fray_only else value_cell(row["ray"], unit, row["status"].get("ray"))
                line += [ray_cell, ratio_cell(row["ratio"])]
            line += [row["target"], row["met"]]
            table.append(line)
        out.append(f"**{title}**\n\n{render(table)}")
    return "\n\n".join(out)


def _last_extra(shapes: dict[str, list[dict[str, Any]]], shape: str) -> dict[str, Any] | None:
    good = [r for r in shapes.get(shape, []) if r["status"] == "ok"]
    return good[-1].get("extra") if good else None


def extras(results: dict[str, dict[str, list[dict[str, Any]]]]) -> list[str]:
    """Details worth a line under the tables, from each backend's last good repetition."""
    out = []
    for backend, shapes in results.items():
        last = partial(_last_extra, shapes)
        if (e := last("init_to_first_result")) is not None:
            out.append(f"{backend}: init {num(e['init_s'])} s + first task {num(e['first_task_s'])} s (last repetition)")
        if (e := last("idle_memory")) is not None:
            top = ", ".join(f"{n} {m:.0f}" for n, m in e["by_process"][:6])
            out.append(f"{backend}: idle {e['processes']} process(es); largest RSS (MiB): {top}")
        if (e := last("shutdown")) is not None and e.get("until_no_processes_s") is not None:
            out.append(f"{backend}: shutdown() until no child process is left: {num(e['until_no_processes_s'])} s")
        for shape in (s for s in shapes if s.startswith("queued_tasks_")):
            if (e := last(shape)) is not None:
                out.append(f"{backend}: {shape}: submitting took {num(e['submit_s'])} s of {num(e['seconds'])} s "
                           f"({e['submit_s'] / e['tasks'] * 1e6:.0f} µs per .remote())")
        for shape in (s for s in shapes if s.startswith("actors_")):
            if (e := last(shape)) is not None:
                out.append(f"{backend}: {shape}: {e['processes_before']} → {e['processes']} processes, "
                           f"PSS {e['pss_mib_before']:.0f} → {e['pss_mib']:.0f} MiB, RSS {e['rss_mib']:.0f} MiB with them alive")
        for shape, runs in shapes.items():
            for r in runs:
                if r["status"] == "memory" and r.get("extra"):
                    e = r["extra"]
                    if e.get("ready"):
                        per = (e["pss_mib"] - e["pss_mib_before"]) / e["ready"]
                        out.append(f"{backend}: {shape} (rep {r['rep'] + 1}) stopped by the memory guard at {e['ready']}/{e['actors']} "
                                   f"actors after {num(e['seconds'])} s; {per:.1f} MiB PSS per actor so far")
        if (e := last("cross_driver_calls")) is not None:
            out.append(f"{backend}: second driver joined in {num(e['join_s'])} s, get_actor {num(e['lookup_s'])} s")
    return out
