"""Plain HTTP GETs to a registered endpoint (a session's dashboard feed), with the cluster token.

Shared by the controller, which fetches every session's feed for its dashboard and `/metrics`,
and by `fray-ray list`, which fetches their state: both read an endpoint's address as Iris
registered it, send the bearer token, and refuse an answer larger than they asked for.
"""

from __future__ import annotations

__all__ = ["ResponseTooLarge", "endpoint_url", "http_get"]


class ResponseTooLarge(ValueError):
    """The answer was longer than the caller's limit."""


def endpoint_url(address: str) -> str:
    """An endpoint's base URL from its registered address (`host:port` gets `http://`)."""
    address = address.rstrip("/")
    return address if address.startswith(("http://", "https://")) else "http://" + address


def http_get(url: str, token: str | None, *, timeout: float, limit: int, accept: str = "application/json") -> bytes:
    """The body of `GET url` (bearer `token`); ResponseTooLarge past `limit` bytes, and
    urllib's errors (HTTPError, URLError, OSError) as they come."""
    import urllib.request  # here: neither the cluster nor the CLI loads urllib's client at start

    request = urllib.request.Request(url, headers={"accept": accept})
    if token:
        request.add_header("authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http(s) only (endpoint_url)
        body: bytes = response.read(limit + 1)
    if len(body) > limit:
        raise ResponseTooLarge(f"the answer is larger than {limit} bytes")
    return body
