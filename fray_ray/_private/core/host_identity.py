"""What a host says about itself to the processes it runs, when the host itself does not.

A TPU host tells its processes which slice they are on through environment variables
(`TPU_NAME`, `TPU_WORKER_ID`, ...), which Ray's TPU helpers read. Some hosts give them only to
processes holding the TPU device (Iris's workers do), while Ray gives every process of a TPU
host its identity. The driver knows each host's identity from the cluster's worker attributes,
so a process it places on a TPU host is started with that identity in one variable, and the
worker adopts each entry the host did not set itself: the host's own values always win.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, MutableMapping

logger = logging.getLogger(__name__)

#: The variable that carries a host's identity to a worker process (a JSON object of strings).
HOST_IDENTITY_ENV = "FRAY_RAY_HOST_IDENTITY"


def encode(identity: Mapping[str, str]) -> dict[str, str]:
    """The environment entry that carries `identity` to a worker (none for an empty one).

    >>> encode({"TPU_NAME": "slice-a"})
    {'FRAY_RAY_HOST_IDENTITY': '{"TPU_NAME": "slice-a"}'}
    >>> encode({})
    {}
    """
    return {HOST_IDENTITY_ENV: json.dumps(dict(identity), sort_keys=True)} if identity else {}


def adopt(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set each variable of the carried identity that `environ` (default: this process's
    environment) lacks or has empty; returns what was set. A malformed value sets nothing."""
    environ = os.environ if environ is None else environ
    raw = environ.get(HOST_IDENTITY_ENV)
    if not raw:
        return {}
    try:
        identity = json.loads(raw)
    except ValueError:
        logger.warning("ignoring %s: not JSON", HOST_IDENTITY_ENV)
        return {}
    if not isinstance(identity, dict):
        logger.warning("ignoring %s: not a JSON object", HOST_IDENTITY_ENV)
        return {}
    adopted = {
        name: value for name, value in identity.items()
        if isinstance(name, str) and isinstance(value, str) and not environ.get(name)
    }
    environ.update(adopted)
    return adopted
