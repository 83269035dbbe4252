"""Who may see the dashboard: the cluster token, given once, exchanged for a session cookie.

A browser proves it knows the token by opening the token link (`/?token=...`) or posting the
login form; the answer sets an HttpOnly, SameSite=Strict cookie holding `session_value(token)`,
an HMAC of a fixed label keyed by the token, so the cookie never carries the token itself and
cannot be forged without it. Scripts may send `Authorization: Bearer <token>` instead. Every
check is constant-time, and happens before anything of the request body is read.

The cookie's name carries the server's port: browsers keep one cookie jar per host, not per
port, and two clusters on one machine must not overwrite each other's sessions.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

#: What the session value is an HMAC of (the token is the key).
SESSION_LABEL = b"fray-ray dashboard session v1"
COOKIE_PREFIX = "fray_ray_dashboard_"


def session_value(token: str) -> str:
    """The cookie value that stands for `token`: HMAC-SHA256(token, SESSION_LABEL), hex."""
    return hmac.new(token.encode(), SESSION_LABEL, hashlib.sha256).hexdigest()


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    return [value for key, value in headers if key.lower() == name]


def request_cookies(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The cookies a request carries (the first of each name); malformed pairs are skipped."""
    found: dict[str, str] = {}
    for raw in _header(headers, b"cookie"):
        for pair in raw.decode("latin-1").split(";"):
            name, sep, value = pair.strip().partition("=")
            if sep and name and name not in found:
                found[name] = value.strip().strip('"')
    return found


class DashboardAuth:
    """The dashboard's credentials check for one cluster (`token` None: auth is off)."""

    def __init__(self, token: str | None) -> None:
        self._token = token.encode() if token else None
        self._bearer = b"Bearer " + self._token if self._token else None
        self._session = session_value(token).encode() if token else None

    @property
    def enabled(self) -> bool:
        return self._token is not None

    @staticmethod
    def cookie_name(scope: dict) -> str:
        server = scope.get("server") or ("", 0)
        return f"{COOKIE_PREFIX}{server[1] if len(server) > 1 and server[1] else 0}"

    def token_matches(self, candidate: str) -> bool:
        """Whether `candidate` is the cluster token (constant-time)."""
        if self._token is None:
            return True
        return hmac.compare_digest(candidate.encode(errors="surrogateescape"), self._token)

    def allows(self, scope: dict) -> bool:
        """Whether the request carries a valid session cookie or bearer token."""
        if self._token is None:
            return True
        assert self._bearer is not None and self._session is not None
        headers = scope.get("headers", ())
        provided = next(iter(_header(headers, b"authorization")), b"")
        if hmac.compare_digest(provided, self._bearer):
            return True
        cookie = request_cookies(headers).get(self.cookie_name(scope), "")
        return hmac.compare_digest(cookie.encode(errors="surrogateescape"), self._session)

    def session_cookie(self, scope: dict) -> bytes:
        """The Set-Cookie header value that opens a session (call after `token_matches`)."""
        value = self._session.decode() if self._session is not None else ""
        return f"{self.cookie_name(scope)}={value}; Path=/; HttpOnly; SameSite=Strict".encode()

    def clearing_cookie(self, scope: dict) -> bytes:
        """The Set-Cookie header value that ends the session."""
        return f"{self.cookie_name(scope)}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0".encode()
