"""Medians, spreads, paired ratios, derived metrics and verdicts over repetitions.

Values are kept per repetition index (`{rep: value}`), because repetition i of fray_ray and of
Ray ran next to each other (one right after the other), so the ratio of the two is taken pair
by pair and only then summarised; a load burst that slows both sides of a pair cancels out.

Spread is the interquartile range over the median (IQR/median; with 5 values: (4th - 2nd
smallest) / median), so one disturbed repetition does not by itself flag a shape; min and max
are kept beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

from shapes import Catalog, Target, TargetKind

SPREAD_FLAG = 0.20

PerRep = dict[int, float]


def summary(values: list[float]) -> dict[str, Any] | None:
    """median, quartiles, min, max and spread (IQR/median) of some values; None if there are none."""
    if not values:
        return None
    ordered = sorted(values)
    median = statistics.median(ordered)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    spread = (q3 - q1) / abs(median) if median else None
    return {
        "n": len(ordered),
        "median": median,
        "q1": q1,
        "q3": q3,
        "min": ordered[0],
        "max": ordered[-1],
        "spread": spread,
        "range_spread": (ordered[-1] - ordered[0]) / abs(median) if median else None,
        "flagged": spread is not None and spread > SPREAD_FLAG,
    }


def paired_ratios(fray: PerRep, ray: PerRep, better: str) -> PerRep:
    """Per repetition both sides have: fray/ray for "higher" metrics, ray/fray for "lower" (>1: fray_ray better)."""
    out = {}
    for rep in sorted(set(fray) & set(ray)):
        f, r = fray[rep], ray[rep]
        if f > 0 and r > 0:
            out[rep] = f / r if better == "higher" else r / f
    return out


def _per_rep(inputs: list[PerRep], combine: Callable[..., float | None]) -> PerRep:
    """combine(values...) for every repetition in which all inputs have a value."""
    reps = set.intersection(*(set(i) for i in inputs)) if inputs else set()
    out = {}
    for rep in sorted(reps):
        value = combine(*(i[rep] for i in inputs))
        if value is not None:
            out[rep] = value
    return out


def _growth(*costs: float) -> float | None:
    """Largest cost along a curve over the cost at its smallest size (costs ordered by size)."""
    return max(costs[1:]) / costs[0] if len(costs) > 1 and costs[0] > 0 else None


def derive(cat: Catalog, values: Mapping[str, PerRep]) -> dict[str, PerRep]:
    """The derived metrics of one backend, repetition by repetition, from its measured ones."""
    out: dict[str, PerRep] = {}

    def have(*names: str) -> bool:
        return all(values.get(n) for n in names)

    floor = "floor_socket_rtt_us"
    for derived, rate in (("tasks_sync_vs_floor", "tasks_sync"), ("actor_call_sync_vs_floor", "actor_calls_sync")):
        if have(floor, rate):
            out[derived] = _per_rep([values[rate], values[floor]], lambda r, f: (1e6 / r) / f if r > 0 and f > 0 else None)
    task_costs = [f"{s}_us_per_task" for s in cat.groups["queued_tasks"]]
    if len(task_costs) > 1 and have(*task_costs):
        out["queued_tasks_cost_growth"] = _per_rep([values[c] for c in task_costs], _growth)
    actor_points = cat.groups["actors"]
    times = [f"{s}_ms_per_actor" for s in actor_points]
    pss = [f"{s}_pss_per_actor" for s in actor_points]
    if len(times) > 1 and have(*times):
        out["actors_time_cost_growth"] = _per_rep([values[c] for c in times], _growth)
    if len(pss) > 1 and have(*pss):
        out["actors_pss_cost_growth"] = _per_rep([values[c] for c in pss], _growth)
    return out


def verdict(target: Target | None, fray: dict[str, Any] | None, ratio: dict[str, Any] | None, completed: bool | None) -> str:
    """"met", "missed", "n/a" (nothing to judge) or "" (no target)."""
    if target is None:
        return ""
    if target.kind is TargetKind.COMPLETES:
        return "n/a" if completed is None else ("met" if completed else "missed")
    if fray is None and completed is False:
        return "missed"  # fray_ray never produced a value
    if target.kind is TargetKind.RATIO:
        return "n/a" if ratio is None else ("met" if ratio["median"] >= target.value else "missed")
    return "n/a" if fray is None else ("met" if fray["median"] <= target.value else "missed")
