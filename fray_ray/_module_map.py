"""Ray 2.60's core module paths and what fray_ray has for each: the module map.

Every public module path of Ray's core (`ray.*` outside Data, Train, Tune, Serve, RLlib and
DAGs) has one entry here, or falls under an entry that covers its subtree. `fray_ray.install()`
reads the map when an import of `ray.<path>` finds no fray_ray module, so the ImportError names
the reason and what to use instead; `scripts/module_map_table.py` renders it as the module
table in COMPATIBILITY.md.

>>> lookup("ray.job_submission.sdk").status
<ModuleStatus.NOT_PROVIDED: 'not provided'>
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["MODULE_MAP", "ModuleEntry", "ModuleStatus", "import_error_message", "lookup", "status_of"]


class ModuleStatus(enum.Enum):
    PROVIDED = "provided"  # imports, with Ray's public names
    PARTIAL = "provided in part"  # imports; `note` says what is missing
    STAND_IN = "stand-in"  # imports; calling anything in it raises NotImplementedError
    NOT_PROVIDED = "not provided"  # `import` raises ImportError with `note`


@dataclass(frozen=True)
class ModuleEntry:
    """One Ray module path (and, with `subtree`, every module below it)."""

    path: str
    status: ModuleStatus
    note: str = ""
    subtree: bool = False

    def __post_init__(self) -> None:
        if not self.path.startswith("ray"):
            raise ValueError(f"a module map entry names a ray module, got {self.path!r}")
        if self.status is not ModuleStatus.PROVIDED and not self.note:
            raise ValueError(f"{self.path}: say what is missing, or why it is not provided")


_P, _PART, _STAND, _NO = (ModuleStatus.PROVIDED, ModuleStatus.PARTIAL, ModuleStatus.STAND_IN,
                          ModuleStatus.NOT_PROVIDED)

_NO_CLIENT = "Ray Client; connect with ray.init('iris://host:port') (or FRAY_RAY_ADDRESS) instead"
_NO_DASHBOARD = "fray_ray runs no Ray dashboard; use the Iris dashboard, or `fray-ray status`, `fray-ray jobs` and `fray-ray logs`"
_REMOVED = "removed from Ray itself too; Ray's own module only raises"
_STANDIN_NOTE = (
    "imports (so code that only mentions it loads); calling anything in it raises NotImplementedError naming what to use instead"
)

MODULE_MAP: tuple[ModuleEntry, ...] = (
    ModuleEntry("ray", _PART, "missing: `LoggingConfig` (init(logging_config=...) warns instead), `Language`, "
                "`SCRIPT_MODE`/`WORKER_MODE`, `_config`, `client`/`ClientBuilder` (Ray Client), "
                "`java_function`/`java_actor_class`/`cpp_function` (cross-language), and the `data`, `autoscaler`, "
                "`internal`, `widgets`, `workflow` subpackages (see their rows)"),
    ModuleEntry("ray._raylet", _PART, "not public in Ray, but widely imported: `ObjectRef`, `ObjectID`, "
                "`ObjectRefGenerator` (and `StreamingObjectRefGenerator`), `DynamicObjectRefGenerator`, the id types, "
                "the scheduling strategies and common errors are there; the core worker, GCS clients and "
                "serialization internals are not"),
    ModuleEntry("ray._private", _PART, "Ray's internals (workers, GCS, raylet) have no counterpart; of the private "
                "names public training code uses, `services`, `state` and `accelerators` are provided (see \"Ray's "
                "private names in training code\" for the survey). For test helpers such as `wait_for_condition` and "
                "`SignalActor`, write them on the public API", subtree=True),
    ModuleEntry("ray._private.services", _PART, "only `get_node_ip_address()` (what RL launchers call); Ray's "
                "functions that start and stop its daemons have no counterpart"),
    ModuleEntry("ray._private.state", _PART, "the `state` accessor's and the module's resources, nodes and "
                "placement groups (`available_resources_per_node`, `total_resources_per_node`, "
                "`placement_group_table`, `cluster_resources`, `nodes`, `node_ids`, `current_node_id`, `timeline`); "
                "Ray's GCS tables of workers, profile events, jobs and actors are not"),
    ModuleEntry("ray._private.accelerators", _PART, "`TPUAcceleratorManager` and `NvidiaGPUAcceleratorManager` "
                "(with the `AcceleratorManager` base and the lookups by resource name); Ray's managers of AMD, "
                "Intel, Apple, Neuron, NPU, HPU and other devices describe hardware Iris does not schedule"),
    ModuleEntry("ray._private.accelerators.accelerator", _P),
    ModuleEntry("ray._private.accelerators.tpu", _P, "the slice as the host's environment describes it "
                "(`TPU_NAME`, `TPU_WORKER_ID`, `TPU_ACCELERATOR_TYPE`, `TPU_TOPOLOGY`), which on Iris the "
                "driver supplies to a process it places on a TPU host whose worker does not set them (docs/tpu.md); "
                "Ray also asks a GCE VM's metadata server, which fray_ray does not; the old `_get_current_node_tpu_pod_type` and "
                "`_get_current_node_tpu_worker_id` spellings work too"),
    ModuleEntry("ray._private.accelerators.nvidia_gpu", _PART, "the GPU count and visible devices; "
                "`get_current_node_accelerator_type()` is None (Ray reads the model from the NVIDIA driver)"),
    ModuleEntry("ray.actor", _P),
    ModuleEntry("ray.autoscaler", _NO, "fray_ray has no Ray autoscaler: Iris scale groups add and remove workers; "
                "`request_resources` has no counterpart (work that does not fit waits in the driver)", subtree=True),
    ModuleEntry("ray.client_builder", _NO, _NO_CLIENT),
    ModuleEntry("ray.cloudpickle", _P, "the `cloudpickle` package itself (Ray vendors a copy)", subtree=True),
    ModuleEntry("ray.cluster_utils", _PART, "`Cluster` runs nodes as simulated hosts of one embedded cluster (see "
                "\"Modules, ray.cluster_utils and init(address='auto')\"); its nodes are `ClusterNode` values, "
                "not Ray's `Node` process objects "
                "(no `kill_raylet`, `all_processes`); `AutoscalingCluster` raises NotImplementedError"),
    ModuleEntry("ray.core", _NO, "Ray's generated protobuf messages for its GCS and raylet services; fray_ray "
                "speaks Iris's protocol instead", subtree=True),
    ModuleEntry("ray.cross_language", _NO, "Java and C++ tasks and actors are not supported: fray_ray runs Python only"),
    ModuleEntry("ray.dashboard", _NO, _NO_DASHBOARD, subtree=True),
    ModuleEntry("ray.exceptions", _P),
    ModuleEntry("ray.experimental", _PART, "the package imports, and of its modules only `ray.experimental.queue`, `tqdm_ray` and `state`; "
                "Ray's experimental APIs (compiled graphs, channels, collectives, RDT tensor transport, sandboxes, "
                "internal KV, object locations, dynamic resources, shuffle) have no counterpart", subtree=True),
    ModuleEntry("ray.experimental.queue", _P, "Ray's old path of `ray.util.queue` (`Queue`, `Empty`, `Full`)"),
    ModuleEntry("ray.experimental.tqdm_ray", _P, "`tqdm` and `safe_print`; the driver draws each bar as "
                "one line (redrawn in place on a terminal) rather than through the real tqdm"),
    ModuleEntry("ray.experimental.state", _P, "an empty package, as Ray's is: its modules below are Ray's old paths"),
    ModuleEntry("ray.experimental.state.api", _P, "Ray's old path of `ray.util.state.api`, with its warning"),
    ModuleEntry("ray.experimental.state.common", _P, "Ray's old path of `ray.util.state.common`, with its warning"),
    ModuleEntry("ray.experimental.state.exception", _P, "Ray's old path of `ray.util.state.exception`, with its warning"),
    ModuleEntry("ray.experimental.state.custom_types", _NO, "Ray's type aliases of its internal protobuf enums "
                "(`ray._private.custom_types`); fray_ray's state rows use plain strings"),
    ModuleEntry("ray.experimental.state.state_cli", _NO, "Ray's `ray list`/`ray summary` command-line code; use "
                "`fray-ray list` and `fray-ray summary`"),
    ModuleEntry("ray.experimental.state.state_manager", _NO, "the client of Ray's dashboard state service; "
                "fray_ray's state API reads the session directly"),
    ModuleEntry("ray.experimental.state.util", _NO, "Ray's internal helpers of the state CLI (type conversions, "
                "usage tags)"),
    ModuleEntry("ray.experimental.multiprocessing", _NO, "use `ray.util.ActorPool` or remote functions with "
                "`ray.util.map_unordered`", subtree=True),
    ModuleEntry("ray.internal", _NO, "Ray's internal helpers (`free`, `memory_summary`): objects are freed when "
                "their last ObjectRef goes", subtree=True),
    ModuleEntry("ray.job_config", _NO, "pass `runtime_env=`, `namespace=` and the rest to `ray.init()` directly; "
                "`JobConfig`'s Java code search path and metadata have no counterpart"),
    ModuleEntry("ray.job_submission", _NO, "submit drivers with `fray-ray submit --address iris://host:port "
                "script.py`, list them with `fray-ray jobs`, follow them with `fray-ray logs -f JOB`, stop them with "
                "`fray-ray stop JOB`", subtree=True),
    ModuleEntry("ray.remote_function", _P),
    ModuleEntry("ray.runtime_context", _P),
    ModuleEntry("ray.runtime_env", _P, subtree=True),
    ModuleEntry("ray.scripts", _NO, "the `ray` command line; use the `fray-ray` command (`start`, `run`, "
                "`submit`, `jobs`, `logs`, `stop`, `status`)", subtree=True),
    ModuleEntry("ray.types", _P),
    ModuleEntry("ray.util", _P, "the helpers Ray exports there; its stand-in submodules are listed below"),
    ModuleEntry("ray.util.accelerators", _P, subtree=True),
    ModuleEntry("ray.util.actor_group", _NO, "deprecated in Ray; keep a list of actor handles, or use "
                "`ray.util.ActorPool`"),
    ModuleEntry("ray.util.actor_pool", _P),
    ModuleEntry("ray.util.annotations", _P),
    ModuleEntry("ray.util.check_open_ports", _NO, "checks the ports of Ray's daemons; fray_ray's ports are "
                "loopback by default and authenticated (see SECURITY.md)"),
    ModuleEntry("ray.util.check_serialize", _P),
    ModuleEntry("ray.util.client", _STAND, _NO_CLIENT + "; " + _STANDIN_NOTE, subtree=True),
    ModuleEntry("ray.util.client_connect", _STAND, _NO_CLIENT + "; " + _STANDIN_NOTE),
    ModuleEntry("ray.util.collective", _STAND, "use torch.distributed or jax.distributed inside the actors; "
                + _STANDIN_NOTE, subtree=True),
    ModuleEntry("ray.util.common", _NO, "Ray's internal helpers for its own modules"),
    ModuleEntry("ray.util.dask", _STAND, "run Dask's own scheduler; " + _STANDIN_NOTE, subtree=True),
    ModuleEntry("ray.util.debug", _PART, "`log_once`, `disable_log_once_globally`, `enable_periodic_logging`; "
                "missing: `reset_log_once` and the memory-leak helpers"),
    ModuleEntry("ray.util.debugpy", _STAND, "in local mode (`init(local_mode=True)`) tasks run in the driver: attach "
                "debugpy there; " + _STANDIN_NOTE),
    ModuleEntry("ray.util.helpers", _P),
    ModuleEntry("ray.util.horovod", _NO, _REMOVED),
    ModuleEntry("ray.util.iter", _STAND, "use `ray.util.as_completed` or `map_unordered`; " + _STANDIN_NOTE),
    ModuleEntry("ray.util.iter_metrics", _NO, "belongs to `ray.util.iter`, which is a stand-in"),
    ModuleEntry("ray.util.joblib", _P, "`register_ray()` and `ray_backend.RayBackend` (joblib must be installed, "
                "as for Ray); Ray's caching of repeated large arguments in the object store is not done",
                subtree=True),
    ModuleEntry("ray.util.lightgbm", _NO, _REMOVED),
    ModuleEntry("ray.util.metrics", _P, "`Counter`, `Gauge`, `Histogram` (recorded in tasks and actors, merged "
                "in the driver, served as Prometheus text)"),
    ModuleEntry("ray.util.multiprocessing", _P, "`Pool` on actors, with Ray's behaviour (see the module's "
                "docstring), `TimeoutError`, `JoinableQueue`"),
    ModuleEntry("ray.util.multiprocessing.pool", _PART, "`Pool`, `AsyncResult`, the `imap` iterators, `PoolActor`, "
                "`PoolTaskError`; missing: Ray's internal helpers (`ResultThread`, `RayBatchedCalls`, "
                "`ray_put_if_needed`, ...)"),
    ModuleEntry("ray.util.placement_group", _P),
    ModuleEntry("ray.util.queue", _P),
    ModuleEntry("ray.util.rpdb", _STAND, "in local mode (`init(local_mode=True)`) tasks run in the driver: use "
                "`breakpoint()`; " + _STANDIN_NOTE),
    ModuleEntry("ray.util.scheduling_strategies", _P),
    ModuleEntry("ray.util.serialization", _PART, "`register_serializer`, `deregister_serializer`; missing: "
                "`StandaloneSerializationContext`"),
    ModuleEntry("ray.util.serialization_addons", _NO, "Ray's internal registration of extra serializers; "
                "use `ray.util.register_serializer`"),
    ModuleEntry("ray.util.sgd", _NO, _REMOVED),
    ModuleEntry("ray.util.spark", _STAND, "run Spark's own cluster manager; " + _STANDIN_NOTE, subtree=True),
    ModuleEntry("ray.util.state", _PART, "`list_actors`, `list_tasks`, `list_objects`, `list_nodes`, `list_jobs`, "
                "`list_placement_groups`, `get_actor`, `get_task`, `summarize_tasks`, `summarize_actors` (tasks, "
                "actors and objects of the current session; nodes and jobs of the cluster); the other functions "
                "raise NotImplementedError"),
    ModuleEntry("ray.util.state.api", _PART, "the functions listed for `ray.util.state`; missing: `StateApiClient`"),
    ModuleEntry("ray.util.state.common", _PART, "the records (`ActorState`, `TaskState`, `ObjectState`, `NodeState`, "
                "`JobState`, `PlacementGroupState`), `state_column`, `StateSchema`, `DEFAULT_LIMIT`, "
                "`DEFAULT_RPC_TIMEOUT`; missing: the option and response classes of Ray's API server"),
    ModuleEntry("ray.util.state.exception", _P),
    ModuleEntry("ray.util.state.state_cli", _NO, "Ray's `ray list`/`ray summary` command line; call "
                "`ray.util.state`'s functions"),
    ModuleEntry("ray.util.state.state_manager", _NO, "Ray's dashboard-side data sources; fray_ray reads the driver's "
                "records directly"),
    ModuleEntry("ray.util.state.util", _NO, "Ray's internal helpers of the state API"),
    ModuleEntry("ray.util.timer", _NO, "Ray's internal timing helper; use `time.perf_counter`"),
    ModuleEntry("ray.util.tpu", _PART, "`SlicePlacementGroup`, `slice_placement_group`, `run_on_slice` and the "
                "topology helpers; missing: subslices (`SubslicePlacementGroup`, `subslice_placement_group`), "
                "`reserve_tpu_slice`, `get_num_tpu_slices`, `get_num_ready_tpu_slices`, `get_tpu_nodes_for_slice`, "
                "`get_tpu_slice_name_from_node`, `get_tpu_num_slices_for_workers`, `get_tpu_resource_per_chip`"),
    ModuleEntry("ray.util.tracing", _NO, "OpenTelemetry tracing of Ray tasks has no counterpart; instrument the "
                "task code itself", subtree=True),
    ModuleEntry("ray.util.xgboost", _NO, _REMOVED),
    ModuleEntry("ray.widgets", _NO, "Jupyter widgets for Ray's own objects; nothing to render", subtree=True),
    ModuleEntry("ray.workflow", _NO, "Ray Workflows was removed from Ray after 2.47 (Ray 2.60's module only raises)"),
)
"""The map, one entry per Ray module path or subtree."""

_BY_PATH = {entry.path: entry for entry in MODULE_MAP}


def lookup(path: str) -> ModuleEntry | None:
    """The entry for Ray module `path`: its own, else the nearest ancestor covering its subtree."""
    entry = _BY_PATH.get(path)
    if entry is not None:
        return entry
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        ancestor = _BY_PATH.get(".".join(parts[:cut]))
        if ancestor is not None and ancestor.subtree:
            return ancestor
    return None


def status_of(path: str) -> ModuleStatus | None:
    """What fray_ray has for Ray module `path`: its entry's status; a module below an entry
    that is provided only in part is not provided (that entry's note says what is there)."""
    entry = lookup(path)
    if entry is None:
        return None
    if entry.path != path and entry.status is ModuleStatus.PARTIAL:
        return ModuleStatus.NOT_PROVIDED
    return entry.status


def import_error_message(path: str) -> str:
    """What `import <path>` says when fray_ray has no such module."""
    entry = lookup(path)
    if entry is not None and entry.status is ModuleStatus.NOT_PROVIDED:
        return f"No module named {path!r}: fray_ray does not provide {entry.path}: {entry.note}."
    if entry is not None:  # a module below a provided one that fray_ray does not have
        return (f"No module named {path!r}: fray_ray provides {entry.path} ({entry.status.value}) but not "
                f"{path}" + (f"; {entry.note}." if entry.note else "."))
    return (f"No module named {path!r}: fray_ray provides Ray Core's API (ray, ray.util, ray.actor, "
            f"ray.exceptions, ...), not {path}. Run this program on Ray itself if it needs {path}.")
