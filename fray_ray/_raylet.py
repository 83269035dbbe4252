"""`ray._raylet`: the names programs import from Ray's core extension module.

Ray's `_raylet` is its compiled core; programs reach into it mostly for `ObjectRef`,
`ObjectRefGenerator` (and its older name `StreamingObjectRefGenerator`),
`DynamicObjectRefGenerator`, the id types and a few errors. Those are here, as fray_ray's own;
the rest of `_raylet` (the core worker, GCS clients, serialization internals) has no
counterpart and is missing.
"""

from fray_ray._private.core.generators import DynamicObjectRefGenerator, ObjectRefGenerator
from fray_ray._private.core.object_ref import ObjectID, ObjectRef
from fray_ray._private.objects.unique_ids import (
    ActorClassID,
    ActorID,
    BaseID,
    ClusterID,
    FunctionID,
    JobID,
    NodeID,
    TaskID,
    UniqueID,
    WorkerID,
)
from fray_ray.exceptions import (
    ActorDiedError,
    GetTimeoutError,
    ObjectRefStreamEndOfStreamError,
    ObjectStoreFullError,
    OutOfDiskError,
    PendingCallsLimitExceeded,
    RayActorError,
    RayError,
    RaySystemError,
    RayTaskError,
    TaskCancelledError,
)
from fray_ray.util.placement_group import PlacementGroupID
from fray_ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

#: The name Ray used for ObjectRefGenerator before 2.9, still exported.
StreamingObjectRefGenerator = ObjectRefGenerator

__all__ = [
    "ActorClassID",
    "ActorDiedError",
    "ActorID",
    "BaseID",
    "ClusterID",
    "DynamicObjectRefGenerator",
    "FunctionID",
    "GetTimeoutError",
    "JobID",
    "NodeAffinitySchedulingStrategy",
    "NodeID",
    "ObjectID",
    "ObjectRef",
    "ObjectRefGenerator",
    "ObjectRefStreamEndOfStreamError",
    "ObjectStoreFullError",
    "OutOfDiskError",
    "PendingCallsLimitExceeded",
    "PlacementGroupID",
    "PlacementGroupSchedulingStrategy",
    "RayActorError",
    "RayError",
    "RaySystemError",
    "RayTaskError",
    "StreamingObjectRefGenerator",
    "TaskCancelledError",
    "TaskID",
    "UniqueID",
    "WorkerID",
]
