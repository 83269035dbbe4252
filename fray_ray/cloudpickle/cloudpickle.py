"""`ray.cloudpickle.cloudpickle`: cloudpickle's own module of the same name."""

from cloudpickle.cloudpickle import *  # noqa: F403
from cloudpickle.cloudpickle import CloudPickler, Pickler, dump, dumps, load, loads  # noqa: F401
