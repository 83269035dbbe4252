"""`ray.experimental.state.api`: Ray's old path of `ray.util.state.api`, with its warning."""

from fray_ray.experimental.state._deprecation import warn_deprecated_import
from fray_ray.util.state.api import *  # noqa: F403 - the module, under its old name

warn_deprecated_import()
