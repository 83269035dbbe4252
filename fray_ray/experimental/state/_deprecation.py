"""The warning every module of `ray.experimental.state` gives on import, in Ray's words."""

import warnings


def warn_deprecated_import() -> None:
    warnings.warn(
        "Ray state API is no longer experimental. Please import from `ray.util.state`. "
        "instead. Importing from `ray.experimental` will be deprecated in future releases. ",
        DeprecationWarning,
        stacklevel=3,
    )
