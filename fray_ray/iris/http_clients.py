"""The HTTP client that Connect stubs for plain-HTTP addresses share, one per process.

connect-python's stubs use pyqwest's default transport unless given a client, and building that
transport (with the system's TLS roots) costs a new worker process about 9 ms of CPU, against
3 ms for a plain one: a large part of what a new actor spends before it answers. Loopback and
cluster-internal addresses are `http://`, which needs no TLS roots, so their stubs share one
client on a plain transport with the default transport's other settings. `https://` addresses
keep the default transport and its trusted roots.
"""

from __future__ import annotations

import threading

from pyqwest import SyncClient, SyncHTTPTransport

_lock = threading.Lock()
_plain: SyncClient | None = None


def http_client_for(url: str) -> SyncClient | None:
    """This process's plain-HTTP client for an `http://` URL; None (the stub's default client)
    for anything else. Made at first use, never at import: a worker template forks after
    importing this module, and a client's threads do not survive a fork."""
    global _plain
    if not url.startswith("http://"):
        return None
    with _lock:
        if _plain is None:
            _plain = SyncClient(SyncHTTPTransport())
        return _plain
