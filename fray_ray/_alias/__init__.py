"""A directory whose `ray` package makes `import ray` give fray_ray.

`fray-ray run` puts this directory on `PYTHONPATH`, so interpreters the script starts (a
`multiprocessing` pool with the spawn start method re-imports the script; a `subprocess` of
`sys.executable`) see the same drop-in alias as the script itself (`alias_path()`).
"""

from __future__ import annotations

import os


def alias_path() -> str:
    """The directory to put on `PYTHONPATH`."""
    return os.path.dirname(os.path.abspath(__file__))
