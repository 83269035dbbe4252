"""`ray.ray_constants`: the public constants of Ray 2.60 that mean something on fray_ray.

Values are Ray's. Constants about Ray's own daemons (GCS and dashboard ports, Redis, raylet
process names, dashboard profiling) are left out: fray_ray has none of those processes.
`env_integer`/`env_float`/`env_bool`/`env_set_by_user` read settings from the environment the
way Ray's do.

>>> from fray_ray import ray_constants
>>> ray_constants.DEFAULT_TASK_MAX_RETRIES
3
"""

from __future__ import annotations

import logging
import os
from typing import Final

from fray_ray._private.core import code_size

logger = logging.getLogger(__name__)

__all__ = [
    "CALLER_MEMORY_USAGE_PER_OBJECT_REF",
    "DEFAULT_ACTOR_CREATION_CPU_SIMPLE",
    "DEFAULT_ACTOR_CREATION_CPU_SPECIFIED",
    "DEFAULT_ACTOR_METHOD_CPU_SIMPLE",
    "DEFAULT_ACTOR_METHOD_CPU_SPECIFIED",
    "DEFAULT_ACTOR_METHOD_NUM_RETURN_VALS",
    "DEFAULT_MAX_CONCURRENCY_THREADED",
    "DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES",
    "DEFAULT_OBJECT_STORE_MEMORY_PROPORTION",
    "DEFAULT_RESOURCES",
    "DEFAULT_RUNTIME_ENV_TIMEOUT_SECONDS",
    "DEFAULT_TASK_MAX_RETRIES",
    "FUNCTION_SIZE_ERROR_THRESHOLD",
    "FUNCTION_SIZE_WARN_THRESHOLD",
    "GPU",
    "HPU",
    "ID_SIZE",
    "LOGGER_FORMAT",
    "LOGGER_FORMAT_HELP",
    "LOGGER_LEVEL",
    "LOGGER_LEVEL_CHOICES",
    "LOGGER_LEVEL_HELP",
    "MAX_INT64_VALUE",
    "MAX_RESOURCE_QUANTITY",
    "MIN_RESOURCE_GRANULARITY",
    "NEURON_CORES",
    "NPU",
    "OBJECT_STORE_MINIMUM_MEMORY_BYTES",
    "RAY_ADDRESS_ENVIRONMENT_VARIABLE",
    "RAY_DEFAULT_LABEL_KEYS_PREFIX",
    "RAY_NAMESPACE_ENVIRONMENT_VARIABLE",
    "RAY_RUNTIME_ENV_DEFAULT_EXCLUDES",
    "TPU",
    "env_bool",
    "env_float",
    "env_integer",
    "env_set_by_user",
]


def env_integer(key: str, default: int) -> int:
    """The integer in environment variable `key`, else `default` (with a warning when it is
    set but not an integer, as Ray does)."""
    if key in os.environ:
        value = os.environ[key]
        try:
            return int(value)
        except ValueError:
            logger.warning("Found %s in environment, but value must be an integer. Got: %s. Returning provided "
                           "default %s.", key, value, default)
    return default


def env_float(key: str, default: float) -> float:
    """The number in environment variable `key`, else `default` (with a warning when it is set
    but not a number, as Ray does)."""
    if key in os.environ:
        value = os.environ[key]
        try:
            return float(value)
        except ValueError:
            logger.warning("Found %s in environment, but value must be a float. Got: %s. Returning provided "
                           "default %s.", key, value, default)
    return default


def env_bool(key: str, default: bool) -> bool:
    """True when environment variable `key` is `true` or `1` (any case), else `default` if unset."""
    if key in os.environ:
        return os.environ[key].lower() in ("true", "1")
    return default


def env_set_by_user(key: str) -> bool:
    """Whether environment variable `key` is set."""
    return key in os.environ


#: Bytes in an object, task or node id.
ID_SIZE: Final = 28
MAX_INT64_VALUE: Final = 9223372036854775807

RAY_ADDRESS_ENVIRONMENT_VARIABLE: Final = "RAY_ADDRESS"
RAY_NAMESPACE_ENVIRONMENT_VARIABLE: Final = "RAY_NAMESPACE"

#: The share of memory the object store takes by default, and its bounds.
DEFAULT_OBJECT_STORE_MEMORY_PROPORTION: Final = 0.3
DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES: Final = 200 * 10**9
OBJECT_STORE_MINIMUM_MEMORY_BYTES: Final = 75 * 1024 * 1024

#: What an ObjectRef costs its caller in memory, for estimates.
CALLER_MEMORY_USAGE_PER_OBJECT_REF: Final = 3000

#: Resource names.
GPU: Final = "GPU"
TPU: Final = "TPU"
NPU: Final = "NPU"
HPU: Final = "HPU"
NEURON_CORES: Final = "neuron_cores"
DEFAULT_RESOURCES: Final = frozenset({"CPU", "GPU", "memory", "object_store_memory"})
MAX_RESOURCE_QUANTITY: Final = 100e12
MIN_RESOURCE_GRANULARITY: Final = 0.0001
RAY_DEFAULT_LABEL_KEYS_PREFIX: Final = "ray.io/"

#: CPU an actor holds for its lifetime, and for each method call, when none is given
#: (SIMPLE) and when resources are given (SPECIFIED).
DEFAULT_ACTOR_CREATION_CPU_SIMPLE: Final = 0
DEFAULT_ACTOR_CREATION_CPU_SPECIFIED: Final = 1
DEFAULT_ACTOR_METHOD_CPU_SIMPLE: Final = 1
DEFAULT_ACTOR_METHOD_CPU_SPECIFIED: Final = 0
DEFAULT_ACTOR_METHOD_NUM_RETURN_VALS: Final = 1
DEFAULT_MAX_CONCURRENCY_THREADED: Final = 1
DEFAULT_TASK_MAX_RETRIES: Final = 3

#: A pickled function or class past these sizes is warned about, then refused.
FUNCTION_SIZE_WARN_THRESHOLD: Final = code_size.FUNCTION_SIZE_WARN_THRESHOLD
FUNCTION_SIZE_ERROR_THRESHOLD: Final = code_size.FUNCTION_SIZE_ERROR_THRESHOLD

DEFAULT_RUNTIME_ENV_TIMEOUT_SECONDS: Final = 600
RAY_RUNTIME_ENV_DEFAULT_EXCLUDES: Final = ".git,.venv,venv,__pycache__"

LOGGER_FORMAT: Final = "%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s"
LOGGER_FORMAT_HELP: Final = f"The logging format. default={LOGGER_FORMAT!r}".replace("%", "%%").replace("'", '"')
LOGGER_LEVEL: Final = "info"
LOGGER_LEVEL_CHOICES: Final = ["debug", "info", "warning", "error", "critical"]
LOGGER_LEVEL_HELP: Final = f"The logging level threshold, choices={LOGGER_LEVEL_CHOICES}, default={LOGGER_LEVEL!r}"
