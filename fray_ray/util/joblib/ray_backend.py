"""The joblib backend behind `register_ray()`: `Parallel`'s batches as `Pool.apply_async` calls.

It is joblib's multiprocessing backend (auto-batching, nesting rules, falling back to running
in the caller for `n_jobs=1`) with the standard library's pool swapped for
`fray_ray.util.multiprocessing.Pool`, so every batch runs in one of the pool's actors.
`n_jobs=-1` means every CPU of the cluster (starting one first if none is running);
`ray_remote_args` (given to `parallel_backend` or to `Parallel`) are the actors' options.

joblib's memory-mapping settings (`max_nbytes`, `mmap_mode`, `temp_folder`), its `verbose`
level and the `multiprocessing` context concern processes forked on one machine; they do not
apply to actors, which may run on other hosts and receive arguments by value, and are not
passed on. Any other keyword goes to `Pool` (e.g. `initializer`, `maxtasksperchild`).
"""

from __future__ import annotations

from typing import Any

from joblib._parallel_backends import FallbackToBackend, MultiprocessingBackend, SequentialBackend

import fray_ray as ray
from fray_ray.util.multiprocessing.pool import Pool

__all__ = ["RayBackend"]

_LOCAL_PROCESS_SETTINGS = frozenset({"max_nbytes", "mmap_mode", "temp_folder", "verbose", "context"})
"""joblib's settings of forked local processes, which actors have no use for."""


def _cluster_cpus() -> int:
    if not ray.is_initialized():
        ray.init()
    return int(ray.cluster_resources().get("CPU", 0))


class RayBackend(MultiprocessingBackend):  # type: ignore[misc]
    """joblib's `"ray"` backend: a `Pool` of `n_jobs` actors."""

    def __init__(
        self,
        nesting_level: int | None = None,
        inner_max_num_threads: int | None = None,
        ray_remote_args: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.ray_remote_args = ray_remote_args
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads, **kwargs)

    def effective_n_jobs(self, n_jobs: int | None) -> int:
        if n_jobs == -1:
            return _cluster_cpus()
        count: int = super().effective_n_jobs(n_jobs)
        return count

    def configure(
        self,
        n_jobs: int = 1,
        parallel: Any = None,
        prefer: str | None = None,
        require: str | None = None,
        ray_remote_args: dict[str, Any] | None = None,
        **backend_kwargs: Any,
    ) -> int:
        """Start the pool joblib will send batches to; the number of actors."""
        n_jobs = self.effective_n_jobs(n_jobs)
        if n_jobs == 1:
            raise FallbackToBackend(SequentialBackend(nesting_level=self.nesting_level))
        settings = {**self.backend_kwargs, **backend_kwargs}
        pool_kwargs = {name: value for name, value in settings.items() if name not in _LOCAL_PROCESS_SETTINGS}
        remote_args = ray_remote_args if ray_remote_args is not None else self.ray_remote_args
        self._pool = Pool(processes=n_jobs, ray_remote_args=remote_args, **pool_kwargs)
        self.parallel = parallel
        return n_jobs
