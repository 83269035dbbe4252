"""`ray.util.check_serialize`: `inspect_serializability`, which finds what cannot be pickled."""

from fray_ray.util._serialization import inspect_serializability

__all__ = ["inspect_serializability"]
