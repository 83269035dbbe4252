"""Errors the embedded controller answers with; each carries the Connect code it maps to.

    ClusterError                 any refusal of a request (`code` is a Connect code name)
    ├── InvalidRequest             the request is malformed (`invalid_argument`)
    ├── UnknownEntity              no such job, task or endpoint (`not_found`)
    ├── JobExists                  the job name is taken and the policy forbids replacing it
    └── PreconditionFailed         valid, but the cluster cannot honour it (`failed_precondition`)

The Connect service (`_service.py`) is the one place these become `ConnectError`s; any other
exception escaping a handler becomes an `internal` error there.
"""

from __future__ import annotations


class ClusterError(Exception):
    """A request the controller refuses; `code` is the Connect error code name."""

    code = "unknown"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(ClusterError):
    """The request is malformed: a bad name, a negative budget, a constraint without a value."""

    code = "invalid_argument"


class UnknownEntity(ClusterError, LookupError):
    """The job, task or endpoint named in the request does not exist."""

    code = "not_found"


class JobExists(ClusterError):
    """A job with this name exists and the existing-job policy forbids replacing it."""

    code = "already_exists"


class PreconditionFailed(ClusterError):
    """The request is valid but cannot be honoured: dead parent, stale attempt, no worker fits."""

    code = "failed_precondition"
