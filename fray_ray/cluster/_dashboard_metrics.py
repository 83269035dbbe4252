"""`GET /metrics` at the controller: every Ray session's application metrics, one scrape target.

Each session's feed (see `_dashboard_sessions`) also serves `GET /metrics`, its metrics in
Prometheus's text format. The controller fetches them all at once (the same deadline, size
limit and token as the feeds) and merges them: each metric family's HELP and TYPE once, then
its samples from every session, each labelled `session="<the session's job>"`. A session that
does not answer is left out, and counted in `fray_ray_dashboard_unreachable_sessions`.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from dataclasses import dataclass, field

from fray_ray.cluster._dashboard_sessions import FETCH_THREADS, FETCH_TIMEOUT_S, MAX_FEED_BYTES, MAX_FEEDS
from fray_ray.iris.endpoint_http import endpoint_url, http_get

__all__ = ["METRICS_PATH", "PROMETHEUS_TYPE", "merge_exposition", "session_metrics"]

METRICS_PATH = "/metrics"
PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_UNREACHABLE = "fray_ray_dashboard_unreachable_sessions"


@dataclass
class _Family:
    help: str = ""
    type: str = ""
    samples: list[str] = field(default_factory=list)


def merge_exposition(texts: Sequence[tuple[str, str]]) -> str:
    """One exposition from (session, exposition text) pairs, every sample labelled with its session."""
    families: dict[str, _Family] = {}
    for session, text in texts:
        current: _Family | None = None
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    current = families.setdefault(parts[2], _Family())
                    setattr(current, parts[1].lower(), parts[3] if len(parts) > 3 else "")
                continue
            if current is None:
                name = line.split("{", 1)[0].split(" ", 1)[0]
                current = families.setdefault(name, _Family())
            current.samples.append(_labelled(line, session))
    lines: list[str] = []
    for name, family in families.items():
        if family.help:
            lines.append(f"# HELP {name} {family.help}")
        if family.type:
            lines.append(f"# TYPE {name} {family.type}")
        lines.extend(family.samples)
    return "\n".join(lines) + ("\n" if lines else "")


def _labelled(sample: str, session: str) -> str:
    label = 'session="' + session.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    name_end = min((i for i in (sample.find("{"), sample.find(" ")) if i >= 0), default=len(sample))
    if sample[name_end:name_end + 1] == "{":
        closing = sample[name_end + 1:].lstrip().startswith("}")
        return sample[:name_end + 1] + label + ("" if closing else ",") + sample[name_end + 1:]
    return sample[:name_end] + "{" + label + "}" + sample[name_end:]


def session_metrics(feeds: Sequence[dict[str, str]], token: str | None) -> str:
    """Every reachable session's metrics, merged; never raises."""
    feeds = list(feeds)[:MAX_FEEDS]

    def fetch(feed: dict[str, str]) -> tuple[str, str] | None:
        try:
            body = http_get(endpoint_url(feed["address"]) + METRICS_PATH, token, timeout=FETCH_TIMEOUT_S,
                            limit=MAX_FEED_BYTES, accept="text/plain")
            return feed["job"], body.decode("utf-8")
        except (OSError, ValueError):  # unreachable, refused, too large or not text: left out
            return None

    results: list[tuple[str, str] | None] = []
    if feeds:
        with concurrent.futures.ThreadPoolExecutor(min(len(feeds), FETCH_THREADS),
                                                   thread_name_prefix="dashboard-metrics") as pool:
            results = list(pool.map(fetch, feeds))
    texts = [result for result in results if result is not None]
    unreachable = len(results) - len(texts)
    footer = (f"# HELP {_UNREACHABLE} Ray sessions whose metrics could not be fetched for this scrape.\n"
              f"# TYPE {_UNREACHABLE} gauge\n{_UNREACHABLE} {unreachable}\n")
    return merge_exposition(texts) + footer
