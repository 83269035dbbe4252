"""Registering this task's endpoints, and keeping them registered while the task lives.

Only a live task attempt may register: the controller checks the task id and attempt id,
both taken from `IRIS_TASK_ID`. Relative names go under the namespace (the root job).
Registrations are renewed periodically with the same endpoint id, which is how leased
registries (Iris's EndpointService) keep them alive; older controllers simply replace them.
"""

from __future__ import annotations

import threading
import uuid

from fray_ray.iris.controller_client import ControllerClient
from fray_ray.iris.errors import IrisError
from fray_ray.iris.job_info import JobInfo
from fray_ray.iris.resolver import qualify_name

DEFAULT_RENEW_INTERVAL_S = 120.0


class EndpointRegistry:
    """This task attempt's endpoints. `close()` unregisters them and stops renewing."""

    def __init__(
        self, controller: ControllerClient, job_info: JobInfo, *, renew_interval: float = DEFAULT_RENEW_INTERVAL_S
    ) -> None:
        self._controller = controller
        self._job_info = job_info
        self._renew_interval = renew_interval
        self._lock = threading.Lock()  # guards _endpoints and _renewer
        self._endpoints: dict[str, tuple[str, str, dict[str, str]]] = {}  # id -> (name, address, metadata)
        self._stopping = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def namespace(self) -> str:
        return self._job_info.job_id.namespace

    def register(self, name: str, address: str, metadata: dict[str, str] | None = None) -> str:
        """Register `name` (absolute, or relative to the namespace) → `address`; returns the id."""
        full_name = qualify_name(name, self.namespace)
        endpoint_id = uuid.uuid4().hex
        self._send(endpoint_id, full_name, address, dict(metadata or {}))
        with self._lock:
            self._endpoints[endpoint_id] = (full_name, address, dict(metadata or {}))
            if self._renewer is None and self._renew_interval > 0:
                self._renewer = threading.Thread(target=self._renew_loop, name="endpoint-renewer", daemon=True)
                self._renewer.start()
        return endpoint_id

    def _send(self, endpoint_id: str, name: str, address: str, metadata: dict[str, str]) -> None:
        self._controller.register_endpoint(
            name,
            address,
            task_id=self._job_info.task_attempt.task.wire,
            attempt_id=self._job_info.attempt_id,
            metadata=metadata,
            endpoint_id=endpoint_id,
        )

    def unregister(self, endpoint_id: str) -> None:
        with self._lock:
            self._endpoints.pop(endpoint_id, None)
        self._controller.unregister_endpoint(endpoint_id)

    def _renew_loop(self) -> None:
        while not self._stopping.wait(self._renew_interval):
            with self._lock:
                endpoints = list(self._endpoints.items())
            for endpoint_id, (name, address, metadata) in endpoints:
                try:
                    self._send(endpoint_id, name, address, metadata)
                except IrisError:
                    pass  # the next round retries; a finished task's endpoints are gone anyway

    def close(self) -> None:
        """Unregister everything (best effort) and stop the renewal thread."""
        self._stopping.set()
        with self._lock:
            endpoint_ids = list(self._endpoints)
            self._endpoints.clear()
            renewer, self._renewer = self._renewer, None
        for endpoint_id in endpoint_ids:
            try:
                self._controller.unregister_endpoint(endpoint_id)
            except IrisError:
                pass
        if renewer is not None:
            renewer.join(timeout=5)
