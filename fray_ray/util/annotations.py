"""`ray.util.annotations`: the decorators libraries use to mark Ray APIs' stability.

`PublicAPI`, `DeveloperAPI` and `Deprecated` return what they decorate (noting the stability
in its docstring); `Deprecated(warning=True)` also warns with `RayDeprecationWarning` when the
function is called or the class built. Libraries written for Ray import these at module
level, so they must exist for such a library to import at all.

>>> @PublicAPI(stability="beta")
... def f():
...     return 1
>>> f()
1
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["AnnotationType", "Deprecated", "DeveloperAPI", "PublicAPI", "RayDeprecationWarning"]


class AnnotationType(Enum):
    PUBLIC_API = "PublicAPI"
    DEVELOPER_API = "DeveloperAPI"
    DEPRECATED = "Deprecated"
    UNKNOWN = "Unknown"


class RayDeprecationWarning(DeprecationWarning):
    """Warned by APIs marked `@Deprecated(warning=True)`; shown by default, unlike DeprecationWarning."""


warnings.simplefilter("default", RayDeprecationWarning)


def _note(obj: Any, text: str, annotation: AnnotationType) -> Any:
    try:
        obj.__doc__ = f"{obj.__doc__ or ''}\n\n{text}".lstrip()
        obj._annotated = obj.__qualname__
        obj._annotated_type = annotation
    except (AttributeError, TypeError):
        pass  # builtins and some extension types take no new attributes
    return obj


def PublicAPI(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - Ray's name
    """Mark a public API: `@PublicAPI` or `@PublicAPI(stability="alpha"|"beta"|"stable", api_group=...)`."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        return PublicAPI(stability="stable")(args[0])
    stability = kwargs.get("stability", "stable")
    if stability not in ("stable", "beta", "alpha"):
        raise ValueError(f"stability must be 'stable', 'beta' or 'alpha', got {stability!r}")
    return lambda obj: _note(obj, f"PublicAPI ({stability}): stable across minor versions"
                             if stability == "stable" else f"PublicAPI ({stability}): may change.",
                             AnnotationType.PUBLIC_API)


def DeveloperAPI(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - Ray's name
    """Mark an API for advanced users, subject to change: `@DeveloperAPI` or `@DeveloperAPI()`."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        return DeveloperAPI()(args[0])
    return lambda obj: _note(obj, "DeveloperAPI: may change across minor versions.", AnnotationType.DEVELOPER_API)


def Deprecated(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - Ray's name
    """Mark an API deprecated: `@Deprecated` or `@Deprecated(message=..., warning=True)`."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        return Deprecated()(args[0])
    message = kwargs.get("message", "This API is deprecated and may be removed in future Ray releases.")
    warning = kwargs.get("warning", False)

    def decorate(obj: Any) -> Any:
        if warning:
            if inspect.isclass(obj):
                original_init = obj.__init__

                @functools.wraps(original_init)
                def init(self: Any, *a: Any, **k: Any) -> None:
                    warnings.warn(message, RayDeprecationWarning, stacklevel=2)
                    original_init(self, *a, **k)

                obj.__init__ = init  # type: ignore[method-assign]
            else:
                wrapped = obj

                @functools.wraps(wrapped)
                def obj(*a: Any, **k: Any) -> Any:
                    warnings.warn(message, RayDeprecationWarning, stacklevel=2)
                    return wrapped(*a, **k)

        return _note(obj, f"Deprecated: {message}", AnnotationType.DEPRECATED)

    return decorate
