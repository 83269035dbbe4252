"""`ray.util.debug`: warn-once helpers (`log_once` and its switches).

>>> log_once("fray-ray-doctest-key"), log_once("fray-ray-doctest-key")
(True, False)
"""

from fray_ray.util._log_once import disable_log_once_globally, enable_periodic_logging, log_once

__all__ = ["disable_log_once_globally", "enable_periodic_logging", "log_once"]
