"""`ray.util.multiprocessing`: a drop-in `multiprocessing.Pool` whose processes are actors.

>>> from fray_ray.util.multiprocessing import Pool
>>> with Pool(processes=2) as pool:
...     sorted(pool.imap_unordered(abs, [-3, -1, 2]))
[1, 2, 3]

`TimeoutError` and `JoinableQueue` are the standard library's, as in Ray.
"""

from __future__ import annotations

from multiprocessing import JoinableQueue, TimeoutError

from fray_ray.util.multiprocessing.pool import Pool

__all__ = ["JoinableQueue", "Pool", "TimeoutError"]
