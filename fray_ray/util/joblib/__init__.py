"""`ray.util.joblib`: joblib's `"ray"` backend, which runs `Parallel` batches on a pool of actors.

>>> import joblib
>>> from fray_ray.util.joblib import register_ray
>>> register_ray()
>>> with joblib.parallel_backend("ray"):
...     joblib.Parallel(n_jobs=2)(joblib.delayed(abs)(i) for i in (-1, -2))
[1, 2]

joblib itself is the user's dependency: importing this module without it raises ImportError,
as Ray's does.
"""

from __future__ import annotations

from joblib.parallel import register_parallel_backend

__all__ = ["register_ray"]


def register_ray() -> None:
    """Make `"ray"` a joblib backend: `joblib.parallel_backend("ray")`, `Parallel(backend="ray")`."""
    from fray_ray.util.joblib.ray_backend import RayBackend

    register_parallel_backend("ray", RayBackend)
