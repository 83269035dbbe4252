"""`ray.cloudpickle.compat`: the `pickle` module and `Pickler` class cloudpickle builds on."""

import pickle  # noqa: F401 - the name this module exists to provide
from _pickle import Pickler  # noqa: F401

__all__ = ["Pickler", "pickle"]
