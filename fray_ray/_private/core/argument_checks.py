"""Checking call arguments against a signature at `.remote()`, as Ray does, cheaply.

`Signature.bind` costs a few microseconds; most calls pass only positional arguments to a
function whose parameters are all positional-or-keyword, and for those the count alone
decides. Everything else goes through `bind`, which also words the error.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class ArgumentCheck:
    """Raises TypeError, as `Signature.bind` would, when arguments do not fit `signature`."""

    __slots__ = ("signature", "_fewest", "_most")

    def __init__(self, signature: inspect.Signature) -> None:
        self.signature = signature
        parameters = list(signature.parameters.values())
        if all(p.kind in _POSITIONAL for p in parameters):
            # Defaults of positional parameters can only trail, so any count in range binds.
            self._fewest = sum(1 for p in parameters if p.default is inspect.Parameter.empty)
            self._most = len(parameters)
        else:
            self._fewest, self._most = 1, 0  # an empty range: always `bind`

    def check(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        if not kwargs and self._fewest <= len(args) <= self._most:
            return
        self.signature.bind(*args, **kwargs)
