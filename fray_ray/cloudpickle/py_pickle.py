"""`ray.cloudpickle.py_pickle`: the standard library's pure-Python pickler, for debugging.

The C pickler hides which object it is in when it fails; the Python one can be stepped through.
"""

from pickle import (  # noqa: F401
    HIGHEST_PROTOCOL,
    PickleError,
    PicklingError,
    UnpicklingError,
)
from pickle import (
    _load as load,
)
from pickle import (
    _loads as loads,
)
from pickle import (
    _Pickler as Pickler,
)
from pickle import (
    _Unpickler as Unpickler,
)

__all__ = ["HIGHEST_PROTOCOL", "PickleError", "Pickler", "PicklingError", "Unpickler", "UnpicklingError", "load", "loads"]
