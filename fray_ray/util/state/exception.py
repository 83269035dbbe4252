"""Errors of the state API, as Ray names them (`ray.util.state.exception`)."""

from __future__ import annotations


class RayStateApiException(Exception):
    """A state query could not be answered (bad filter column, the cluster unreachable, ...)."""


class ServerUnavailable(RayStateApiException):
    """The source of the state (the cluster's controller) could not be reached."""
