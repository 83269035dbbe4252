"""Building the driver runtime for init(): which cluster, which client, how big.

- local_mode: Fray's LocalClient; executors and actors are threads of this process, on one
  host sized from this machine or from num_cpus/num_gpus/resources.
- no address: an embedded Iris-compatible cluster started in this process: its one simulated
  host is sized from this machine or from num_cpus/num_gpus/resources (custom resources become
  `ray-resource:<name>` worker attributes), or `cluster_config` lays out its hosts.
- an address: a running Iris controller (ours or a real one). Its workers are the session's
  capacity; num_cpus/num_gpus/resources raise, as Ray's do for an existing cluster.
- inside an Iris task: the task's controller, with the task's job as parent.

It is the top of the runtime: the one module that imports both the driver's package and the
worker's, to hand the driver the worker's entry points (`WORKER_ENTRY_POINTS`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fray_ray._private.driver.dashboard_feed import DashboardSettings
from fray_ray._private.driver.launcher import WorkerEntryPoints
from fray_ray._private.driver.runtime import DriverRuntime
from fray_ray._private.objects.object_store import SYSTEM_CONFIG_KEYS, ObjectStoreConfig
from fray_ray._private.observe.output_folding import FoldSettings
from fray_ray._private.workers.actor_host import CheckedActorHost, RayActorHost
from fray_ray._private.workers.executor import executor_main, start_executor

if TYPE_CHECKING:
    from fray_ray.fray.iris_backend import FrayIrisClient

logger = logging.getLogger(__name__)

#: What the driver's launcher starts: this module sits above the driver and worker packages,
#: which never import each other, so it is where the two meet.
WORKER_ENTRY_POINTS = WorkerEntryPoints(
    executor=executor_main, checked_executor=start_executor, actor_host=RayActorHost, checked_actor_host=CheckedActorHost
)


def _check_sizes(num_cpus: float | None, num_gpus: float | None, resources: Mapping[str, float] | None) -> None:
    """Ray's checks of init's sizes: CPU and GPU have arguments of their own."""
    for key in ("CPU", "GPU"):
        if resources and key in resources:
            raise ValueError(f"Use the '{key.lower()}s' argument instead of resources['{key}'] (num_cpus/num_gpus).")
    for name, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus), *(resources or {}).items()):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            raise ValueError(f"{name} must be a non-negative number, got {value!r}")


def _existing_cluster_sizes(num_cpus: float | None, num_gpus: float | None, resources: Mapping[str, float] | None) -> None:
    """Ray 2.60 refuses sizes when connecting to a cluster that already has its nodes (its words)."""
    if num_cpus is not None or num_gpus is not None:
        raise ValueError("When connecting to an existing cluster, num_cpus and num_gpus must not be provided.")
    if resources is not None:
        raise ValueError("When connecting to an existing cluster, resources must not be provided.")


def default_object_store_memory() -> int:
    """30% of the memory this process may use (Ray's default share)."""
    return int(_machine_memory() * 0.3)


def _machine_memory() -> int:
    """Physical memory, or the memory limit of this process's cgroup when that is lower."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 8 << 30
    limit = _cgroup_memory_limit()
    return min(physical, limit) if limit else physical


def _cgroup_memory_limit() -> int | None:
    """The memory limit of our cgroup (v2 `memory.max`, v1 `memory.limit_in_bytes`), if any."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidates.append(f"/sys/fs/cgroup{path}/memory.max")
            candidates.append(f"/sys/fs/cgroup/unified{path}/memory.max")
        elif "memory" in controllers.split(","):
            candidates.append(f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
    for candidate in candidates:
        try:
            with open(candidate) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):
            return int(text)
    return None


def start_driver(
    *,
    address: str | None,
    num_cpus: float | None,
    num_gpus: float | None,
    resources: Mapping[str, float] | None,
    namespace: str,
    runtime_env: Mapping[str, Any] | None,
    local_mode: bool,
    log_to_driver: bool,
    cluster_config: Any = None,
    object_store_memory: Any = None,
    system_config: Mapping[str, Any] | None = None,
    node_ip_address: str | None = None,
    temp_dir: str | None = None,
    token: str | None = None,
    include_dashboard: bool | None = None,
    dashboard_host: str | None = None,
    dashboard_port: int | None = None,
) -> DriverRuntime:
    from fray_ray._private.core.runtime_env import parse_runtime_env

    _check_token(token)
    _check_dashboard(include_dashboard, dashboard_host, dashboard_port)
    output_folding = FoldSettings.from_environment()  # malformed RAY_DEDUP_LOGS_* fail before anything starts

    job_env = parse_runtime_env(runtime_env, job=True)  # a bad runtime_env fails before anything starts
    session_name = "session-" + os.urandom(4).hex()
    if system_config is not None and not isinstance(system_config, Mapping):
        raise TypeError(f"_system_config must be a dict, got {type(system_config).__name__}")
    object_store = ObjectStoreConfig.from_init(object_store_memory, system_config, default_object_store_memory())
    ignored = sorted(set(system_config or ()) - set(SYSTEM_CONFIG_KEYS))
    if ignored:
        logger.warning("fray_ray does not use these _system_config keys: %s", ", ".join(map(str, ignored)))
    _check_sizes(num_cpus, num_gpus, resources)
    if local_mode and token is not None:
        raise ValueError(_TOKEN_NEEDS_ADDRESS + "; local_mode runs everything in this process")
    if local_mode and (include_dashboard or dashboard_host is not None or dashboard_port is not None):
        logger.warning("local_mode runs no cluster, so there is no dashboard: include_dashboard, dashboard_host and "
                       "dashboard_port are ignored")
    if local_mode:
        from fray_ray._private.driver.nodes import resource_attributes

        if job_env.setup_hook is not None:  # the workers are threads of this one process: run it here
            job_env.setup_hook.load()()
        from fray_ray.fray import this_machine
        from fray_ray.fray.local_backend import LocalClient

        host = this_machine(cpu=num_cpus, gpus=int(num_gpus or 0), attributes=resource_attributes(resources))
        runtime = DriverRuntime(
            LocalClient(max_threads=256, host=host),
            WORKER_ENTRY_POINTS,
            host_id=host.host_id,
            namespace=namespace,
            session_name=session_name,
            log_to_driver=log_to_driver,
            address_info=_address_info("local_mode", session_name),
            warm_executors=0,
            object_store=object_store,
            runtime_env=job_env,
            output_folding=output_folding,
        )
        try:
            return runtime.start()
        except BaseException:
            runtime.shutdown()
            raise

    from fray_ray.fray import FrayIrisClient
    from fray_ray.fray.job_info import get_job_info

    address = _resolve_address(address, temp_dir)
    if address == _RUN_CLUSTER:
        # "auto" reaches a cluster that exists for the script, so sizes are refused as Ray
        # refuses them for any existing cluster; the run's layout sizes it.
        _existing_cluster_sizes(num_cpus, num_gpus, resources)
        address = None
    owned: list[Any] = []
    host_id: str | None = None  # the cluster host this driver runs on, if it is one of them
    bind, advertise = session_hosts(node_ip_address)
    if token is not None and address in (None, "task"):
        raise ValueError(
            _TOKEN_NEEDS_ADDRESS
            + ("; inside an Iris task init() uses the task's own controller and token" if address == "task"
               else "; without one init() starts an embedded cluster with a token of its own")
        )
    if address is not None and (dashboard_host is not None or dashboard_port is not None):
        logger.warning("dashboard_host and dashboard_port apply to a cluster init() starts; the dashboard of the "
                       "cluster at %s is served at its controller's address", address)
    cluster_token: str | None = None
    if address is None:
        cluster = _start_embedded_cluster(
            num_cpus, num_gpus, resources, cluster_config,
            dashboard=include_dashboard is not False, dashboard_host=dashboard_host, dashboard_port=dashboard_port,
        )
        owned.append(cluster)
        client = FrayIrisClient(cluster.address, token=cluster.token)
        workers = cluster.config.effective_workers()
        host_id = workers[0].worker_id if len(workers) == 1 else None  # one host is this machine
        address = cluster.address
        cluster_token = cluster.token
        if include_dashboard and cluster.dashboard_url:
            # Asked for: say where it is, as Ray does. The link carries the token: it logs in.
            print(f"fray_ray: the dashboard is at {cluster.dashboard_url}", file=sys.stderr, flush=True)
    elif address == "task":
        _existing_cluster_sizes(num_cpus, num_gpus, resources)
        client = FrayIrisClient.from_job_info(get_job_info())
        host_id = get_job_info().worker_id
        address = client_address(client)
        cluster_token = get_job_info().token
    else:
        _existing_cluster_sizes(num_cpus, num_gpus, resources)
        if token is None:
            token = os.environ.get("FRAY_RAY_TOKEN") or os.environ.get("IRIS_AUTH_TOKEN") or _known_token(address, temp_dir)
        client = _connect(address, token)
        _warn_if_unreachable(client_address(client), advertise)
        cluster_token = token
    dashboard = None
    if include_dashboard is not False:
        dashboard = DashboardSettings(cluster_token, bind, advertise, session_job=bool(include_dashboard))
    address_info = _address_info(address, session_name, advertise)
    if include_dashboard is not False:
        address_info["webui_url"] = _host_port(address)
    runtime = DriverRuntime(
        client,
        WORKER_ENTRY_POINTS,
        host_id=host_id,
        namespace=namespace,
        session_name=session_name,
        log_to_driver=log_to_driver,
        host=bind,
        advertise_host=advertise,
        node_ip=advertise,
        owned=owned,
        address_info=address_info,
        object_store=object_store,
        runtime_env=job_env,
        output_folding=output_folding,
        dashboard=dashboard,
    )
    try:
        return runtime.start()
    except BaseException:
        runtime.shutdown()
        raise


_TOKEN_NEEDS_ADDRESS = "token= is the bearer token of a running cluster's controller, so it needs a cluster address"


def _check_dashboard(include: object, host: object, port: object) -> None:
    """Ray's dashboard options, checked before anything starts."""
    if include is not None and not isinstance(include, bool):
        raise TypeError(f"include_dashboard must be True, False or None, got {include!r}")
    if host is not None and (not isinstance(host, str) or not host):
        raise TypeError(f"dashboard_host must be an address such as '127.0.0.1' or '0.0.0.0', got {host!r}")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535):
        raise ValueError(f"dashboard_port must be a port number in 0..65535, got {port!r}")


def _host_port(address: str) -> str:
    """`host:port` of a controller URL: what Ray's `webui_url` and `dashboard_url` look like."""
    import urllib.parse

    parts = urllib.parse.urlsplit(address if "://" in address else f"http://{address}")
    return parts.netloc


def _check_token(token: object) -> None:
    if token is not None and not isinstance(token, str):
        raise TypeError(f"token must be a string (the cluster's bearer token), got {type(token).__name__}")
    if token is not None and not token.strip():
        raise ValueError("token must not be empty: give the cluster's bearer token, or leave token unset")


def _connect(address: str, token: str | None) -> FrayIrisClient:
    """A client of the controller at `address`; ConnectionError, saying how to give the
    token, when the controller refuses the credentials."""
    from fray_ray.fray import CredentialsRejected, FrayIrisClient

    try:
        return FrayIrisClient(address, token=token)
    except CredentialsRejected as exc:
        given = "the token given was refused" if token else "no token was given"
        raise ConnectionError(
            f"The cluster at {exc.address or address} refused the connection: {given} ({exc.reason}). "
            "Pass the cluster's token: fray_ray.init(address, token=...), or set FRAY_RAY_TOKEN "
            "(`fray-ray start` prints the address and token of the cluster it starts)."
        ) from exc


def _known_token(address: str, temp_dir: str | None) -> str | None:
    """The token of a cluster this process started, or of the one `fray-ray start` recorded."""
    from fray_ray._private.driver import cluster_address

    return cluster_address.token_for(address, temp_dir=temp_dir)


def client_address(client: FrayIrisClient) -> str:
    return client.address


def _recorded_cluster(temp_dir: str | None) -> str:
    """The address of the cluster `fray-ray start` recorded last (Ray's address file)."""
    from fray_ray._private.driver import cluster_address

    record = cluster_address.read(temp_dir=temp_dir)
    if record is None:
        raise ConnectionError(
            "Could not find any running Ray instance. Please specify the one to connect to by setting "
            "RAY_ADDRESS (or FRAY_RAY_ADDRESS), or start a cluster with `fray-ray start`: init(address='auto') "
            f"connects to the last one started on this machine (recorded in {cluster_address.record_dir(temp_dir)})."
        )
    return record.address


#: `_resolve_address`'s answer for "auto" in a `fray-ray run`: the run's own (embedded) cluster.
_RUN_CLUSTER = "run"


def _resolve_address(address: str | None, temp_dir: str | None = None) -> str | None:
    """None: start an embedded cluster; "task": the surrounding Iris task's; "run": the cluster
    of a `fray-ray run` (embedded, sized by the run); else a URL.

    `"auto"`: RAY_ADDRESS/FRAY_RAY_ADDRESS, else the surrounding Iris task's controller, else
    the run's cluster under `fray-ray run`, else the cluster `fray-ray start` recorded last;
    ConnectionError when there is none."""
    from fray_ray.fray.job_info import get_job_info

    if address == "local":
        return None
    if address in (None, "auto"):
        env_address = os.environ.get("FRAY_RAY_ADDRESS") or os.environ.get("RAY_ADDRESS")
        if env_address and env_address not in ("local", "auto"):
            return env_address
        if get_job_info() is not None and get_job_info().controller_address:
            return "task"
        if address == "auto":
            from fray_ray._private.driver import cluster_address

            return _RUN_CLUSTER if cluster_address.in_run() else _recorded_cluster(temp_dir)
        return None
    if address.startswith("ray://"):
        raise ValueError(f"Ray Client addresses ({address}) are not supported; give an Iris controller address (iris://host:port)")
    return address


def _start_embedded_cluster(
    num_cpus: float | None,
    num_gpus: float | None,
    resources: Mapping[str, float] | None,
    cluster_config: Any,
    *,
    dashboard: bool = True,
    dashboard_host: str | None = None,
    dashboard_port: int | None = None,
) -> Any:
    """Start the embedded cluster. Its dashboard is served at the controller's address, so
    `dashboard_host`/`dashboard_port` (Ray's names) choose where the controller listens."""
    import json

    from fray_ray.cluster import ClusterConfig, EmbeddedCluster, config_from_mapping, load_config_file

    config = cluster_config
    if config is None and os.environ.get("FRAY_RAY_CLUSTER_CONFIG"):
        config = os.environ["FRAY_RAY_CLUSTER_CONFIG"]  # a layout file, or the layout as JSON
    if isinstance(config, str):
        config = config_from_mapping(json.loads(config)) if config.lstrip().startswith("{") else load_config_file(config)
    if config is None:
        config = ClusterConfig()
    if not isinstance(config, ClusterConfig):
        raise TypeError(f"cluster_config must be a ClusterConfig or a path to a JSON/TOML layout, got {type(config).__name__}")
    sized = num_cpus is not None or num_gpus is not None or resources is not None
    if config.workers and sized:
        raise ValueError(
            "cluster_config lays out the cluster's hosts, so num_cpus, num_gpus and resources must not be provided "
            "with it: give each host's size in cluster_config (cpu_worker(cpu=...), gpu_host(...), attributes "
            "{'ray-resource:<name>': amount} for custom resources)"
        )
    if not config.workers:  # one host, this machine, sized by init's arguments
        config = dataclasses.replace(config, workers=(_sized_host(num_cpus, num_gpus, resources),))
    listen = {"host": dashboard_host, "port": dashboard_port}
    config = dataclasses.replace(config, dashboard=dashboard, **{k: v for k, v in listen.items() if v is not None})
    cluster = EmbeddedCluster(config)
    cluster.start()
    _say_if_simulated(cluster.config.effective_workers())
    return cluster


def _say_if_simulated(workers: Sequence[Any]) -> None:
    """One line when some hosts only stand in for accelerator machines: the CPUs and memory
    they declare (and Ray's APIs report) are not this machine's."""
    from fray_ray.cluster._config import ATTR_SIMULATED

    simulated = [w for w in workers if str(w.attributes.get(ATTR_SIMULATED, "")).lower() == "true"]
    if not simulated:
        return
    def cpu(hosts: Sequence[Any]) -> str:
        return f"{sum(w.cpu_millicores for w in hosts) / 1000:g} CPUs"

    def memory(hosts: Sequence[Any]) -> str:
        return f"{sum(w.memory_bytes for w in hosts) / (1 << 30):.0f} GiB"

    print(f"fray_ray: {len(simulated)} of the cluster's {len(workers)} hosts are simulated on this machine (label "
          f"simulated=true): of the {cpu(workers)} and {memory(workers)} of memory it reports, {cpu(simulated)} and "
          f"{memory(simulated)} are theirs, declared, not real; every task runs on this machine's {os.cpu_count()} cores",
          file=sys.stderr, flush=True)


def _sized_host(num_cpus: float | None, num_gpus: float | None, resources: Mapping[str, float] | None) -> Any:
    """The embedded cluster's one host (this machine): its cores and memory, or init's sizes;
    GPUs make it a GPU host, custom resources become its `ray-resource:` attributes."""
    from fray_ray._private.driver.nodes import resource_attributes
    from fray_ray.cluster import cpu_worker, gpu_host

    host = cpu_worker("cpu-0", cpu=num_cpus, attributes=resource_attributes(resources))
    if not num_gpus:
        return host
    return gpu_host("auto", max(1, int(num_gpus)), worker_id="gpu-0", cpu=host.cpu_millicores / 1000,
                    memory=host.memory_bytes, disk=host.disk_bytes, attributes=resource_attributes(resources))


#: The address of this machine that workers on other hosts connect to (Ray's `_node_ip_address`).
NODE_IP_ENV = "FRAY_RAY_NODE_IP_ADDRESS"
#: What the session service binds when an address is given (default: that address).
BIND_HOST_ENV = "FRAY_RAY_BIND_HOST"


def session_hosts(node_ip_address: str | None) -> tuple[str, str]:
    """(bind, advertise) for the driver's session service.

    An explicit address (`init(_node_ip_address=...)`, else FRAY_RAY_NODE_IP_ADDRESS) is
    advertised and bound (FRAY_RAY_BIND_HOST overrides the bind, e.g. 0.0.0.0 behind NAT);
    inside an Iris task, IRIS_ADVERTISE_HOST and IRIS_BIND_HOST; otherwise loopback only.
    """
    from fray_ray.fray.job_info import get_job_info

    explicit = node_ip_address or os.environ.get(NODE_IP_ENV)
    if explicit:
        return os.environ.get(BIND_HOST_ENV) or explicit, explicit
    info = get_job_info()
    if info is not None:
        return os.environ.get("IRIS_BIND_HOST") or "0.0.0.0", info.advertise_host
    return os.environ.get(BIND_HOST_ENV) or "127.0.0.1", "127.0.0.1"


def _warn_if_unreachable(controller: str, advertise: str) -> None:
    """A remote controller's workers cannot reach a driver that advertises loopback."""
    import urllib.parse

    host = urllib.parse.urlsplit(controller).hostname or ""
    if advertise.startswith("127.") and host and not (host.startswith("127.") or host in ("localhost", "::1")):
        logger.warning(
            "the controller at %s is on another host, but this driver's session service is reachable at %s only; "
            "workers there cannot connect back. Pass init(_node_ip_address=<this machine's address>) or set %s.",
            controller, advertise, NODE_IP_ENV,
        )


def _address_info(address: str, session_name: str, node_ip: str = "127.0.0.1") -> dict[str, Any]:
    return {
        "node_ip_address": node_ip,
        "raylet_ip_address": node_ip,
        "redis_address": None,
        "object_store_address": "",
        "raylet_socket_name": "",
        "webui_url": "",
        "session_dir": os.path.join("/tmp", "fray_ray", session_name),
        "metrics_export_port": 0,
        "gcs_address": address,
        "address": address,
        "dashboard_agent_listen_port": 0,
        "node_id": "",
    }
