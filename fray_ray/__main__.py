"""`python -m fray_ray ...` is the `fray-ray` command (see fray_ray.cli)."""

import sys

from fray_ray.cli import main

sys.exit(main())
