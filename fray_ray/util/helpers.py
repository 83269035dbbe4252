"""`ray.util.helpers`: `as_completed` and `map_unordered` over ObjectRefs."""

from fray_ray.util._completion import as_completed, map_unordered

__all__ = ["as_completed", "map_unordered"]
