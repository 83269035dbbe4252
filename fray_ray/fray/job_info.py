"""The Iris task this process runs in, if any.

`get_job_info()` returns Iris's `JobInfo` (the task's job, index and attempt, its worker, the
controller's address and token, the hosts to bind and advertise) while `IRIS_TASK_ID` is set,
else None; `PY_MODULES_DIR` is where a bundle's extra modules sit in the task's workdir. All
three are re-exported from `fray_ray.iris.job_info`, so that the Ray layer learns where it runs
from the Fray layer and never imports `fray_ray.iris` itself.
"""

from __future__ import annotations

from fray_ray.iris.job_info import PY_MODULES_DIR, JobInfo, get_job_info

__all__ = ["PY_MODULES_DIR", "JobInfo", "get_job_info"]
