"""`import ray` in an interpreter started under `fray-ray run`: install the alias and become
fray_ray (this module replaces itself in `sys.modules`)."""

import fray_ray

fray_ray.install()
