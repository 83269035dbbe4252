"""`ray.experimental.state.common`: Ray's old path of `ray.util.state.common`, with its warning."""

from fray_ray.experimental.state._deprecation import warn_deprecated_import
from fray_ray.util.state.common import *  # noqa: F403 - the module, under its old name

warn_deprecated_import()
