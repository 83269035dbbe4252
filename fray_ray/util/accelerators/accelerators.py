"""`ray.util.accelerators.accelerators`: the module Ray defines the accelerator names in.

The names are those of `fray_ray.util.accelerators` (one table, two import paths).
"""

import fray_ray.util.accelerators as _package

globals().update({name: value for name, value in vars(_package).items() if name.isupper()})
__all__ = sorted(name for name in vars(_package) if name.isupper())
