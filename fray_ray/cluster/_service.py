"""The Connect handlers: `iris.cluster.ControllerService`, `iris.cluster.EndpointService` and
finelog's `finelog.logging.LogService` over an `EmbeddedController`.

Handlers run inline on the server's event loop: each one takes the controller lock for a few
microseconds and never blocks on I/O, so a thread hop would only add latency. FetchLogs is the
exception: it may sort many thousands of lines, so it runs on a worker thread. This is the one
place the cluster's refusals (`fray_ray.iris.errors.IrisRpcError` and its subclasses, each
carrying its Connect code) become Connect errors; any other exception is logged and answered as
`internal`, so a handler bug never takes the server down. Every job, task and endpoint name a
request carries is checked here (`_request_names`) before the controller sees it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from fray_ray.cluster._controller import EmbeddedController
from fray_ray.cluster._process_status import process_info
from fray_ray.cluster._request_names import (
    endpoint_name_arg,
    job_id_arg,
    job_ids_arg,
    job_or_task_arg,
    task_id_arg,
    task_ids_arg,
)
from fray_ray.cluster._state_lookups import DEFAULT_LEASE_S, LEGACY_LEASE_S
from fray_ray.iris.errors import IrisRpcError, NotFound
from fray_ray.iris.rpc import controller_pb2, finelog_logging_pb2, job_pb2, vm_pb2

logger = logging.getLogger(__name__)

Controller = controller_pb2.Controller
R = TypeVar("R")


def rpc(method: str, *, in_thread: bool = False) -> Callable[[Callable[..., R]], Callable[..., Awaitable[R]]]:
    """Make a sync handler an async one whose failures are Connect errors (`in_thread`: run it
    on a worker thread, for handlers too slow for the event loop)."""

    def wrap(handler: Callable[..., R]) -> Callable[..., Awaitable[R]]:
        @functools.wraps(handler)
        async def run(self: Any, request: Any, ctx: Any) -> R:
            try:
                if in_thread:
                    return await asyncio.to_thread(handler, self, request, ctx)
                return handler(self, request, ctx)
            except ConnectError:
                raise
            except IrisRpcError as exc:
                raise ConnectError(Code(exc.code), exc.message) from None
            except Exception as exc:  # noqa: BLE001 - answered as `internal`, never fatal
                logger.exception("%s failed", method)
                raise ConnectError(Code.INTERNAL, f"{method} failed: {type(exc).__name__}: {exc}") from None

        return run

    return wrap


def _check_registration(request: Controller.RegisterEndpointRequest) -> None:
    endpoint_name_arg(request.name)
    task_id_arg(request.task_id)


class ControllerService:
    """`iris.cluster.ControllerService`: jobs, tasks, endpoints and logs."""

    def __init__(self, controller: EmbeddedController) -> None:
        self._controller = controller

    @rpc("LaunchJob")
    def launch_job(self, request: Controller.LaunchJobRequest, ctx: Any) -> Controller.LaunchJobResponse:
        return Controller.LaunchJobResponse(job_id=self._controller.launch_job(request))

    @rpc("GetJobState")
    def get_job_state(self, request: Controller.GetJobStateRequest, ctx: Any) -> Controller.GetJobStateResponse:
        return Controller.GetJobStateResponse(states=self._controller.job_states(job_ids_arg(request.job_ids)))

    @rpc("GetJobStatus")
    def get_job_status(self, request: Controller.GetJobStatusRequest, ctx: Any) -> Controller.GetJobStatusResponse:
        return self._controller.job_status(job_id_arg(request.job_id))

    @rpc("ListJobs")
    def list_jobs(self, request: Controller.ListJobsRequest, ctx: Any) -> Controller.ListJobsResponse:
        return self._controller.list_jobs(request.query)

    @rpc("TerminateJob")
    def terminate_job(self, request: Controller.TerminateJobRequest, ctx: Any) -> job_pb2.Empty:
        self._controller.terminate_job(job_id_arg(request.job_id))
        return job_pb2.Empty()

    @rpc("ListTasks")
    def list_tasks(self, request: Controller.ListTasksRequest, ctx: Any) -> Controller.ListTasksResponse:
        return Controller.ListTasksResponse(tasks=self._controller.list_tasks(job_id_arg(request.job_id)))

    @rpc("GetTaskStatus")
    def get_task_status(self, request: Controller.GetTaskStatusRequest, ctx: Any) -> Controller.GetTaskStatusResponse:
        return self._controller.task_status(task_id_arg(request.task_id).task.wire)

    @rpc("GetTaskLogs")
    def get_task_logs(self, request: Controller.GetTaskLogsRequest, ctx: Any) -> Controller.GetTaskLogsResponse:
        job_or_task_arg(request.id)
        return self._controller.task_logs(request)

    @rpc("ListWorkers")
    def list_workers(self, request: Controller.ListWorkersRequest, ctx: Any) -> Controller.ListWorkersResponse:
        return self._controller.list_workers(request.query)

    @rpc("RegisterEndpoint")
    def register_endpoint(
        self, request: Controller.RegisterEndpointRequest, ctx: Any
    ) -> Controller.RegisterEndpointResponse:
        # Old clients never renew through this surface, so it grants a long lease by default.
        _check_registration(request)
        return self._controller.register_endpoint(request, default_lease_s=LEGACY_LEASE_S)

    @rpc("UnregisterEndpoint")
    def unregister_endpoint(self, request: Controller.UnregisterEndpointRequest, ctx: Any) -> job_pb2.Empty:
        self._controller.unregister_endpoint(request.endpoint_id)
        return job_pb2.Empty()

    @rpc("ListEndpoints")
    def list_endpoints(self, request: Controller.ListEndpointsRequest, ctx: Any) -> Controller.ListEndpointsResponse:
        task_ids_arg(request.task_ids)
        return self._controller.list_endpoints(request)

    @rpc("GetAutoscalerStatus")
    def get_autoscaler_status(
        self, request: Controller.GetAutoscalerStatusRequest, ctx: Any
    ) -> Controller.GetAutoscalerStatusResponse:
        # The workers are fixed at start: there is no autoscaler, so no scale groups.
        return Controller.GetAutoscalerStatusResponse(status=vm_pb2.AutoscalerStatus())

    @rpc("GetProcessStatus")
    def get_process_status(self, request: job_pb2.GetProcessStatusRequest, ctx: Any) -> job_pb2.GetProcessStatusResponse:
        if request.target not in ("", "/system/process"):
            raise NotFound(f"no process {request.target!r} here: only /system/process (the controller)")
        return job_pb2.GetProcessStatusResponse(process_info=process_info())


class EndpointService:
    """`iris.cluster.EndpointService`: the leased endpoint registry (same messages)."""

    def __init__(self, controller: EmbeddedController) -> None:
        self._controller = controller

    @rpc("EndpointService.RegisterEndpoint")
    def register_endpoint(
        self, request: Controller.RegisterEndpointRequest, ctx: Any
    ) -> Controller.RegisterEndpointResponse:
        _check_registration(request)
        return self._controller.register_endpoint(request, default_lease_s=DEFAULT_LEASE_S)

    @rpc("EndpointService.UnregisterEndpoint")
    def unregister_endpoint(self, request: Controller.UnregisterEndpointRequest, ctx: Any) -> job_pb2.Empty:
        self._controller.unregister_endpoint(request.endpoint_id)
        return job_pb2.Empty()

    @rpc("EndpointService.ListEndpoints")
    def list_endpoints(self, request: Controller.ListEndpointsRequest, ctx: Any) -> Controller.ListEndpointsResponse:
        task_ids_arg(request.task_ids)
        return self._controller.list_endpoints(request)


class LogService:
    """`finelog.logging.LogService`: FetchLogs over the tasks' captured output."""

    def __init__(self, controller: EmbeddedController) -> None:
        self._controller = controller

    @rpc("FetchLogs", in_thread=True)
    def fetch_logs(
        self, request: finelog_logging_pb2.FetchLogsRequest, ctx: Any
    ) -> finelog_logging_pb2.FetchLogsResponse:
        return self._controller.fetch_logs(request)
