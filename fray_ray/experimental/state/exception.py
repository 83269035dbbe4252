"""`ray.experimental.state.exception`: Ray's old path of `ray.util.state.exception`, with its warning."""

from fray_ray.experimental.state._deprecation import warn_deprecated_import
from fray_ray.util.state.exception import *  # noqa: F403 - the module, under its old name

warn_deprecated_import()
