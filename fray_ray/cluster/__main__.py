"""Entry point of `python -m fray_ray.cluster` (see `fray_ray.cluster._cli`)."""

import sys

from fray_ray.cluster._cli import main

sys.exit(main())
