"""The Ray sessions panel: fetching each session's dashboard feed and checking what it says.

A feed is an endpoint named `<job>/fray-ray-dashboard` whose address answers
`GET /dashboard.json` (bearer token: the cluster's) with
`{"title": str, "sections": [{"title": str, "columns": [str], "rows": [[scalar]]}]}`
(the contract is written in ARCHITECTURE.md). The controller knows nothing else of Ray: it
fetches every feed at once, each with a short deadline and a size limit, and a feed that does
not answer, or answers something else, becomes a `SessionPanel` that says so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fray_ray.iris.endpoint_http import endpoint_url, http_get

FEED_PATH = "/dashboard.json"
FETCH_TIMEOUT_S = 2.0
MAX_FEED_BYTES = 1 << 20
MAX_SECTIONS = 20
MAX_ROWS = 500
MAX_COLUMNS = 20
MAX_FEEDS = 32
FETCH_THREADS = 16
_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Section:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str | int | float | bool | None, ...], ...]
    rows_total: int


@dataclass(frozen=True)
class SessionPanel:
    """One session as the dashboard shows it: its sections, or why there are none."""

    job: str
    address: str
    title: str
    sections: tuple[Section, ...] = ()
    problem: str = ""


class FeedError(ValueError):
    """A feed answered something that does not follow the contract."""


def parse_feed(data: Any) -> tuple[str, tuple[Section, ...]]:
    """(title, sections) of a decoded feed document; FeedError when it breaks the contract."""
    if not isinstance(data, dict):
        raise FeedError("the feed is not a JSON object")
    title = data.get("title", "")
    if not isinstance(title, str):
        raise FeedError("title is not a string")
    sections = data.get("sections", [])
    if not isinstance(sections, list):
        raise FeedError("sections is not a list")
    parsed = []
    for index, section in enumerate(sections[:MAX_SECTIONS]):
        if not isinstance(section, dict):
            raise FeedError(f"section {index} is not an object")
        name, columns, rows = section.get("title", ""), section.get("columns", []), section.get("rows", [])
        if not isinstance(name, str) or not isinstance(columns, list) or not isinstance(rows, list):
            raise FeedError(f"section {index} needs a string title, a list of columns and a list of rows")
        if not all(isinstance(column, str) for column in columns):
            raise FeedError(f"section {name!r}: columns must be strings")
        kept = []
        for row in rows[:MAX_ROWS]:
            if not isinstance(row, list) or not all(isinstance(cell, _SCALARS) for cell in row):
                raise FeedError(f"section {name!r}: each row must be a list of strings, numbers, booleans or nulls")
            kept.append(tuple(row[:MAX_COLUMNS]))
        parsed.append(Section(name, tuple(columns[:MAX_COLUMNS]), tuple(kept), len(rows)))
    return title, tuple(parsed)


def fetch_panel(feed: dict[str, str], token: str | None, timeout: float = FETCH_TIMEOUT_S) -> SessionPanel:
    """Fetch and check one feed; never raises (a failure is the panel's `problem`)."""
    import urllib.error

    job, address = feed["job"], endpoint_url(feed["address"])
    try:
        title, sections = parse_feed(json.loads(http_get(address + FEED_PATH, token, timeout=timeout, limit=MAX_FEED_BYTES)))
    except urllib.error.HTTPError as exc:
        return SessionPanel(job, address, job, problem=f"unreachable: HTTP {exc.code} from {address}{FEED_PATH}")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return SessionPanel(job, address, job, problem=f"unreachable: {reason}")
    except (ValueError, UnicodeDecodeError) as exc:  # FeedError, ResponseTooLarge and bad JSON
        return SessionPanel(job, address, job, problem=f"unreadable feed: {exc}")
    return SessionPanel(job, address, title or job, sections)


def fetch_panels(feeds: Sequence[dict[str, str]], token: str | None) -> list[SessionPanel]:
    """The first `MAX_FEEDS` feeds, all at once: returns within about one `FETCH_TIMEOUT_S`
    (for each batch of `FETCH_THREADS`) whatever the feeds do."""
    import concurrent.futures

    feeds = list(feeds)[:MAX_FEEDS]
    if not feeds:
        return []
    with concurrent.futures.ThreadPoolExecutor(min(len(feeds), FETCH_THREADS), thread_name_prefix="dashboard-feed") as pool:
        return list(pool.map(lambda feed: fetch_panel(feed, token), feeds))
