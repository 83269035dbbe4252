"""The dashboard's HTML, rendered on the server: the page, its panels and the login form.

Everything that comes from users or tasks (job names, errors, attributes, what a session's
feed says) is escaped here; the page's script only swaps in these fragments and appends log
lines as text. No inline script or style: the page's Content-Security-Policy forbids them.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote

from fray_ray.cluster._dashboard_sessions import SessionPanel

_KINDS = ("CPU", "GPU", "TPU", "memory", "disk")
_BYTE_KINDS = frozenset({"memory", "disk"})
_BAD_STATES = frozenset({"failed", "killed", "worker_failed", "unschedulable", "cosched_failed", "preempted"})


def _amount(kind: str, value: float) -> str:
    if kind in _BYTE_KINDS:
        for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size:
                return f"{value / size:.1f} {unit}"
        return f"{value:.0f} B"
    return f"{value:g}"


def _time(ms: int) -> str:
    if not ms:
        return ""
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%H:%M:%S")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _state(state: str) -> str:
    css = "bad" if state in _BAD_STATES else "good" if state == "succeeded" else "live" if state in (
        "running", "assigned", "building") else "wait"
    return f'<span class="state {css}">{escape(state)}</span>'


def _table(columns: Sequence[str], rows: Iterable[Sequence[str]], *, empty: str, css: str = "") -> str:
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    if not body:
        return f'<p class="empty">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(column)}</th>" for column in columns)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _bar(used: float, total: float) -> str:
    share = 0 if total <= 0 else min(max(used / total, 0.0), 1.0)
    return f'<meter min="0" max="1" value="{share:.3f}"></meter>'


def _usage(worker: Mapping[str, Any]) -> str:
    parts = []
    for kind in _KINDS:
        if kind not in worker["total"]:
            continue
        used, total, free = worker["used"][kind], worker["total"][kind], worker["free"][kind]
        parts.append(
            f'<div class="usage"><b>{kind}</b> {_bar(used, total)} {_amount(kind, used)} used of '
            f"{_amount(kind, total)}, {_amount(kind, free)} free</div>"
        )
    return "".join(parts)


def _shape(shape: Mapping[str, float]) -> str:
    return ", ".join(f"{escape(kind)} {_amount(kind, value)}" for kind, value in shape.items()) or "nothing"


def cluster_panel(view: Mapping[str, Any]) -> str:
    workers = _table(
        ("worker", "address", "state", "device", "resources", "running", "attributes"),
        (
            (
                escape(w["id"]),
                escape(w["address"]),
                '<span class="state good">alive</span>' if w["alive"] else '<span class="state bad">dead</span>',
                escape(w["device"]),
                _usage(w),
                str(w["running"]),
                "<br>".join(f"{escape(k)}={escape(v)}" for k, v in w["attributes"].items()),
            )
            for w in view["workers"]
        ),
        empty="no workers",
    )
    pending = _table(
        ("job", "pending tasks", "each needs", "why it waits"),
        (
            (_job_link(p["job"]), str(p["tasks"]), _shape(p["shape"]), escape(p["reason"]))
            for p in view["pending"]
        ),
        empty="no pending demand",
    )
    counts = ", ".join(f"{count} {escape(state)}" for state, count in view["job_counts"].items()) or "none"
    return (
        f"<h2>Cluster</h2>{workers}<h3>Pending demand</h3>{pending}"
        f'<p class="summary">Jobs: {counts}</p>'
    )


def _job_link(job_id: str) -> str:
    return f'<a class="job-link" href="/?job={quote(job_id, safe="")}" data-job="{escape(job_id)}">{escape(job_id)}</a>'


def _error(text: str, exit_code: int) -> str:
    if not text and not exit_code:
        return ""
    code = f'<span class="exit">exit code {exit_code}</span> ' if exit_code else ""
    return f'{code}<pre class="error">{escape(text)}</pre>' if text else code


def jobs_panel(view: Mapping[str, Any]) -> str:
    shown = len(view["jobs"])
    note = f" (the {shown} most recent of {view['jobs_total']})" if view["jobs_total"] > shown else ""
    table = _table(
        ("job", "state", "tasks", "submitted", "duration", "failure"),
        (
            (
                _job_link(j["id"]),
                _state(j["state"]),
                ", ".join(f"{n} {escape(s)}" for s, n in j["task_states"].items()),
                _time(j["submitted_ms"]),
                _duration(j["duration_s"]),
                _error(j["error"], j["exit_code"]) or escape(j["pending_reason"]),
            )
            for j in view["jobs"]
        ),
        empty="no jobs yet",
        css="jobs",
    )
    return f"<h2>Jobs{escape(note)}</h2>{table}"


def job_panel(job: Mapping[str, Any] | None, job_id: str) -> str:
    if not job_id:
        return '<h2>Job</h2><p class="empty">Select a job above to see its tasks and its log.</p>'
    if job is None:
        return f'<h2>Job {escape(job_id)}</h2><p class="empty">The cluster does not know this job (any more).</p>'
    tasks = _table(
        ("task", "state", "attempts", "worker", "started", "duration", "failure"),
        (
            (
                escape(t["id"]),
                _state(t["state"]),
                str(t["attempts"]),
                escape(f"{t['worker']} ({t['address']})" if t["worker"] else ""),
                _time(t["started_ms"]),
                _duration(t["duration_s"]),
                _error(t["error"], t["exit_code"]),
            )
            for t in job["task_list"]
        ),
        empty="no tasks",
    )
    children = "".join(f"<li>{_job_link(child)}</li>" for child in job["children"])
    parent = f'<p>Parent: {_job_link(job["parent"])}</p>' if job["parent"] else ""
    return (
        f'<h2>Job {escape(job["id"])} {_state(job["state"])}</h2>{parent}'
        f'{_error(job["error"], job["exit_code"])}<h3>Tasks</h3>{tasks}'
        + (f"<h3>Child jobs</h3><ul>{children}</ul>" if children else "")
    )


def endpoints_panel(view: Mapping[str, Any]) -> str:
    table = _table(
        ("endpoint", "address", "task"),
        ((escape(e["name"]), escape(e["address"]), escape(e["task"])) for e in view["endpoints"]),
        empty="no endpoints registered",
    )
    return f"<h2>Endpoints ({view['endpoints_total']})</h2>{table}"


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return escape(f"{value:g}")
    return escape(str(value))


def sessions_panel(panels: Sequence[SessionPanel]) -> str:
    if not panels:
        return (
            '<h2>Ray sessions</h2><p class="empty">No Ray session publishes a dashboard feed on this cluster '
            "(a fray_ray driver does while it runs).</p>"
        )
    parts = ["<h2>Ray sessions</h2>"]
    for panel in panels:
        parts.append(f'<section class="session"><h3>{escape(panel.title)} <small>{escape(panel.job)}</small></h3>')
        if panel.problem:
            parts.append(f'<p class="state bad problem">{escape(panel.problem)}</p>')
        for section in panel.sections:
            more = f" ({len(section.rows)} of {section.rows_total})" if section.rows_total > len(section.rows) else ""
            parts.append(f"<h4>{escape(section.title)}{more}</h4>")
            parts.append(
                _table(section.columns, ([_cell(cell) for cell in row] for row in section.rows), empty="none")
            )
        parts.append("</section>")
    return "".join(parts)


def _layout(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{escape(title)}</title>'
        '<link rel="stylesheet" href="/dashboard/static/dashboard.css"></head>'
        f"<body>{body}</body></html>"
    )


def page(panels: Mapping[str, str], *, address: str, job_id: str, with_logout: bool) -> str:
    """The whole dashboard, with every panel rendered now (the script keeps them current)."""
    logout = (
        '<form method="post" action="/logout" class="logout"><button type="submit">Log out</button></form>'
        if with_logout
        else ""
    )
    log = (
        '<h3>Log <small id="log-state"></small></h3><pre id="log" class="log"></pre>'
        if job_id
        else ""
    )
    body = (
        f'<header><h1>fray_ray cluster</h1><span class="address">{escape(address)}</span>'
        f'<span id="updated" class="updated"></span>{logout}</header>'
        f'<main data-job="{escape(job_id)}">'
        f'<div id="cluster" class="panel">{panels["cluster"]}</div>'
        f'<div id="sessions" class="panel">{panels["sessions"]}</div>'
        f'<div id="jobs" class="panel">{panels["jobs"]}</div>'
        f'<div id="job-detail" class="panel"><div id="job">{panels["job"]}</div>{log}</div>'
        f'<div id="endpoints" class="panel">{panels["endpoints"]}</div>'
        "</main>"
        '<script src="/dashboard/static/dashboard.js"></script>'
    )
    return _layout("fray_ray dashboard", body)


def login_page(*, address: str, problem: str = "") -> str:
    """The token form shown to a browser without a session."""
    message = f'<p class="state bad">{escape(problem)}</p>' if problem else ""
    body = (
        f'<main class="login"><h1>fray_ray cluster</h1><p class="address">{escape(address)}</p>{message}'
        '<form method="post" action="/login"><label for="token">Cluster token</label>'
        '<input id="token" name="token" type="password" autocomplete="off" autofocus required>'
        '<button type="submit">Open the dashboard</button></form>'
        "<p>The token is what <code>fray-ray start</code> printed (or <code>cluster.token</code> of an "
        "embedded cluster); its dashboard link logs in at once.</p></main>"
    )
    return _layout("fray_ray dashboard: log in", body)
